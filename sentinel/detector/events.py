"""The detector's events: every point where a layer plugs into a detector.

In the manner of SQLAlchemy's ``event`` module: the layers above the detector
(rules, temporal, bitemporal, Ode, reactive, the ORM, replay, testing) do not
call a verb of their own on the detector; they listen to one of the events
catalogued in :data:`EVENTS`::

    from sentinel.detector import events

    events.listen(detector, "flush", on_flush)      # on_flush(scope) from now on
    events.remove(detector, "flush", on_flush)      # and no more
    events.contains(detector, "flush", on_flush)    # False

Each detector has a :class:`Dispatch` (``detector.dispatch``) with one
attribute per event: the tuple of its listeners (a :class:`Listeners`, empty
when nobody listens). Code that fires an event spells it one way, whose cost
when nobody listens is one truth test::

    if self.dispatch.flush:
        self.dispatch.flush(scope)          # calls every listener, in order

Events whose listeners answer a question are asked with
:meth:`Listeners.first` (the first answer that is not ``None``) or, for the
ones a single listener decides (``run_detached``, ``object_scope``), through
their first listener (``dispatch.object_scope[0](obj)``): a layer that takes
over listens with ``insert=True`` and gives the decision back when it removes
its listener.

Listeners are kept in tuples that are replaced, never changed, under the
detector's lock: a thread firing an event iterates over the listeners of that
moment, whatever another thread adds or removes meanwhile.

What is not an event stays a registry, described in ``docs/architecture.md``
("The detector's events"): the operator strategies (``operators.register``),
the samplers of P* (``detector.sampler``), the embedded languages of Snoop
text (``register_block``), the process's default detector (``watch_default``)
and the graph's wiring hooks (``EventGraph.entry_hooks`` and the like).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sentinel.errors import UnknownEventError

__all__ = ["EVENTS", "Dispatch", "Event", "Listeners", "contains", "listen", "remove"]


class Listeners(tuple):  # type: ignore[type-arg]
    """The listeners of one event on one detector, in the order they are called.

    Empty (false) when nobody listens. Calling it calls each listener with the
    arguments and returns ``None``."""

    __slots__ = ()

    def __call__(self, *args: Any) -> None:
        for fn in self:
            fn(*args)

    def first(self, *args: Any) -> Any:
        """Call the listeners in order until one returns something other than
        ``None``; return that (``None`` when none does)."""
        for fn in self:
            answer = fn(*args)
            if answer is not None:
                return answer
        return None


_NOBODY = Listeners()


@dataclass(frozen=True)
class Event:
    """One event of the catalogue: what fires it, when, with which arguments,
    and what a listener may return or raise."""

    name: str
    #: The layer whose code fires it.
    fired_by: str
    #: When it fires.
    when: str
    #: The listener's signature.
    arguments: str
    #: What a listener returns or may raise.
    contract: str
    #: Adding or removing a listener fires ``changed`` (what is listened to changed).
    tells_changed: bool = False


_CATALOGUE = (
    Event(
        "prepare",
        "detector",
        "an expression is resolved on the detector (``expression()``, a rule, a "
        "subscription), for each of its sub-expressions, parents first, before "
        "any is used",
        "fn(detector, expression)",
        "returns nothing; sets up what detecting that kind of expression needs "
        "there (a timer service, a channel); raises a SentinelError to refuse it",
    ),
    Event(
        "prepare_mode",
        "detector",
        "before a subscription whose mode has a lifespan, an occurrence-time "
        "order or archiving is wired",
        "fn(detector, mode, expression)",
        "returns nothing; may raise to refuse the subscription (nothing is wired)",
    ),
    Event(
        "replica",
        "rules",
        "``replica()`` made a fresh detector, before it copies the rules",
        "fn(source, replica)",
        "returns nothing; copies the listener's own definitions (event classes)",
    ),
    Event(
        "route",
        "detector",
        "``inject()`` meets a logged occurrence that no channel carries (a "
        "temporal tick), under the lock",
        "fn(event_name)",
        "returns ``route(occurrence, scope) -> entries`` for the events it "
        "dispatches, ``None`` for others; the first answer is used",
    ),
    Event(
        "selectors",
        "detector",
        "``inject()`` (replay) needs the selectors a logged occurrence carried",
        "fn(event_name, source)",
        "returns the tuple of selectors, or ``None`` to leave it to the next "
        "listener; with no answer the source itself is the selector",
    ),
    Event(
        "flush",
        "detector",
        "``flush()`` forgets the detection state of a scope (``None``: of "
        "everything), under the lock",
        "fn(scope)",
        "returns nothing; drops the work it keeps beside that state (timers)",
    ),
    Event(
        "occurrence",
        "detector",
        "every primitive occurrence signalled, under the lock, before it "
        "propagates (not for ``inject()``: replayed ones are logged already); "
        "the occurrence in the graph's form, a plain tuple (``sentinel.occurrence``)",
        "fn(occurrence)",
        "returns ``None``, or the occurrence to signal in its place, an 8-tuple "
        "(the event log's, its parameters made loggable; other values are "
        "ignored); an exception reaches the "
        "signaller and nothing of the signal is detected",
        tells_changed=True,
    ),
    Event(
        "changed",
        "detector",
        "what is listened to may have changed: a subscription came or went, an "
        "``occurrence`` listener was added or removed; under the lock",
        "fn()",
        "returns nothing (layers that signal only while listened re-check here)",
    ),
    Event(
        "define_rule",
        "rules",
        "a rule is being defined, before it is registered or enabled",
        "fn(rule)",
        "returns nothing; raises a RuleDefinitionError to reject the rule "
        "(nothing of it is applied)",
    ),
    Event(
        "rule_run",
        "rules",
        "after each rule run (immediate, deferred, detached run here)",
        "fn(rule, occurrence, status, error)",
        "``status`` is ``fired``, ``condition_false`` or ``failed`` (``error`` "
        "is then the exception about to reach the signaller); must not raise, "
        "except to fail the run (the ORM fails a run that ended its transaction)",
    ),
    Event(
        "run_detached",
        "rules",
        "a detached rule is due: its transaction ended (or none was running)",
        "fn(rule, occurrence, committed)",
        "the first listener alone runs it (``insert=True`` takes over); with "
        "none the detector runs it at once in a transaction of its own",
    ),
    Event(
        "classes_attached",
        "reactive",
        "reactive classes start signalling to the detector (created, bound or "
        "moved there), after their event names are defined",
        "fn(classes)",
        "returns nothing (the ORM layer defines the database events of mapped classes)",
    ),
    Event(
        "object_scope",
        "reactive",
        "a listened event method is about to signal",
        "fn(obj)",
        "the first listener alone answers (``insert=True`` takes over): the "
        "Scope the occurrence belongs to, or ``None`` for the current scope",
    ),
    Event(
        "expired",
        "bitemporal",
        "a clock tick purged occurrences from rules and event classes with "
        "``archive=True``, outside the lock",
        "fn(expired)",
        "returns nothing; ``expired`` is a list of ``sentinel.bitemporal.Expired``",
    ),
)

#: Every event of a detector, by name.
EVENTS: Mapping[str, Event] = MappingProxyType({e.name: e for e in _CATALOGUE})


class Dispatch:
    """The listeners of every event of one detector: one attribute per event of
    :data:`EVENTS`, a :class:`Listeners` tuple (empty while nobody listens)."""

    __slots__ = tuple(EVENTS)

    prepare: Listeners
    prepare_mode: Listeners
    replica: Listeners
    route: Listeners
    selectors: Listeners
    flush: Listeners
    occurrence: Listeners
    changed: Listeners
    define_rule: Listeners
    rule_run: Listeners
    run_detached: Listeners
    classes_attached: Listeners
    object_scope: Listeners
    expired: Listeners

    def __init__(self) -> None:
        for name in EVENTS:
            setattr(self, name, _NOBODY)


def _event(target: Any, name: str, where: str) -> Event:
    spec = EVENTS.get(name) if isinstance(name, str) else None
    if spec is None:
        err = UnknownEventError(str(name), EVENTS, where=where)
        if not err.suggestions:
            err.args = (
                f"unknown detector event {name!r} in {where}; the detector's events "
                f"are {', '.join(EVENTS)} (sentinel.detector.events.EVENTS)",
            )
        raise err
    if not isinstance(getattr(target, "dispatch", None), Dispatch):
        raise TypeError(f"{where}: {target!r} is not an event detector (it has no dispatch)")
    return spec


def _lock_of(target: Any) -> Any:
    return getattr(target, "_lock", None) or _NO_LOCK


_NO_LOCK = threading.RLock()


def listen(target: Any, name: str, fn: Callable[..., Any], *, insert: bool = False) -> None:
    """Call ``fn`` whenever the event ``name`` fires on the detector ``target``
    (see :data:`EVENTS` for when, and with which arguments). ``insert=True``
    puts ``fn`` before the listeners already there. Raises
    :class:`~sentinel.errors.UnknownEventError` for a name not in the catalogue."""
    spec = _event(target, name, f"listen(detector, {name!r}, ...)")
    if not callable(fn):
        raise TypeError(f"listen(detector, {name!r}, fn): fn must be callable, not {fn!r}")
    dispatch: Dispatch = target.dispatch
    with _lock_of(target):
        old: Listeners = getattr(dispatch, name)
        setattr(dispatch, name, Listeners((fn, *old) if insert else (*old, fn)))
        if spec.tells_changed and dispatch.changed:
            dispatch.changed()


def remove(target: Any, name: str, fn: Callable[..., Any]) -> None:
    """Stop calling ``fn`` (given to :func:`listen`) for ``name`` on ``target``;
    nothing if it does not listen."""
    spec = _event(target, name, f"remove(detector, {name!r}, ...)")
    dispatch: Dispatch = target.dispatch
    with _lock_of(target):
        old: Listeners = getattr(dispatch, name)
        if fn not in old:
            return
        left = tuple(x for x in old if x != fn)
        setattr(dispatch, name, Listeners(left) if left else _NOBODY)
        if spec.tells_changed and dispatch.changed:
            dispatch.changed()


def contains(target: Any, name: str, fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` listens to ``name`` on ``target``."""
    _event(target, name, f"contains(detector, {name!r}, ...)")
    return fn in getattr(target.dispatch, name)
