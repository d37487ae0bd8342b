"""Where sentinel's pre-commit step runs inside SQLAlchemy's commit.

SQLAlchemy commits a root transaction in this order (``SessionTransaction.commit``
and ``_prepare_impl``):

1. the ``before_commit`` listeners, class-level ones (on ``Session``, on a
   sessionmaker) first in the order they were added, then the session's own;
2. savepoints still open are released (each sends ``before_commit``, flushes,
   ``after_commit``, ``after_transaction_end``);
3. the session is flushed until it is clean (each flush sends ``before_flush``,
   ``after_flush``, ``after_flush_postexec``);
4. the database commit, ``after_commit``, ``after_transaction_end``.

Sentinel's pre-commit step (``txn:pre_commit``: the deferred rules; then the log
and the outbox written in the transaction) needs the database events of every
pending change, so it runs once SQLAlchemy has nothing left to flush, at the
first of these points after sentinel's own ``before_commit`` listener:

- that listener itself, if the session is clean then and no savepoint is open;
- the end of a flush (``after_flush_postexec``, sentinel's listener), once the
  session is clean and no savepoint is open: usually SQLAlchemy's own flush of
  step 3, or one that a later ``before_commit`` listener makes itself;
- the end of the last open savepoint's release (step 2), if the session is clean.

So every other ``before_commit`` listener sees the session as SQLAlchemy leaves
it (pending objects not flushed yet), no event is added, and a failure inside
the step fails the commit exactly as a failing flush would: the transaction is
rolled back before ``commit()`` raises, and the session says
``PendingRollbackError`` until ``rollback()``. Flushes after the step (what
other listeners change later) write their log rows in the transaction too.

:class:`PreCommit` is the step for one attachment; the functions below it read
SQLAlchemy's commit state for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, SessionTransaction

from sentinel.errors import RollbackOnlyError, ScopeError
from sentinel.log import OutboxEntry
from sentinel.log.records import Firing
from sentinel.log.tables import FiringStatus
from sentinel.orm.outbox import entry_for
from sentinel.orm.state import KEY, TxnState, clock_datetime, depth_below

if TYPE_CHECKING:
    from sentinel.orm.attach import Attachment

__all__ = [
    "PreCommit",
    "commit_refused",
    "committing",
    "flushing_released",
    "in_commit",
    "is_clean",
    "outside_ended_block",
    "roll_back_now",
]


class PreCommit:
    """The pre-commit step of one attachment's transactions (see the module
    docs): its three places, the step itself and the writes in the transaction."""

    def __init__(self, attachment: Attachment) -> None:
        self.att = attachment

    # -- where it runs -----------------------------------------------------------------
    def at_before_commit(self, session: Session) -> None:
        """sentinel's ``before_commit`` listener: the step now if the session is
        clean (else later, at the end of SQLAlchemy's flush or savepoint release);
        a transaction a rule doomed fails here."""
        trans = committing(session)
        if trans is None or trans.parent is not None:
            return  # a savepoint being released: nothing to do before
        st = session.info.get(KEY)
        if st is None or st.transaction is not trans or st.scope is None or not st.scope.active:
            return
        st.commit_seen = True
        with outside_ended_block(session):  # commit() inside its savepoint's block
            try:
                self.refuse_if_doomed(st)
                if st.pre_committed:  # a failed attempt ran it already
                    self.refuse_if_changed(session, st)
                if st.savepoints or not is_clean(session):
                    return
                if st.pre_committed:
                    self.write(session, st)
                else:
                    self.run(session, st)
            except BaseException:
                roll_back_now(session)
                raise

    def at_flush_end(self, session: Session, st: TxnState) -> None:
        """``after_flush_postexec`` of a flush inside the commit, after sentinel's
        ``before_commit``: the step (or the log rows of what came since) once
        nothing is left to flush. Raising here fails the flush, which SQLAlchemy
        rolls back: the commit fails with it."""
        if st.pre_committing or st.savepoints or not is_clean(session):
            return
        with outside_ended_block(session):
            if st.pre_committed:
                self.write(session, st)
            else:
                with flushing_released(session):
                    self.run(session, st)

    def at_savepoint_released(self, session: Session, st: TxnState) -> None:
        """A savepoint's ``after_transaction_end`` after its release: if the
        root's commit released the last one and nothing is left to flush, the
        step runs now (not while the step runs already: a deferred rule's own
        savepoint released). The release may end the ``with
        session.begin_nested():`` block that ``commit()`` was called in: the step
        runs outside it (:func:`outside_ended_block`)."""
        if (
            st.pre_committed
            or st.pre_committing
            or st.savepoints
            or st.scope is None
            or not st.scope.active
            or not in_commit(st.transaction)
            or not is_clean(session)
        ):
            return
        with outside_ended_block(session):
            try:
                self.run(session, st)
            except BaseException:
                roll_back_now(session)
                raise

    # -- the step ----------------------------------------------------------------------
    def run(self, session: Session, st: TxnState) -> None:
        """``txn:pre_commit`` (the deferred rules), then the log written if the
        session is clean (else at the end of the flush of what the rules changed)."""
        self.refuse_if_doomed(st)
        det = self.att.detector
        scope = st.scope
        assert scope is not None
        st.pre_committing = True
        try:
            with det.use_scope(scope), commit_refused(session, st):
                det.pre_commit(scope)  # deferred rules
        finally:
            st.pre_committing = False
        if st.commit_refused is not None:  # no rule run took it (a subscriber's, caught)
            raise st.commit_refused
        st.pre_committed = True
        if is_clean(session):
            self.write(session, st)

    def write(self, session: Session, st: TxnState) -> None:
        """Write what ``st`` holds unwritten (log rows, outbox entries) in the
        transaction: the log on every database the transaction used, the outbox
        and the late rows on the home database."""
        self.refuse_if_doomed(st)
        att = self.att
        entries, pending = self.outbox_entries(st)
        if not entries:
            if att.sink is None or att._skip(st):
                return  # a read-only unit of work: no write (and no SQL) for the log
            if (
                st.written == len(st.occurrences)
                and st.firings_written == len(st.firings)
                and st.rolled_back_written == len(st.rolled_back)
            ):
                return  # nothing new since the last write
        home = att._home_of(session)
        if att.sink is None:
            att.writer.write(session.connection(bind_arguments={"bind": home}), (), outbox=entries)
        else:
            # the home database joins the transaction only for outbox entries
            # (or when the transaction used no database)
            conns = self.connections(session, st, home if entries else None)
            home_conn = None
            if home in st.engines:
                home_conn = session.connection(bind_arguments={"bind": home})
            rows = att.sink.write_transaction(conns, st, entries, pending, home=home_conn)
            if rows and st.witness is None:
                # the proof of the commit, should its reply be lost (see
                # Attachment._resolve): the transaction's log rows
                st.witness = (home_conn.engine if home_conn is not None else conns[0].engine, None)
        if entries and st.witness is None:
            st.witness = (home, entries[0].idempotency_key)  # or an outbox entry
        st.outbox_keys.update(e.idempotency_key for e in entries)

    def connections(self, session: Session, st: TxnState, also: Engine | None) -> list[Connection]:
        """The transaction's connections to every database it used (and to
        ``also``; to the home database when it used none)."""
        engines = list(st.engines)
        if also is not None and also not in engines:
            engines.append(also)
        if not engines:
            engines.append(self.att._home_of(session))
        return [session.connection(bind_arguments={"bind": e}) for e in engines]

    @staticmethod
    def refuse_if_doomed(st: TxnState) -> None:
        if st.doomed is None:
            return
        _, rule, error = st.doomed
        raise RollbackOnlyError(
            f"the transaction cannot commit: rule {rule!r} failed in it ({error}); it has "
            "been rolled back (to keep the rest of a transaction, run the update a rule may "
            "reject inside session.begin_nested())",
            rule=rule,
        ) from error

    @staticmethod
    def refuse_if_changed(session: Session, st: TxnState) -> None:
        """A commit retried after an attempt that failed once the deferred rules
        had run: refused if the transaction changed since (they cannot run
        again, and would not see the change)."""
        if not st.changed_after_pre_commit and is_clean(session):
            return
        raise RollbackOnlyError(
            "the transaction cannot commit: an earlier commit attempt failed after its "
            "deferred rules ran (a before_commit listener raised), and the transaction "
            "changed since, which they cannot see; it has been rolled back (roll back "
            "after a failed commit, or retry it unchanged)"
        )

    @staticmethod
    def note_change(st: TxnState) -> None:
        """Something happens in ``st``'s transaction (a flush, a method event):
        if that is after its pre-commit step and outside a commit, remember it
        (see :meth:`refuse_if_changed`)."""
        if st.pre_committed and not in_commit(st.transaction):
            st.changed_after_pre_commit = True

    def outbox_entries(self, st: TxnState) -> tuple[list[OutboxEntry], list[Firing]]:
        """Outbox entries (and pending firings) for the detached rules triggered
        in ``st`` so far, to be written in its commit."""
        assert st.scope is not None
        pending = st.scope.info.get("detached")
        if not pending or not self.att.outbox:
            return [], []
        entries: list[OutboxEntry] = []
        firings: list[Firing] = []
        seen = set(st.outbox_keys)
        depth = depth_below(st.session_ref())
        for rule, occ, _dependent in pending:
            entry = entry_for(rule, occ, committed=True, depth=depth)
            if entry.idempotency_key in seen:
                continue
            seen.add(entry.idempotency_key)
            entries.append(entry)
            firings.append(
                Firing.of(
                    rule.name,
                    occ,
                    coupling=str(rule.coupling),
                    status=FiringStatus.PENDING,
                    fired_at=clock_datetime(self.att.detector),
                    partition=rule.partition(occ),
                )
            )
        return entries, firings


# -- reading SQLAlchemy's commit state ----------------------------------------------------


def _preparing(transaction: SessionTransaction) -> bool:
    """True while SQLAlchemy runs ``transaction``'s ``_prepare_impl`` (its commit
    before the database commit). Read from SQLAlchemy's own state tracking."""
    fn = getattr(transaction, "_current_fn", None)
    return fn is not None and getattr(fn, "__name__", "") == "_prepare_impl"


def committing(session: Session) -> SessionTransaction | None:
    """The transaction ``session`` is committing (inside ``before_commit``).

    SQLAlchemy sends ``before_commit`` for the root transaction and for each
    savepoint released, without saying which. Usually it is the innermost one;
    but when the root transaction object is committed directly while a
    savepoint is still open (``with session.begin():`` around an unreleased
    ``begin_nested()``), the root's ``before_commit`` comes first, while the
    savepoint is still innermost. The transaction whose ``_prepare_impl`` is in
    progress is the one committing; if that ever cannot be read, the innermost
    transaction is assumed.
    """
    current = session._transaction
    t = current
    while t is not None:
        if _preparing(t):
            return t
        t = t.parent
    return current


def in_commit(root: SessionTransaction) -> bool:
    """True while ``root`` (a root transaction) is being committed, up to the
    database commit. Where SQLAlchemy's state cannot be read, assumed."""
    if not hasattr(root, "_current_fn"):  # pragma: no cover - guards a SQLAlchemy change
        return True
    return _preparing(root)


def is_clean(session: Session) -> bool:
    """True when ``session`` has nothing to flush (what SQLAlchemy's commit checks
    before flushing, through the public collections)."""
    return not session.new and not session.dirty and not session.deleted


def roll_back_now(session: Session) -> None:
    """Inside an ``except`` block during the commit: roll the transaction back
    before the exception reaches the caller of ``commit()``, the way a flush
    that fails inside ``commit()`` does (SQLAlchemy's own mechanism: a
    subtransaction rolled back, capturing the exception, so the session reports
    ``PendingRollbackError`` quoting it until ``rollback()``). Only ever called
    on failure, so a commit that succeeds sends no extra transaction events."""
    begin = getattr(session, "_autobegin_t", None)
    if begin is None:  # pragma: no cover - guards a SQLAlchemy change
        return
    begin()._begin().rollback(_capture_exception=True)


@contextmanager
def commit_refused(session: Session, st: TxnState) -> Iterator[None]:
    """While the deferred rules run (inside SQLAlchemy's commit): a
    ``session.commit()`` raises :class:`~sentinel.errors.ScopeError` at once,
    before anything is committed, and is remembered in ``st.commit_refused``
    (the rule observer fails the rule run with it, naming the rule, even if
    the action caught it; see ``sentinel.orm.attach``).

    SQLAlchemy sends no event for that call: inside the commit's flush it would
    commit (close) the flush's own subtransaction, then fail on the root
    (``IllegalStateChangeError``), and the flush's rollback of the closed
    subtransaction would fail with ``ResourceClosedError``, naming no rule. So
    the session's ``commit`` is shadowed by an instance attribute for the step,
    and put back after it."""
    own = vars(session)
    had = "commit" in own
    previous = own.get("commit")

    def refuse() -> None:
        err = ScopeError(
            "it called commit() on the session of the transaction it runs in while that "
            "transaction commits (a deferred rule runs inside session.commit()); nothing "
            "was committed and the commit fails. Leave the commit to the code that "
            "called it (session.flush() sends changes early); to abort it, raise an "
            "exception"
        )
        if st.commit_refused is None:
            st.commit_refused = err
        raise err

    own["commit"] = refuse
    try:
        yield
    finally:
        if own.get("commit") is refuse:
            if had:
                own["commit"] = previous
            else:
                del own["commit"]


@contextmanager
def outside_ended_block(session: Session) -> Iterator[None]:
    """Run the block as if no ``with`` block of an ended transaction were open.

    SQLAlchemy refuses every use of a session while the innermost ``with
    session.begin()`` / ``begin_nested()`` block is of a transaction that has
    ended ("Can't operate on closed transaction inside context manager"). A root
    ``commit()`` called inside ``with session.begin_nested():`` releases that
    savepoint first, then commits the root, and the pre-commit step runs in
    the root's ``before_commit`` or at the release, still inside the block: the
    step's work (the deferred rules, the log's write, a rollback on
    failure) is in the root transaction, which is active, so it runs with the
    session's current block set aside for its duration (what the block's own
    exit does afterwards is unchanged)."""
    ctx = session._trans_context_manager
    if ctx is None or ctx._transaction_is_active():
        yield
        return
    session._trans_context_manager = None
    try:
        yield
    finally:
        session._trans_context_manager = ctx


@contextmanager
def flushing_released(session: Session) -> Iterator[None]:
    """Inside ``after_flush_postexec``: let the block flush the session (and
    autoflush) although the flush that sent the event has not returned yet.

    The deferred rules may change and flush objects; when they run at the end of
    SQLAlchemy's flush at commit, that flush's work is done (its changes are
    finalized; only its subtransaction's commit remains), so a nested flush is
    safe: SQLAlchemy's guard against re-entering a flush is lifted for the
    block and put back after it."""
    was = session._flushing
    session._flushing = False
    try:
        yield
    finally:
        session._flushing = was
