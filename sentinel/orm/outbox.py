"""The detached-rule outbox: what goes in, and the row operations workers use.

A causally dependent detached rule triggered in a transaction gets an outbox row
written *in that transaction* (with its occurrences), so it exists exactly when
the trigger committed. Workers then, for each due row:

1. **claim** it in a short transaction of their own: ``status`` ``pending`` (or a
   ``running`` row whose claim expired) becomes ``running``, ``attempts`` goes up,
   ``claimed_by`` names the worker and ``next_attempt_at`` becomes the end of the
   claim (the *lease*);
2. run the rule's condition and action in a new session and transaction, and
   **finish** the row (``done``) in that same transaction, only if the claim is
   still theirs, so the action's database effects and the ``done`` mark commit
   together, exactly once;
3. on failure, roll that transaction back and **record the failure** in another
   short transaction: ``pending`` again with a later ``next_attempt_at``
   (exponential backoff), or ``failed`` after the last attempt.

A worker that dies mid-action leaves a ``running`` row; once its lease ends any
worker may claim it again.

Detached conditions and actions run in another transaction and possibly in
another process (``sentinel worker``), so they must be importable:
:func:`check_importable` rejects lambdas, nested functions, bound methods and
functions of ``__main__`` when the rule is defined.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sentinel.errors import DetachedActionError, OutboxError
from sentinel.log.records import OutboxEntry
from sentinel.log.tables import LogTables, OutboxStatus
from sentinel.occurrence import CompositeOccurrence, Occurrence
from sentinel.rules import Coupling

if TYPE_CHECKING:
    from sentinel.rules import Rule

__all__ = [
    "Claimed",
    "OutboxStore",
    "check_importable",
    "entry_for",
    "function_path",
    "import_function",
    "rebuild",
]

DETACHED = (Coupling.DETACHED, Coupling.DETACHED_INDEPENDENT)


def function_path(fn: Any) -> str:
    """``module:qualname`` of ``fn`` as far as it has them (for messages)."""
    module = getattr(fn, "__module__", None) or "?"
    qual = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}:{qual}"


def _why_not_importable(fn: Any) -> str | None:
    if inspect.ismethod(fn):
        return "it is a bound method (the worker cannot rebuild its object)"
    if not inspect.isfunction(fn):
        return f"it is a {type(fn).__name__}, not a function"
    qual = fn.__qualname__
    if "<lambda>" in qual:
        return "it is a lambda"
    if "<locals>" in qual:
        return "it is defined inside a function"
    module = fn.__module__
    if not module or module == "__main__":
        return "it is defined in __main__, which a worker process cannot import"
    if module not in sys.modules and importlib.util.find_spec(module) is None:
        return f"its module {module!r} cannot be found"
    return None


def check_importable(rule: Rule) -> None:
    """Raise :class:`~sentinel.errors.DetachedActionError` unless ``rule``'s
    action (and condition, if any) are module-level functions of an importable
    module. Rules of other coupling modes pass."""
    if rule.coupling not in DETACHED:
        return
    for what, fn in (("action", rule.action), ("condition", rule.condition)):
        if fn is None:
            continue
        why = _why_not_importable(fn)
        if why is not None:
            path = function_path(fn)
            raise DetachedActionError(
                f"detached rule {rule.name!r}: its {what} {path} cannot be imported by the "
                f"outbox worker: {why}; make it a module-level function of an importable "
                "module (a worker runs detached rules after the commit, possibly in "
                "another process)",
                rule=rule.name,
                function=path,
            )


def import_function(path: str) -> Any:
    """The function ``module:qualname`` names (a :class:`~sentinel.Rule` found
    there, as the ``@rule`` decorator leaves, stands for its action)."""
    module_name, _, qual = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qual.split("."):
        obj = getattr(obj, part)
    action = getattr(obj, "action", None)
    if action is not None and not inspect.isfunction(obj):
        return action
    return obj


def entry_for(rule: Rule, occurrence: Any, *, committed: bool) -> OutboxEntry:
    """The outbox entry for ``rule``'s detection ``occurrence``; ``committed``
    is whether the trigger committed (known later for independent rules)."""
    composite = isinstance(occurrence, CompositeOccurrence)
    return OutboxEntry.of(
        rule.name,
        occurrence,
        extra={
            "action": function_path(rule.action),
            "condition": None if rule.condition is None else function_path(rule.condition),
            "coupling": str(rule.coupling),
            "committed": committed,
            "composite": composite,
            "expression": str(rule.event),
        },
    )


def rebuild(
    constituents: Sequence[Occurrence], extra: Any, t_occ: int, event: Any = None
) -> Occurrence | CompositeOccurrence:
    """What a detached action receives: the primitive occurrence, or a composite
    of the rule's event whose ``parts`` are the detection's constituents in
    ``t_occ`` order (the nesting of operators is not kept in the outbox)."""
    if not extra.get("composite") and len(constituents) == 1:
        return constituents[0]
    if event is None:
        from sentinel.algebra import parse

        event = parse(extra.get("expression") or "outbox")
    return CompositeOccurrence(event, t_occ, tuple(constituents))


@dataclass(frozen=True, slots=True)
class Claimed:
    """An outbox row a worker holds: its key, rule, detection and attempt."""

    id: int
    key: str
    rule: str
    scope: str
    t_occ: int
    constituents: tuple[Occurrence, ...]
    extra: Any
    attempts: int


def _now() -> datetime:
    return datetime.now(UTC)


class OutboxStore:
    """Row operations on one log's outbox table (see the module docs)."""

    def __init__(self, tables: LogTables) -> None:
        self.tables = tables
        self.table = tables.outbox

    def due(self, conn: Connection, *, limit: int | None = None) -> list[str]:
        """Keys of the rows a worker may claim now: pending and due, or running
        with an expired claim; oldest first."""
        t = self.table
        now = _now()
        q = (
            sa.select(t.c.idempotency_key)
            .where(
                t.c.status.in_((OutboxStatus.PENDING.value, OutboxStatus.RUNNING.value)),
                t.c.next_attempt_at <= now,
            )
            .order_by(t.c.id)
        )
        if limit is not None:
            q = q.limit(limit)
        return list(conn.execute(q).scalars())

    def claim(self, conn: Connection, key: str, worker: str, lease: float) -> Claimed | None:
        """Claim the row ``key`` for ``worker`` until ``lease`` seconds from now;
        ``None`` when it is not claimable (done, failed, claimed by a live
        worker, or not due). Run in a transaction of its own and commit."""
        t = self.table
        now = _now()
        res = conn.execute(
            sa.update(t)
            .where(
                t.c.idempotency_key == key,
                t.c.status.in_((OutboxStatus.PENDING.value, OutboxStatus.RUNNING.value)),
                t.c.next_attempt_at <= now,
            )
            .values(
                status=OutboxStatus.RUNNING.value,
                attempts=t.c.attempts + 1,
                claimed_by=worker,
                next_attempt_at=now + timedelta(seconds=lease),
            )
        )
        if res.rowcount != 1:
            return None
        row = conn.execute(
            sa.select(
                t.c.id, t.c.rule, t.c.scope, t.c.t_occ, t.c.payload, t.c.attempts, t.c.claimed_by
            ).where(t.c.idempotency_key == key)
        ).one()
        if row.claimed_by != worker:  # pragma: no cover - the UPDATE just set it
            return None
        constituents, extra = OutboxEntry.decode_payload(row.payload)
        return Claimed(
            row.id, key, row.rule, row.scope, row.t_occ, constituents, extra, row.attempts
        )

    def finish(self, conn: Connection, claimed: Claimed, worker: str) -> None:
        """Mark the row done, in the action's own transaction. Raises
        :class:`~sentinel.errors.OutboxError` if the claim is no longer this
        worker's (its lease expired and another worker took the row): the caller
        must then roll back, so the action's effects do not commit twice."""
        t = self.table
        res = conn.execute(
            sa.update(t)
            .where(
                t.c.id == claimed.id,
                t.c.status == OutboxStatus.RUNNING.value,
                t.c.claimed_by == worker,
                t.c.attempts == claimed.attempts,
            )
            .values(status=OutboxStatus.DONE.value, done_at=_now(), last_error=None)
        )
        if res.rowcount != 1:
            raise OutboxError(
                f"outbox entry {claimed.key[:12]}… of rule {claimed.rule!r}: the claim of "
                f"worker {worker!r} expired and another worker took the entry; this "
                "attempt is rolled back",
                key=claimed.key,
            )

    def fail(
        self,
        conn: Connection,
        claimed: Claimed,
        worker: str,
        error: str,
        *,
        retry_at: datetime | None,
    ) -> bool:
        """Record a failed attempt: ``pending`` until ``retry_at``, or ``failed``
        for good when ``retry_at`` is ``None``. Returns False when the claim is
        no longer this worker's (nothing changed)."""
        t = self.table
        values: dict[str, Any] = {"last_error": error[:4000], "claimed_by": None}
        if retry_at is None:
            values.update(status=OutboxStatus.FAILED.value, next_attempt_at=None)
        else:
            values.update(status=OutboxStatus.PENDING.value, next_attempt_at=retry_at)
        res = conn.execute(
            sa.update(t)
            .where(
                t.c.id == claimed.id,
                t.c.status == OutboxStatus.RUNNING.value,
                t.c.claimed_by == worker,
                t.c.attempts == claimed.attempts,
            )
            .values(**values)
        )
        return bool(res.rowcount == 1)

    def status(self, conn: Connection, key: str) -> str | None:
        """The row's status (``None``: no such row)."""
        t = self.table
        return conn.execute(
            sa.select(t.c.status).where(t.c.idempotency_key == key)
        ).scalar_one_or_none()
