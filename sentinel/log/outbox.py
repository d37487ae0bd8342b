"""The detached-rule outbox's store: what goes in, and the row operations workers
use (SQLAlchemy Core only; the ORM layer's :mod:`sentinel.orm.worker` runs the
entries, the global detector enqueues them).

A causally dependent detached rule triggered in a transaction gets an outbox row
written *in that transaction* (with its occurrences), so it exists exactly when
the trigger committed. Workers then, for each due row:

1. **claim** it in a short transaction of their own, with one ``UPDATE ...
   WHERE`` that names the state it expects: a ``pending`` row that is due, or a
   ``running`` row whose claim expired, *and* fewer ``attempts`` than the
   worker's ``max_attempts``, becomes ``running``; ``attempts`` goes up (every
   claim is an attempt), ``claimed_by`` names the worker and ``next_attempt_at``
   becomes the end of the claim (the *lease*, timed by the database server's
   clock on PostgreSQL and MariaDB, so workers' clocks need not agree; a pending
   row's due time is a worker's clock's). Of two workers claiming one row,
   the database lets exactly one ``UPDATE`` match: PostgreSQL and InnoDB
   re-check the ``WHERE`` against the row the other committed, SQLite runs
   writers one at a time. A due row with no attempts left is marked ``failed``
   instead (with an ``UPDATE`` that expects the state just read);
2. run the rule's condition and action in a new session and transaction while
   a heartbeat renews the lease (:meth:`OutboxStore.renew`), and **finish** the
   row (``done``) in that same transaction, only if the claim is still theirs
   (``claimed_by`` and ``attempts`` unchanged), so the action's database effects
   and the ``done`` mark commit together, exactly once;
3. on failure, roll that transaction back and **record the failure** in another
   short transaction, again only if the claim is still theirs: ``pending``
   again with a later ``next_attempt_at`` (exponential backoff), or ``failed``
   after the last attempt.

A worker that dies mid-action stops renewing its lease; once the lease ends any
worker may claim the row again (an attempt like any other). A worker whose lease
was taken over while its action ran cannot finish: its ``UPDATE`` matches no row,
so its transaction, with the action's effects, is rolled back.

Workers run only rules of their own rule set, looked up by the row's rule name
(:meth:`OutboxStore.claim` reads nothing else from the row that could name
code).

:func:`server_now` and :func:`server_later` are the database server's clock in
SQL, shared by every lease (outbox claims, the global detector's cursor).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sentinel.errors import OutboxError
from sentinel.log.records import OutboxEntry
from sentinel.log.tables import LogTables, OutboxStatus, UTCDateTime
from sentinel.occurrence import CompositeOccurrence, Occurrence
from sentinel.params import storable_text

__all__ = [
    "ClaimLost",
    "Claimed",
    "Exhausted",
    "OutboxStore",
    "RuleLike",
    "Unreadable",
    "entry_extra",
    "entry_for",
    "function_path",
    "rebuild",
    "server_later",
    "server_now",
]


class RuleLike(Protocol):
    """What :func:`entry_for` reads of a rule (a :class:`~sentinel.Rule`)."""

    @property
    def name(self) -> str: ...
    @property
    def event(self) -> Any: ...
    @property
    def condition(self) -> Any: ...
    @property
    def action(self) -> Any: ...
    @property
    def coupling(self) -> Any: ...


def function_path(fn: Any) -> str:
    """``module:qualname`` of ``fn`` as far as it has them (for messages)."""
    module = getattr(fn, "__module__", None) or "?"
    qual = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}:{qual}"


def entry_for(rule: RuleLike, occurrence: Any, *, committed: bool, depth: int = 1) -> OutboxEntry:
    """The outbox entry for ``rule``'s detection ``occurrence``; ``committed``
    is whether the trigger committed (known later for independent rules);
    ``depth`` how many detached runs deep the trigger was (1: an ordinary
    transaction's; 2: a detached rule's own transaction's, ...)."""
    composite = isinstance(occurrence, CompositeOccurrence)
    extra = entry_extra(rule, composite=composite, committed=committed)
    if depth > 1:
        extra["depth"] = depth
    return OutboxEntry.of(rule.name, occurrence, extra=extra)


def entry_extra(rule: RuleLike, *, composite: bool, committed: bool) -> dict[str, Any]:
    """The ``extra`` of :func:`entry_for`'s entry: what the rule was (its action,
    condition, coupling and expression), whether the trigger committed and
    whether the detection is composite (and, past 1, its ``depth``)."""
    return {
        "action": function_path(rule.action),
        "condition": None if rule.condition is None else function_path(rule.condition),
        "coupling": str(rule.coupling),
        "committed": committed,
        "composite": composite,
        "expression": str(rule.event),
    }


def rebuild(
    constituents: Sequence[Occurrence], extra: Any, t_occ: int, event: Any
) -> Occurrence | CompositeOccurrence:
    """What a detached action receives: the primitive occurrence, or a composite
    of the rule's ``event`` whose ``parts`` are the detection's constituents in
    ``t_occ`` order (the nesting of operators is not kept in the outbox)."""
    if not extra.get("composite") and len(constituents) == 1:
        return constituents[0]
    return CompositeOccurrence(event, t_occ, tuple(constituents))


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A ``payload`` that is not JSON a worker can read (a row written by hand:
    not JSON at all, or nested deeper than Python's JSON reader goes)."""

    error: str


def _payload(dialect: Any, text: Any) -> Any:
    """The payload column's text, decoded; :class:`Unreadable` if it cannot be.
    (Decoded here rather than by the column type, whose error would fail the
    claim, and with it every drain that meets the row, for ever.)"""
    if not isinstance(text, str):
        return text  # a driver that returns JSON values itself
    loads = getattr(dialect, "_json_deserializer", None) or json.loads
    try:
        return loads(text)
    except (ValueError, RecursionError, MemoryError) as err:
        return Unreadable(f"{type(err).__name__}: {str(err)[:200]}")


@dataclass(frozen=True, slots=True)
class Claimed:
    """An outbox row a worker holds: its key, rule, detection, attempt, and the
    ``payload`` as stored (decode it with
    :meth:`~sentinel.log.OutboxEntry.decode_payload`: a row written by hand may
    not decode)."""

    id: int
    key: str
    rule: str
    scope: str
    t_occ: int
    payload: Any
    attempts: int


@dataclass(frozen=True, slots=True)
class Exhausted:
    """A due row that had no attempts left when a worker came to claim it, and
    that the worker marked ``failed`` with ``error``."""

    id: int
    key: str
    rule: str
    scope: str
    t_occ: int
    payload: Any
    attempts: int
    error: str


class ClaimLost(OutboxError):
    """The worker's claim of an entry ended while its attempt ran: the lease ran
    out and another worker took the entry (or someone changed the row). The
    attempt must be rolled back; it is not this worker's failure to record."""


def _now() -> datetime:
    return datetime.now(UTC)


_CLAIMABLE = (OutboxStatus.PENDING.value, OutboxStatus.RUNNING.value)
_PENDING, _RUNNING = OutboxStatus.PENDING.value, OutboxStatus.RUNNING.value


def server_now(dialect: str) -> sa.ColumnElement[datetime] | None:
    """The database server's clock (UTC) for ``dialect`` (a dialect's name), where
    leases are timed (outbox claims, the global detector's cursor); ``None`` on
    SQLite (every process using a file database shares the machine's clock)."""
    if dialect == "postgresql":
        return sa.func.clock_timestamp(type_=UTCDateTime())
    if dialect in ("mysql", "mariadb"):
        return sa.literal_column("UTC_TIMESTAMP(6)", UTCDateTime())
    return None


def server_later(dialect: str, seconds: float) -> sa.ColumnElement[datetime] | None:
    """The server's clock ``seconds`` from now (``None`` on SQLite)."""
    if dialect == "postgresql":
        return sa.func.clock_timestamp(type_=UTCDateTime()) + sa.literal(
            timedelta(seconds=seconds), sa.Interval()
        )
    if dialect in ("mysql", "mariadb"):
        micro = max(0, int(seconds * 1_000_000))
        return sa.literal_column(
            f"TIMESTAMPADD(MICROSECOND, {micro}, UTC_TIMESTAMP(6))", UTCDateTime()
        )
    return None


class OutboxStore:
    """Row operations on one log's outbox table (see the module docs)."""

    def __init__(self, tables: LogTables, *, clock: Callable[[], datetime] = _now) -> None:
        self.tables = tables
        self.table = tables.outbox
        self.clock = clock

    def _lease_end(self, conn: Connection, lease: float) -> Any:
        later = server_later(conn.dialect.name, lease)
        return self.clock() + timedelta(seconds=lease) if later is None else later

    def _claimable(self, conn: Connection, now: datetime) -> sa.ColumnElement[bool]:
        """Rows a worker may claim: ``pending`` and due by the worker's clock
        (``now``; a retry's time, set by a worker's clock too), or ``running``
        with a lease the database server's clock says has ended. A row without
        a time (``next_attempt_at`` NULL: written by hand, or an
        :class:`~sentinel.log.OutboxEntry` enqueued without one) is due now,
        pending, or has no live claim, running: ``NULL <= now`` being unknown,
        it was never claimed, run or reported."""
        t = self.table
        server = server_now(conn.dialect.name)
        at = t.c.next_attempt_at
        return sa.or_(
            sa.and_(t.c.status == _PENDING, sa.or_(at <= now, at.is_(None))),
            sa.and_(
                t.c.status == _RUNNING,
                sa.or_(at <= (now if server is None else server), at.is_(None)),
            ),
        )

    def due(
        self, conn: Connection, *, limit: int | None = None, after: int | None = None
    ) -> list[str]:
        """Keys of the rows a worker may claim now: pending and due, or running
        with an expired claim; oldest first (with ``after``, those written after
        the row of that id)."""
        return [key for _, key in self.due_rows(conn, limit=limit, after=after)]

    def due_rows(
        self, conn: Connection, *, limit: int | None = None, after: int | None = None
    ) -> list[tuple[int, str]]:
        """``(id, key)`` of the rows :meth:`due` names."""
        t = self.table
        q = sa.select(t.c.id, t.c.idempotency_key).where(self._claimable(conn, self.clock()))
        if after is not None:
            q = q.where(t.c.id > after)
        q = q.order_by(t.c.id)
        if limit is not None:
            q = q.limit(limit)
        return [(int(i), str(k)) for i, k in conn.execute(q)]

    def claim(
        self, conn: Connection, key: str, worker: str, lease: float, max_attempts: int
    ) -> Claimed | Exhausted | None:
        """Claim the row ``key`` for ``worker`` until ``lease`` seconds from now,
        if it has had fewer than ``max_attempts`` attempts; mark it ``failed``
        (:class:`Exhausted`) if it is due and has none left; ``None`` when it is
        not claimable (done, failed, claimed by a live worker, not due, or taken
        by another worker meanwhile). Run in a transaction of its own and commit."""
        t = self.table
        now = self.clock()
        res = conn.execute(
            sa.update(t)
            .where(
                t.c.idempotency_key == key,
                self._claimable(conn, now),
                t.c.attempts < max_attempts,
            )
            .values(
                status=OutboxStatus.RUNNING.value,
                attempts=t.c.attempts + 1,
                claimed_by=worker,
                next_attempt_at=self._lease_end(conn, lease),
            )
        )
        claimed = res.rowcount == 1
        server = server_now(conn.dialect.name)
        row = conn.execute(
            sa.select(
                (sa.literal(now, UTCDateTime()) if server is None else server).label("server_now"),
                t.c.id,
                t.c.rule,
                t.c.scope,
                t.c.t_occ,
                sa.cast(t.c.payload, sa.Text()).label("payload"),
                t.c.status,
                t.c.attempts,
                t.c.claimed_by,
                t.c.next_attempt_at,
                t.c.last_error,
            ).where(t.c.idempotency_key == key)
        ).one_or_none()
        if row is None:
            return None
        payload = _payload(conn.dialect, row.payload)
        if claimed:
            return Claimed(row.id, key, row.rule, row.scope, row.t_occ, payload, row.attempts)
        if (
            row.status not in _CLAIMABLE
            or (
                row.next_attempt_at is not None  # no time: due (see _claimable)
                and row.next_attempt_at > (now if row.status == _PENDING else row.server_now)
            )
            or row.attempts < max_attempts
        ):
            return None  # not due, or claimed by another worker in the meantime
        return self._exhaust(conn, key, row, payload, max_attempts, now)

    def claim_enqueued(
        self, conn: Connection, keys: Sequence[str], worker: str, lease: float
    ) -> dict[str, Claimed]:
        """Claim for ``worker``, until ``lease`` seconds from now, the entries
        ``keys`` that the caller's transaction has just enqueued (pending, never
        attempted, seen by no other transaction yet), with one ``UPDATE`` and
        one ``SELECT`` per 500 keys rather than two statements per entry
        (:meth:`claim`); return them by key. The claims hold once that
        transaction commits."""
        t = self.table
        out: dict[str, Claimed] = {}
        for i in range(0, len(keys), 500):
            chunk = list(keys[i : i + 500])
            conn.execute(
                sa.update(t)
                .where(t.c.idempotency_key.in_(chunk), t.c.status == _PENDING, t.c.attempts == 0)
                .values(
                    status=_RUNNING,
                    attempts=1,
                    claimed_by=worker,
                    next_attempt_at=self._lease_end(conn, lease),
                )
            )
            rows = conn.execute(
                sa.select(
                    t.c.id,
                    t.c.idempotency_key,
                    t.c.rule,
                    t.c.scope,
                    t.c.t_occ,
                    sa.cast(t.c.payload, sa.Text()).label("payload"),
                ).where(
                    t.c.idempotency_key.in_(chunk),
                    t.c.status == _RUNNING,
                    t.c.claimed_by == worker,
                    t.c.attempts == 1,
                )
            )
            for row in rows:
                key = str(row.idempotency_key)
                payload = _payload(conn.dialect, row.payload)
                out[key] = Claimed(row.id, key, row.rule, row.scope, row.t_occ, payload, 1)
        return out

    def finish_many(self, conn: Connection, claims: Sequence[Claimed], worker: str) -> None:
        """Mark the rows of ``claims`` done, in the transaction of their
        actions, with one ``UPDATE`` per 500 rows and attempt number; raise
        :class:`ClaimLost` (the caller rolls back) if any claim is no longer
        ``worker``'s, as :meth:`finish` does for one."""
        t = self.table
        by_attempt: dict[int, list[int]] = {}
        for c in claims:
            by_attempt.setdefault(c.attempts, []).append(c.id)
        marked = 0
        for attempts, ids in by_attempt.items():
            for i in range(0, len(ids), 500):
                res = conn.execute(
                    sa.update(t)
                    .where(
                        t.c.id.in_(ids[i : i + 500]),
                        t.c.status == OutboxStatus.RUNNING.value,
                        t.c.claimed_by == worker,
                        t.c.attempts == attempts,
                    )
                    .values(status=OutboxStatus.DONE.value, done_at=self.clock(), last_error=None)
                )
                marked += res.rowcount
        if marked != len(claims):
            raise ClaimLost(
                f"{len(claims) - marked} of {len(claims)} outbox entries run together: the "
                f"claim of worker {worker!r} ended (a lease expired and another worker took "
                "the entry, or the row was changed); their transaction is rolled back",
                key=claims[0].key if claims else "",
            )

    def _exhaust(
        self,
        conn: Connection,
        key: str,
        row: Any,
        payload: Any,
        max_attempts: int,
        now: datetime,
    ) -> Exhausted | None:
        t = self.table
        if row.status == OutboxStatus.RUNNING.value:
            error = (
                f"attempt {row.attempts} of {max_attempts} did not finish: the claim of worker "
                f"{row.claimed_by!r} expired (the worker stopped, hung, or lost the database)"
            )
        else:
            error = f"no attempts left ({row.attempts} made, at most {max_attempts})"
        if row.last_error:
            error += f"; the last error before: {row.last_error}"
        error = error[:4000]
        res = conn.execute(
            sa.update(t)
            .where(
                t.c.id == row.id,
                t.c.status == row.status,
                t.c.attempts == row.attempts,
                t.c.claimed_by.is_(None)
                if row.claimed_by is None
                else t.c.claimed_by == row.claimed_by,
                self._claimable(conn, now),
            )
            .values(
                status=OutboxStatus.FAILED.value,
                claimed_by=None,
                next_attempt_at=None,
                last_error=storable_text(error),
            )
        )
        if res.rowcount != 1:
            return None  # another worker changed it first
        return Exhausted(row.id, key, row.rule, row.scope, row.t_occ, payload, row.attempts, error)

    def renew(self, conn: Connection, claimed: Claimed, worker: str, lease: float) -> bool:
        """Extend ``worker``'s claim of ``claimed`` to ``lease`` seconds from now
        (the heartbeat of a running attempt). Returns False when the claim is no
        longer this worker's: its lease ran out and another worker took the row,
        or someone changed the row's status."""
        t = self.table
        res = conn.execute(
            sa.update(t)
            .where(
                t.c.id == claimed.id,
                t.c.status == OutboxStatus.RUNNING.value,
                t.c.claimed_by == worker,
                t.c.attempts == claimed.attempts,
            )
            .values(next_attempt_at=self._lease_end(conn, lease))
        )
        return bool(res.rowcount == 1)

    def finish(self, conn: Connection, claimed: Claimed, worker: str) -> None:
        """Mark the row done, in the action's own transaction. Raises
        :class:`ClaimLost` if the claim is no longer this worker's (its lease
        expired and another worker took the row): the caller must then roll
        back, so the action's effects do not commit twice."""
        t = self.table
        res = conn.execute(
            sa.update(t)
            .where(
                t.c.id == claimed.id,
                t.c.status == OutboxStatus.RUNNING.value,
                t.c.claimed_by == worker,
                t.c.attempts == claimed.attempts,
            )
            .values(status=OutboxStatus.DONE.value, done_at=self.clock(), last_error=None)
        )
        if res.rowcount != 1:
            raise ClaimLost(
                f"outbox entry {claimed.key[:12]}… of rule {claimed.rule!r}: the claim of "
                f"worker {worker!r} ended (its lease expired and another worker took the "
                "entry, or the row was changed); this attempt is rolled back",
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
        values: dict[str, Any] = {"last_error": storable_text(error[:4000]), "claimed_by": None}
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

    def requeue(
        self, conn: Connection, *, rule: str | None = None, keys: Sequence[str] | None = None
    ) -> int:
        """Set ``failed`` rows (of ``rule``, or with these ``keys``, or all) back
        to ``pending``, due now, with their attempts reset (``last_error`` stays
        until the next attempt); return how many. For after the cause of their
        failure was fixed (``sentinel worker --retry-failed``)."""
        t = self.table
        where = [t.c.status == OutboxStatus.FAILED.value]
        if rule is not None:
            where.append(t.c.rule == rule)
        if keys is not None:
            where.append(t.c.idempotency_key.in_(list(keys)))
        res = conn.execute(
            sa.update(t)
            .where(*where)
            .values(
                status=OutboxStatus.PENDING.value,
                attempts=0,
                claimed_by=None,
                next_attempt_at=self.clock(),
            )
        )
        return int(res.rowcount)

    def unknown_statuses(self, conn: Connection, *, limit: int = 100) -> list[tuple[int, str, str]]:
        """``(id, rule, status)`` of rows whose status is none of
        :class:`~sentinel.log.tables.OutboxStatus` (a row changed by hand): no
        worker claims, fails or requeues them. Oldest first, at most ``limit``.
        Read as ranges of the status index around the known values (a few
        index probes, not a scan of the table)."""
        t = self.table
        q = sa.select(t.c.id, t.c.rule, t.c.status).where(self._unknown()).order_by(t.c.id)
        return [(int(i), str(r), str(s)) for i, r, s in conn.execute(q.limit(limit))]

    def _unknown(self) -> sa.ColumnElement[bool]:
        """A status none of :class:`~sentinel.log.tables.OutboxStatus`: the
        ranges of the status index around the known values (on SQLite also a
        number or a blob, which sort before and after all text)."""
        t = self.table
        known = sorted(s.value for s in OutboxStatus)
        ranges = [t.c.status < known[0], t.c.status > known[-1]]
        ranges += [
            sa.and_(t.c.status > lo, t.c.status < hi) for lo, hi in itertools.pairwise(known)
        ]
        return sa.or_(*ranges)

    def fail_unknown(self, conn: Connection, row_id: int, status: str) -> bool:
        """Mark the row ``row_id``, whose status is the unknown ``status``,
        ``failed``, saying so in ``last_error`` (``requeue`` runs it again);
        False when its status changed meanwhile (nothing changed)."""
        t = self.table
        known = ", ".join(s.value for s in OutboxStatus)
        error = (
            f"its status {status!r:.40} is none of {known} (the row was changed by hand): "
            "no worker runs it; marked failed (requeue it to run it)"
        )
        res = conn.execute(
            sa.update(t)
            .where(t.c.id == row_id, self._unknown())  # (status: as read, maybe not text)
            .values(
                status=OutboxStatus.FAILED.value,
                claimed_by=None,
                next_attempt_at=None,
                last_error=storable_text(error),
            )
        )
        return bool(res.rowcount == 1)

    def status(self, conn: Connection, key: str) -> str | None:
        """The row's status (``None``: no such row)."""
        t = self.table
        return conn.execute(
            sa.select(t.c.status).where(t.c.idempotency_key == key)
        ).scalar_one_or_none()
