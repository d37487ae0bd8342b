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
  step 3;
- the end of the last open savepoint's release (step 2), if the session is clean.

So every other ``before_commit`` listener sees the session as SQLAlchemy leaves
it (pending objects not flushed yet), no event is added, and a failure inside
the step fails the commit exactly as a failing flush would: the transaction is
rolled back before ``commit()`` raises, and the session says
``PendingRollbackError`` until ``rollback()``. This module holds the few
helpers that read SQLAlchemy's commit state for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, SessionTransaction

__all__ = ["committing", "flushing_released", "in_commit", "is_clean", "roll_back_now"]


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
