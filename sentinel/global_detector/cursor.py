"""The global detector's durable cursor and its lease.

One row of ``<prefix>global_cursors`` per global detector (by ``name``):
``position`` is the last commit sequence number whose rows it processed,
``holder`` the instance that may act and ``lease_until`` when that right ends
(timed by the database server's clock on PostgreSQL and MariaDB).

- :meth:`Cursor.acquire` takes the lease, in a short transaction: only if it is
  free, expired, or already this instance's.
- :meth:`Cursor.advance` moves the position, *in the transaction that writes the
  outbox entries of the detections it caused*, with an ``UPDATE`` that names
  the holder and the position it expects, before the entries: if another
  instance took the lease meanwhile the ``UPDATE`` matches nothing and
  :class:`~sentinel.errors.LeaseLost` is raised before any entry is written
  (the caller rolls back); if not, the row stays locked until the commit, so
  no instance takes the lease over while the entries are written. Entries
  and position commit together or not at all: a ``kill -9`` anywhere loses no
  detection and repeats none.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sentinel.errors import LeaseLost
from sentinel.log.outbox import server_later, server_now
from sentinel.log.tables import LogTables

__all__ = ["Cursor", "CursorState"]


class CursorState:
    """What one row says: position, holder, lease end, log time reached."""

    __slots__ = ("holder", "lease_until", "log_time", "position")

    def __init__(
        self,
        position: int,
        holder: str | None,
        lease_until: datetime | None,
        log_time: float | None,
    ) -> None:
        self.position = position
        self.holder = holder
        self.lease_until = lease_until
        self.log_time = log_time


class Cursor:
    """The cursor row ``name`` of ``tables`` (see the module docs)."""

    def __init__(self, tables: LogTables, name: str) -> None:
        self.tables = tables
        self.table = tables.global_cursors
        self.name = name

    def _now(self, conn: Connection) -> sa.ColumnElement[datetime] | datetime:
        server = server_now(conn.dialect.name)
        return datetime.now(UTC) if server is None else server

    def _later(self, conn: Connection, lease: float) -> sa.ColumnElement[datetime] | datetime:
        from datetime import timedelta

        later = server_later(conn.dialect.name, lease)
        return datetime.now(UTC) + timedelta(seconds=lease) if later is None else later

    def read(self, conn: Connection) -> CursorState | None:
        t = self.table
        row = conn.execute(
            sa.select(t.c.position, t.c.holder, t.c.lease_until, t.c.log_time).where(
                t.c.name == self.name
            )
        ).one_or_none()
        if row is None:
            return None
        return CursorState(int(row.position), row.holder, row.lease_until, row.log_time)

    def acquire(self, conn: Connection, holder: str, lease: float) -> CursorState | None:
        """Take (or renew) the lease for ``holder``; return the cursor's state,
        or ``None`` when another instance holds a lease that has not ended.
        Creates the row (position 0: the log's beginning) on first use. Run in a
        transaction of its own."""
        t = self.table
        if self.read(conn) is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        sa.insert(t).values(
                            name=self.name, position=0, updated_at=datetime.now(UTC)
                        )
                    )
            except sa.exc.IntegrityError:
                pass  # another instance made it first
        res = conn.execute(
            sa.update(t)
            .where(
                t.c.name == self.name,
                sa.or_(
                    t.c.holder.is_(None),
                    t.c.holder == holder,
                    t.c.lease_until < self._now(conn),
                ),
            )
            .values(holder=holder, lease_until=self._later(conn, lease))
        )
        if res.rowcount != 1:
            return None
        return self.read(conn)

    def advance(
        self,
        conn: Connection,
        holder: str,
        old: int,
        new: int,
        lease: float,
        log_time: float | None = None,
    ) -> None:
        """Move the position from ``old`` to ``new`` and renew the lease, in the
        caller's transaction; raise :class:`~sentinel.errors.LeaseLost` when the
        row is no longer ``holder``'s at ``old``."""
        t = self.table
        values: dict[str, object] = {
            "position": new,
            "lease_until": self._later(conn, lease),
            "updated_at": datetime.now(UTC),
        }
        if log_time is not None:
            values["log_time"] = log_time
        res = conn.execute(
            sa.update(t)
            .where(t.c.name == self.name, t.c.holder == holder, t.c.position == old)
            .values(**values)
        )
        if res.rowcount != 1:
            raise self.lost(holder, old)

    def lost(self, holder: str, old: int) -> LeaseLost:
        """The :class:`~sentinel.errors.LeaseLost` of ``holder``, whose batch
        after ``old`` could not commit."""
        return LeaseLost(
            f"sentinel global {self.name!r}: instance {holder!r} lost the cursor's lease at "
            f"position {old} (another instance took it over): its batch was rolled back, "
            "no entry written, and it stands by"
        )

    def release(self, conn: Connection, holder: str) -> None:
        """Give the lease up (a clean stop), so a standby takes over at once."""
        t = self.table
        conn.execute(
            sa.update(t)
            .where(t.c.name == self.name, t.c.holder == holder)
            .values(holder=None, lease_until=None)
        )

    def reset(self, conn: Connection, position: int = 0) -> None:
        """Set the position (an operator's repair: no command does it; see
        ``docs/global.md``): the detector then reprocesses or skips history.
        Entries already written stay."""
        t = self.table
        conn.execute(sa.update(t).where(t.c.name == self.name).values(position=position))
