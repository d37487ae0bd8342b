"""How a session transaction ends when SQLAlchemy's ``after_commit`` did not
say it committed: the in-doubt commit (a commit whose reply was lost, resolved
by asking the database), the abort, a transaction whose session was
garbage-collected; and logging a transaction as aborted.

:class:`Endings` is that part of :class:`~sentinel.orm.attachment.Attachment`
(a mixin).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from sentinel.log import LogWriter
from sentinel.occurrence import Occurrence
from sentinel.orm.logsink import TXN_EVENTS, LogSink, firing_of, only_transaction_events
from sentinel.orm.state import TxnState, take_abandoned
from sentinel.orm.worker import Runner
from sentinel.rules import LocalEventDetector

log = logging.getLogger("sentinel.orm")


class Endings:
    """The transaction endings of :class:`~sentinel.orm.attachment.Attachment`."""

    detector: LocalEventDetector
    writer: LogWriter
    sink: LogSink | None
    log_empty: bool
    runner: Runner

    if TYPE_CHECKING:

        def _home_of(self, session: Session) -> Engine: ...

    def _skip(self, st: TxnState) -> bool:
        return not self.log_empty and st.written == 0 and only_transaction_events(st)

    def _late_aborted(
        self,
        occs: list[Occurrence],
        firings: list[Any],
        rolled_back: list[tuple[str, list[Occurrence], list[Any]]],
    ) -> None:
        """Log a transaction's occurrences and rule runs as aborted, with the
        late rows."""
        sink = self.sink
        assert sink is not None
        for occ in occs:
            sink.add_late(("occ", occ, "aborted"))
        for r in firings:
            sink.add_late(("firing", firing_of(r)))
        for path, sp_occs, sp_firings in rolled_back:
            for occ in sp_occs:
                sink.add_late(("occ", occ, "aborted", path))
            for r in sp_firings:
                sink.add_late(("firing", firing_of(r, savepoint=path)))

    def _resolve(self, st: TxnState) -> bool | None:
        """Did the transaction of ``st``, which ended without SQLAlchemy's
        ``after_commit``, commit after all? Only asked of a transaction whose
        pre-commit step wrote rows in it (``st.witness``): a commit whose reply
        was lost (the connection cut after COMMIT reached the database) leaves
        them in the database, a rollback does not. True or False as the
        database answers (three tries, on fresh connections); None when it
        does not answer."""
        assert st.witness is not None
        engine, key = st.witness
        tables = self.writer.tables
        if key is None:
            b = tables.batches
            query = sa.select(b.c.scope).where(b.c.scope == st.scope_id).limit(1)
        else:
            ob = tables.outbox
            query = sa.select(ob.c.idempotency_key).where(ob.c.idempotency_key == key)
        for delay in (0.0, 0.05, 0.25):
            time.sleep(delay)
            try:
                with engine.connect() as conn:
                    found = conn.execute(query).first() is not None
            except Exception as err:
                error: Exception = err
                continue
            if found:
                log.warning(
                    "sentinel: the commit of transaction %s failed in the driver, but the "
                    "database holds its rows: it committed (the reply to COMMIT was "
                    "lost); txn:commit is signalled",
                    st.scope_id,
                )
            return found
        log.error(
            "sentinel: the commit of transaction %s failed and the database does not "
            "answer (%s): whether it committed is unknown; see 'A commit whose reply is "
            "lost' in docs/operations.md",
            st.scope_id,
            error,
        )
        return None

    def _in_doubt(self, st: TxnState) -> None:
        """The transaction of ``st`` ended without a commit that sentinel saw,
        and the database could not say whether it committed: its scope ends
        without ``txn:commit`` or ``txn:abort`` (no rule runs on a guess), and
        nothing more is logged for it (its rows written in the transaction are
        in the log exactly if it committed)."""
        scope = st.scope
        if scope is not None and scope.active:
            scope.status = "aborted"
            self.detector.flush(scope)

    def _abort(self, session: Session, st: TxnState) -> None:
        scope = st.scope
        if scope is None:
            return
        aborted = st.aborted_outbox
        try:
            if scope.active:
                self.detector.abort(scope)
        except Exception:
            log.exception("sentinel: a rule on txn:abort of %s failed", st.scope_id)
        if not aborted and (self.sink is None or self._skip(st)):
            return
        try:
            home = self._home_of(session)
        except Exception:
            if aborted or not st.engines:
                log.exception("sentinel: no engine to log aborted transaction %s", st.scope_id)
                return
            home = st.engines[0]  # no outbox entry: any database the transaction used
        if self.sink is not None:
            copies = [e for e in st.engines if e is not home]
            self.sink.write_aborted(home, st, aborted, copies=copies)
        elif aborted:
            try:
                with home.begin() as conn:
                    self.writer.write(conn, (), outbox=aborted)
            except Exception:
                log.exception("sentinel's outbox: detached rules of %s not enqueued", st.scope_id)
                return
        for entry in aborted:
            self.runner.submit(entry.idempotency_key)

    def _abandoned(
        self,
        scope_id: str,
        scope_ref: Any,
        occs: list[Occurrence],
        firings: list[Any],
        rolled_back: list[tuple[str, list[Occurrence], list[Any]]],
    ) -> None:
        """A transaction of this attachment whose session was garbage-collected
        before it ended (the database rolled it back when its connection went
        back to the pool): its detection scope went with it (or is ended now,
        without ``txn:abort``: no rule runs for a garbage collection) and what it
        signalled is logged as aborted, with the late rows."""
        scope = None if scope_ref is None else scope_ref()
        if scope is not None and scope.status in ("active", "abandoned"):
            scope.status = "aborted"
            self.detector.flush(scope)
        log.warning(
            "sentinel: the session of transaction %s was garbage-collected before the "
            "transaction ended (close() it); it counts as aborted, without txn:abort",
            scope_id,
        )
        sink = self.sink
        if sink is None:
            return
        if (
            not self.log_empty
            and not firings
            and not rolled_back
            and all(o[0] in TXN_EVENTS for o in occs)
        ):
            return
        self._late_aborted(occs, firings, rolled_back)


def _collect_abandoned() -> None:
    for att, scope_id, scope_ref, occs, firings, rolled_back in take_abandoned():
        try:
            att._abandoned(scope_id, scope_ref, occs, firings, rolled_back)
        except Exception:  # pragma: no cover - never let one harm a new transaction
            log.exception("sentinel: cleaning up an abandoned transaction failed")
