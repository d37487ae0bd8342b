"""What a detached rule runs in: its :class:`DetachedContext` (the session,
the idempotency key, the attempt), and the guard that keeps it from ending the
worker's transaction (:class:`_TransactionGuard`). Shared by the outbox
runner (:mod:`sentinel.orm.worker`) and by the runs of several entries in one
transaction (:mod:`sentinel.orm.together`)."""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session, SessionTransaction

from sentinel.errors import OutboxError, RuleError, ScopeError
from sentinel.orm.commit import committing, roll_back_now

__all__ = ["DetachedContext", "detached_context"]


@dataclass(frozen=True, slots=True)
class DetachedContext:
    """What a detached rule's condition and action can know about their run.

    ``session``
        the session of the detached transaction (from the attached session
        factory): work in it; it commits together with the outbox entry's
        ``done`` mark, so database effects happen exactly once.
    ``idempotency_key``
        the outbox entry's key, the same on every attempt and in every worker:
        pass it to external systems (payment APIs, mail queues) so a retried
        attempt is recognised as the same request.
    ``attempt``
        1 on the first attempt, then 2, 3, ...
    ``committed``
        whether the triggering transaction committed (always true for causally
        dependent rules; independent ones also run after an abort).
    ``rule``, ``trigger_scope``, ``trigger_t_occ``
        the rule, and the scope and ``t_occ`` of the triggering detection.
    """

    rule: str
    idempotency_key: str
    attempt: int
    committed: bool
    session: Session
    trigger_scope: str
    trigger_t_occ: int


_CONTEXT: ContextVar[DetachedContext | None] = ContextVar("sentinel_detached", default=None)


def _enter(rule: str, entry: Any, committed: bool, session: Session) -> Token[Any]:
    """Make the context of a run of outbox ``entry`` (a claimed entry: its
    key, attempts, scope and ``t_occ``) current; returns the token that
    resets it."""
    return _CONTEXT.set(
        DetachedContext(
            rule, entry.key, entry.attempts, committed, session, entry.scope, entry.t_occ
        )
    )


def detached_context() -> DetachedContext:
    """The :class:`DetachedContext` of the detached rule running in this thread.

    Raises :class:`~sentinel.errors.OutboxError` outside a detached rule's
    condition or action.

    >>> def notify_hq(occ):                                   # doctest: +SKIP
    ...     ctx = sentinel.orm.detached_context()
    ...     ctx.session.add(Notice(unit=occ.source.key[0]))
    ...     mailer.send(..., idempotency_key=ctx.idempotency_key)
    """
    ctx = _CONTEXT.get()
    if ctx is None:
        raise OutboxError(
            "detached_context() is only available inside a detached rule's condition or "
            "action (run by sentinel's outbox worker)"
        )
    return ctx


class _TransactionGuard:
    """Keeps a detached rule's condition and action from ending the worker's
    transaction, which commits their work with the entry's ``done`` mark.

    A ``commit()`` is refused in ``before_commit`` (a listener on this session
    only, while the rule runs), before anything is committed: the transaction
    is rolled back there and the caller of ``commit()`` gets a
    :class:`~sentinel.errors.RuleError` naming the rule. A ``rollback()`` or
    ``close()`` is found when the condition or action returns. Either way the
    attempt fails for good (:attr:`ended_transaction`), whatever the rule did
    with the exception: a retry would end it again, and a commit that went
    through would repeat the effects at every attempt. Savepoints
    (``begin_nested()``) are the rule's own."""

    __slots__ = ("ended", "error", "phase", "rule", "session", "transaction")

    def __init__(self, session: Session, transaction: SessionTransaction, rule: str) -> None:
        self.session = session
        self.transaction = transaction
        self.rule = rule
        self.phase = "action"
        self.error: RuleError | None = None
        self.ended = False
        # on the session, not its class: this runs in the worker's sessions only
        # (a session of a scoped factory is reused: removed after the rule)
        sa_event.listen(session, "before_commit", self._refuse)
        sa_event.listen(session, "after_transaction_end", self._on_end)

    def remove(self) -> None:
        sa_event.remove(self.session, "before_commit", self._refuse)
        sa_event.remove(self.session, "after_transaction_end", self._on_end)

    def _on_end(self, session: Session, transaction: SessionTransaction) -> None:
        # the worker's transaction closed (rolled back, or the session closed);
        # a failed flush only deactivates it, and is the rule's ordinary failure
        if transaction is self.transaction:
            self.ended = True

    def _ended(self, how: str) -> RuleError:
        cause = ScopeError(
            f"it called {how} on the session of its detached transaction "
            "(detached_context().session); the worker commits that transaction itself, "
            "with the outbox entry's done mark, so that its effects happen exactly once. "
            "Nothing was committed and the entry is not retried. Leave the commit to the "
            "worker (session.flush() sends changes early; begin_nested() makes a "
            "savepoint); to fail the attempt, raise an exception"
        )
        err = RuleError(self.rule, self.phase, cause)
        err.__cause__ = cause
        err.ended_transaction = True  # type: ignore[attr-defined]
        return err

    def _refuse(self, session: Session) -> None:
        trans = committing(session)
        if trans is not None and trans.nested:
            return  # a savepoint released
        err = self.error = self.error or self._ended("commit()")
        try:
            raise err
        except RuleError:
            # sentinel's own pre-commit step (a class-level listener) ran before
            # this one: what it wrote is in the transaction rolled back here
            roll_back_now(session)
            raise

    def check(self) -> None:
        """Raise the refusal of a commit (even if the rule caught it), or the
        error of a transaction the rule rolled back or closed."""
        if self.error is None and self.ended:
            self.error = self._ended("rollback() or close()")
        if self.error is not None:
            raise self.error
