"""``@event``: declaring a method an event generator (Sentinel's event interface).

The paper writes ``event begin(e2) && end(e3) void set_price(float price)``; here::

    class Stock(Reactive):
        @event(end="e1")                 # end event, also named Stock.e1
        def sell_stock(self, qty): ...

        @event(begin="e2", end="e3")     # both, named
        def set_price(self, price): ...

        @event                           # the end event (the default), unnamed
        def close(self): ...

Declaring changes nothing about the method: the class keeps the plain function, so
a call costs what it cost before. The :class:`~sentinel.Reactive` class machinery
reads the declaration when the class is created and installs a wrapper only while
something listens to the method's events.
"""

from __future__ import annotations

import inspect
import re
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Final,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

from sentinel.errors import ReactiveError

if TYPE_CHECKING:
    from sentinel.algebra.expressions import Primitive

__all__ = [
    "BEGIN",
    "END",
    "BoundEventMethod",
    "Declaration",
    "Declares",
    "EventClassMethod",
    "EventMethod",
    "EventStaticMethod",
    "event",
    "take_pending",
]

BEGIN: Final = "begin"
END: Final = "end"
PHASES: Final = (BEGIN, END)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Declares:
    """Base of the classes whose methods :func:`event` declares:
    :class:`~sentinel.Reactive`. A declaration waits for its class's set-up
    (:func:`take_pending`)."""

    __slots__ = ()


#: The declarations ``@event`` left for a class being created, by class.
_PENDING: weakref.WeakKeyDictionary[type, dict[str, Declaration]] = weakref.WeakKeyDictionary()


def take_pending(owner: type) -> dict[str, Declaration]:
    """The declarations ``@event`` left for ``owner`` (a class being created),
    handed over once."""
    return _PENDING.pop(owner, {})


S = TypeVar("S")
T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


# What @event makes of a method, as type checkers see it: the same signature,
# called through an instance or the class, plus the method's class-level events
# (``Account.deposit.end``). At run time the class holds the plain function with
# ``begin``/``end`` attributes (see sentinel.reactive.classes), which is what
# these protocols describe.
class _Phases(Protocol):
    @property
    def begin(self) -> Primitive:
        """The class-level begin event (raises if the method declares none)."""

    @property
    def end(self) -> Primitive:
        """The class-level end event (raises if the method declares none)."""


class EventMethod(_Phases, Protocol, Generic[S, P, R_co]):
    """An instance method declared with ``@event``, for type checkers."""

    def __call__(self, instance: S, /, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    @overload
    def __get__(self, instance: None, owner: type[Any], /) -> EventMethod[S, P, R_co]: ...

    @overload
    def __get__(self, instance: S, owner: type[Any], /) -> Callable[P, R_co]: ...


class BoundEventMethod(_Phases, Protocol, Generic[P, R_co]):
    """A classmethod or staticmethod declared with ``@event``, as the class (or an
    instance) gives it: callable, with the class-level events."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...


class EventClassMethod(_Phases, Protocol, Generic[P, R_co]):
    """A classmethod declared with ``@event``, for type checkers."""

    def __get__(self, instance: object, owner: type[Any], /) -> BoundEventMethod[P, R_co]: ...


class EventStaticMethod(_Phases, Protocol, Generic[P, R_co]):
    """A staticmethod declared with ``@event``, for type checkers."""

    def __get__(self, instance: object, owner: type[Any], /) -> BoundEventMethod[P, R_co]: ...


class _EventDecorator(Protocol):
    """What ``@event(...)`` with arguments returns, for type checkers."""

    @overload
    def __call__(self, func: classmethod[T, P, R], /) -> EventClassMethod[P, R]: ...

    # A staticmethod is callable too, so it also fits the plain method's overload
    # below; listed first, it wins (the overlap is intended).
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, func: staticmethod[P, R], /
    ) -> EventStaticMethod[P, R]: ...

    @overload
    def __call__(self, func: Callable[Concatenate[type[T], P], R], /) -> EventClassMethod[P, R]: ...

    @overload
    def __call__(self, func: Callable[Concatenate[S, P], R], /) -> EventMethod[S, P, R]: ...


@dataclass(frozen=True)
class Declaration:
    """What ``@event`` declared for one method: its phases (``"begin"``,
    ``"end"`` or both, in that order), the optional event name of each phase, and
    parameters left out of the event's parameters."""

    phases: tuple[str, ...]
    names: tuple[tuple[str, str], ...] = ()  # (phase, name)
    exclude: tuple[str, ...] = ()
    #: The parameter whose value is the occurrence time of the method's events.
    occurred_at: str | None = None

    def name_of(self, phase: str) -> str | None:
        for p, n in self.names:
            if p == phase:
                return n
        return None


class _Declared:
    """What ``@event`` returns: a placeholder that puts the plain function back
    into the class (``__set_name__``) and leaves the declaration with the class.

    It is not callable: if it is ever called, ``@event`` was not applied to a
    method of a class body (or another decorator was stacked above it).
    """

    __slots__ = ("declaration", "func")

    def __init__(self, func: Any, declaration: Declaration) -> None:
        self.func = func
        self.declaration = declaration

    def __set_name__(self, owner: type, name: str) -> None:
        if not (isinstance(owner, type) and issubclass(owner, Declares)):
            raise ReactiveError(
                f"{owner.__qualname__}.{name} is declared with @event, but "
                f"{owner.__qualname__} is not reactive: derive it from sentinel.Reactive",
                owner=owner.__qualname__,
                method=name,
            )
        # Put the plain callable back so that unobserved calls cost nothing extra,
        # and leave the declaration for Reactive.__init_subclass__ (which runs
        # after every __set_name__ of the class body).
        type.__setattr__(owner, name, self.func)
        _reroute_sqlalchemy_hooks(owner, name, self.func)
        _PENDING.setdefault(owner, {})[name] = self.declaration

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = getattr(_function_of(self.func), "__qualname__", repr(self.func))
        raise ReactiveError(
            f"{name} was called through its @event placeholder: @event declares methods of "
            "Reactive classes and must be the outermost decorator (above @classmethod, "
            "@staticmethod and other decorators)",
            method=getattr(_function_of(self.func), "__name__", None),
        )

    def __repr__(self) -> str:
        return f"<@event {self.declaration.phases} {self.func!r}>"


#: What SQLAlchemy's ``@validates`` and ``@reconstructor`` mark a function with.
_SA_HOOKS = ("__sa_validators__", "__sa_validation_opts__", "__sa_reconstructor__")


def _reroute_sqlalchemy_hooks(owner: type, name: str, func: Any) -> None:
    """An event method that is also a SQLAlchemy validator or reconstructor:
    SQLAlchemy calls the function it finds when it maps the class, by itself,
    on every attribute set or load, never through the class attribute where
    sentinel puts the method's wrapper while something listens. So the marks
    move to a function of their own, ``_sentinel_sa_<name>``, that SQLAlchemy
    finds instead, and which calls the method through the object: those calls
    signal like any other call (and cost one more call while nothing listens).
    Called before the class is mapped (``__set_name__`` runs first)."""
    attrs = getattr(func, "__dict__", None)
    if not attrs or not any(a in attrs for a in _SA_HOOKS):
        return
    hooks = {a: attrs.pop(a) for a in _SA_HOOKS if a in attrs}

    def through_the_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, name)(*args, **kwargs)

    alias = f"_sentinel_sa_{name}"
    through_the_object.__name__ = alias
    through_the_object.__qualname__ = f"{owner.__qualname__}.{alias}"
    through_the_object.__dict__.update(hooks)
    type.__setattr__(owner, alias, through_the_object)


def _function_of(obj: Any) -> Any:
    return obj.__func__ if isinstance(obj, (classmethod, staticmethod)) else obj


def _parse(
    phase: str | None,
    begin: bool | str,
    end: bool | str,
    exclude: Iterable[str] | str,
    occurred_at: str | None = None,
) -> Declaration:
    if phase is not None:
        if not isinstance(phase, str) or phase not in (BEGIN, END, "both"):
            raise ReactiveError(
                f"@event takes 'begin', 'end' or 'both' (or begin=/end= keywords), not {phase!r}"
            )
        if begin is not False or end is not False:
            raise ReactiveError(
                f"@event({phase!r}) cannot be combined with begin=/end=; name events with "
                "@event(begin='e2', end='e3')"
            )
        begin = phase in (BEGIN, "both")
        end = phase in (END, "both")
    for kw, value in (("begin", begin), ("end", end)):
        if value is None:  # neither False nor a phase: it declared nothing, silently
            raise ReactiveError(
                f"@event({kw}=None): {kw}= is True or an event name (leave it out, or "
                "False, for no event at that phase)"
            )
    if begin is False and end is False:
        end = True  # Sentinel's default: the end of the method is the event
    phases: list[str] = []
    names: list[tuple[str, str]] = []
    for p, value in ((BEGIN, begin), (END, end)):
        if value is False:
            continue
        phases.append(p)
        if value is True:
            continue
        if not isinstance(value, str) or not _IDENT.match(value):
            raise ReactiveError(
                f"@event({p}=...) takes True or an event name (an identifier such as 'e2'), "
                f"not {value!r}"
            )
        names.append((p, value))
    if len(names) == 2 and names[0][1] == names[1][1]:
        raise ReactiveError(
            f"@event names both the begin and the end event {names[0][1]!r}; an event name "
            "is used once per class"
        )
    if isinstance(exclude, str):
        exclude = (exclude,)
    excl = tuple(exclude)
    for x in excl:
        if not isinstance(x, str):
            raise ReactiveError(f"@event(exclude=...) takes parameter names, not {x!r}")
    if occurred_at is not None and not (isinstance(occurred_at, str) and _IDENT.match(occurred_at)):
        raise ReactiveError(
            f"@event(occurred_at=...) names the parameter holding the occurrence time, not "
            f"{occurred_at!r}"
        )
    return Declaration(tuple(phases), tuple(names), excl, occurred_at)


def _declare(func: Any, declaration: Declaration) -> Any:
    target = _function_of(func)
    if isinstance(func, _Declared) or isinstance(target, _Declared):
        raise ReactiveError("@event is applied twice to the same method")
    if not callable(target):
        raise ReactiveError(
            f"@event decorates methods, not {type(func).__name__} objects ({func!r:.60})"
        )
    try:
        inner = inspect.unwrap(target)
    except ValueError:  # a __wrapped__ cycle
        inner = target
    if not inspect.isfunction(inner) and not inspect.isfunction(target):
        raise ReactiveError(
            f"@event decorates functions defined in a class body (optionally as classmethod "
            f"or staticmethod), not {type(target).__name__} objects ({target!r:.60})"
        )
    # What the class holds says what a call is: a synchronous decorator may
    # consume a generator (list(f(...))) or run a coroutine (asyncio.run) it
    # wraps, and its call then ends when that work does.
    if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        raise ReactiveError(
            f"{target.__qualname__} is an async function: sentinel cannot yet tell "
            "when its call ends; declare the events on a synchronous method",
            method=target.__name__,
        )
    if inspect.isgeneratorfunction(target):
        raise ReactiveError(
            f"{target.__qualname__} is a generator function: its call returns before "
            "its body runs, so its end event would mean nothing; declare the events on the "
            "method that consumes it",
            method=target.__name__,
        )
    params = inspect.signature(target).parameters
    unknown = [x for x in declaration.exclude if x not in params]
    if unknown:
        raise ReactiveError(
            f"@event(exclude=...) names {', '.join(map(repr, unknown))}, which "
            f"{target.__qualname__} has no parameter for",
            method=target.__name__,
        )
    occ = declaration.occurred_at
    if occ is not None and (occ not in params or occ in declaration.exclude):
        raise ReactiveError(
            f"@event(occurred_at={occ!r}): {target.__qualname__} has no parameter {occ!r}"
            + (" (it is excluded)" if occ in declaration.exclude else ""),
            method=target.__name__,
        )
    if END in declaration.phases and "result" in params and "result" not in declaration.exclude:
        raise ReactiveError(
            f"{target.__qualname__} has a parameter named 'result', which its end event "
            "uses for the return value; rename it, exclude it (exclude='result') or declare "
            "only the begin event",
            method=target.__name__,
        )
    return _Declared(func, declaration)


@overload
def event(func: classmethod[T, P, R], /) -> EventClassMethod[P, R]: ...


@overload
def event(func: staticmethod[P, R], /) -> EventStaticMethod[P, R]: ...  # type: ignore[overload-overlap]


# A classmethod under @event reaches the type checker as a function of the class
# (mypy's reading of @classmethod in a class body): its own overload, first.
@overload
def event(func: Callable[Concatenate[type[T], P], R], /) -> EventClassMethod[P, R]: ...


@overload
def event(func: Callable[Concatenate[S, P], R], /) -> EventMethod[S, P, R]: ...


@overload
def event(
    phase: str | None = None,
    /,
    *,
    begin: bool | str = False,
    end: bool | str = False,
    exclude: Iterable[str] | str = (),
    occurred_at: str | None = None,
) -> _EventDecorator: ...


def event(
    phase: Any = None,
    /,
    *,
    begin: bool | str = False,
    end: bool | str = False,
    exclude: Iterable[str] | str = (),
    occurred_at: str | None = None,
) -> Any:
    """Declare a method of a :class:`~sentinel.Reactive` class an event generator.

    ``@event`` alone declares the end event (Sentinel's default). ``@event("begin")``,
    ``@event("end")`` and ``@event("both")`` choose phases; ``begin=`` and ``end=``
    choose them too, each ``True`` or an event name, so ``@event(begin="e2",
    end="e3")`` is the paper's ``event begin(e2) && end(e3)``. A name makes the event
    available as ``Class.name`` in Snoop text and as ``on(Class).name``. Names are
    identifiers, used once per class (inherited names included).

    Each occurrence carries the call's arguments by parameter name (defaults applied;
    ``*args`` as a tuple, ``**kwargs`` as a mapping), except ``self``/``cls`` and the
    parameters named in ``exclude``; the end event adds ``result``, the return value.
    Argument values must be loggable (see :mod:`sentinel.params`): reactive objects
    become object references, lists become tuples, and anything else raises
    :class:`~sentinel.params.UnloggableParameter` naming the method and parameter,
    before the method runs.

    ``occurred_at`` names a parameter whose argument is the events' *occurrence
    time* (an aware datetime, a naive one read as UTC, or POSIX seconds), as the
    caller says: a report of something that happened earlier, or an announcement
    of something to come (``docs/bitemporal.md``). Without it, the occurrence time
    is the time of the call. An argument that is not a time raises
    :class:`~sentinel.errors.OccurrenceTimeError` before the method runs.

    Works on plain methods, classmethods and staticmethods (``@event`` outermost).
    Raises :class:`~sentinel.errors.ReactiveError` for anything else (non-callables,
    async and generator functions), for a parameter named ``result`` on an end event,
    and, when the class is created, if the class is not reactive.
    """
    if phase is not None and not isinstance(phase, str):
        if begin is not False or end is not False or exclude != () or occurred_at is not None:
            raise ReactiveError("@event(...) takes the method only when used without arguments")
        return _declare(phase, _parse(None, False, False, ()))
    declaration = _parse(phase, begin, end, exclude, occurred_at)

    def decorate(func: Any) -> Any:
        return _declare(func, declaration)

    return decorate
