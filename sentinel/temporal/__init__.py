"""Temporal events: clocks, absolute and relative events, periodic operators.

Expressions (defined in :mod:`sentinel.algebra.temporal`, usable in every
operator and context, and in Snoop text)::

    <(17:00:00)*/*/*>            Absolute("(17:00:00)*/*/*")     daily at 17:00
    E1 + [00:10:00]              E1 + timedelta(minutes=10)      10 minutes after each E1
    P(E1, [00:00:10], E3)        P(e1, "00:00:10", e3)            every 10 s from E1 to E3
    P*(E1, [00:00:10] px, E3)    Pstar(e1, "00:00:10", e3, "px")  once at E3, with every tick
    within(e1, e2, t)            A(e1, e2, e1 + [t])
    not_within(e1, e2, t)        NOT(e2)[e1, e1 + [t]]

Clocks (:mod:`sentinel.temporal.clocks`): pass one to the detector
(``LocalEventDetector(clock=VirtualClock())``). Without one, a detector's timers
run on a :class:`SystemClock` in local time.

How timers meet transactions, replay and the event log: ``docs/temporal.md``.
"""

from sentinel.algebra.temporal import Absolute, AbsoluteTime, Duration, P, Pstar, Relative
from sentinel.detector import EventDetector
from sentinel.temporal import handlers as _handlers  # registers the strategies
from sentinel.temporal.calendar import matches, next_match
from sentinel.temporal.clocks import Clock, ReplayClock, SystemClock, Timer, VirtualClock
from sentinel.temporal.service import TICK, TemporalService, replay_events, service
from sentinel.temporal.within import not_within, within

del _handlers


def timers(detector: EventDetector) -> TemporalService:
    """The timer service of ``detector``: the clock its timers run on
    (``.clock``), how many are pending (``.pending()``), the absolute events armed
    (``.scheduled_absolute()``). Created on first use; raises
    :class:`~sentinel.errors.TemporalError` when the detector's clock cannot run
    timers."""
    if not isinstance(detector, EventDetector):
        raise TypeError(f"timers() takes an event detector, not {type(detector).__name__}")
    return service(detector)


__all__ = [
    "TICK",
    "Absolute",
    "AbsoluteTime",
    "Clock",
    "Duration",
    "P",
    "Pstar",
    "Relative",
    "ReplayClock",
    "SystemClock",
    "TemporalService",
    "Timer",
    "VirtualClock",
    "matches",
    "next_match",
    "not_within",
    "replay_events",
    "service",
    "timers",
    "within",
]
