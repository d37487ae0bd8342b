"""The ``Reactive`` mixin: what happens when a reactive class is created.

For every reactive class ``C`` and every event method ``m`` it has (declared on
``C`` or inherited), ``C.__dict__[m]`` holds a callable of ``C``'s own: the
method as written on ``C`` (an override), or a copy of the inherited function that
shares its code, globals, defaults and closure (so ``super()`` inside it behaves
exactly as in the original). This costs nothing per call, and it is what lets
``SubStock.set_price.begin`` be SubStock's event while ``Stock.set_price.begin`` is
Stock's: each function object carries the event handles of its class.

One *event method* (:class:`EventMethod`) exists per method and class that first
declares its events (the hierarchy root of that method); it owns one detector
channel per phase, named ``"Stock.set_price:begin"``. An override inherits the
event interface: calls on any class of the hierarchy signal on the root's channels.
Each class's callable for the method is an :class:`Entry`; while something
listens to the method's channels, the hub installs the entry's wrapper in the
class instead of the plain callable (see :mod:`sentinel.reactive.hub`).

Selectors: the root's class-level event has no selector (every signal on its
channel is a call on the root or a subclass). The class-level event of a subclass
``S`` carries ``ClassSelector("S")``; a call on an instance of class ``T`` passes
the selectors of every class between ``T`` and the root (``T`` included, the root
excluded) plus the object's reference, so it matches the class-level events of
``T`` and its ancestors and the instance-level events of that object.
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sentinel.algebra.expressions import Primitive
from sentinel.errors import DuplicateEventError, ReactiveError
from sentinel.params import PLAIN as PLAIN  # where the reactive layer's modules import it
from sentinel.params import normalize
from sentinel.reactive.binder import Binder, CallShape, call_shape, make_binder
from sentinel.reactive.declare import (
    BEGIN,
    END,
    PHASES,
    Declaration,
    Declares,
    _Declared,
    take_pending,
)
from sentinel.reactive.hub import register
from sentinel.reactive.info import (
    CLASSMETHOD,
    LOCK,
    METHOD,
    STATICMETHOD,
    ClassInfo,
    ClassSelector,
    class_info,
    hierarchy,
)
from sentinel.reactive.refs import param_ref

if TYPE_CHECKING:
    from sentinel.detector import Channel, EventDetector
    from sentinel.reactive.hub import Hub

__all__ = [
    "BEGIN",
    "END",
    "ClassInfo",
    "ClassSelector",
    "Entry",
    "EventMethod",
    "Reactive",
    "class_info",
    "hierarchy",
]


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNSET: Any = object()


class EventMethod:
    """One event-generating method of a hierarchy: the class that first declared
    its events (``root``), its name, what was declared, and, while the hierarchy is
    bound to a detector, that detector and its channels."""

    __slots__ = (
        "__weakref__",
        "always",
        "begin",
        "channel_names",
        "declaration",
        "detector",
        "end",
        "hub",
        "kind",
        "name",
        "root",
        "root_name",
        "wired",
    )

    def __init__(self, root: type, root_name: str, name: str, kind: str, decl: Declaration):
        self.root = root
        self.root_name = root_name
        self.name = name
        self.kind = kind
        self.declaration = decl
        self.channel_names = {p: f"{root_name}.{name}:{p}" for p in decl.phases}
        # Set while bound to a detector (read on every call by the wrapper).
        self.detector: EventDetector | None = None
        self.hub: Hub | None = None
        self.begin: Channel | None = None
        self.end: Channel | None = None
        #: The detector has occurrence listeners (the event log): signal every call.
        self.always = False
        #: ``(detector, begin, end)`` while bound, set and cleared in one
        #: assignment: what a call signals on is read from one tuple, so a call
        #: in flight while the hierarchy moves to another detector never pairs
        #: one detector with another's channel.
        self.wired: tuple[EventDetector, Channel | None, Channel | None] | None = None

    @property
    def listened(self) -> bool:
        """Something listens to one of this method's channels (or to every event)."""
        if self.always:
            return True
        b, e = self.begin, self.end
        return bool(
            (b is not None and (b.any or b.selected)) or (e is not None and (e.any or e.selected))
        )

    def __repr__(self) -> str:
        return f"<EventMethod {self.root_name}.{self.name} {'/'.join(self.declaration.phases)}>"


@dataclass(eq=False, repr=False, slots=True, weakref_slot=True)
class Entry:
    """A reactive class's own callable for one event method.

    ``raw`` is what the class holds while nothing listens (a function, or a
    classmethod/staticmethod of one); ``_wrapper`` the wrapper installed while
    something does (made on first use and put in by
    :func:`sentinel.reactive.wrapper.install_entry`; ``installed`` says which
    the class holds). ``selectors`` are the class selectors a call on an
    instance of ``owner`` carries; ``handles`` the class-level events by phase and
    ``named`` the named ones.
    """

    owner: type
    owner_name: str
    method: EventMethod
    raw: Any
    #: The method's signature as source (see :mod:`.binder`).
    shape: CallShape
    selector: ClassSelector | None
    selectors: tuple[ClassSelector, ...]
    binder: Binder = field(init=False)
    #: What parameter errors name: ``Stock.set_price``.
    label: str = field(init=False)
    handles: dict[str, Primitive] = field(init=False)
    named: dict[str, Primitive] = field(init=False)
    installed: bool = field(default=False, init=False)
    #: A function, or a classmethod/staticmethod of one.
    _wrapper: Any = field(default=None, init=False)
    #: The ``id`` of what replaced the callable in the class while the wrapper
    #: was due (warned about once; see :func:`~.wrapper.install_entry`).
    replaced_by: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        method, selector, owner_name = self.method, self.selector, self.owner_name
        self.binder = make_binder(self.shape)
        self.label = f"{owner_name}.{method.name}"
        self.handles = {
            p: Primitive(method.channel_names[p], selector, f"{owner_name}.{method.name}:{p}")
            for p in method.declaration.phases
        }
        self.named = {
            n: Primitive(method.channel_names[p], selector, f"{owner_name}.{n}")
            for p, n in method.declaration.names
        }

    def __repr__(self) -> str:
        state = "wrapped" if self.installed else "plain"
        return f"<Entry {self.label} {state}>"


class Reactive(Declares):
    """Mixin that makes a class's objects event generators (Sentinel's REACTIVE).

    Declare event methods with :func:`~sentinel.event`. Class keywords:

    ``detector=``
        the event detector the class (and its subclasses) signals to; by default
        the process's default detector (:func:`sentinel.default_detector`),
        followed when it is replaced. Only on the top reactive class of a
        hierarchy; :func:`~sentinel.reactive.bind` rebinds later.
    ``sentinel_name=``
        the name used in event names and object references (default: the class's
        ``__name__``); must be unique among the reactive classes of a detector.

    Works with plain classes and SQLAlchemy declarative classes alike (list
    ``Reactive`` among the bases), and with the class decorators that make a new
    class from the decorated one (``@dataclass(slots=True)``, ``attrs``): the new
    class takes over the declarations and class keywords of the first.
    Subclasses inherit the event interface: overriding an event method keeps its
    events, and a class-level event of a class matches calls on instances of its
    subclasses. Adds nothing to instances (``__slots__ = ()``); instances must
    support weak references.

    >>> from sentinel import LocalEventDetector, event
    >>> det = LocalEventDetector()
    >>> class Stock(Reactive, detector=det):
    ...     @event(begin="e2", end="e3")
    ...     def set_price(self, price: float) -> None:
    ...         self.price = price
    >>> seen = []
    >>> r = det.rule("R", Stock.set_price.begin, action=lambda o: seen.append(o.params["price"]))
    >>> Stock().set_price(9.5)
    >>> seen
    [9.5]

    Raises :class:`~sentinel.errors.ReactiveError` when the class cannot be made
    reactive (details in the message) and
    :class:`~sentinel.errors.DuplicateEventError` for an event name used twice.
    """

    __slots__ = ()

    _sentinel_info: ClassVar[ClassInfo]

    def __init_subclass__(
        cls,
        *,
        detector: EventDetector | None = _UNSET,
        sentinel_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        decls = take_pending(cls)
        with LOCK:
            original = _copied_from(cls)
            info = _set_up(cls, decls, detector, sentinel_name, original)
        register(cls, info, replaces=original)


# -- class set-up -------------------------------------------------------------------


def _copied_from(cls: type) -> type | None:
    """The reactive class ``cls`` is a copy of, if any: a class decorator that
    makes a new class from the namespace of the decorated one
    (``@dataclass(slots=True)``, ``attrs``) copies its ``_sentinel_info`` too,
    while Python calls ``__init_subclass__`` on the copy without the class
    keywords and, the ``@event`` placeholders being gone, without declarations.
    The copied info is removed from ``cls`` (its own is set up next)."""
    info = cls.__dict__.get("_sentinel_info")
    if not isinstance(info, ClassInfo):
        return None
    type.__delattr__(cls, "_sentinel_info")
    original = info.cls()
    if original is None or original is cls:
        return None
    if cls.__qualname__ == cls.__name__ == original.__name__:
        # type(name, bases, namespace) names the copy by its bare name; the
        # decorator gives it the original's qualified name afterwards, which
        # sentinel's messages and pickled copies of inherited methods need now.
        cls.__qualname__ = original.__qualname__
    return original


def _set_up(
    cls: type,
    decls: dict[str, Declaration],
    detector: Any,
    sentinel_name: str | None,
    original: type | None = None,
) -> ClassInfo:
    copied = class_info(original) if original is not None else None
    if copied is not None:
        assert original is not None
        # A copy declares what the original declared, under the original's name
        # (unless it is renamed) and bound where the original was.
        decls = {**copied.declared, **decls}
        if sentinel_name is None and cls.__name__ == original.__name__:
            sentinel_name = copied.name
        if detector is _UNSET and copied.tops == (original,) and copied.binding is not None:
            detector = copied.binding
    name = cls.__name__ if sentinel_name is None else sentinel_name
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ReactiveError(
            f"sentinel_name of {cls.__qualname__} must be an identifier (it prefixes event "
            f"names such as {name}.set_price:end), not {name!r}",
            owner=cls.__qualname__,
        )
    if cls.__weakrefoffset__ == 0:
        raise ReactiveError(
            f"{cls.__qualname__} instances cannot be referenced weakly (its __slots__ lack "
            "'__weakref__'); sentinel refers to reactive objects weakly"
            + (
                " (with @dataclass(slots=True), add weakref_slot=True)"
                if original is not None and "__dataclass_fields__" in cls.__dict__
                else ""
            ),
            owner=cls.__qualname__,
        )
    for attr, value in cls.__dict__.items():
        if isinstance(value, (classmethod, staticmethod)) and isinstance(value.__func__, _Declared):
            raise ReactiveError(
                f"{cls.__qualname__}.{attr}: write @event above @{type(value).__name__}, "
                "not below it",
                owner=cls.__qualname__,
                method=attr,
            )

    info = ClassInfo(cls, name)
    info.declared = decls
    bases = [b for b in cls.__mro__[1:] if class_info(b) is not None]
    info.tops = _tops(cls, bases)
    _bind_at_creation(cls, info, bases, detector)

    # Event methods inherited from reactive bases: the first reactive base (in
    # MRO order) with an entry for the name decides which EventMethod it is.
    inherited: dict[str, Entry] = {}
    for b in bases:
        for m, entry in class_info(b).entries.items():  # type: ignore[union-attr]
            inherited.setdefault(m, entry)

    for m in sorted(set(inherited) | set(decls)):
        decl = decls.get(m)
        base_entry = inherited.get(m)
        raw, kind, own = _own_callable(cls, m, base_entry, copied)
        if base_entry is None:
            assert decl is not None
            method = EventMethod(cls, name, m, kind, decl)
        else:
            method = base_entry.method
            _check_override(cls, m, method, kind, decl)
        selectors = _selectors(cls, info, method.root)
        shape = _shape_of(cls, name, m, raw, kind, method)
        entry = Entry(
            cls, name, method, raw, shape, None if cls is method.root else info.selector, selectors
        )
        _mark(cls, raw, entry)
        if not own or cls.__dict__.get(m) is not raw:  # a copy may hold a wrapper
            type.__setattr__(cls, m, raw)
        info.entries[m] = entry

    _collect_names(cls, info)
    type.__setattr__(cls, "_sentinel_info", info)
    return info


def _selectors(cls: type, info: ClassInfo, root: type) -> tuple[ClassSelector, ...]:
    """The class selectors a call on an instance of ``cls`` carries for a method
    rooted at ``root``: every reactive class from ``cls`` up to, not including,
    ``root``."""
    out = []
    for k in cls.__mro__:
        if k is root or not issubclass(k, root):
            continue
        k_info = info if k is cls else class_info(k)
        if k_info is not None:
            out.append(k_info.selector)
    return tuple(out)


def _tops(cls: type, bases: list[type]) -> tuple[type, ...]:
    if not bases:
        return (cls,)
    seen: dict[type, None] = {}
    for b in bases:
        for t in class_info(b).tops:  # type: ignore[union-attr]
            seen[t] = None
    return tuple(seen)


def _bind_at_creation(cls: type, info: ClassInfo, bases: list[type], detector: Any) -> None:
    if detector is _UNSET:
        detector = None
    elif bases:
        raise ReactiveError(
            f"detector= can only be given to the top reactive class of a hierarchy; "
            f"{cls.__qualname__} inherits its detector from "
            f"{', '.join(t.__qualname__ for t in info.tops)}",
            owner=cls.__qualname__,
        )
    elif detector is not None:
        from sentinel.detector import EventDetector

        if not isinstance(detector, EventDetector):
            raise ReactiveError(
                f"detector= of {cls.__qualname__} must be an event detector, not "
                f"{type(detector).__name__}",
                owner=cls.__qualname__,
            )
    info.binding = detector
    if len(info.tops) > 1:
        bindings = {id(class_info(t).binding): t for t in info.tops}  # type: ignore[union-attr]
        if len(bindings) > 1:
            raise ReactiveError(
                f"{cls.__qualname__} joins reactive hierarchies bound to different detectors "
                f"({', '.join(t.__qualname__ for t in info.tops)}); bind them to one detector",
                owner=cls.__qualname__,
            )


def _kind(value: Any) -> str:
    if isinstance(value, classmethod):
        return CLASSMETHOD
    if isinstance(value, staticmethod):
        return STATICMETHOD
    return METHOD


def _func(value: Any) -> Any:
    return value.__func__ if isinstance(value, (classmethod, staticmethod)) else value


def _own_callable(
    cls: type, m: str, base_entry: Entry | None, copied: ClassInfo | None = None
) -> tuple[Any, str, bool]:
    """The callable ``cls`` holds for event method ``m``: its own definition if it
    has one (``own=True``), else a copy of the inherited one. ``copied`` is the
    class ``cls`` is a copy of (see :func:`_copied_from`): its callables are
    ``cls``'s own."""
    value = cls.__dict__.get(m, _UNSET)
    own = value is not _UNSET
    was = copied.entries.get(m) if copied is not None else None
    if was is not None and own and (value is was.raw or value is was._wrapper):
        value = was.raw  # the original's callable (or the wrapper it held meanwhile)
    elif own:
        owner = getattr(_func(value), "_sentinel_owner", None)
        if owner is not None and owner is not cls:
            # Another class's callable assigned here (``set_price = Stock.set_price``):
            # treat it as inherited from that class.
            other = class_info(owner)
            value = other.entries[m].raw if other and m in other.entries else value
            own = False
    else:
        # Python's own lookup decides what is inherited (a plain mixin earlier in
        # the MRO may override the reactive base's method).
        for k in cls.__mro__[1:]:
            if m in k.__dict__:
                info = class_info(k)
                value = info.entries[m].raw if info and m in info.entries else k.__dict__[m]
                break
    f = _func(value)
    if type(f) is not types.FunctionType:
        where = f"{cls.__qualname__}.{m}"
        what = "is" if own else "inherits"
        raise ReactiveError(
            f"{where} {what} a {type(value).__name__}, but it is an event method"
            + (f" (declared on {base_entry.method.root.__qualname__})" if base_entry else "")
            + "; event methods are functions (or classmethods/staticmethods of functions)",
            owner=cls.__qualname__,
            method=m,
        )
    if not own:
        value = _copy_callable(value, cls)
    return value, _kind(value), own


def _copy_callable(value: Any, cls: type) -> Any:
    f = _func(value)
    copy = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    copy.__kwdefaults__ = dict(f.__kwdefaults__) if f.__kwdefaults__ else None
    copy.__dict__.update(f.__dict__)
    for attr in ("_sentinel_owner", BEGIN, END):
        copy.__dict__.pop(attr, None)
    copy.__doc__ = f.__doc__
    copy.__module__ = f.__module__
    copy.__annotations__ = dict(f.__annotations__)
    # Pickle finds functions by qualified name: name the copy after its class.
    copy.__qualname__ = f"{cls.__qualname__}.{f.__name__}"
    if isinstance(value, classmethod):
        return classmethod(copy)
    if isinstance(value, staticmethod):
        return staticmethod(copy)
    return copy


def _check_override(
    cls: type, m: str, method: EventMethod, kind: str, decl: Declaration | None
) -> None:
    root = method.root.__qualname__
    if kind != method.kind:
        raise ReactiveError(
            f"{cls.__qualname__}.{m} is a {kind} but overrides the event {method.kind} {root}.{m}",
            owner=cls.__qualname__,
            method=m,
        )
    if decl is None:
        return
    inherited = method.declaration
    # What the override's @event leaves out it inherits; what it says must be
    # what the root declared.
    differs = [
        what
        for what, mine, theirs, said in (
            ("phases", "/".join(decl.phases), "/".join(inherited.phases), True),
            ("names", dict(decl.names), dict(inherited.names), bool(decl.names)),
            ("exclude", sorted(decl.exclude), sorted(inherited.exclude), bool(decl.exclude)),
            ("occurred_at", decl.occurred_at, inherited.occurred_at, decl.occurred_at is not None),
        )
        if said and mine != theirs
    ]
    if differs:
        raise ReactiveError(
            f"{cls.__qualname__}.{m} redeclares the events of {root}.{m} differently "
            f"({'; '.join(_spell(w, decl) + ' vs ' + _spell(w, inherited) for w in differs)}); "
            "an override inherits its events and cannot change them: drop the @event, "
            f"repeat the declaration of {root}.{m} exactly, or change it there",
            owner=cls.__qualname__,
            method=m,
        )


def _spell(what: str, decl: Declaration) -> str:
    if what == "phases":
        return "/".join(decl.phases)
    if what == "names":
        return f"names {dict(decl.names) or 'none'}"
    if what == "exclude":
        return f"exclude={decl.exclude!r}"
    return f"occurred_at={decl.occurred_at!r}"


def _shape_of(
    cls: type, info_name: str, m: str, raw: Any, kind: str, method: EventMethod
) -> CallShape:
    import inspect

    decl = method.declaration
    f = _func(raw)
    sig = inspect.signature(f)
    params = sig.parameters
    named = [*decl.exclude, *([decl.occurred_at] if decl.occurred_at else [])]
    if any(x not in params for x in named) and any(
        p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        for p in params.values()
    ):
        # a pass-through override (def login(self, *args, **kwargs)) is called as
        # the root is: its arguments are bound by the root's signature, so the
        # parameters the declaration names (excluded, the occurrence time) are
        # found there, not logged inside args or kwargs
        root = method.root.__dict__.get(m)
        if root is not None:
            sig = inspect.signature(_func(root))
            params = sig.parameters
    if kind != STATICMETHOD and not params:
        raise ReactiveError(
            f"{cls.__qualname__}.{m} takes no parameters, so it cannot be a method",
            owner=cls.__qualname__,
            method=m,
        )
    first = next(iter(params.values()), None)
    if (
        kind != STATICMETHOD
        and first is not None
        and first.kind
        not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ):
        raise ReactiveError(
            f"{cls.__qualname__}.{m} has no positional first parameter for "
            f"{'the class' if kind == CLASSMETHOD else 'the object'}",
            owner=cls.__qualname__,
            method=m,
        )
    skip = kind != STATICMETHOD
    rest = list(params)[1:] if skip else list(params)
    # The parameters the declaration names are part of the event interface: an
    # override (or an inherited mixin's method) without them would log what the
    # root leaves out, or have no occurrence time.
    missing = [x for x in named if x not in params]
    if missing:
        root = method.root.__qualname__
        raise ReactiveError(
            f"{cls.__qualname__}.{m} has no parameter {', '.join(map(repr, missing))}, "
            f"which the events of {root}.{m} name "
            f"({'exclude' if missing[0] in decl.exclude else 'occurred_at'}=...); keep the "
            "parameter's name in the override",
            owner=cls.__qualname__,
            method=m,
        )
    if END in decl.phases and "result" in rest and "result" not in decl.exclude:
        raise ReactiveError(
            f"{cls.__qualname__}.{m} has a parameter named 'result', which its end event "
            "uses for the return value; rename it or exclude it (exclude='result')",
            owner=cls.__qualname__,
            method=m,
        )
    label = f"{info_name}.{m}"

    def loggable(value: Any, param: str) -> Any:
        # the length caps are the log's, which knows whether its policy leaves
        # the value out (an excluded password over MAX_BYTES passes, and its
        # value is in no error message)
        return normalize(value, event=label, param=param, ref=param_ref, limits=False)

    return call_shape(
        sig,
        skip_first=skip,
        exclude=[x for x in decl.exclude if x in rest],
        normalize=loggable,
        plain=PLAIN,
    )


def _mark(cls: type, raw: Any, entry: Entry) -> None:
    f = _func(raw)
    f._sentinel_owner = cls
    for phase in PHASES:
        if phase in entry.handles:
            setattr(f, phase, entry.handles[phase])
        else:
            f.__dict__.pop(phase, None)


def _collect_names(cls: type, info: ClassInfo) -> None:
    methods = set(info.entries)
    for m, entry in sorted(info.entries.items()):
        for phase, n in entry.method.declaration.names:
            if n in methods:
                raise DuplicateEventError(
                    f"{info.name}.{n}",
                    f"{n!r} is also the name of an event method of {cls.__qualname__}; "
                    "choose another event name",
                )
            if n in info.names and info.names[n] != (m, phase):
                other_m, other_p = info.names[n]
                raise DuplicateEventError(
                    f"{info.name}.{n}",
                    f"{cls.__qualname__} uses the event name {n!r} for both the {other_p} "
                    f"of {other_m} and the {phase} of {m}",
                )
            info.names[n] = (m, phase)
