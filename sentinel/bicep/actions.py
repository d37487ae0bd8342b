"""BiCEPL actions as sentinel events and rules.

Each action of a program is an explicit sentinel event named
``<program>.<action>`` (``grocery.orderResource``). Publishing a fired action
signals it, so Snoop and Ode rules can combine actions with other events, and the
event log records it. Its occurrence's ``at`` is the BiCEPL event's occurrence
time (the tick, for a revocation), ``detected_at`` the detector's clock when the
tick published it, and its parameters are those of :class:`ActionCall`.

A Python callable registered for an action (:meth:`Processor.action`) runs as a
sentinel rule on that event, with the coupling mode asked for: immediate (in the
tick's transaction), deferred (at its commit) or detached (after it, through the
outbox when the processor works with an attached session factory). The rule's
action is :func:`run_action`, a module-level function, so detached actions pass
the outbox's importability check; it finds the callable in this module's
registry (a worker process registers it by importing the module that defines the
processor, as it imports the rest of the application's rules).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sentinel.bicep.times import as_datetime
from sentinel.occurrence import CompositeOccurrence, Occurrence

__all__ = ["ActionCall", "ActionFn", "action_event", "register", "run_action"]


@dataclass(frozen=True)
class ActionCall:
    """One firing of a BiCEPL action: what a registered callable receives.

    ``args`` are the action's parameters as the statement computed them;
    ``event_class`` and ``key`` name the event whose statement fired; ``tick``
    is the clock tick, ``occ_time`` / ``det_time`` the event's occurrence and
    detection times (``occ_time`` is ``None`` for a revocation); ``statement``
    is the condition-action statement as written.
    """

    program: str
    action: str
    args: tuple[Any, ...]
    event_class: str
    key: Mapping[str, Any]
    tick: datetime
    occ_time: datetime | None
    det_time: datetime | None
    statement: str

    @property
    def event(self) -> str:
        """The sentinel event this firing was signalled as."""
        return action_event(self.program, self.action)

    def params(self) -> dict[str, Any]:
        """The occurrence parameters (loggable values)."""
        return {
            "args": list(self.args),
            "event_class": self.event_class,
            "key": dict(self.key),
            "tick": int(self.tick.timestamp()),
            "occ_time": None if self.occ_time is None else int(self.occ_time.timestamp()),
            "det_time": None if self.det_time is None else int(self.det_time.timestamp()),
            "statement": self.statement,
        }

    @classmethod
    def from_occurrence(cls, occ: Occurrence) -> ActionCall:
        program, _, action = occ.event.partition(".")
        p = occ.params
        return cls(
            program=program,
            action=action,
            args=tuple(p["args"]),
            event_class=p["event_class"],
            key=dict(p["key"]),
            tick=as_datetime(p["tick"]),  # type: ignore[arg-type]
            occ_time=as_datetime(p["occ_time"]),
            det_time=as_datetime(p["det_time"]),
            statement=p["statement"],
        )

    def __str__(self) -> str:
        args = ", ".join(
            f"{a:%Y-%m-%d %H:%M}" if isinstance(a, datetime) else repr(a) for a in self.args
        )
        return f"{self.action}({args})"


ActionFn = Callable[[ActionCall], Any]

_LOCK = threading.Lock()
_REGISTRY: dict[str, ActionFn] = {}


def action_event(program: str, action: str) -> str:
    """The sentinel event name of ``program``'s ``action``."""
    return f"{program}.{action}"


def register(program: str, action: str, fn: ActionFn) -> None:
    """Make ``fn`` the callable of ``program``'s ``action`` in this process."""
    with _LOCK:
        _REGISTRY[action_event(program, action).lower()] = fn


def unregister(program: str, action: str) -> None:
    with _LOCK:
        _REGISTRY.pop(action_event(program, action).lower(), None)


def registered(program: str, action: str) -> ActionFn | None:
    return _REGISTRY.get(action_event(program, action).lower())


def run_action(occ: Occurrence | CompositeOccurrence) -> Any:
    """The action of every BiCEPL action rule: call the registered callable with
    the :class:`ActionCall` the occurrence carries."""
    if isinstance(occ, CompositeOccurrence):  # a deferred rule's net effect
        result = None
        for part in occ.constituents:
            if part.event.lower() in _REGISTRY:
                result = run_action(part)
        return result
    fn = _REGISTRY.get(occ.event.lower())
    if fn is None:
        from sentinel.errors import BicepActionError

        raise BicepActionError(
            f"no callable is registered for BiCEPL action {occ.event!r} in this process "
            "(register it with Processor.action before the worker runs it)",
            action=occ.event,
        )
    return fn(ActionCall.from_occurrence(occ))
