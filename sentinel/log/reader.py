"""Reading the log back: occurrences in replay order, in bounded-memory chunks.

:class:`LogReader` streams the occurrences of the ``event_batches`` table (one
row per transaction, its occurrences in one JSON column) ordered by ``(scope,
t_occ)`` (the order replay feeds a detector: each detection scope is
independent, and within a scope ``t_occ`` is the detector's order) or by
``(t_occ, scope)`` (one process's global order, for rules that span
transactions). It pages over the rows with keyset queries (``WHERE (scope,
t_first) > last ORDER BY scope, t_first LIMIT n``, then the rows' occurrences
by id) and merges the occurrences of a scope's rows whose ``t_occ`` ranges
overlap, so memory stays bounded by about one chunk, no server-side cursor or
long transaction is held, and a partition of a larger read (``scope_range``)
is an index range.

Each page is a separate query: rows inserted while a read is under way may or
may not be seen, but no row is seen twice and order holds.

Occurrences come back exactly as the detector made them (same timestamps as
floats, parameters with their types, :class:`~sentinel.occurrence.ObjectRef`
sources), paired with their transaction's outcome.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sentinel.errors import (
    LogConfigError,
    LogConnectionError,
    LogRowError,
    LogTablesMissingError,
)
from sentinel.log.partition import key_candidates
from sentinel.log.records import Firing, LoggedOccurrence, OutboxEntry, source_ref
from sentinel.log.schema import check_schema, sqlite_file
from sentinel.log.tables import DEFAULT_PREFIX, SCHEMA_VERSION, LogTables, log_tables
from sentinel.occurrence import _END_TIME, _FIRST_TIME, Occurrence, split_params
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
            path = sqlite_file(url)
            if path is not None and not path.exists():
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
    ) -> list[sa.ColumnElement[bool]]:
        """The filters on ``event_batches`` rows (the occurrence-level ones,
        ``since``/``until`` and event names, are applied again to each
        occurrence by :class:`_Elements`)."""
        c = self.tables.batches.c
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
            where.append(c.at_max >= _utc(since))
        if until is not None:
            where.append(c.at_min < _utc(until))
        if outcomes is not None:
            named = [str(o) for o in outcomes if o is not None]
            either = [c.outcome.in_(named)] if named else []
            if None in outcomes:
                either.append(c.outcome.is_(None))
            where.append(sa.or_(*either) if either else sa.false())
        return where

    def _rows(self, conn: sa.Connection, ids: list[int]) -> list[Any]:
        return batch_rows(conn, self.tables.batches, ids)

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
        """The log's occurrences as lists of about ``chunk_size``, in ``order``.

        Filters (all optional, combined with AND): ``scopes`` (these scope ids),
        ``scope_range`` (``lo <= scope < hi``, either end open with ``None``; for
        partitioned reads), ``since`` / ``until`` (``since <= at < until``; naive
        datetimes are UTC), ``outcomes`` (a collection of ``"committed"``,
        ``"aborted"`` and ``None`` for the process scope), ``events`` (event
        names). ``order`` is ``"scope"`` (by scope, then ``t_occ``: replay order)
        or ``"t_occ"`` (by ``t_occ``, then scope: one process's order).

        Reads ``event_batches`` rows by ``(scope, t_first)`` (or ``(t_first,
        scope)``) with keyset queries and merges the occurrences of rows whose
        ``t_occ`` ranges overlap (a transaction's rolled-back savepoints, rows
        written late), so memory holds one chunk and the rows that overlap it.
        """
        if order not in ("scope", "t_occ"):
            raise LogConfigError(f"order must be 'scope' or 't_occ', not {order!r}")
        self._ready()
        b = self.tables.batches
        c = b.c
        where = self._filters(scopes, scope_range, since, until, outcomes)
        k1, k2 = (c.scope, c.t_first) if order == "scope" else (c.t_first, c.scope)
        size = self.chunk_size
        page = max(1, min(size, 1000))
        heads = sa.select(c.id, c.scope, c.t_first, c.n).where(*where).order_by(k1, k2).limit(page)
        elements = _Elements(b.name, since, until, events, by_scope=order == "scope")
        last: tuple[Any, Any] | None = None
        out: list[LoggedOccurrence] = []
        while True:
            q = heads
            if last is not None:
                # "k1 >= a" first so every database uses it as an index range start.
                q = q.where(k1 >= last[0], sa.or_(k1 > last[0], k2 > last[1]))
            with self._connect() as conn:
                found = conn.execute(q).all()
                take: list[Any] = []
                total = 0
                for h in found:
                    take.append(h)
                    total += h.n
                    if total >= size:
                        break
                rows = self._rows(conn, [h.id for h in take]) if take else []
            for row in rows:
                out.extend(elements.add(row))
                while len(out) >= size:
                    yield out[:size]
                    out = out[size:]
            if len(take) < len(found) or len(found) == page:
                tail = take[-1]
                last = (tail[1], tail[2]) if order == "scope" else (tail[2], tail[1])
                continue
            out.extend(elements.rest())
            while out:
                yield out[:size]
                out = out[size:]
            return

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
        """How many occurrences the same filters select (for progress bars):
        a sum over the rows' ``n`` unless a filter looks inside them (times,
        event names), which reads them."""
        self._ready()
        where = self._filters(scopes, scope_range, since, until, outcomes)
        if since is None and until is None and events is None:
            b = self.tables.batches
            q = sa.select(sa.func.coalesce(sa.func.sum(b.c.n), 0)).where(*where)
            with self._connect() as conn:
                return int(conn.execute(q).scalar_one())
        return sum(
            len(chunk)
            for chunk in self.chunks(
                scopes=scopes,
                scope_range=scope_range,
                since=since,
                until=until,
                outcomes=outcomes,
                events=events,
            )
        )

    def latest(
        self,
        limit: int = 20,
        *,
        events: Iterable[str] | None = None,
        scopes: Iterable[str] | None = None,
    ) -> list[LoggedOccurrence]:
        """The last ``limit`` occurrences written (by row ``id``, then ``t_occ``
        within a row), oldest first."""
        self._ready()
        b = self.tables.batches
        where = self._filters(scopes, None, None, None, None)
        names = None if events is None else set(events)
        got: list[list[LoggedOccurrence]] = []
        total = 0
        before: int | None = None
        while total < limit:
            q = sa.select(b.c.id).where(*where).order_by(b.c.id.desc()).limit(50)
            if before is not None:
                q = q.where(b.c.id < before)
            with self._connect() as conn:
                ids = list(conn.execute(q).scalars())
                rows = self._rows(conn, ids) if ids else []
            if not rows:
                break
            for row in rows:  # newest row first
                occs = [o for o in _decode(row, b.name) if names is None or o[0][0] in names]
                got.append(occs)
                total += len(occs)
                if total >= limit:
                    break
            before = ids[-1]
        flat = [o for occs in reversed(got) for o in occs]
        return flat[-limit:] if limit > 0 else []

    # -- firings and outbox ----------------------------------------------------------
    def firings(
        self,
        *,
        rules: Iterable[str] | None = None,
        scopes: Iterable[str] | None = None,
        statuses: Iterable[str] | None = None,
        keys: Iterable[str] | None = None,
    ) -> Iterator[Firing]:
        """Rule firings in the order they were written, fetched in chunks;
        only those of ``rules``, ``scopes``, ``statuses`` and partition
        ``keys`` when given (each key as a filter reads it:
        :func:`~sentinel.log.partition.key_candidates`, so ``"7"`` finds the
        firings of ``order_id=7``)."""
        self._ready()
        f = self.tables.firings
        where: list[sa.ColumnElement[bool]] = []
        if rules is not None:
            where.append(f.c.rule.in_(list(rules)))
        if scopes is not None:
            where.append(f.c.scope.in_(list(scopes)))
        if keys is not None:
            where.append(f.c.partition_key.in_([c for k in keys for c in key_candidates(k)]))
        if statuses is not None:
            where.append(f.c.status.in_([str(s) for s in statuses]))
        for row in self._by_id(f, where, json_column=f.c.constituents):
            yield Firing(
                rule=row.rule,
                scope=row.scope,
                t_occ=row.t_occ,
                constituents=_constituents(row.id, row.constituents, f.name),
                coupling=row.coupling,
                status=row.status,
                error=row.error,
                fired_at=row.fired_at,
                finished_at=row.finished_at,
                id=row.id,
                savepoint=row.savepoint,
                key=row.partition_key,
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
        self,
        table: sa.Table,
        where: Sequence[sa.ColumnElement[bool]],
        *,
        json_column: sa.Column[Any] | None = None,
    ) -> Iterator[sa.Row[Any]]:
        """``table``'s rows in ``id`` order; ``json_column`` comes as the
        database gives it (text, or what the driver decoded), so that a value
        that is not JSON is reported with its row, not by the driver."""
        columns: list[Any] = [
            sa.type_coerce(col, sa.Text).label(col.name) if col is json_column else col
            for col in table.c
        ]
        last = None
        while True:
            q = sa.select(*columns).where(*where).order_by(table.c.id).limit(self.chunk_size)
            if last is not None:
                q = q.where(table.c.id > last)
            with self._connect() as conn:
                try:
                    rows = conn.execute(q).all()
                except UNREADABLE as err:  # a value its type cannot read
                    raise _unreadable(conn, table, columns, q, err) from err
            yield from rows
            if len(rows) < self.chunk_size:
                return
            last = rows[-1].id


def batch_rows(conn: sa.Connection, batches: sa.Table, ids: list[int]) -> list[Any]:
    """The ``event_batches`` rows with these ids (occurrences as text or as the
    driver decoded them, as :func:`_decode` reads them), in the order of ``ids``."""
    b = batches
    q = sa.select(
        b.c.id,
        b.c.scope,
        b.c.t_first,
        b.c.outcome,
        b.c.savepoint,
        sa.type_coerce(b.c.occurrences, sa.Text).label("occurrences"),
    ).where(b.c.id.in_(ids))
    by_id = {r.id: r for r in conn.execute(q)}
    return [by_id[i] for i in ids if i in by_id]


def _unreadable(
    conn: sa.Connection,
    table: sa.Table,
    columns: Iterable[Any],
    query: Any,
    err: Exception,
    key: Any = None,
) -> Exception:
    """The :class:`LogRowError` naming the row and column of ``query``'s result
    that raised ``err`` when read (a time on SQLite that is not one): each of
    the query's rows (told apart by ``key``, default ``id``), then each of that
    row's columns, is read alone. ``err`` itself if none fails alone."""
    key = table.c.id if key is None else key
    ids = list(conn.execute(query.with_only_columns(key)).scalars())
    for rid in ids:
        one = key == rid
        for col in columns:
            try:
                conn.execute(sa.select(col).where(one)).all()
            except UNREADABLE as bad:
                raw = conn.execute(
                    sa.select(sa.type_coerce(table.c[col.name], sa.Text)).where(one)
                ).scalar()
                return LogRowError(
                    f"row {rid} of {table.name}: its {col.name} {str(raw)[:80]!r} cannot be "
                    f"read as the log writes it ({type(bad).__name__}: {str(bad)[:200]})",
                    table=table.name,
                    row_id=rid,
                    column=str(col.name),
                )
    return err


#: What reading a value its column's type cannot take raises (a text where a
#: time belongs on SQLite, a time past the year 9999).
UNREADABLE = (ValueError, TypeError, OverflowError)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_OUTCOMES = frozenset({"committed", "aborted", None})
_fromts = datetime.fromtimestamp


def _decode(row: Any, table: str) -> list[LoggedOccurrence]:
    """An ``event_batches`` row's occurrences (``row``: id, scope, t_first,
    outcome, savepoint, occurrences), checked: a value the writer never writes
    raises :class:`LogRowError` naming the row, the column and the occurrence."""
    rid, scope, _t_first, outcome, sp, value = row
    if not (type(scope) is str and (sp is None or type(sp) is str) and outcome in _OUTCOMES):
        for name, v, ok in (
            ("scope", scope, type(scope) is str),
            ("savepoint", sp, sp is None or type(sp) is str),
            ("outcome", outcome, outcome in _OUTCOMES),
        ):
            if not ok:
                what = (
                    "none of 'committed', 'aborted' and NULL" if name == "outcome" else "not a text"
                )
                raise _row_error(rid, scope, table, name, f"its {name} {v!r:.80} is {what}")
    try:
        elems = json.loads(value) if type(value) is str else value
        if type(elems) is not list:
            raise TypeError(f"a JSON {type(elems).__name__}, not an array")
    except Exception as err:
        raise _row_error(
            rid,
            scope,
            table,
            "occurrences",
            "its occurrences are not the JSON array the log writes "
            f"({type(err).__name__}: {str(err)[:200]})",
        ) from err
    out: list[LoggedOccurrence] = []
    append = out.append
    new = _new
    for i, e in enumerate(elems):
        try:
            t_occ, event, ts, dts, source_class, source_key, params = e
            if type(ts) is not float:
                ts = _number(ts)
            dts = ts if dts is None else dts if type(dts) is float else _number(dts)
            if not (
                type(t_occ) is int
                and type(event) is str
                and type(params) is dict
                and (source_class is None or type(source_class) is str)
                and (source_key is None or type(source_key) is str)
            ):
                raise TypeError("a value of the wrong type")
            if not (_FIRST_TIME <= ts < _END_TIME and _FIRST_TIME <= dts < _END_TIME):
                raise ValueError("a time outside the years 1 to 9999")  # NaN too
            decoded = {k: from_json(v) for k, v in params.items()} if params else {}
            source = None if source_class is None else source_ref(source_class, source_key)
        except Exception as err:  # shape, types, a tag's payload, a key
            raise _row_error(
                rid,
                scope,
                table,
                "occurrences",
                f"its occurrence #{i} {json.dumps(e, default=str)[:120]} is not one the log "
                f"writes ({type(err).__name__}: {str(err)[:200]})",
            ) from err
        values, names = split_params(decoded)
        occ = new(Occurrence, (event, t_occ, ts, dts, source, values, scope, names))
        logged = new(LoggedOccurrence, (occ, outcome, rid))
        if sp is not None:
            logged.savepoint = sp
        append(logged)
    return out


def _number(value: Any) -> float:
    """A time as a float: JSON keeps ``1.0`` as ``1`` on PostgreSQL, and a row
    written by hand may hold integers."""
    if type(value) is int:
        return float(value)
    raise TypeError(f"the time {value!r:.40} is not a number")


class _Elements:
    """Occurrences of ``event_batches`` rows coming in ``(scope, t_first)`` (or
    ``(t_first, scope)``) order, given back in ``(scope, t_occ)`` (or
    ``(t_occ, scope)``) order: each row's occurrences are held until no later
    row can hold one before them (a row's ``t_first`` bounds all of its
    occurrences from below), then given back, filtered by time and name."""

    def __init__(
        self,
        table: str,
        since: datetime | None,
        until: datetime | None,
        events: Iterable[str] | None,
        *,
        by_scope: bool,
    ) -> None:
        self.table = table
        self.since = None if since is None else _utc(since)
        self.until = None if until is None else _utc(until)
        self.names = None if events is None else frozenset(events)
        self.by_scope = by_scope
        self.held: list[tuple[Any, LoggedOccurrence]] = []

    def add(self, row: Any) -> list[LoggedOccurrence]:
        occs = _decode(row, self.table)
        if self.names is not None or self.since is not None or self.until is not None:
            occs = [o for o in occs if self._wanted(o)]
        held = self.held
        out: list[LoggedOccurrence] = []
        if self.by_scope:
            if held and held[0][1][0][6] != row.scope:
                out = [o for _, o in held]
                held.clear()
            if not occs:
                return out
            bound: Any = row.t_first
            keyed = [(o[0][1], o) for o in occs]
        else:
            if not occs:
                return out
            bound = (row.t_first, row.scope)
            keyed = [((o[0][1], o[0][6]), o) for o in occs]
        # rows of one transaction rarely overlap: usually everything held
        # comes before the new row and goes out as it is
        if held and held[-1][0] < bound:
            out.extend(o for _, o in held)
            held.clear()
        elif held:
            cut = bisect_left(held, bound, key=_first)
            out.extend(o for _, o in held[:cut])
            del held[:cut]
        if held and keyed[0][0] < held[-1][0]:
            held.extend(keyed)
            held.sort(key=_first)
        else:
            held.extend(keyed)
        return out

    def rest(self) -> list[LoggedOccurrence]:
        out = [o for _, o in self.held]
        self.held.clear()
        return out

    def _wanted(self, o: LoggedOccurrence) -> bool:
        occ = o[0]
        if self.names is not None and occ[0] not in self.names:
            return False
        if self.since is not None or self.until is not None:
            at = _fromts(occ[2], UTC)
            if self.since is not None and at < self.since:
                return False
            if self.until is not None and at >= self.until:
                return False
        return True


def _first(item: tuple[Any, Any]) -> Any:
    return item[0]


def _row_error(rid: Any, scope: Any, table: str, column: str, why: str) -> LogRowError:
    return LogRowError(
        f"row {rid} of {table} (scope {str(scope)[:80]!r}): {why}",
        table=table,
        row_id=rid,
        column=column,
    )


def _constituents(rid: Any, value: Any, table: str) -> tuple[tuple[str, int], ...]:
    """A firing row's ``constituents`` (JSON text, or what the driver decoded)
    as ``(scope, t_occ)`` pairs; :class:`LogRowError` naming the row when it is
    not the list of ``[scope, t_occ]`` pairs the writer writes."""
    try:
        pairs = json.loads(value) if type(value) is str else value
        if type(pairs) is not list:
            raise TypeError(f"a JSON {type(pairs).__name__}, not a list")
        out = []
        for pair in pairs:
            if not (
                type(pair) is list
                and len(pair) == 2
                and type(pair[0]) is str
                and type(pair[1]) is int
            ):
                raise TypeError(f"{json.dumps(pair)[:80]} is not a [scope, t_occ] pair")
            out.append((pair[0], pair[1]))
    except (ValueError, TypeError) as err:
        raise LogRowError(
            f"row {rid} of {table}: its constituents are not the list of [scope, t_occ] "
            f"pairs the log writes ({type(err).__name__}: {str(err)[:200]})",
            table=table,
            row_id=rid,
            column="constituents",
        ) from err
    return tuple(out)


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
