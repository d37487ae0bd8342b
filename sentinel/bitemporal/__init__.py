"""The bitemporal model (the BiCEP thesis, 2.2, 2.5, 4.1.3): two times, event
classes, timing primitives, occurrence-time order, lifespans.

Every occurrence has an *occurrence time* (when it happened, as its source
says) and a *detection time* (when the detector learned of it). On top of that:

- :func:`event_class` defines a keyed event class (``MUTABLE`` or
  ``IMMUTABLE``); :func:`announce` and :func:`revoke` announce, revise and
  revoke its instances; :func:`revision` shows a rule the old and new values;
- the timing primitives (:func:`ONTIME`, :func:`LATE`, :func:`CHANGE`, ...)
  are events, in Python and in Snoop text (``FUTURE(CHANGE(Delivery))``);
  :data:`FIRED` is a condition;
- a detector's ``chronon`` makes times within one chronon one instant and
  processes announcements at its clock ticks;
- rules take ``lifespan=`` (and event classes too), ``order="occurrence"``
  with ``lateness=``, and ``archive=``; :func:`sentinel.within` is a WITHIN
  whose E1s live for the window.

``docs/bitemporal.md`` is the guide: the definitions, how each thesis example
reads, and what sentinel decided where the thesis is vague.
"""

from __future__ import annotations

import warnings
from typing import Any

from sentinel.algebra import expressions as ex
from sentinel.algebra.bitemporal import (
    ANNOUNCEMENT,
    CANCELLATION,
    CHANGE,
    FUTURE,
    KINDS,
    LATE,
    ONTIME,
    POSTPONE,
    RETROACTIVECHANGE,
    REVOCATION,
    Timing,
    Within,
)
from sentinel.algebra.expressions import Primitive
from sentinel.bitemporal import window as _window  # registers WITHIN's strategies
from sentinel.bitemporal.classes import IMMUTABLE, MUTABLE, EventClass, Revision, revision
from sentinel.bitemporal.classify import REVISION, classify
from sentinel.bitemporal.fired import FIRED, Condition
from sentinel.bitemporal.lifespan import Expired, refuse_lifespan
from sentinel.bitemporal.service import TICK, BitemporalService, prepare, service
from sentinel.detector import EventDetector, Mode
from sentinel.detector.events import listen
from sentinel.errors import LifespanWarning
from sentinel.occurrence import Occurrence

del _window

__all__ = [
    "ANNOUNCEMENT",
    "CANCELLATION",
    "CHANGE",
    "FIRED",
    "FUTURE",
    "IMMUTABLE",
    "KINDS",
    "LATE",
    "MUTABLE",
    "ONTIME",
    "POSTPONE",
    "RETROACTIVECHANGE",
    "REVISION",
    "REVOCATION",
    "TICK",
    "BitemporalService",
    "Condition",
    "EventClass",
    "Expired",
    "Revision",
    "Timing",
    "Within",
    "announce",
    "bitemporal",
    "classify",
    "event_class",
    "on_expired",
    "revision",
    "revoke",
    "too_late",
]


def bitemporal(detector: EventDetector) -> BitemporalService:
    """The bitemporal service of ``detector`` (created on first use): its event
    classes (``.classes``), their instances' current versions (``.instances``),
    the lifespans and the occurrence-time buffers."""
    if not isinstance(detector, EventDetector):
        raise TypeError(f"bitemporal() takes an event detector, not {type(detector).__name__}")
    return service(detector)


#: ``event_class``'s default lifespan: none was given (kept for ever, with a
#: :class:`~sentinel.errors.LifespanWarning`), unlike an explicit ``None``.
_UNSAID: Any = object()


def event_class(
    detector: EventDetector,
    name: str,
    *,
    key: str | tuple[str, ...] | list[str] | None,
    mutable: bool = True,
    lifespan: Any = _UNSAID,
    archive: bool = False,
) -> Primitive:
    """Define the keyed event class ``name`` on ``detector`` and return its event.

    ``key`` names the attribute(s) identifying an instance (``None``: none, every
    announcement is a new instance). A ``MUTABLE`` class (``mutable=True``)
    accepts revisions and revocations; an ``IMMUTABLE`` one refuses them.
    ``lifespan`` (a timedelta, seconds, or a time string: ``"14d"``, ``"5h"``,
    ``"00:10:00"``) bounds how long its occurrences take part in detections and
    how long an instance is kept. Without it, every occurrence and instance is
    kept for ever, and a :class:`~sentinel.errors.LifespanWarning` says so (the
    thesis makes a lifespan mandatory); ``lifespan=None`` keeps them for ever
    without the warning.
    ``archive=True`` hands expired occurrences to the archive listeners.

    Raises :class:`~sentinel.errors.BitemporalError` for a bad name, key or
    lifespan (zero or negative) and :class:`~sentinel.errors.DuplicateEventError`
    for a name already used otherwise.

    >>> from sentinel import LocalEventDetector
    >>> det = LocalEventDetector()
    >>> event_class(det, "Delivery", key="resource", lifespan="14d")
    <Primitive Delivery>
    """
    if lifespan is _UNSAID:
        lifespan = None
        warnings.warn(
            LifespanWarning(
                f"event class {name} has no lifespan: every occurrence and instance of it is "
                f"kept for ever (memory grows with them); give it one "
                f"(event_class(..., lifespan='14d')), or lifespan=None to keep them on purpose",
                event=name,
            ),
            stacklevel=2,
        )
    return (
        service(detector)
        .event_class(name, key=key, mutable=mutable, lifespan=lifespan, archive=archive)
        .event
    )


def announce(detector: EventDetector, name: str, at: Any, /, **attrs: Any) -> Occurrence | None:
    """Announce an instance of the event class ``name`` occurring at ``at`` (an
    aware datetime, a naive one read as UTC, or POSIX seconds) with ``attrs``
    (which include the key). The first announcement of a key is an
    ANNOUNCEMENT; a later one a revision (CHANGE, RETROACTIVECHANGE, POSTPONE).

    Without a chronon the occurrence is signalled at once and returned (rules
    have run); with one it is processed at the next clock tick and ``None`` is
    returned. Raises :class:`~sentinel.errors.OccurrenceTimeError` for a time
    that is not a time, :class:`~sentinel.errors.BitemporalError` for a missing
    key attribute or a revision of an ``IMMUTABLE`` class,
    :class:`~sentinel.params.UnloggableParameter` for a value the log cannot
    store, all before anything is signalled or logged.
    """
    return service(detector).announce(name, at, attrs)


def revoke(detector: EventDetector, name: str, /, **key: Any) -> Occurrence | None:
    """Revoke the instance of ``name`` with the key values ``key`` (CANCELLATION;
    REVOCATION when its occurrence time had passed). Raises
    :class:`~sentinel.errors.BitemporalError` for a key no instance has (never
    announced, revoked or expired) and for an ``IMMUTABLE`` class."""
    return service(detector).revoke(name, key)


def too_late(detector: EventDetector, rule: Any) -> dict[str, int]:
    """How many occurrences of each event arrived too late for the
    occurrence-time order of ``rule`` (a rule or its name)."""
    if isinstance(rule, str):
        rule = detector.get_rule(rule)  # type: ignore[attr-defined]
    mode: Mode = rule._subscription.mode
    return service(detector).too_late(mode)


def on_expired(detector: EventDetector, listener: Any) -> None:
    """Call ``listener(expired)`` with the list of :class:`Expired` occurrences
    each clock tick purges from rules and event classes with ``archive=True``
    (the detector's ``expired`` event, :mod:`sentinel.detector.events`)."""
    listen(detector, "expired", listener)


def _prepare_mode(det: EventDetector, mode: Mode, expression: ex.Expression) -> None:
    if mode.lifespan is not None:
        refuse_lifespan(expression, mode.lifespan)
    service(det)


def install(detector: EventDetector) -> None:
    """The bitemporal layer's plug-in (:mod:`sentinel.detector.plugins`): timing
    primitives, WITHIN and the modes of lifespans, occurrence-time order and
    archiving set up the detector's bitemporal service."""
    listen(detector, "prepare", prepare)
    listen(detector, "prepare_mode", _prepare_mode)
