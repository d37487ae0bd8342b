"""The web view's queries of the outbox and the global detectors' cursors (a
part of :class:`~sentinel.ui.queries.LogView`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from sentinel.errors import LogRowError
from sentinel.log.outbox import server_now
from sentinel.log.tables import LogTables
from sentinel.ui.rows import MAX_PAGE, Page, _iso, _read, _stamp

__all__ = ["LAG_COUNT", "Operations"]

#: The most commit numbers a cursor's lag counts (more shows as "10000+").
LAG_COUNT = 10_000


class Operations:
    """:class:`~sentinel.ui.queries.LogView`'s outbox and cursor pages."""

    engine: sa.Engine
    tables: LogTables

    def outbox(self, status: str, *, limit: int = 50) -> Page:
        """The first ``limit`` outbox entries of ``status`` by ``next_attempt_at``
        (the index ``(status, next_attempt_at)``), and how many there are."""
        o = self.tables.outbox
        q = (
            sa.select(
                o.c.id,
                o.c.rule,
                o.c.idempotency_key,
                o.c.scope,
                o.c.t_occ,
                o.c.status,
                o.c.attempts,
                o.c.next_attempt_at,
                o.c.claimed_by,
                o.c.last_error,
                o.c.created_at,
            )
            .where(o.c.status == status)
            .order_by(o.c.next_attempt_at, o.c.id)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            rows = [
                {
                    "id": r.id,
                    "rule": r.rule,
                    "key": r.idempotency_key,
                    "scope": r.scope,
                    "t_occ": r.t_occ,
                    "status": r.status,
                    "attempts": r.attempts,
                    "next_attempt_at": _iso(r.next_attempt_at),
                    "claimed_by": r.claimed_by or "",
                    "last_error": r.last_error or "",
                    "created_at": _iso(r.created_at),
                }
                for r in _read(conn, o, q)
            ]
        return Page(rows)

    def outbox_counts(self) -> dict[str, int]:
        """How many outbox entries are pending, running and failed (a range of
        the status index each; finished ones are not counted)."""
        o = self.tables.outbox
        q = (
            sa.select(o.c.status, sa.func.count())
            .where(o.c.status.in_(["pending", "running", "failed"]))
            .group_by(o.c.status)
        )
        counts = {"pending": 0, "running": 0, "failed": 0}
        with self.engine.connect() as conn:
            counts.update({s: int(n) for s, n in conn.execute(q)})
        return counts

    def cursors(self) -> list[dict[str, Any]]:
        """Each global detector's cursor: position, lease holder and end, the
        log time it reached, and its lag: how many commit numbers the log's
        rows hold above its position (counted through the ``commit_seq``
        index, at most :data:`LAG_COUNT`: ``lag_more`` says there are more;
        a number taken by a transaction that rolled back, a hole, is not
        counted). A lease is held or expired by the database server's clock
        (which the global detector times it by), read in the same query."""
        c = self.tables.global_cursors
        b = self.tables.batches
        with self.engine.connect() as conn:
            head = conn.execute(sa.select(sa.func.max(b.c.commit_seq))).scalar()
            clock = server_now(conn.dialect.name)
            cols: list[Any] = list(c.c)
            if clock is not None:
                cols.append(clock.label("server_now"))
            q = sa.select(*cols).order_by(c.c.name).limit(MAX_PAGE)
            rows = _read(conn, c, q, c.c.name)
            behind = {p: self._behind(conn, p, head) for p in sorted({r.position for r in rows})}
        out = []
        for r in rows:
            lease = r.lease_until
            now = r.server_now if clock is not None else datetime.now(UTC)
            try:
                log_time = _stamp(r.log_time)
            except (ValueError, OverflowError) as err:  # NaN, infinite, past year 9999
                raise LogRowError(
                    f"row {r.name!r} of {c.name}: its log_time {r.log_time!r} is not a time "
                    f"({type(err).__name__}: {err})",
                    table=c.name,
                    row_id=r.name,
                    column="log_time",
                ) from err
            lag = behind[r.position]
            out.append(
                {
                    "name": r.name,
                    "position": r.position,
                    "head": "" if head is None else head,
                    "lag": min(lag, LAG_COUNT),
                    "lag_more": lag > LAG_COUNT,
                    "holder": r.holder or "",
                    "lease_until": _iso(lease),
                    "lease": (
                        "free"
                        if r.holder is None
                        else "held"
                        if lease is not None and now is not None and lease > now
                        else "expired"
                    ),
                    "log_time": log_time,
                    "updated_at": _iso(r.updated_at),
                }
            )
        return out

    def _behind(self, conn: sa.Connection, position: int, head: int | None) -> int:
        """How many commit numbers the log's rows hold above ``position``, up
        to :data:`LAG_COUNT` + 1 (a walk of the ``commit_seq`` index)."""
        if head is None or head <= position:
            return 0
        b = self.tables.batches
        numbers = (
            sa.select(b.c.commit_seq)
            .where(b.c.commit_seq > position)
            .distinct()
            .order_by(b.c.commit_seq)
            .limit(LAG_COUNT + 1)
            .subquery()
        )
        return int(conn.execute(sa.select(sa.func.count()).select_from(numbers)).scalar() or 0)
