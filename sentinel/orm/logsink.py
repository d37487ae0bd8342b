"""When and where an attachment writes the event log.

- A transaction's occurrences and rule firings are buffered in its
  :class:`~sentinel.orm.state.TxnState` (by the detector's occurrence listener
  and the scheduler's rule observer) and written **in the transaction**, on the
  session's connections, at pre-commit: after the deferred rules ran and their
  changes were flushed, so the rows commit exactly when the data does. A very
  long transaction also writes at flushes (every ``flush_every`` occurrences),
  unless a savepoint is open.
- Where: on every database the transaction used (each database's log is the
  complete record of the transactions that used it); the outbox entries, their
  ``pending`` firings and the late rows only on the attachment's home database
  (see :mod:`sentinel.orm.binds`).
- What a rolled-back savepoint took with it is written with the transaction,
  marked ``aborted``, under a scope id of its own (``<scope>/sp<n>``): the
  committed rows of the transaction never contain it.
- An aborted transaction's occurrences are written after the rollback, in a
  short transaction of their own, marked ``aborted``.
- Everything else is *late*: ``txn:commit`` (signalled after the commit, when the
  transaction's rows are already written) and what rules triggered by it do,
  occurrences of the process scope and of detection scopes that are not session
  transactions (``detector.transaction()`` blocks). Late rows wait in memory and
  are written with the next transaction's batch, in its transaction; by
  :meth:`LogSink.flush`, at ``detach()`` and at interpreter exit; and in a short
  transaction of their own once more than ``late_limit`` wait when a transaction
  ends. A crash loses at most these (never a transaction's own rows).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection, Engine

from sentinel.log import Firing, LogWriter, OutboxEntry, Outcome
from sentinel.occurrence import Occurrence

if TYPE_CHECKING:
    from sentinel.orm.state import FiringRecord, TxnState

__all__ = ["TXN_EVENTS", "LogSink", "firing_of", "only_transaction_events"]

log = logging.getLogger("sentinel.orm")

_new: Any = tuple.__new__
_utc = UTC
_fromts = datetime.fromtimestamp


def _lock_order(conn: Connection) -> str:
    return conn.engine.url.render_as_string(hide_password=True)


def firing_of(
    record: FiringRecord, *, scope: str | None = None, remap: tuple[str, str, int] | None = None
) -> Firing:
    """The log's :class:`~sentinel.log.Firing` for a buffered rule run.
    ``scope`` replaces the detection's scope id; ``remap = (old, new, t0)`` moves
    constituents of scope ``old`` from ``t_occ`` ``t0`` on to scope ``new`` (a
    rolled-back savepoint's sub-scope)."""
    rule, occ, status, error, at = record
    constituents = tuple((c.scope, c.t_occ) for c in occ.constituents)
    if remap is not None:
        old, new, t0 = remap
        constituents = tuple((new, t) if s == old and t >= t0 else (s, t) for s, t in constituents)
    when = _fromts(at, _utc)
    return Firing(
        rule=rule.name,
        scope=str(scope if scope is not None else occ.scope),
        t_occ=occ.t_occ,
        constituents=constituents,
        coupling=str(rule.coupling),
        status=status,
        error=None if error is None else f"{type(error).__name__}: {error}"[:4000],
        fired_at=when,
        finished_at=when,
    )


#: The transaction events sentinel signals itself.
TXN_EVENTS = frozenset({"txn:begin", "txn:pre_commit", "txn:commit", "txn:abort"})


def only_transaction_events(st: TxnState) -> bool:
    """True when nothing happened in ``st``'s transaction but its own
    ``txn:*`` events: no other occurrence, no rule ran, no savepoint was rolled
    back (a read-only unit of work). Such transactions are not logged unless
    the attachment asks for it (``attach(..., log_empty=True)``)."""
    if st.firings or st.rolled_back:
        return False
    txn = TXN_EVENTS
    return all(o[0] in txn for o in st.occurrences)


def _rescoped(occs: Iterable[Occurrence], scope: str) -> list[Occurrence]:
    return [_new(Occurrence, (*o[:6], scope)) for o in occs]


#: A late item: ("occ", occurrence, outcome), ("firing", Firing) or ("expired",
#: (scope, t_occ, when)): an occurrence's archive mark (docs/bitemporal.md).
Late = tuple[Any, ...]


class LogSink:
    """An attachment's log writing (see the module docs). Thread-safe."""

    def __init__(
        self,
        writer: LogWriter,
        *,
        late_limit: int = 1000,
        max_late: int = 1_000_000,
    ) -> None:
        self.writer = writer
        self.late: deque[Late] = deque()
        self.late_limit = late_limit
        self.max_late = max_late
        self._dropped = 0
        self._lock = threading.Lock()
        #: The engine late rows go to when no transaction carries them.
        self.engine: Engine | None = None
        self._atexit = _register_atexit(self)

    # -- late rows ---------------------------------------------------------------------
    def add_late(self, item: Late) -> None:
        late = self.late
        late.append(item)
        if len(late) > self.max_late:  # the database has been failing for long
            try:
                late.popleft()
                self._dropped += 1
            except IndexError:
                pass
            if self._dropped in (1, 1000) or self._dropped % 100_000 == 0:
                log.error(
                    "sentinel's event log: %d late rows dropped (more than %d waited: is the "
                    "log's database reachable and migrated?)",
                    self._dropped,
                    self.max_late,
                )

    def take_late(self) -> list[Late]:
        out = []
        popleft = self.late.popleft
        while True:
            try:
                out.append(popleft())
            except IndexError:
                return out

    def give_back(self, items: list[Late]) -> None:
        """Put late items taken for a write that did not commit back in front."""
        self.late.extendleft(reversed(items))

    @staticmethod
    def _late_groups(
        items: list[Late],
    ) -> tuple[list[tuple[list[Occurrence], str | None]], list[Firing], list[Any]]:
        by_outcome: dict[str | None, list[Occurrence]] = {}
        firings: list[Firing] = []
        expired: list[Any] = []
        for item in items:
            if item[0] == "occ":
                by_outcome.setdefault(item[2], []).append(item[1])
            elif item[0] == "expired":
                expired.append(item[1])
            else:
                firings.append(item[1])
        return [(occs, outcome) for outcome, occs in by_outcome.items()], firings, expired

    def flush(self, engine: Engine | None = None) -> int:
        """Write the late rows now, in a short transaction on ``engine`` (default:
        the attachment's); return how many occurrences were written. On failure
        they are kept and the error is raised."""
        engine = engine or self.engine
        if engine is None or not self.late:
            return 0
        items = self.take_late()
        groups, firings, expired = self._late_groups(items)
        try:
            with engine.begin() as conn:
                return self.writer.write_groups(conn, groups, firings=firings, expired=expired)
        except BaseException:
            self.give_back(items)
            raise

    def flush_quietly(self, engine: Engine | None = None) -> None:
        """:meth:`flush`, reporting a failure to the ``sentinel.orm`` logger."""
        try:
            self.flush(engine)
        except Exception:
            log.exception("sentinel's event log: late rows could not be written (kept)")

    # -- transactions ------------------------------------------------------------------
    def write_transaction(
        self,
        conns: list[Connection],
        st: TxnState,
        outbox: list[OutboxEntry],
        pending: list[Firing],
        *,
        home: Connection | None = None,
    ) -> None:
        """Write ``st``'s unwritten occurrences and firings (``committed``) and
        what its rolled-back savepoints took (``aborted``) on each of ``conns``
        (the transaction's connections to every database it used), and the
        ``outbox`` entries, their ``pending`` firings and the late rows on
        ``home`` if it is one of them (else the first). On failure nothing is
        taken from ``st`` or the late rows."""
        occs = st.occurrences[st.written :]
        groups: list[tuple[Iterable[Occurrence], str | None]] = [(occs, Outcome.COMMITTED)]
        firings = [firing_of(r) for r in st.firings[st.firings_written :]]
        for sub, sp_occs, sp_firings in st.rolled_back:
            groups.append((_rescoped(sp_occs, sub), Outcome.ABORTED))
            t0 = sp_occs[0].t_occ if sp_occs else 0
            firings.extend(
                firing_of(r, scope=sub, remap=(st.scope_id, sub, t0)) for r in sp_firings
            )
        main = home if home is not None and any(c is home for c in conns) else conns[0]
        # rows a long transaction wrote at flushes get its commit number now
        restamp = st.scope_id if st.written else None
        other_groups, other_firings = list(groups), list(firings)
        firings.extend(pending)
        late = self.take_late() if self.late and main is home else []
        expired: list[Any] = []
        if late:
            lgroups, lfirings, expired = self._late_groups(late)
            groups.extend(lgroups)
            firings.extend(lfirings)
        try:
            # Each write takes its database's commit-number lock until the commit:
            # in one order (by URL), so two transactions using the same databases
            # never wait for each other's lock on two databases at once.
            for conn in sorted(conns, key=_lock_order):
                if conn is main:
                    self.writer.write_groups(
                        main,
                        groups,
                        firings=firings,
                        outbox=outbox,
                        expired=expired,
                        restamp=restamp,
                    )
                else:
                    self.writer.write_groups(
                        conn, other_groups, firings=other_firings, restamp=restamp
                    )
        except BaseException:
            if late:
                self.give_back(late)
            raise
        st.written += len(occs)
        st.firings_written = len(st.firings)
        st.rolled_back.clear()
        st.borrowed.extend(late)

    def write_partial(self, conns: list[Connection], st: TxnState) -> None:
        """Write what ``st`` buffered so far (a long transaction, at a flush), on
        each of ``conns``."""
        occs = st.occurrences[st.written :]
        firings = [firing_of(r) for r in st.firings[st.firings_written :]]
        for conn in conns:
            # no commit number yet: taking it would hold its lock until the commit
            self.writer.write_groups(
                conn, [(occs, Outcome.COMMITTED)], firings=firings, sequence=False
            )
        st.written += len(occs)
        st.firings_written = len(st.firings)

    def after_commit(self, st: TxnState, *, skip_empty: bool = False) -> None:
        """After the commit: what came later (``txn:commit``, the rules it
        triggered) becomes late rows (nothing, with ``skip_empty``, for a
        transaction in which only its ``txn:*`` events happened)."""
        if skip_empty and st.written == 0 and only_transaction_events(st):
            st.written = len(st.occurrences)
            return
        for occ in st.occurrences[st.written :]:
            self.add_late(("occ", occ, "committed"))
        for r in st.firings[st.firings_written :]:
            self.add_late(("firing", firing_of(r)))
        st.written = len(st.occurrences)
        st.firings_written = len(st.firings)
        st.borrowed.clear()

    def write_aborted(
        self,
        engine: Engine,
        st: TxnState,
        outbox: list[OutboxEntry],
        *,
        copies: list[Engine] | None = None,
    ) -> None:
        """After a rollback: write everything ``st`` holds marked ``aborted`` (and
        the late rows its batch had taken, with their own outcomes) in a short
        transaction of its own on ``engine`` (the home database), and
        ``st``'s own rows on each of ``copies`` (the other databases the
        transaction used). A failure is reported to the ``sentinel.orm``
        logger and the rows are kept as late rows (the rollback already
        happened; raising here would hide why)."""
        groups: list[tuple[Iterable[Occurrence], str | None]] = [(st.occurrences, Outcome.ABORTED)]
        firings = [firing_of(r) for r in st.firings]
        for sub, sp_occs, sp_firings in st.rolled_back:
            groups.append((_rescoped(sp_occs, sub), Outcome.ABORTED))
            t0 = sp_occs[0].t_occ if sp_occs else 0
            firings.extend(
                firing_of(r, scope=sub, remap=(st.scope_id, sub, t0)) for r in sp_firings
            )
        for other in copies or ():
            try:
                with other.begin() as conn:
                    self.writer.write_groups(conn, list(groups), firings=firings)
            except Exception:
                log.exception(
                    "sentinel's event log: the occurrences of aborted transaction %s could "
                    "not be written to %s",
                    st.scope_id,
                    other.url,
                )
        borrowed = st.borrowed
        expired: list[Any] = []
        if borrowed:
            lgroups, lfirings, expired = self._late_groups(borrowed)
            groups.extend(lgroups)
            firings.extend(lfirings)
        try:
            with engine.begin() as conn:
                self.writer.write_groups(
                    conn, groups, firings=firings, outbox=outbox, expired=expired
                )
        except Exception:
            log.exception(
                "sentinel's event log: the occurrences of aborted transaction %s could not "
                "be written; they are kept and written later",
                st.scope_id,
            )
            for grp, outcome in groups:
                for occ in grp:
                    self.add_late(("occ", occ, None if outcome is None else str(outcome)))
            for f in firings:
                self.add_late(("firing", f))
            for mark in expired:
                self.add_late(("expired", mark))
            if outbox:
                log.error(
                    "sentinel's outbox: %d detached rule(s) of aborted transaction %s were "
                    "not enqueued and will not run",
                    len(outbox),
                    st.scope_id,
                )
        finally:
            st.borrowed = []

    def close(self) -> None:
        atexit.unregister(self._atexit)


def _register_atexit(sink: LogSink) -> Any:
    ref = weakref.ref(sink)

    def at_exit() -> None:  # pragma: no cover - runs at interpreter exit
        s = ref()
        if s is not None and s.late:
            deadline = time.monotonic() + 5
            while s.late and time.monotonic() < deadline:
                try:
                    s.flush()
                except Exception:
                    log.exception("sentinel's event log: late rows lost at exit")
                    return

    atexit.register(at_exit)
    return at_exit
