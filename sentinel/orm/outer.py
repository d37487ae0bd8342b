"""A session inside a transaction begun outside it (``join_transaction_mode``).

A session that joined a connection's transaction (``"create_savepoint"``,
``"rollback_only"``) or works inside a savepoint commits into that transaction:
its ``txn:commit`` waits for the outer transaction's commit, and the outer
rollback aborts it. :class:`OuterTransactions` is that part of
:class:`~sentinel.orm.attachment.Attachment` (a mixin); the module-level
functions wait for a connection's end.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection
from sqlalchemy.orm import SessionTransaction

from sentinel.orm.integration import _LOCK
from sentinel.orm.logsink import LogSink, only_transaction_events
from sentinel.orm.state import TxnState, unregister
from sentinel.rules import LocalEventDetector

if TYPE_CHECKING:
    from sentinel.occurrence import Occurrence

log = logging.getLogger("sentinel.orm")

#: Seconds before a worker first looks for the outbox entry of a detached rule
#: that an outer transaction's commit triggered (its ``commit`` event comes just
#: before the database commit, which makes the entry visible); it looks again,
#: at doubling waits, for as long as a claim's lease (``Runner.submit_awaited``).
_OUTER_SUBMIT_DELAY = 0.1

#: Connections whose transaction sessions committed into (see
#: :meth:`Attachment._hand_over`), with what waits for its end. Each gets one
#: pair of listeners, for its life (a listener cannot be removed while its
#: event runs).
_OUTER: weakref.WeakKeyDictionary[Connection, list[Callable[[Connection, bool], None]]] = (
    weakref.WeakKeyDictionary()
)


def _joins_outer(transaction: SessionTransaction, connection: Connection) -> bool:
    """True when the root session transaction ``transaction`` uses ``connection``
    inside a transaction begun outside the session, so that its commit is not
    the database's: a savepoint of its own (``join_transaction_mode=
    "create_savepoint"``), or the connection's transaction joined without
    committing it (``"rollback_only"``), or its open savepoint."""
    entry = transaction._connections.get(connection)
    if entry is None:  # pragma: no cover - after_begin registers it first
        return False
    _, trans, should_commit, _ = entry
    return not should_commit or trans is not connection.get_transaction()


def _await_outer(conn: Connection, callback: Callable[[Connection, bool], None]) -> None:
    """Call ``callback(conn, committed)`` when ``conn``'s transaction commits
    (in its ``commit`` event) or rolls back (``rollback``)."""
    with _LOCK:
        waiting = _OUTER.get(conn)
        if waiting is None:
            waiting = _OUTER[conn] = []
            sa_event.listen(conn, "commit", _outer_committed)
            sa_event.listen(conn, "rollback", _outer_rolled_back)
        waiting.append(callback)


#: Connections whose transaction's ``commit`` event sentinel acted on, with what
#: to do if the database then refuses that COMMIT. The refusal reaches the
#: engine's ``handle_error`` event for that connection (SQLAlchemy signals no
#: ``rollback`` after a failed COMMIT); the connection's next ``begin`` says the
#: COMMIT went through (the one DBAPI call between the two is the COMMIT).
_COMMITTING: weakref.WeakKeyDictionary[Connection, list[Callable[[], None]]] = (
    weakref.WeakKeyDictionary()
)
#: Engines with the ``handle_error`` listener of :data:`_COMMITTING`.
_WATCHED: weakref.WeakSet[Any] = weakref.WeakSet()


def _await_refusal(conn: Connection, callback: Callable[[], None]) -> None:
    """Call ``callback()`` if the COMMIT whose ``commit`` event is running on
    ``conn`` fails (see :data:`_COMMITTING`)."""
    with _LOCK:
        waiting = _COMMITTING.get(conn)
        if waiting is None:
            waiting = _COMMITTING[conn] = []
            sa_event.listen(conn, "begin", _committed_then_began)
        engine = conn.engine
        if engine not in _WATCHED:
            _WATCHED.add(engine)
            sa_event.listen(engine, "handle_error", _maybe_refused)
        waiting.append(callback)


def _committed_then_began(conn: Connection) -> None:
    with _LOCK:
        waiting = _COMMITTING.get(conn)
        if waiting:
            waiting.clear()  # the COMMIT went through: a new transaction begins


def _maybe_refused(context: Any) -> None:
    conn = context.connection
    if conn is None or context.statement is not None:
        return  # not a COMMIT: connecting, or a statement
    with _LOCK:
        waiting = _COMMITTING.get(conn)
        if not waiting:
            return
        todo = waiting[:]
        waiting.clear()
    for callback in todo:
        try:
            callback()
        except Exception:  # a rollback must not fail for it
            log.exception("sentinel: handling a refused outer COMMIT failed")


def _outer_committed(conn: Connection) -> None:
    _outer_ended(conn, True)


def _outer_rolled_back(conn: Connection) -> None:
    _outer_ended(conn, False)


def _outer_ended(conn: Connection, committed: bool) -> None:
    with _LOCK:
        waiting = _OUTER.get(conn)
        if not waiting:
            return
        todo = waiting[:]
        waiting.clear()
    error: BaseException | None = None
    for callback in todo:
        try:
            callback(conn, committed)
        except BaseException as err:  # the others still end; the first one fails the commit
            error = error or err
    if error is not None:
        raise error


class OuterTransactions:
    """The outer-transaction handling of :class:`~sentinel.orm.attachment.Attachment`."""

    detector: LocalEventDetector
    sink: LogSink | None
    log_empty: bool

    if TYPE_CHECKING:

        def _skip(self, st: TxnState) -> bool: ...

        def _detached(self, rule: Any, occ: Any, committed: bool, st: TxnState | None) -> None: ...

        def _late_aborted(
            self,
            occs: list[Occurrence],
            firings: list[Any],
            rolled_back: list[tuple[str, list[Occurrence], list[Any]]],
        ) -> None: ...

    def _hand_over(self, st: TxnState) -> bool:
        """The session committed, but into transactions begun outside it
        (``st.outer``: it joined a connection's transaction with
        ``join_transaction_mode="create_savepoint"`` or ``"rollback_only"``, or
        inside a savepoint): its commit released a savepoint, or did nothing, and
        its work commits or rolls back with theirs. Its log rows are written in
        them already (the pre-commit step). ``txn:commit`` (and the rules it
        triggers, the detached rules handed to the workers) waits for their
        commit and is written in it (:meth:`_outer_commit`); their rollback
        aborts the transaction (:meth:`_outer_rollback`). Until then the state
        stays live and its scope active. False (nothing handed over) when none of
        them is still in a transaction."""
        outer = [c for c in st.outer if not c.closed and c.in_transaction()]
        if not outer:
            return False
        st.handed_over = True
        st.outer_waiting = len(outer)
        for conn in outer:
            _await_outer(conn, partial(self._outer_ended, st))
        return True

    def _outer_ended(self, st: TxnState, conn: Connection, committed: bool) -> None:
        """A connection ``st`` was handed over to commits (in its ``commit``
        event: before the database commit) or rolls back."""
        scope = st.scope
        if scope is None or not scope.active or not st.handed_over:
            return  # ended already (another connection rolled back; detached)
        if not committed:
            self._outer_rollback(st)
            return
        st.outer_waiting -= 1
        if st.outer_waiting <= 0:
            self._outer_commit(st, conn)

    def _outer_commit(self, st: TxnState, conn: Connection) -> None:
        """The outer transaction commits: ``txn:commit`` now, its rows and the
        rows of the rules it ran written on ``conn``, in that transaction, so
        that they commit with it. A failed write fails that commit (raised
        from the connection's ``commit`` event, before the database commit)."""
        assert st.scope is not None
        st.committed = True
        st.outer_detached = list(st.scope.info.get("detached") or ())
        try:
            self.detector.commit(st.scope)
        except Exception:
            log.exception("sentinel: a rule on txn:commit of %s failed", st.scope_id)
        finally:
            unregister(st)
        _await_refusal(conn, partial(self._outer_refused, st))
        sink = self.sink
        if sink is None or (not self.log_empty and st.written == 0 and only_transaction_events(st)):
            return
        sink.write_transaction([conn], st, [], [])

    def _outer_refused(self, st: TxnState) -> None:
        """The database refused the outer COMMIT after its ``commit`` event, where
        ``txn:commit`` was signalled (SQLAlchemy signals nothing after a
        connection's commit): a deferred constraint, a serialization failure.
        The rules on ``txn:commit`` have run; what the transaction logged went
        with the rollback (its detached rules' outbox entries too), and is
        logged again as aborted, with ``txn:commit`` among it, as the detector
        saw it (replay detects what ran). Its independent detached rules are
        enqueued again, told the transaction did not commit, as an abort's are;
        the dependent ones do not run."""
        log.error(
            "sentinel: the database refused the COMMIT of the transaction that session "
            "transaction %s committed into, after sentinel signalled its txn:commit (the "
            "rules on txn:commit have run; the transaction is logged as aborted; see "
            "'Transactions are detection scopes' in docs/orm.md)",
            st.scope_id,
        )
        if self.sink is not None and not self._skip(st):
            self._late_aborted(st.occurrences, st.firings, st.rolled_back)
        for rule, occ, dependent in st.outer_detached:
            if not dependent:
                self._detached(rule, occ, False, None)

    def _outer_rollback(self, st: TxnState) -> None:
        """The outer transaction rolls back (in its ``rollback`` event, before the
        database rollback): the transaction aborts; what it logged goes with the
        rollback and is logged again as aborted, with the late rows (written
        later, in transactions of their own)."""
        scope = st.scope
        assert scope is not None
        st.ended = True  # detached rules of an abort are enqueued at once
        try:
            self.detector.abort(scope)
        except Exception:
            log.exception("sentinel: a rule on txn:abort of %s failed", st.scope_id)
        finally:
            unregister(st)
        if self.sink is not None and not self._skip(st):
            self._late_aborted(st.occurrences, st.firings, st.rolled_back)
