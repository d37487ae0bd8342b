"""The log's ``INSERT`` statements, compiled once per dialect.

An :class:`_InsertPlan` is one table's ``INSERT`` compiled for one dialect with
the bind processors of its columns; :class:`_EventsInsert` is the ``events``
table's, which makes the datetimes and the parameters' JSON the way the
columns' types would, directly as text on SQLite. Both turn rows into the
driver's parameters for one ``executemany`` call
(:class:`~sentinel.log.writer.LogWriter` sends them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

import sqlalchemy as sa

from sentinel.errors import LogWriteError
from sentinel.log.encoding import _SURELY_FITS, _dumps, _fit, _params_text
from sentinel.log.records import encode_params
from sentinel.log.tables import LogJSON, UTCDateTime

_fromtimestamp = datetime.fromtimestamp
_DATETIME_TZ = sa.DateTime(timezone=True)
#: The ``events`` columns the writer fills, in the order of its rows.
EVENT_COLUMNS: tuple[str, ...] = (
    "scope",
    "t_occ",
    "event",
    "at",
    "detected_at",
    "ts",
    "detected_ts",
    "source_class",
    "source_key",
    "params",
    "outcome",
    "savepoint",
    "commit_seq",
)


def _processor(column: sa.Column[Any], dialect: sa.Dialect) -> Any:
    """The bind processor of ``column`` on ``dialect`` (``None``: values go to the
    driver as they are), with shortcuts for the log's own types where they
    provably give the same result: a UTC datetime as the text or naive datetime
    SQLite and MySQL store, JSON through :func:`json.dumps` when the engine has
    no serializer of its own, floats as they are."""
    generic = column.type.dialect_impl(dialect).bind_processor(dialect)
    if generic is None:
        return None
    ctype = column.type
    name = dialect.name
    if isinstance(ctype, UTCDateTime) and name in ("sqlite", "mysql", "mariadb"):
        as_text = name == "sqlite"

        def utc(value: Any, _generic: Any = generic, _utc: Any = UTC) -> Any:
            if value.tzinfo is not _utc:
                return _generic(value)
            naive = value.replace(tzinfo=None)
            return naive.isoformat(" ", "microseconds") if as_text else naive

        return utc
    if isinstance(ctype, LogJSON) and name in ("sqlite", "mysql", "mariadb"):
        if getattr(dialect, "_json_serializer", None) is None:
            return json.dumps
        return generic
    if isinstance(ctype, sa.Double):

        def as_float(value: Any, _generic: Any = generic) -> Any:
            return value if type(value) is float else _generic(value)

        return as_float
    return generic


class _InsertPlan:
    """One table's ``INSERT`` compiled for one dialect, with the bind processors
    of its columns: what :meth:`LogWriter._insert` sends through the driver's
    ``executemany``.

    ``columns`` are the columns the rows carry, in row order; ``convert`` turns a
    row (a sequence in that order) into the driver's parameters: a tuple, or a
    dict for drivers with named parameters, with each column's bind processor
    applied (generated once per plan, so a row costs one call).
    """

    __slots__ = ("columns", "convert", "sql")

    def __init__(self, table: sa.Table, columns: Sequence[str], dialect: sa.Dialect) -> None:
        compiled = table.insert().compile(dialect=dialect, column_keys=list(columns))
        self.sql: str = compiled.string
        self.columns = tuple(columns)
        if compiled.positional:
            order = tuple(compiled.positiontup or ())
            if order != self.columns:
                raise LogWriteError(  # pragma: no cover - a dialect we do not know
                    f"cannot prepare the insert into {table.name} for {dialect.name}: "
                    f"parameters come in the order {order}",
                    table=table.name,
                )
            names = None
        else:
            names = tuple(compiled.binds[c].key for c in columns)
        env: dict[str, Any] = {}
        parts = []
        for i, c in enumerate(columns):
            proc = _processor(table.c[c], dialect)
            if proc is None:
                parts.append(f"v[{i}]")
                continue
            env[f"p{i}"] = proc
            if table.c[c].nullable:
                parts.append(f"(None if v[{i}] is None else p{i}(v[{i}]))")
            else:
                parts.append(f"p{i}(v[{i}])")
        if names is None:
            body = "(" + ", ".join(parts) + ",)"
        else:
            body = "{" + ", ".join(f"{n!r}: {x}" for n, x in zip(names, parts, strict=True)) + "}"
        src = f"def convert(v):\n    return {body}\n"
        exec(compile(src, f"<sentinel insert {table.name}>", "exec"), env)
        self.convert = env["convert"]

    def rows(self, values: Iterable[Sequence[Any]]) -> list[Any]:
        """Driver parameters for ``values`` (each a sequence in column order)."""
        return list(map(self.convert, values))


_STAMPS: dict[int, str] = {}


def _sqlite_stamp(ts: float) -> str:
    """``datetime.fromtimestamp(ts, UTC)`` as the text SQLAlchemy stores for it
    on SQLite (``YYYY-MM-DD HH:MM:SS.ffffff``), without making the datetime: the
    microseconds are rounded as ``datetime`` rounds them (half to even)."""
    secs = int(ts // 1)
    us = round((ts - secs) * 1e6)
    if us >= 1_000_000:
        secs += 1
        us -= 1_000_000
    return f"{_stamp_prefix(secs)}.{us:06d}"


#: The POSIX seconds of the first and the last second a ``datetime`` holds
#: (0001-01-01 00:00:00 and 9999-12-31 23:59:59 UTC).
_FIRST_SECOND = -62_135_596_800
_LAST_SECOND = 253_402_300_799


def _stamp_prefix(secs: int) -> str:
    """``YYYY-MM-DD HH:MM:SS`` of the POSIX second ``secs`` (UTC), remembered.
    Raises :class:`ValueError` for a second outside the years 1 to 9999, as
    ``datetime.fromtimestamp`` does (``strftime`` would write the year 10000,
    and a year before 1000 without its leading zeros)."""
    prefix = _STAMPS.get(secs)
    if prefix is None:
        if not _FIRST_SECOND <= secs <= _LAST_SECOND:
            raise ValueError(f"the POSIX second {secs} is outside the years 1 to 9999")
        if len(_STAMPS) > 10_000:
            _STAMPS.clear()
        tm = time.gmtime(secs)
        prefix = _STAMPS[secs] = (
            f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d} "
            f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}"
        )
    return prefix


def _sqlite_rows(values: Iterable[Sequence[Any]]) -> list[Any]:
    """:meth:`_EventsInsert.rows` on SQLite: :func:`_sqlite_stamp` and
    :func:`_params_text` inlined where rows share a second or have no
    parameters (a Python call per row and value less: this loop runs for every
    logged occurrence)."""
    encode = _params_text
    out: list[Any] = []
    append = out.append
    last: float | None = None  # the second of the previous row's stamp
    prefix = ""
    for scope, t_occ, event, ts, dts, sclass, skey, params, outcome, sp in values:
        secs = ts // 1
        us = round((ts - secs) * 1e6)
        if us >= 1_000_000:
            secs += 1
            us -= 1_000_000
        if secs != last:
            prefix = _stamp_prefix(int(secs))
            last = secs
        at = f"{prefix}.{us:06d}"
        append(
            (
                scope,
                t_occ,
                event,
                at,
                at if dts == ts else _sqlite_stamp(dts),
                ts,
                dts,
                sclass,
                skey,
                encode(params, event) if params else "{}",
                outcome,
                sp,
                None,
            )
        )
    return out


class _EventsInsert:
    """The ``events`` insert for one dialect: :meth:`rows` turns
    :meth:`LogWriter.event_values` rows into driver parameters, making the
    datetimes and the parameters' JSON the way the columns' types would
    (directly as text on SQLite, naive UTC datetimes on MySQL/MariaDB, through
    the columns' own bind processors elsewhere)."""

    __slots__ = ("at", "names", "params", "sql", "sqlite_text")

    def __init__(self, table: sa.Table, dialect: sa.Dialect) -> None:
        compiled = table.insert().compile(dialect=dialect, column_keys=list(EVENT_COLUMNS))
        self.sql: str = compiled.string
        if compiled.positional:
            if tuple(compiled.positiontup or ()) != EVENT_COLUMNS:  # pragma: no cover
                raise LogWriteError(
                    f"cannot prepare the insert into {table.name} for {dialect.name}",
                    table=table.name,
                )
            self.names: tuple[str, ...] | None = None
        else:
            self.names = tuple(compiled.binds[c].key for c in EVENT_COLUMNS)
        name = dialect.name
        at_proc = table.c.at.type.dialect_impl(dialect).bind_processor(dialect)
        json_proc = table.c.params.type.dialect_impl(dialect).bind_processor(dialect)
        plain_json = getattr(dialect, "_json_serializer", None) is None
        fromts, utc = _fromtimestamp, UTC
        if name == "sqlite":
            self.at: Any = _sqlite_stamp
        elif name in ("mysql", "mariadb"):

            def naive(ts: float) -> Any:
                return fromts(ts, utc).replace(tzinfo=None)

            self.at = naive
        elif (
            name == "postgresql"
            and _DATETIME_TZ.dialect_impl(dialect).bind_processor(dialect) is None
        ):
            # UTCDateTime binds an aware UTC datetime as it is on PostgreSQL
            self.at = partial(fromts, tz=utc)
        else:

            def generic_at(ts: float) -> Any:
                value = fromts(ts, utc)
                return at_proc(value) if at_proc is not None else value

            self.at = generic_at
        if name in ("sqlite", "mysql", "mariadb") and plain_json:
            self.params: Any = _params_text
        elif name == "postgresql" and dialect.driver == "psycopg" and plain_json:
            # what LogJSON binds (psycopg's Jsonb of the tagged form), with the
            # text made by _params_text: JSONB keeps no formatting, and the
            # floats LogJSON tags on PostgreSQL are tagged by to_json already
            jsonb = dialect._psycopg_Jsonb  # type: ignore[attr-defined]

            def psycopg_params(params: Any, event: str) -> Any:
                return jsonb(_params_text(params, event), str)

            self.params = psycopg_params
        else:

            def generic_params(params: Any, event: str) -> Any:
                if not params:
                    value: Any = {}
                else:
                    value = encode_params(params, event=event)
                    text = _dumps(value)
                    if len(text) > _SURELY_FITS:
                        fitted = _fit(text, params, event)
                        if fitted is not text:
                            value = json.loads(fitted)
                return json_proc(value) if json_proc is not None else value

            self.params = generic_params
        #: SQLite with plain JSON: rows made by :func:`_sqlite_rows`
        self.sqlite_text = (
            self.names is None and self.at is _sqlite_stamp and self.params is _params_text
        )

    def rows(self, values: Iterable[Sequence[Any]]) -> list[Any]:
        if self.sqlite_text:
            return _sqlite_rows(values)
        stamp, encode, names = self.at, self.params, self.names
        seq = None
        out: list[Any] = []
        append = out.append
        for scope, t_occ, event, ts, dts, sclass, skey, params, outcome, sp in values:
            at = stamp(ts)
            row = (
                scope,
                t_occ,
                event,
                at,
                at if dts == ts else stamp(dts),
                ts,
                dts,
                sclass,
                skey,
                encode(params, event),
                outcome,
                sp,
                seq,
            )
            append(row if names is None else dict(zip(names, row, strict=True)))
        return out

    def stamp(self, rows: list[Any], seq: int) -> list[Any]:
        """Rows made by :meth:`rows` with their commit number (the last column)
        set (made before the number is taken, so a bad value raises before any
        SQL is sent)."""
        names = self.names
        if names is None:
            return [(*row[:-1], seq) for row in rows]
        key = names[-1]
        for row in rows:
            row[key] = seq
        return rows
