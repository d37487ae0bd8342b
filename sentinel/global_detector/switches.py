"""Enabling and disabling the global detector's rules while it runs, exactly.

A request (:func:`sentinel.log.switches.request_switch`: ``sentinel rules
disable NAME``, or the web view's action) is a row of ``rule_switches``. The
service (:class:`Switchboard`, called by
:class:`~sentinel.global_detector.GlobalDetector`):

- at a read-batch boundary (the start of a step, before it reads: every
  commit up to the cursor's position fed, none after it), takes the pending
  requests of its detector and, **in one transaction that holds the cursor's
  lease at that position** (:meth:`~sentinel.global_detector.cursor.Cursor.advance`
  from the position to itself, which locks the cursor's row), records each as
  handled at that position: applied, or refused with the reason (a rule its
  rule set does not define, or enabling a rule that is not detached). Only
  after that commit does it apply them to its detector
  (:meth:`~sentinel.global_detector.detect.CommitFeeder.switch`:
  ``rule.disable()`` / ``rule.enable()``), so a switch is in the detector's
  memory only when the log says where it was applied;
- when it rebuilds its memory from the log (a start, a restart, a lost lease
  taken back, a failed batch), schedules the applied switches at their
  recorded positions (:meth:`~sentinel.global_detector.detect.CommitFeeder.schedule`):
  the feed applies each between the same two commits as the first time. So
  what is detected does not depend on when an instance restarted.

Each step looks for pending requests (one indexed query; at most every
:attr:`Switchboard.every` seconds when that is set). On a log without the table
(revision 0006) a step raises :class:`~sentinel.errors.LogTablesMissingError`
naming the command that adds it, as the service's log writer would refuse a
log older than the revision this code expects.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy.engine import Connection, Engine

from sentinel.errors import LeaseLost
from sentinel.global_detector.detect import CommitFeeder
from sentinel.log.switches import (
    Switch,
    applied_switches,
    has_switches,
    mark_handled,
    pending_switches,
    require_switches,
)
from sentinel.log.tables import LogTables

__all__ = ["Switchboard", "schedule_switches"]

log = logging.getLogger("sentinel.global")


def schedule_switches(
    conn: Connection,
    tables: LogTables,
    detector: str,
    feeder: CommitFeeder,
    upto: int | None = None,
) -> list[Switch]:
    """Schedule on ``feeder`` the switches global detector ``detector``
    applied (at positions up to ``upto``; ``None``: all); return them. Nothing
    when the log has no switches table."""
    if not has_switches(conn, tables):
        return []
    done = applied_switches(conn, tables, detector, upto)
    feeder.schedule((s.position or 0, s.rule, s.enabled) for s in done)
    return done


class Switchboard:
    """The service's side of rule switches (see the module docs); one per
    :class:`~sentinel.global_detector.GlobalDetector`. Not thread-safe."""

    def __init__(self, engine: Engine, tables: LogTables, name: str) -> None:
        self.engine = engine
        self.tables = tables
        self.name = name
        #: Seconds between two looks for pending requests (0, the default:
        #: every step; one indexed query, small beside a step's reads).
        self.every = 0.0
        self._next = 0.0
        #: Whether the log was found to have the switches table.
        self.available = False
        #: The switches this instance handled, in order (applied or refused).
        self.handled: list[Switch] = []

    def _check(self, conn: Connection) -> None:
        """Raise :class:`~sentinel.errors.LogTablesMissingError`, naming the
        command that adds it, when the log has no switches table (once found,
        it is not looked for again)."""
        if not self.available:
            require_switches(conn, self.tables)
            self.available = True

    def load(self, conn: Connection, feeder: CommitFeeder, position: int) -> None:
        """Before ``feeder`` is fed the log up to ``position`` (a rebuild):
        schedule every switch applied, those up to there applied as the
        rebuild passes them, and any beyond (a cursor set back by an
        operator) as the service's reads pass them again."""
        self._check(conn)
        schedule_switches(conn, self.tables, self.name, feeder)

    def apply(self, service: Any, feeder: CommitFeeder) -> list[Switch]:
        """At a read-batch boundary (``feeder`` has fed every commit up to the
        cursor's position): record the pending requests as handled at that
        position, under the lease, then apply those not refused to
        ``feeder``; return them. When the lease is no longer this instance's,
        nothing is recorded or applied (the step's batch then finds out)."""
        now = time.monotonic()
        if now < self._next:
            return []
        self._next = now + self.every
        with self.engine.connect() as conn:
            self._check(conn)
            pending = pending_switches(conn, self.tables, self.name)
        if not pending:
            return []
        position = feeder.position
        outcome = [(s, feeder.refusal(s.rule, s.enabled)) for s in pending]
        try:
            with self.engine.begin() as conn:
                # holds the lease at this position, and locks the cursor's row
                # until the commit: no other instance reads past it meanwhile
                service.cursor.advance(
                    conn, service.id, position, position, service.lease, feeder.log_time
                )
                mark_handled(
                    conn, self.tables, [(s.id, why) for s, why in outcome], position, service.id
                )
        except LeaseLost:
            return []  # rolled back: nothing recorded, nothing applied
        except BaseException:
            # the commit's outcome may be unknown (recorded, or not): the next
            # step rebuilds the detector from the log, which says which
            service._feeder = None
            raise
        done: list[Switch] = []
        for s, why in outcome:
            handled = Switch(
                s.id,
                s.detector,
                s.rule,
                s.enabled,
                s.requested_at,
                s.requested_by,
                position,
                None,
                service.id,
                why,
            )
            self.handled.append(handled)
            if why is not None:
                log.warning(
                    "sentinel global %r: the request #%d to %s rule %r is refused: %s",
                    self.name,
                    s.id,
                    "enable" if s.enabled else "disable",
                    s.rule,
                    why,
                )
                continue
            feeder.switch(s.rule, s.enabled)
            log.info(
                "sentinel global %r: rule %r %s after commit %d (request #%d by %s)",
                self.name,
                s.rule,
                "enabled" if s.enabled else "disabled",
                position,
                s.id,
                s.requested_by,
            )
            done.append(handled)
        return done
