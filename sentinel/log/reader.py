"""Reading the log back: occurrences in replay order, in bounded-memory chunks.

:class:`LogReader` streams the ``events`` table ordered by ``(scope, t_occ)`` (the
order replay feeds a detector: each detection scope is independent, and within a
scope ``t_occ`` is the detector's order) or by ``(t_occ, scope)`` (one process's
global order, for rules that span transactions). It pages with keyset queries
(``WHERE (scope, t_occ) > last ORDER BY scope, t_occ LIMIT chunk_size``), so
memory stays bounded by one chunk, no server-side cursor or long transaction is
held, and a partition of a larger read (``scope_range``) is an index range.

Each chunk is a separate query: rows inserted while a read is under way may or
may not be seen, but no row is seen twice and order holds.

Occurrences come back exactly as the detector made them (same timestamps as
floats, parameters with their types, :class:`~sentinel.occurrence.ObjectRef`
sources), paired with their transaction's outcome.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sentinel.errors import LogConfigError, LogConnectionError, LogTablesMissingError
from sentinel.log.records import Firing, LoggedOccurrence, OutboxEntry, source_ref
from sentinel.log.schema import check_schema
from sentinel.log.tables import DEFAULT_PREFIX, SCHEMA_VERSION, LogTables, log_tables
from sentinel.occurrence import Occurrence
from sentinel.params import from_json

__all__ = ["LogReader", "Order", "read_occurrences"]

Order = Literal["scope", "t_occ"]
_new = tuple.__new__


class LogReader:
    """Reads a log: occurrences, rule firings and outbox entries.

    ``source`` is a SQLAlchemy URL (the reader creates an engine and disposes of
    it on :meth:`close`) or an :class:`~sqlalchemy.engine.Engine` (left open).
    ``schema`` and ``prefix`` select the tables. ``chunk_size`` bounds how many
    rows one query fetches. The schema revision is checked before the first
    read (``check=False`` skips that); a log at a revision this code does not
    know raises :class:`~sentinel.errors.LogSchemaUnknownError`, an older one
    :class:`~sentinel.errors.LogSchemaOutdatedError`, missing tables
    :class:`~sentinel.errors.LogTablesMissingError`, an unreachable database
    :class:`~sentinel.errors.LogConnectionError`.

    Iterators it returns are lazy and independent; a reader may be used from
    several threads.

    >>> with LogReader("sqlite:///app.db") as log:          # doctest: +SKIP
    ...     for row in log.occurrences(outcomes={"committed"}):
    ...         detector_feed(row.occurrence)
    """

    def __init__(
        self,
        source: str | sa.URL | Engine,
        *,
        schema: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        chunk_size: int = 10_000,
        check: bool = True,
    ) -> None:
        if chunk_size < 1:
            raise LogConfigError(f"chunk_size must be at least 1, not {chunk_size}")
        self.tables: LogTables = log_tables(schema, prefix)
        self.chunk_size = chunk_size
        if isinstance(source, Engine):
            self.engine = source
            self._owned = False
        else:
            url = sa.make_url(source)
            if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
                path = Path(url.database)
                if not path.exists():
                    raise LogTablesMissingError(
                        f"no SQLite database at {path}: there is no event log to read",
                        location=str(path),
                        found=None,
                        expected=SCHEMA_VERSION,
                        missing=self.tables.names,
                    )
            self.engine = sa.create_engine(url)
            self._owned = True
        self._check = check
        self._revision: str | None = None

    # -- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        """Dispose of the engine if the reader created it."""
        if self._owned:
            self.engine.dispose()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def location(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def _connect(self) -> sa.Connection:
        try:
            return self.engine.connect()
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as err:
            orig = getattr(err, "orig", None) or err
            raise LogConnectionError(
                f"cannot connect to the log database {self.location}: {orig}",
                location=self.location,
            ) from err

    def check(self) -> str:
        """Check the schema revision (once) and return it; see the class docs."""
        if self._revision is None:
            with self._connect() as conn:
                self._revision = check_schema(conn, self.tables)
        return self._revision

    def _ready(self) -> None:
        if self._check and self._revision is None:
            self.check()

    # -- occurrences -----------------------------------------------------------------
    def _filters(
        self,
        scopes: Iterable[str] | None,
        scope_range: tuple[str | None, str | None] | None,
        since: datetime | None,
        until: datetime | None,
        outcomes: Collection[str | None] | None,
        events: Iterable[str] | None,
    ) -> list[sa.ColumnElement[bool]]:
        c = self.tables.events.c
        where: list[sa.ColumnElement[bool]] = []
        if scopes is not None:
            where.append(c.scope.in_(list(scopes)))
        if scope_range is not None:
            lo, hi = scope_range
            if lo is not None:
                where.append(c.scope >= lo)
            if hi is not None:
                where.append(c.scope < hi)
        if since is not None:
            where.append(c.at >= _utc(since))
        if until is not None:
            where.append(c.at < _utc(until))
        if outcomes is not None:
            named = [str(o) for o in outcomes if o is not None]
            either = [c.outcome.in_(named)] if named else []
            if None in outcomes:
                either.append(c.outcome.is_(None))
            where.append(sa.or_(*either) if either else sa.false())
        if events is not None:
            where.append(c.event.in_(list(events)))
        return where

    def chunks(
        self,
        *,
        scopes: Iterable[str] | None = None,
        scope_range: tuple[str | None, str | None] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        outcomes: Collection[str | None] | None = None,
        events: Iterable[str] | None = None,
        order: Order = "scope",
    ) -> Iterator[list[LoggedOccurrence]]:
        """The log's occurrences as lists of at most ``chunk_size``, in ``order``.

        Filters (all optional, combined with AND): ``scopes`` (these scope ids),
        ``scope_range`` (``lo <= scope < hi``, either end open with ``None``; for
        partitioned reads), ``since`` / ``until`` (``since <= at < until``; naive
        datetimes are UTC), ``outcomes`` (a collection of ``"committed"``,
        ``"aborted"`` and ``None`` for the process scope), ``events`` (event
        names). ``order`` is ``"scope"`` (by scope, then ``t_occ``: replay order)
        or ``"t_occ"`` (by ``t_occ``, then scope: one process's order).
        """
        if order not in ("scope", "t_occ"):
            raise LogConfigError(f"order must be 'scope' or 't_occ', not {order!r}")
        self._ready()
        ev = self.tables.events
        c = ev.c
        where = self._filters(scopes, scope_range, since, until, outcomes, events)
        k1, k2 = (c.scope, c.t_occ) if order == "scope" else (c.t_occ, c.scope)
        base = (
            sa.select(
                c.id,
                c.event,
                c.t_occ,
                c.ts,
                c.detected_ts,
                c.source_class,
                c.source_key,
                c.params,
                c.scope,
                c.outcome,
                c.savepoint,
            )
            .where(*where)
            .order_by(k1, k2)
            .limit(self.chunk_size)
        )
        size = self.chunk_size
        last: tuple[Any, Any] | None = None
        while True:
            q = base
            if last is not None:
                # "k1 >= a" first so every database uses it as an index range start.
                q = q.where(k1 >= last[0], sa.or_(k1 > last[0], k2 > last[1]))
            with self._connect() as conn:
                rows = conn.execute(q).all()
            if not rows:
                return
            yield [_logged(r) for r in rows]
            if len(rows) < size:
                return
            tail = rows[-1]
            last = (tail.scope, tail.t_occ) if order == "scope" else (tail.t_occ, tail.scope)

    def occurrences(
        self,
        *,
        scopes: Iterable[str] | None = None,
        scope_range: tuple[str | None, str | None] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        outcomes: Collection[str | None] | None = None,
        events: Iterable[str] | None = None,
        order: Order = "scope",
    ) -> Iterator[LoggedOccurrence]:
        """The log's occurrences one by one, in ``order``, fetched in chunks; the
        filters are those of :meth:`chunks`."""
        for chunk in self.chunks(
            scopes=scopes,
            scope_range=scope_range,
            since=since,
            until=until,
            outcomes=outcomes,
            events=events,
            order=order,
        ):
            yield from chunk

    def count(
        self,
        *,
        scopes: Iterable[str] | None = None,
        scope_range: tuple[str | None, str | None] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        outcomes: Collection[str | None] | None = None,
        events: Iterable[str] | None = None,
    ) -> int:
        """How many occurrences the same filters select (for progress bars)."""
        self._ready()
        where = self._filters(scopes, scope_range, since, until, outcomes, events)
        q = sa.select(sa.func.count()).select_from(self.tables.events).where(*where)
        with self._connect() as conn:
            return int(conn.execute(q).scalar_one())

    def latest(
        self,
        limit: int = 20,
        *,
        events: Iterable[str] | None = None,
        scopes: Iterable[str] | None = None,
    ) -> list[LoggedOccurrence]:
        """The last ``limit`` rows written (by ``id``), oldest first."""
        self._ready()
        c = self.tables.events.c
        where = self._filters(scopes, None, None, None, None, events)
        q = (
            sa.select(
                c.id,
                c.event,
                c.t_occ,
                c.ts,
                c.detected_ts,
                c.source_class,
                c.source_key,
                c.params,
                c.scope,
                c.outcome,
                c.savepoint,
            )
            .where(*where)
            .order_by(c.id.desc())
            .limit(limit)
        )
        with self._connect() as conn:
            rows = conn.execute(q).all()
        return [_logged(r) for r in reversed(rows)]

    # -- firings and outbox ----------------------------------------------------------
    def firings(
        self,
        *,
        rules: Iterable[str] | None = None,
        scopes: Iterable[str] | None = None,
        statuses: Iterable[str] | None = None,
    ) -> Iterator[Firing]:
        """Rule firings in the order they were written, fetched in chunks."""
        self._ready()
        f = self.tables.firings
        where: list[sa.ColumnElement[bool]] = []
        if rules is not None:
            where.append(f.c.rule.in_(list(rules)))
        if scopes is not None:
            where.append(f.c.scope.in_(list(scopes)))
        if statuses is not None:
            where.append(f.c.status.in_([str(s) for s in statuses]))
        for row in self._by_id(f, where):
            yield Firing(
                rule=row.rule,
                scope=row.scope,
                t_occ=row.t_occ,
                constituents=tuple((s, t) for s, t in row.constituents),
                coupling=row.coupling,
                status=row.status,
                error=row.error,
                fired_at=row.fired_at,
                finished_at=row.finished_at,
                id=row.id,
                savepoint=row.savepoint,
            )

    def outbox(self, *, statuses: Iterable[str] | None = None) -> Iterator[OutboxEntry]:
        """Outbox entries in the order they were written (payloads decoded)."""
        self._ready()
        o = self.tables.outbox
        where = [] if statuses is None else [o.c.status.in_([str(s) for s in statuses])]
        for row in self._by_id(o, where):
            constituents, extra = OutboxEntry.decode_payload(row.payload)
            yield OutboxEntry(
                rule=row.rule,
                idempotency_key=row.idempotency_key,
                scope=row.scope,
                t_occ=row.t_occ,
                constituents=constituents,
                extra=extra,
                status=row.status,
                attempts=row.attempts,
                next_attempt_at=row.next_attempt_at,
                claimed_by=row.claimed_by,
                last_error=row.last_error,
                created_at=row.created_at,
                done_at=row.done_at,
                id=row.id,
            )

    def _by_id(
        self, table: sa.Table, where: Sequence[sa.ColumnElement[bool]]
    ) -> Iterator[sa.Row[Any]]:
        last = None
        while True:
            q = sa.select(table).where(*where).order_by(table.c.id).limit(self.chunk_size)
            if last is not None:
                q = q.where(table.c.id > last)
            with self._connect() as conn:
                rows = conn.execute(q).all()
            yield from rows
            if len(rows) < self.chunk_size:
                return
            last = rows[-1].id


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _logged(row: Any) -> LoggedOccurrence:
    rid, event, t_occ, ts, dts, source_class, source_key, params, scope, outcome, sp = row
    source = None if source_class is None else source_ref(source_class, source_key)
    occ = _new(
        Occurrence,
        (
            event,
            t_occ,
            ts,
            dts,
            source,
            {k: from_json(v) for k, v in params.items()} if params else {},
            scope,
        ),
    )
    logged = _new(LoggedOccurrence, (occ, outcome, rid))
    if sp is not None:
        logged.savepoint = sp
    return logged


def read_occurrences(
    source: str | sa.URL | Engine,
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    chunk_size: int = 10_000,
    **filters: Any,
) -> Iterator[LoggedOccurrence]:
    """Stream a log's occurrences (see :meth:`LogReader.chunks` for ``filters``),
    closing the reader when the iterator is exhausted or closed.

    >>> for occ, outcome, _ in read_occurrences("sqlite:///app.db"):  # doctest: +SKIP
    ...     print(occ.scope, occ.t_occ, occ.event, outcome)
    """
    with LogReader(source, schema=schema, prefix=prefix, chunk_size=chunk_size) as reader:
        yield from reader.occurrences(**filters)
