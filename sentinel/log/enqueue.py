"""Outbox entries enqueued many to a statement (the global detector's batches).

:class:`OutboxRows` makes the outbox row of a rule's detection as a tuple
``(rule, idempotency_key, scope, t_occ, payload)``, the payload already JSON
text: what :meth:`~sentinel.log.LogWriter.outbox_rows` makes of
:func:`~sentinel.log.outbox.entry_for`'s entry (without a parameter policy or a
signature), written directly: the constituents by orjson when their values
are plain (as the log's are, mostly), the rule's ``extra`` object once per
rule.

:func:`insert_pending` writes such rows as pending entries, due and created
now: through ``COPY`` on PostgreSQL with psycopg 3, elsewhere with multi-row
``INSERT ... VALUES (...), (...)`` statements bounded by the backend's number
of parameters (as SQLAlchemy's "insertmanyvalues" knows it) and by about a
megabyte of payload (PyMySQL's own bound for the statements its
``executemany`` makes). Measured against one statement per row (the
writer's ``executemany``): a multi-row statement took about half the client's
time on SQLite and MariaDB; on PostgreSQL it took psycopg as long as its
pipelined ``executemany``, and ``COPY`` a seventh of that
(``docs/performance.md``, "A service that keeps up").
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sentinel.errors import LogSchemaError, LogWriteError
from sentinel.log.encoding import _dumps
from sentinel.log.inserts import _plain_chars, _processor
from sentinel.log.outbox import RuleLike, entry_extra
from sentinel.log.records import detection_key, encode_occurrence, encode_params
from sentinel.log.schema import check_schema
from sentinel.log.tables import LogTables, OutboxStatus, _jsonb_exact
from sentinel.occurrence import CompositeOccurrence, params_of
from sentinel.params import to_json

__all__ = ["OutboxRows", "PendingRow", "insert_pending"]

#: ``(rule, idempotency_key, scope, t_occ, payload JSON text)``.
PendingRow = tuple[str, str, str, int, str]

_copysign = math.copysign
_fast_dumps = orjson.dumps
_FastError = orjson.JSONEncodeError
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
#: Payload text per statement, at most (a row larger than it goes alone).
STATEMENT_TEXT = 1_000_000
_COLUMNS = (
    "rule",
    "idempotency_key",
    "scope",
    "t_occ",
    "payload",
    "status",
    "attempts",
    "next_attempt_at",
    "created_at",
)
#: Parameters a row takes in a multi-row ``INSERT`` (status and attempts are
#: written in the statement).
_PER_ROW = 7


def _structure(occ: Any) -> dict[str, Any] | None:
    """:func:`~sentinel.log.records.encode_occurrence`'s structure for the
    primitive ``occ`` when orjson writes it as the log's JSON column would
    read the payload's text (``None`` otherwise: see :func:`occurrence_text`):
    parameters of plain values (texts without NUL; finite floats without a
    positive exponent, not ``-0.0``; 64-bit integers; booleans; ``None``) under
    names without NUL, times that are such floats, an integer ``t_occ``.
    Lone surrogates are left to orjson, which refuses them."""
    event, t_occ, ts, dts, source, _, scope, _ = occ
    params = params_of(occ)
    if not (
        type(ts) is float
        and type(dts) is float
        and -1e16 < ts < 1e16
        and -1e16 < dts < 1e16
        and (ts or _copysign(1.0, ts) > 0)
        and (dts or _copysign(1.0, dts) > 0)
        and type(t_occ) is int
        and _INT_MIN <= t_occ <= _INT_MAX
        and type(event) is str
        and type(scope) is str
        and type(params) is dict
    ):
        return None
    for k, v in params.items():
        if _plain_chars(v) < 0 or type(k) is not str or "\x00" in k:
            return None
    return {
        "event": event,
        "t_occ": t_occ,
        "ts": ts,
        "detected_ts": dts,
        "source": None if source is None else to_json(source),
        "params": params,
        "scope": scope,
    }


def occurrence_text(occ: Any, jsonb: bool) -> str:
    """The JSON text of :func:`~sentinel.log.records.encode_occurrence`'s
    structure for the primitive ``occ``, as the payload column's type writes
    it (``jsonb``, PostgreSQL: the floats JSONB would not keep tagged)."""
    data = encode_occurrence(occ)
    return json.dumps(_jsonb_exact(data) if jsonb else data, separators=(",", ":"))


class OutboxRows:
    """Outbox rows (:data:`PendingRow`) for rules' detections, for a database
    of ``dialect`` (a dialect's name); ``committed`` as for
    :func:`~sentinel.log.outbox.entry_for`. Not thread-safe."""

    def __init__(self, dialect: str, *, committed: bool = True) -> None:
        self.jsonb = dialect == "postgresql"
        self.committed = committed
        #: rule name -> (action, condition, event it was made for; the extra's
        #: text for a primitive detection, for a composite one)
        self._extra: dict[str, tuple[Any, Any, Any, str, str]] = {}

    def _extra_text(self, rule: RuleLike, composite: bool) -> str:
        known = self._extra.get(rule.name)
        if (
            known is None
            or known[0] is not rule.action
            or known[1] is not rule.condition
            or known[2] is not rule.event
        ):
            primitive, compound = (
                _dumps(
                    encode_params(
                        entry_extra(rule, composite=flag, committed=self.committed),
                        event="outbox " + rule.name,
                    )
                )
                for flag in (False, True)
            )
            known = (rule.action, rule.condition, rule.event, primitive, compound)
            self._extra[rule.name] = known
        return known[4] if composite else known[3]

    def row(self, rule: RuleLike, occurrence: Any) -> PendingRow:
        """The outbox row of ``rule``'s detection ``occurrence``."""
        name = rule.name
        extra = self._extra_text(rule, isinstance(occurrence, CompositeOccurrence))
        constituents = occurrence.constituents
        scope, t_occ = str(occurrence.scope), occurrence.t_occ
        return (
            name,
            detection_key(name, scope, t_occ, constituents),
            scope,
            t_occ,
            '{"constituents":' + self._constituents(constituents) + ',"extra":' + extra + "}",
        )

    def _constituents(self, constituents: Sequence[Any]) -> str:
        """The JSON text of the constituents' list: by orjson when every one
        is plain (:func:`_structure`), else one by one as the column's type
        would write them."""
        plain = []
        for c in constituents:
            data = _structure(c)
            if data is None:
                break
            plain.append(data)
        else:
            try:
                return _fast_dumps(plain).decode()
            except _FastError:  # a lone surrogate
                pass
        jsonb = self.jsonb
        return "[" + ",".join([occurrence_text(c, jsonb) for c in constituents]) + "]"


def insert_pending(
    conn: Connection, tables: LogTables, rows: Sequence[PendingRow], now: datetime
) -> int:
    """Insert ``rows`` into the outbox of ``tables`` as pending entries due
    ``now`` (a UTC datetime; also their creation time), in ``conn``'s
    transaction; return how many. Raises
    :class:`~sentinel.errors.LogWriteError` naming a duplicate idempotency key
    (or another failure), :class:`~sentinel.errors.LogSchemaError` when the
    outbox table is missing or outdated."""
    if not rows:
        return 0
    table = tables.outbox
    dialect = conn.dialect
    try:
        if dialect.name == "postgresql" and dialect.driver == "psycopg" and not dialect.is_async:
            _copy(conn, table, rows, _bound(table, dialect, now))
        elif dialect.paramstyle in ("qmark", "format", "pyformat"):
            _values(conn, table, rows, _bound(table, dialect, now))
        else:  # pragma: no cover - drivers sentinel is not tested with
            pending = OutboxStatus.PENDING.value
            values = [dict(zip(_COLUMNS, (*r, pending, 0, now, now), strict=True)) for r in rows]
            conn.execute(table.insert(), values)
    except sa.exc.DBAPIError as err:
        raise _failure(conn, tables, len(rows), err) from err
    return len(rows)


def _bound(table: sa.Table, dialect: sa.Dialect, now: datetime) -> Any:
    """``now`` as the driver takes it for the outbox's datetime columns."""
    convert = _processor(table.c.created_at, dialect)
    return now if convert is None else convert(now)


def _copy(conn: Connection, table: sa.Table, rows: Sequence[PendingRow], when: Any) -> None:
    """``COPY`` the rows in (PostgreSQL through psycopg 3) on ``conn``'s
    connection, in its transaction; a driver error is raised as SQLAlchemy
    raises it for a statement (the connection invalidated if it was lost)."""
    dialect = conn.dialect
    name = dialect.identifier_preparer.format_table(table)
    sql = f"COPY {name} ({', '.join(_COLUMNS)}) FROM STDIN"
    pending = OutboxStatus.PENDING.value
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    cursor = dbapi.cursor()
    try:
        with cursor.copy(sql) as copy:
            write = copy.write_row
            for r in rows:
                write((*r, pending, 0, when, when))
    except dialect.loaded_dbapi.Error as err:
        lost = dialect.is_disconnect(err, dbapi, cursor)
        if lost:
            conn.invalidate(err)
        raise sa.exc.DBAPIError.instance(
            sql, None, err, dialect.loaded_dbapi.Error, lost, dialect=dialect
        ) from err
    finally:
        cursor.close()


def _values(conn: Connection, table: sa.Table, rows: Sequence[PendingRow], when: Any) -> None:
    """Multi-row ``INSERT`` statements: as many rows each as the backend's
    parameters and :data:`STATEMENT_TEXT` allow."""
    dialect = conn.dialect
    mark = "?" if dialect.paramstyle == "qmark" else "%s"
    pending = OutboxStatus.PENDING.value
    group = f"({mark}, {mark}, {mark}, {mark}, {mark}, '{pending}', 0, {mark}, {mark})"
    head = (
        f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
        f"({', '.join(_COLUMNS)}) VALUES "
    )
    most = dialect.insertmanyvalues_page_size
    most = max(1, min(most, dialect.insertmanyvalues_max_parameters // _PER_ROW))
    start, total = 0, len(rows)
    while start < total:
        end, size = start + 1, len(rows[start][4])
        while end < total and end - start < most:
            size += len(rows[end][4])
            if size > STATEMENT_TEXT:
                break
            end += 1
        params: list[Any] = []
        for r in rows[start:end]:
            params.extend(r)
            params.append(when)
            params.append(when)
        conn.exec_driver_sql(head + ", ".join([group] * (end - start)), tuple(params))
        start = end


def _failure(conn: Connection, tables: LogTables, n: int, err: sa.exc.DBAPIError) -> Exception:
    """What :func:`insert_pending` raises for ``err``."""
    table = tables.qualified(tables.outbox.name)
    orig = getattr(err, "orig", None) or err
    first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    if isinstance(err, sa.exc.IntegrityError):
        text = first.lower()
        what = (
            "an outbox entry with the same idempotency key exists"
            if "unique" in text or "duplicate" in text
            else "a constraint was violated"
        )
        return LogWriteError(
            f"writing {n} row(s) to {table} failed: {what} ({first})", table=tables.outbox.name
        )
    try:  # a missing or outdated table: say what to run (on another connection:
        # this one may be in an aborted transaction)
        with conn.engine.connect() as other:
            check_schema(other, tables)
    except LogSchemaError as schema_err:
        return schema_err
    except Exception:  # the diagnosis is best effort
        pass
    return LogWriteError(f"writing {n} row(s) to {table} failed: {first}", table=tables.outbox.name)
