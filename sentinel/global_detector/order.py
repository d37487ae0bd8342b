"""Reading the event log in commit order, and waking up when it grows.

Every transaction that writes log rows takes a *commit sequence number* just
before its commit (:meth:`sentinel.log.LogWriter.take_commit_seq`) and stamps its
rows with it (``event_batches.commit_seq``). The number is taken under a lock that the
transaction holds until it ends, so:

- numbers are handed out in commit order (the next transaction can take one only
  after the previous one ended), and
- a reader never sees a number while a smaller one may still commit: when
  number ``n`` is visible, every transaction that took a smaller number has
  ended, committed (visible) or rolled back (its number is never used, or is
  reused by the next transaction, which is why it was not visible).

So a reader that remembers the last number it processed and asks for larger ones
never skips a row that commits later: there are no holes to wait for, on any
backend. PostgreSQL takes the number with ``nextval`` under a transaction-level
advisory lock; SQLite and MariaDB increment a counter row (on SQLite writers are
serialized anyway). The cost is on the writing side: from the moment a
transaction takes its number to its commit (its last ``INSERT`` s and the
commit's flush to disk) other log-writing transactions wait.

:class:`CommitReader` reads committed rows after a position, whole commits at a
time; :func:`waiter` returns what waits for the next commit: ``LISTEN`` on
PostgreSQL (the number is sent with ``NOTIFY`` at the commit), polling with
back-off elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from sentinel.log.tables import LogTables, Outcome
from sentinel.log.writer import notify_channel

__all__ = ["CommitReader", "LogRow", "Poller", "PostgresListener", "waiter"]

log = logging.getLogger("sentinel.global")


@dataclass(frozen=True, slots=True)
class LogRow:
    """One committed log row as the global detector reads it."""

    id: int
    commit_seq: int
    scope: str
    t_occ: int
    event: str
    ts: float
    detected_ts: float
    source_class: str | None
    source_key: str | None
    params: str
    outcome: str | None


class CommitReader:
    """Reads the committed occurrences of the log (rows whose ``outcome`` is
    committed or NULL) in commit order: by ``commit_seq``, then by row ``id``
    (insertion order within a transaction), then by ``t_occ`` within a row;
    whole commits only."""

    def __init__(self, tables: LogTables) -> None:
        self.tables = tables
        b = tables.batches
        self._committed = sa.or_(b.c.outcome.is_(None), b.c.outcome != Outcome.ABORTED.value)
        self._select = sa.select(
            b.c.id,
            b.c.commit_seq,
            b.c.scope,
            b.c.outcome,
            sa.type_coerce(b.c.occurrences, sa.Text).label("occurrences"),
        ).where(self._committed)

    def read(self, conn: Connection, after: int, *, limit: int = 5000) -> list[LogRow]:
        """The committed occurrences with ``commit_seq > after``, in commit
        order, about ``limit`` of them (read as ``limit // 100`` log rows, at
        least one) but always whole commits (one commit larger than that is
        read whole)."""
        b = self.tables.batches
        rows_limit = max(1, limit // 100)
        q = (
            self._select.where(b.c.commit_seq > after)
            .order_by(b.c.commit_seq, b.c.id)
            .limit(rows_limit + 1)
        )
        rows = conn.execute(q).all()
        if len(rows) > rows_limit:
            last = rows[-1].commit_seq
            if rows[0].commit_seq == last:  # one commit: read all of it
                q = self._select.where(b.c.commit_seq == last).order_by(b.c.id)
                rows = conn.execute(q).all()
            else:
                rows = [r for r in rows if r.commit_seq != last]
        return [o for r in rows for o in _rows(r)]

    def unnumbered(self, conn: Connection, after_id: int) -> tuple[int, int]:
        """How many occurrences in rows with an id above ``after_id`` have no
        commit number (written by a process attached without
        ``commit_order=True``), and the largest row id in the log (0: none)."""
        b = self.tables.batches
        n, top = conn.execute(
            sa.select(
                sa.func.sum(sa.case((b.c.commit_seq.is_(None), b.c.n), else_=0)),
                sa.func.max(b.c.id),
            ).where(b.c.id > after_id)
        ).one()
        return int(n or 0), int(top or after_id)

    def behind(self, conn: Connection, after_id: int, was: int, position: int) -> int:
        """The committed occurrences in rows with an id above ``after_id``
        numbered at most ``was``, plus those numbered after ``was`` up to
        ``position``. For a reader that stood at ``was`` when ``after_id`` was
        the log's largest row id and has read up to ``position`` since: the
        occurrences it read since then, plus those numbered behind it meanwhile
        (forged, or written with a stale ``commit_seq``), which it never reads.
        Both sums use the ``commit_seq`` index."""
        b = self.tables.batches
        total = sa.func.coalesce(sa.func.sum(b.c.n), 0)
        old = conn.execute(
            sa.select(total).where(b.c.commit_seq <= was, b.c.id > after_id, self._committed)
        ).scalar()
        new = conn.execute(
            sa.select(total).where(
                b.c.commit_seq > was, b.c.commit_seq <= position, self._committed
            )
        ).scalar()
        return int(old or 0) + int(new or 0)

    def last_id(self, conn: Connection) -> int:
        """The largest row id in the log (0: none)."""
        b = self.tables.batches
        return int(conn.execute(sa.select(sa.func.max(b.c.id))).scalar() or 0)

    def handed_out(self, conn: Connection) -> int:
        """The last commit number handed out (0: none): the counter row on
        SQLite and MariaDB, the sequence on PostgreSQL (its last value, taken
        by a transaction that may not have ended yet). Read *after* the rows it
        judges: a committed row numbered above it was not numbered by
        :meth:`~sentinel.log.LogWriter.take_commit_seq` (written by hand,
        imported, or left behind by a reset of the counter or the sequence)."""
        t = self.tables
        if conn.dialect.name == "postgresql":
            q = t.commit_sequence_name
            seq = f'"{t.schema}"."{q}"' if t.schema else f'"{q}"'
            # NULL while nothing was taken since the sequence was made or restarted;
            # needs USAGE (which nextval needs too), not SELECT, on the sequence
            n = conn.execute(_PG_LAST_VALUE, {"q": seq}).scalar()
        else:
            c = t.commit_counter
            n = conn.execute(sa.select(c.c.n).where(c.c.id == 1)).scalar()
        return int(n or 0)

    def head(self, conn: Connection, upto: int | None = None) -> int:
        """The largest commit number in the log (0: none), or the largest at
        most ``upto``."""
        b = self.tables.batches
        q = sa.select(sa.func.max(b.c.commit_seq))
        if upto is not None:
            q = q.where(b.c.commit_seq <= upto)
        return int(conn.execute(q).scalar() or 0)


_PG_LAST_VALUE = sa.text("SELECT pg_sequence_last_value(CAST(:q AS regclass))")


def _rows(r: Any) -> list[LogRow]:
    """A log row's occurrences as :class:`LogRow` s (``params`` as compact JSON
    text, as the detector's feeder decodes it)."""
    elems = json.loads(r.occurrences) if isinstance(r.occurrences, str) else r.occurrences
    rid, seq, scope, outcome = int(r.id), int(r.commit_seq), r.scope, r.outcome
    try:
        return _make(elems, rid, seq, scope, outcome)
    except OverflowError:
        # JSONB gives a number no float holds (``1e999``, written by hand) back
        # as an integer: read it as the infinity :func:`json.loads` makes of the
        # same text elsewhere, which the feeder refuses, naming the row
        elems = [[t, ev, _time(ts), _time(dts), *rest] for t, ev, ts, dts, *rest in elems]
        return _make(elems, rid, seq, scope, outcome)


def _time(value: Any) -> Any:
    """``value``, or the infinity of its sign if it is an integer no float holds."""
    if type(value) is int:
        try:
            float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return value


def _make(elems: Any, rid: int, seq: int, scope: str, outcome: str | None) -> list[LogRow]:
    """The occurrences ``elems`` of one log row as :class:`LogRow` s."""
    dumps = _dumps
    return [
        LogRow(
            rid,
            seq,
            scope,
            int(t_occ),
            event,
            float(ts),
            float(ts if dts is None else dts),
            source_class,
            source_key,
            dumps(params),
            outcome,
        )
        for t_occ, event, ts, dts, source_class, source_key, params in elems
    ]


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class Poller:
    """Waits between reads that found nothing: ``min_wait`` seconds at first,
    doubling up to ``max_wait`` while nothing new comes (:meth:`reset` after a
    read that found rows)."""

    def __init__(self, min_wait: float = 0.05, max_wait: float = 1.0) -> None:
        self.min_wait = min_wait
        self.max_wait = max_wait
        self._next = min_wait

    def wait(self, stop: threading.Event, limit: float | None = None) -> None:
        w = self._next if limit is None else min(self._next, max(0.0, limit))
        stop.wait(w)
        self._next = min(self.max_wait, self._next * 2)

    def reset(self) -> None:
        self._next = self.min_wait

    def close(self) -> None:
        pass


class PostgresListener(Poller):
    """Waits for a ``NOTIFY`` of a commit that wrote log rows (sent by
    :meth:`~sentinel.log.LogWriter.take_commit_seq`), on a connection of its
    own; at most ``max_wait`` seconds (a safety net: the reader re-reads then,
    whatever happened to the notification)."""

    def __init__(self, engine: Engine, tables: LogTables, max_wait: float = 5.0) -> None:
        super().__init__(max_wait, max_wait)
        self.channel = notify_channel(tables)
        self._conn: Any = None
        self._engine = engine

    def _connect(self) -> Any:
        if self._conn is None:
            raw = self._engine.raw_connection()
            driver: Any = raw.driver_connection
            driver.autocommit = True
            driver.execute(f'LISTEN "{self.channel}"')
            self._raw, self._conn = raw, driver
        return self._conn

    def wait(self, stop: threading.Event, limit: float | None = None) -> None:
        timeout = self.max_wait if limit is None else min(self.max_wait, max(0.0, limit))
        try:
            conn = self._connect()
            # wake at the first notification; drain those that came together
            for _ in conn.notifies(timeout=timeout, stop_after=1):
                break
        except Exception:  # the listening connection broke: poll, reconnect later
            log.warning("sentinel global: LISTEN failed; polling", exc_info=True)
            self.close()
            stop.wait(min(timeout, 1.0))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._raw.invalidate()
            self._conn = None


def waiter(engine: Engine, tables: LogTables, *, min_wait: float, max_wait: float) -> Poller:
    """A :class:`PostgresListener` on PostgreSQL with psycopg, a
    :class:`Poller` elsewhere."""
    if engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg":
        return PostgresListener(engine, tables, max_wait=max(max_wait, 1.0))
    return Poller(min_wait, max_wait)
