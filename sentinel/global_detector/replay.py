"""Batch replay of the committed log in commit order (:func:`replay_committed`),
the detections a global detector makes over the same log, and how a rule set
given by reference is found (:func:`resolve_rules`, which the service uses too).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Protocol, runtime_checkable

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sentinel.global_detector.detect import CommitFeeder, Detection
from sentinel.global_detector.order import CommitReader
from sentinel.global_detector.switches import schedule_switches
from sentinel.log.tables import DEFAULT_PREFIX, log_tables
from sentinel.rules import LocalEventDetector
from sentinel.rules.reference import import_reference

__all__ = ["replay_committed", "resolve_rules"]

log = logging.getLogger("sentinel.global")


@runtime_checkable
class Attachment(Protocol):
    """An attachment (:class:`sentinel.orm.Attachment`) as far as the service
    reads one: the detector holding its rules."""

    @property
    def detector(self) -> Any: ...


def resolve_rules(rules: Any) -> LocalEventDetector:
    """``rules`` as :class:`GlobalDetector` takes them (a detector, a
    ``"package.module:attribute"`` reference, an attachment, a callable
    returning either) as the :class:`~sentinel.LocalEventDetector` holding them."""
    if isinstance(rules, str):  # what ``sentinel worker --rules`` takes too
        target = import_reference(rules, (LocalEventDetector, Attachment))
    else:
        target = rules
    if not isinstance(target, LocalEventDetector):
        target = target.detector  # an Attachment
    det: LocalEventDetector = target
    _warn_own_timers(det)
    return det


#: Rule sets already warned about (:func:`_warn_own_timers`).
_WARNED: weakref.WeakSet[LocalEventDetector] = weakref.WeakSet()


def _warn_own_timers(det: LocalEventDetector) -> None:
    """Say so when the rule set's own detector keeps timers on a clock that
    fires (an absolute event armed on the default system clock at the rule's
    definition): they fire in every process that imports the rules, and a
    detached rule they trigger runs there, in process, outside the outbox."""
    from sentinel.temporal import ReplayClock, VirtualClock
    from sentinel.temporal.service import _ATTR

    svc = det.__dict__.get(_ATTR)
    if svc is None or det in _WARNED or isinstance(svc.clock, ReplayClock | VirtualClock):
        return
    armed = sorted(svc.scheduled_absolute())
    if not armed and not svc.pending():
        return
    _WARNED.add(det)
    log.warning(
        "sentinel global: the rule set's detector keeps timers on its own clock (%s): they "
        "fire in every process that imports it, and the detached rules they trigger run "
        "there, outside the outbox; define a global rule set on "
        "LocalEventDetector(clock=ReplayClock()), whose timers never fire (the global "
        "detector runs its rules' timers on the log's time: docs/global.md, 'Temporal "
        "events')",
        ", ".join(armed) or "relative timers",
    )


def replay_committed(
    rules: Any,
    bind: str | Engine,
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    max_ahead: float | None = 300.0,
    max_late: float | None = 86_400.0,
    switches: str | None = None,
) -> list[Detection]:
    """Batch replay of the committed log in commit order through ``rules``:
    the detections a global detector makes over the same log, in its order
    (``max_ahead``, ``max_late``: as :class:`GlobalDetector`'s; a row ahead of
    the clock is judged by this machine's clock now). ``switches`` names a
    global detector whose applied rule switches are applied at their recorded
    positions (``None``: the rules as ``rules`` defines them)."""
    det = resolve_rules(rules)
    feeder = CommitFeeder(det, max_ahead=max_ahead, max_late=max_late)
    engine = sa.create_engine(bind) if isinstance(bind, str) else bind
    reader = CommitReader(log_tables(schema, prefix))
    out: list[Detection] = []
    try:
        with engine.connect() as conn:
            if switches is not None:
                schedule_switches(conn, reader.tables, switches, feeder)
            after = 0
            while True:
                rows = reader.read(conn, after, parsed=True)
                if not rows:
                    break
                out.extend(feeder.feed(rows))
                after = rows[-1].commit_seq
    finally:
        if isinstance(bind, str):
            engine.dispose()
    return out
