"""The log's ``INSERT`` statements, compiled once per dialect.

An :class:`_InsertPlan` is one table's ``INSERT`` compiled for one dialect with
the bind processors of its columns; :class:`_BatchInsert` is the
``event_batches`` table's, which makes a transaction's row (its occurrences'
JSON text in one pass) and the datetimes the way the columns' types would. Both turn rows into the
driver's parameters for one ``executemany`` call
(:class:`~sentinel.log.writer.LogWriter` sends them).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import partial
from itertools import pairwise
from operator import methodcaller
from types import MappingProxyType
from typing import Any

import orjson
import sqlalchemy as sa

from sentinel.errors import LogWriteError
from sentinel.log.encoding import _esc, _params_text
from sentinel.log.tables import LogJSON, UTCDateTime
from sentinel.params import MAX_PARAMS

_fromtimestamp = datetime.fromtimestamp
_DATETIME_TZ = sa.DateTime(timezone=True)


def _processor(column: sa.Column[Any], dialect: sa.Dialect) -> Any:
    """The bind processor of ``column`` on ``dialect`` (``None``: values go to the
    driver as they are), with shortcuts for the log's own types where they
    provably give the same result: a UTC datetime as the text or naive datetime
    SQLite and MySQL store, JSON as :func:`json.dumps` writes it
    (:func:`_json_dumps`) when the engine has no serializer of its own, floats
    as they are."""
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
            if as_text:  # the naive datetime's text: without "+00:00"
                return value.isoformat(" ", "microseconds")[:-6]
            return value.replace(tzinfo=None)

        return utc
    if isinstance(ctype, LogJSON) and name in ("sqlite", "mysql", "mariadb"):
        if getattr(dialect, "_json_serializer", None) is None:
            return _json_dumps
        return generic
    if isinstance(ctype, sa.Double):

        def as_float(value: Any, _generic: Any = generic) -> Any:
            return value if type(value) is float else _generic(value)

        return as_float
    return generic


_esc_ascii = json.encoder.encode_basestring_ascii


def _json_dumps(value: Any) -> str:
    """:func:`json.dumps` of ``value`` (a ``LogJSON`` column's value), the same
    text; a rule firing's constituents (a list of ``[scope, t_occ]`` pairs: a
    string, usually one for all, and an integer) written here, in about 60% of
    the instructions ``json.dumps`` takes."""
    if type(value) is not list:
        return json.dumps(value)
    esc = _esc_ascii
    parts = []
    last: Any = _NONE
    text = ""
    for pair in value:
        if type(pair) is not list or len(pair) != 2:
            return json.dumps(value)
        s, t = pair
        if type(t) is not int:
            return json.dumps(value)
        if s is not last:
            if type(s) is not str:
                return json.dumps(value)
            last, text = s, esc(s)
        parts.append(f"[{text}, {t!r}]")
    return "[" + ", ".join(parts) + "]"


_esc_ascii = json.encoder.encode_basestring_ascii


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


#: A row of ``event_batches`` holds at most this many occurrences, and its
#: ``occurrences`` text at most about this many characters (a longer batch is
#: split into rows of its own: one row stays well within every driver's packet
#: and every server's value limits, and a reader's chunk stays bounded).
MAX_ROW_OCCURRENCES = 5_000
MAX_ROW_TEXT = 4_000_000
#: The POSIX seconds a log time may take (the years 1 to 9999, as a datetime).
_FIRST_TS = float(_FIRST_SECOND)
_END_TS = float(_LAST_SECOND + 1)
#: ``event_batches`` columns the writer fills, in the order of its rows.
BATCH_COLUMNS: tuple[str, ...] = (
    "scope",
    "t_first",
    "t_last",
    "n",
    "at_min",
    "at_max",
    "outcome",
    "savepoint",
    "commit_seq",
    "written_at",
    "process",
    "occurrences",
)
#: JSON texts of names (event and class names recur in every transaction).
_NAMES: dict[str, str] = {}


def _name_text(name: str) -> str:
    text = _NAMES.get(name)
    if text is None:
        if len(_NAMES) > 50_000:
            _NAMES.clear()
        text = _NAMES[name] = _esc(name)
    return text


class BadValue(ValueError):
    """A value the log cannot hold; ``index`` is the row of the writer's
    values it came from, ``what`` which value: ``"occurrence time"``,
    ``"detection time"``, ``"t_occ"``, ``"event"``, or ``"repeated"`` (index
    -1) for an occurrence id given twice."""

    def __init__(self, index: int, what: str, scope: Any = None, t_occ: Any = None) -> None:
        super().__init__(what)
        self.index = index
        self.what = what
        #: for ``what == "repeated"``: the occurrence id given twice
        self.scope = scope
        self.t_occ = t_occ


def batch_elements(
    values: Sequence[Sequence[Any]],
) -> dict[tuple[Any, Any, Any], list[tuple[int, float, str]]]:
    """The writer's rows (:meth:`~sentinel.log.writer.LogWriter.event_values`
    tuples) as the elements of ``event_batches.occurrences``, grouped by
    ``(scope, outcome, savepoint)`` in the order they came: each element is
    ``(t_occ, ts, json_text)``. One pass; raises :class:`BadValue` for a time
    outside the years 1 to 9999 (or not a number) and a ``t_occ`` that is not
    an integer, and :class:`~sentinel.params.UnloggableParameter` for
    parameters the log cannot store."""
    groups: dict[tuple[Any, Any, Any], list[tuple[int, float, str]]] = {}
    encode = _params_text
    names = _NAMES
    esc = _esc
    lo, hi = _FIRST_TS, _END_TS
    last_scope: Any = _NONE
    last_outcome: Any = _NONE
    last_sp: Any = _NONE
    elems: list[tuple[int, float, str]] = []
    append = elems.append
    plain = _plain
    dumps = _orjson_dumps
    copy = _copy
    try:
        for scope, t_occ, event, ts, dts, sclass, skey, params, outcome, sp in values:
            if not (lo <= ts < hi) or type(t_occ) is not int or type(event) is not str:
                raise _Refused
            if dts == ts:
                dtext = "null"
            elif lo <= dts < hi:
                dtext = _float_text(float(dts))
            else:
                raise _Refused
            if scope is not last_scope or outcome is not last_outcome or sp is not last_sp:
                elems = groups.setdefault((scope, outcome, sp), [])
                append = elems.append
                last_scope, last_outcome, last_sp = scope, outcome, sp
            if not params or plain(params):
                # orjson writes what the text below would, as one call
                item = [
                    t_occ,
                    event,
                    ts,
                    None if dtext == "null" else dts,
                    sclass,
                    skey,
                    params if params else _EMPTY,
                ]
                try:
                    append((t_occ, ts, dumps(item, default=copy).decode()))
                    continue
                except TypeError:
                    try:  # a read-only mapping whose copy orjson does not take
                        append((t_occ, ts, dumps(item, default=_as_dict).decode()))
                        continue
                    except TypeError:  # a lone surrogate in a name, a key not a str
                        pass
            if sclass is None:
                src = "null,null"
            else:
                src = f"{names.get(sclass) or _name_text(sclass)},{esc(skey)}"
            append(
                (
                    t_occ,
                    ts,
                    f"[{t_occ},{names.get(event) or _name_text(event)},"
                    f"{ts if type(ts) is float else float(ts)!r},{dtext},{src},"
                    f"{encode(params, event) if params else '{}'}]",
                )
            )
    except (_Refused, TypeError):
        _which(values)
        raise
    return groups


class _Refused(Exception):
    pass


_orjson_dumps = orjson.dumps
_EMPTY: dict[str, Any] = {}
#: A parameters object holding only strings of at most this many characters
#: in all fits in :data:`~sentinel.params.MAX_PARAMS` whatever else it holds
#: (orjson writes a character in at most four bytes; names and numbers are short).
_PLAIN_CHARS = MAX_PARAMS // 8
_copysign = math.copysign
_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1


def _plain(params: Any) -> bool:
    """Whether orjson writes ``params`` exactly as the log's JSON of them: names
    that are strings without NUL, and values that are only strings without NUL
    (JSONB refuses ``\\u0000``: such a string is tagged), finite floats under
    1e16 in magnitude and not ``-0.0`` (JSONB's numeric would not keep them:
    tagged), 64-bit integers, booleans, ``None``, and
    read-only mappings (database events' column values) of such under names
    that do not start with ``$``; at most :data:`_PLAIN_CHARS` characters of
    strings. Anything else takes :func:`~sentinel.log.encoding._params_text`.

    The values' rule is :func:`_plain_chars`'s, written out here for each
    value (a call per value cost more than the test: one is made per logged
    occurrence)."""
    chars = 0
    for k, v in params.items():
        if type(k) is not str or "\x00" in k:
            return False
        t = type(v)
        if t is float:
            if not -1e16 < v < 1e16 or (v == 0.0 and _copysign(1.0, v) < 0):
                return False
        elif t is str:
            if "\x00" in v:
                return False
            chars += len(v)
        elif t is int:
            if not _INT_MIN <= v <= _INT_MAX:
                return False
        elif t is MappingProxyType:
            for k2, v2 in v.items():
                if type(k2) is not str or (k2 and k2[0] == "$") or "\x00" in k2:
                    return False
                t2 = type(v2)
                if t2 is float:
                    if not -1e16 < v2 < 1e16 or (v2 == 0.0 and _copysign(1.0, v2) < 0):
                        return False
                elif t2 is str:
                    if "\x00" in v2:
                        return False
                    chars += len(v2)
                elif t2 is int:
                    if not _INT_MIN <= v2 <= _INT_MAX:
                        return False
                elif v2 is not None and t2 is not bool:
                    return False
        elif v is not None and t is not bool:
            return False
    return chars <= _PLAIN_CHARS


def _plain_chars(v: Any) -> int:
    """The characters of ``v`` if it is a plain value :func:`_plain` lets
    through (0 for a number, a boolean or ``None``), else -1."""
    t = type(v)
    if t is str:
        return -1 if "\x00" in v else len(v)
    if t is float:
        return 0 if -1e16 < v < 1e16 and (v != 0.0 or _copysign(1.0, v) > 0) else -1
    if t is int:
        return 0 if _INT_MIN <= v <= _INT_MAX else -1
    return 0 if v is None or t is bool else -1


def _as_dict(value: Any) -> dict[str, Any]:
    """orjson's ``default``: a read-only mapping :func:`_plain` let through."""
    if type(value) is MappingProxyType:
        return dict(value)
    raise TypeError(type(value).__name__)


#: orjson's ``default`` tried first: a read-only mapping :func:`_plain` let
#: through, as the copy of the dict it shows (the read-only mappings of
#: parameters are made over dicts: database events' column values,
#: :func:`sentinel.params.normalize`'s mappings), made in C where
#: :func:`_as_dict` is a Python call; anything else (that :func:`_plain` let
#: through, so a time: ``Decimal``, ``Fraction``) has no ``copy`` and raises,
#: and orjson raises ``TypeError``: the writer then tries :func:`_as_dict`.
_copy = methodcaller("copy")


_NONE = object()
_float_text = float.__repr__


def _which(values: Sequence[Sequence[Any]]) -> None:
    """Raise :class:`BadValue` for the first of ``values`` whose times or
    ``t_occ`` the log cannot hold."""
    lo, hi = _FIRST_TS, _END_TS
    for i, row in enumerate(values):
        t_occ, ts, dts = row[1], row[3], row[4]
        for what, value in (("occurrence time", ts), ("detection time", dts)):
            try:
                ok = lo <= value < hi
            except TypeError:
                ok = False
            if not ok:
                raise BadValue(i, what)
        if type(t_occ) is not int:
            raise BadValue(i, "t_occ")
        if type(row[2]) is not str:
            raise BadValue(i, "event")


class _BatchInsert:
    """The ``event_batches`` insert for one dialect: :meth:`rows` turns
    :meth:`LogWriter.event_values` rows into driver parameters, one row per
    ``(scope, outcome, savepoint)`` (split at :data:`MAX_ROW_OCCURRENCES` and
    :data:`MAX_ROW_TEXT`), with the occurrences' JSON text made in one pass and
    sent as the column's text (psycopg's ``Jsonb`` of it on PostgreSQL), the
    datetimes made the way the columns' types would."""

    __slots__ = ("at", "json", "names", "sql")

    def __init__(self, table: sa.Table, dialect: sa.Dialect) -> None:
        compiled = table.insert().compile(dialect=dialect, column_keys=list(BATCH_COLUMNS))
        self.sql: str = compiled.string
        if compiled.positional:
            if tuple(compiled.positiontup or ()) != BATCH_COLUMNS:  # pragma: no cover
                raise LogWriteError(
                    f"cannot prepare the insert into {table.name} for {dialect.name}",
                    table=table.name,
                )
            self.names: tuple[str, ...] | None = None
        else:
            self.names = tuple(compiled.binds[c].key for c in BATCH_COLUMNS)
        name = dialect.name
        at_proc = table.c.at_min.type.dialect_impl(dialect).bind_processor(dialect)
        json_proc = table.c.occurrences.type.dialect_impl(dialect).bind_processor(dialect)
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
            self.at = partial(fromts, tz=utc)
        else:

            def generic_at(ts: float) -> Any:
                value = fromts(ts, utc)
                return at_proc(value) if at_proc is not None else value

            self.at = generic_at
        if name in ("sqlite", "mysql", "mariadb") and plain_json:
            self.json: Any = None  # the text as it is
        elif name == "postgresql" and dialect.driver == "psycopg" and plain_json:
            jsonb = dialect._psycopg_Jsonb  # type: ignore[attr-defined]

            def psycopg_json(text: str) -> Any:
                return jsonb(text, str)

            self.json = psycopg_json
        else:

            def generic_json(text: str) -> Any:
                value = json.loads(text)
                return json_proc(value) if json_proc is not None else value

            self.json = generic_json

    def rows(
        self,
        groups: dict[tuple[Any, Any, Any], list[tuple[int, float, str]]],
        written: float,
        process: str | None,
    ) -> list[Any]:
        """Driver parameters for ``groups`` (made by :func:`batch_elements`),
        written at ``written`` (POSIX seconds) by ``process``; the commit
        number (``commit_seq``) is ``None`` until :meth:`stamp`. Raises
        :class:`BadValue` (``index`` -1) for an occurrence id that repeats."""
        stamp, to_json, names = self.at, self.json, self.names
        when = stamp(written)
        out: list[Any] = []
        append = out.append
        for (scope, outcome, sp), elems in groups.items():
            prev = None
            for t, _ts, _text in elems:
                if prev is not None and t <= prev:
                    elems = sorted(elems, key=_first)
                    for a, b in pairwise(elems):
                        if a[0] == b[0]:
                            raise BadValue(-1, "repeated", scope, a[0])
                    break
                prev = t
            start = 0
            total = len(elems)
            while start < total:
                end = min(total, start + MAX_ROW_OCCURRENCES)
                part = elems[start:end]
                text = "[" + ",".join([e[2] for e in part]) + "]"
                while len(text) > MAX_ROW_TEXT and len(part) > 1:
                    end = start + len(part) // 2
                    part = elems[start:end]
                    text = "[" + ",".join([e[2] for e in part]) + "]"
                times = [e[1] for e in part]
                row = (
                    scope,
                    part[0][0],
                    part[-1][0],
                    len(part),
                    stamp(min(times)),
                    stamp(max(times)),
                    outcome,
                    sp,
                    None,
                    when,
                    process,
                    text if to_json is None else to_json(text),
                )
                append(row if names is None else dict(zip(names, row, strict=True)))
                start = end
        return out

    def stamp(self, rows: list[Any], seq: int) -> list[Any]:
        """Rows made by :meth:`rows` with their commit number set."""
        names = self.names
        if names is None:
            return [(*row[:8], seq, *row[9:]) for row in rows]
        key = names[8]
        for row in rows:
            row[key] = seq
        return rows


def _first(e: tuple[int, float, str]) -> int:
    return e[0]
