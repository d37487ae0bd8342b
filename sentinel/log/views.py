"""The per-occurrence view of the event log, ``<prefix>occurrences``.

The log holds one row per transaction (``event_batches``, its occurrences in
one JSON column, see :mod:`sentinel.log.tables`); the view turns it back into
one row per occurrence with the columns, types and values the table had when
it held one row per occurrence (schema revision 0005): SQLite with
``json_each``, PostgreSQL with ``jsonb_array_elements``, MariaDB/MySQL with
``JSON_TABLE``. Its columns:

``id``
    the ``event_batches`` row holding the occurrence (not the 0005 row id).
``scope``, ``outcome``, ``savepoint``, ``commit_seq``
    the batch row's.
``t_occ``, ``event``, ``ts``, ``source_class``, ``source_key``, ``params``
    the occurrence's element (``params``: text on SQLite, ``JSON`` on
    MariaDB/MySQL, ``jsonb`` on PostgreSQL, as the 0005 column). On
    MariaDB/MySQL ``source_key`` is ``LONGTEXT``: a ``TEXT`` column of
    ``JSON_TABLE`` cuts its value to 65,535 characters without a word, and a
    key is as long as its values (strings of up to
    :data:`~sentinel.params.MAX_STRING` characters, escaped); ``event`` and
    ``source_class`` are ``VARCHAR(255)``, the most the writer takes.
``detected_ts``
    the element's, or ``ts`` when the element holds ``null`` (equal times).
``at``, ``detected_at``
    ``ts`` and ``detected_ts`` as the 0005 writer stored them: the datetime
    ``datetime.fromtimestamp(ts, UTC)`` makes, whose microseconds are the
    fraction of the second times 10**6 rounded half to even (not what
    PostgreSQL's ``to_timestamp`` or MariaDB's ``FROM_UNIXTIME`` round to, and
    the latter depends on the session's time zone): text
    ``YYYY-MM-DD HH:MM:SS.ffffff`` on SQLite (the fraction taken from the
    floor of ``ts``, as the writer's text stamps were), ``timestamptz`` on
    PostgreSQL, ``DATETIME(6)`` holding UTC on MariaDB/MySQL.
``expired_at``
    the occurrence's mark in ``<prefix>expired``, else NULL.

The view is a stack of derived tables, each adding the next step of the
timestamp arithmetic (SQLite builds may lack ``floor()``: the floor is a
``CAST`` and a comparison there). Every database flattens it into one scan of
``event_batches``, so a filter on ``scope`` or ``id`` reaches the table's
indexes; a filter on ``at`` cannot, filter ``event_batches.at_max`` /
``at_min`` too (``docs/eventlog.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentinel.log.tables import LogTables

__all__ = ["create_view_sql", "drop_view_sql"]

#: The view's columns, in order: the 0005 ``events`` table's.
VIEW_COLUMNS: tuple[str, ...] = (
    "id",
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
    "expired_at",
    "savepoint",
    "commit_seq",
)
#: Columns carried through every layer of the view (the times and the
#: archive mark are computed in the last).
_CARRIED = tuple(c for c in VIEW_COLUMNS if c not in ("at", "detected_at", "expired_at"))


def _mysql(dialect: str) -> bool:
    return dialect in ("mysql", "mariadb")


def _q(dialect: str, name: str, schema: str | None) -> str:
    quote = "`" if _mysql(dialect) else '"'
    return f"{quote}{schema}{quote}.{quote}{name}{quote}" if schema else f"{quote}{name}{quote}"


def _layers(base: str, layers: list[list[tuple[str, str]]], final: dict[str, str]) -> str:
    """``SELECT`` of ``final`` (column -> expression) over ``base`` (a ``FROM``
    clause giving :data:`_CARRIED`), through derived tables each adding the
    named expressions of one layer."""
    names = list(_CARRIED)
    sql = base
    for i, layer in enumerate(layers):
        cols = ", ".join([*names, *(f"{expr} AS {name}" for name, expr in layer)])
        sql = f"SELECT {cols} FROM ({sql}) AS l{i}"
        names += [name for name, _ in layer]
    cols = ", ".join(f"{final.get(c, c)} AS {c}" for c in VIEW_COLUMNS if c != "expired_at")
    return f"SELECT {cols} FROM ({sql}) AS l{len(layers)}"


def _sqlite(b: str, x: str) -> str:
    def e(i: int) -> str:
        return f"json_extract(j.value, '$[{i}]')"

    base = (
        f"SELECT b.id AS id, b.scope AS scope, {e(0)} AS t_occ, {e(1)} AS event, "
        f"CAST({e(2)} AS REAL) AS ts, CAST(coalesce({e(3)}, {e(2)}) AS REAL) AS detected_ts, "
        f"{e(4)} AS source_class, {e(5)} AS source_key, {e(6)} AS params, "
        f"b.outcome AS outcome, b.savepoint AS savepoint, b.commit_seq AS commit_seq "
        f"FROM {b} AS b JOIN json_each(b.occurrences) AS j"
    )
    layers: list[list[tuple[str, str]]] = [[], [], []]
    final = {}
    for p, col in (("a", "ts"), ("d", "detected_ts")):
        # floor(ts) without floor(); the fraction times 10**6 (exact as in
        # Python: ts - floor(ts) is exact); rounded half to even (v - trunc(v)
        # is exact); then the carry into the next second
        layers[0].append((f"{p}_s", f"CAST({col} AS INTEGER) - ({col} < CAST({col} AS INTEGER))"))
        layers[1].append((f"{p}_v", f"({col} - {p}_s) * 1000000.0"))
        t = f"CAST({p}_v AS INTEGER)"
        layers[2].append(
            (f"{p}_r", f"{t} + ({p}_v - {t} > 0.5) + ({p}_v - {t} = 0.5 AND {t} % 2 = 1)")
        )
        carry = f"({p}_r >= 1000000)"
        final["at" if p == "a" else "detected_at"] = (
            f"strftime('%Y-%m-%d %H:%M:%S', {p}_s + {carry}, 'unixepoch') "
            f"|| '.' || substr('00000' || ({p}_r - 1000000 * {carry}), -6)"
        )
    body = _layers(base, layers, final)
    return _with_expired(body, x)


def _with_expired(body: str, x: str) -> str:
    cols = ", ".join("x.expired_at" if c == "expired_at" else f"o.{c}" for c in VIEW_COLUMNS)
    return (
        f"SELECT {cols} FROM ({body}) AS o "
        f"LEFT JOIN {x} AS x ON x.scope = o.scope AND x.t_occ = o.t_occ"
    )


def _round_layers(
    trunc: str, floor: str, bigint: str, stamp: str
) -> tuple[list[list[tuple[str, str]]], dict[str, str]]:
    """PostgreSQL and MariaDB: the layers of ``datetime.fromtimestamp``'s
    arithmetic (``modf``, times 10**6, half to even, carry either way), with
    ``stamp(seconds, microseconds)`` making the datetime."""
    layers: list[list[tuple[str, str]]] = [[], []]
    final = {}
    for p, col in (("a", "ts"), ("d", "detected_ts")):
        layers[0].append((f"{p}_i", trunc.format(col)))
        layers[0].append((f"{p}_v", f"({col} - {trunc.format(col)}) * 1000000"))
        f = floor.format(f"{p}_v")
        odd = f"MOD({bigint.format(f)}, 2) <> 0"
        layers[1].append(
            (
                f"{p}_r",
                f"{bigint.format(f)} + CASE WHEN {p}_v - {f} > 0.5 "
                f"OR ({p}_v - {f} = 0.5 AND {odd}) THEN 1 ELSE 0 END",
            )
        )
        carry = f"(CASE WHEN {p}_r >= 1000000 THEN 1 WHEN {p}_r < 0 THEN -1 ELSE 0 END)"
        final["at" if p == "a" else "detected_at"] = stamp.format(
            secs=f"{bigint.format(p + '_i')} + {carry}", us=f"{p}_r - 1000000 * {carry}"
        )
    return layers, final


def _postgresql(b: str, x: str) -> str:
    def num(i: int) -> str:
        # a float jsonb cannot hold exactly is tagged {"$float": "..."} (LogJSON)
        return f"(e.value -> {i} ->> '$float'), (e.value ->> {i})"

    base = (
        "SELECT b.id AS id, b.scope AS scope, CAST(e.value ->> 0 AS bigint) AS t_occ, "
        "CAST(e.value ->> 1 AS varchar(255)) AS event, "
        f"CAST(coalesce({num(2)}) AS double precision) AS ts, "
        f"CAST(coalesce({num(3)}, {num(2)}) AS double precision) AS detected_ts, "
        "CAST(e.value ->> 4 AS varchar(255)) AS source_class, "
        "e.value ->> 5 AS source_key, e.value -> 6 AS params, "
        "b.outcome AS outcome, b.savepoint AS savepoint, b.commit_seq AS commit_seq "
        f"FROM {b} AS b CROSS JOIN LATERAL jsonb_array_elements(b.occurrences) AS e(value)"
    )
    layers, final = _round_layers(
        "trunc({})",
        "floor({})",
        "CAST({} AS bigint)",
        "to_timestamp({secs}) + ({us}) * interval '1 microsecond'",
    )
    return _with_expired(_layers(base, layers, final), x)


def _mariadb(b: str, x: str) -> str:
    base = (
        "SELECT b.id AS id, b.scope AS scope, e.t_occ AS t_occ, e.event AS event, "
        "e.ts AS ts, coalesce(e.detected_ts, e.ts) AS detected_ts, "
        "e.source_class AS source_class, e.source_key AS source_key, e.params AS params, "
        "b.outcome AS outcome, b.savepoint AS savepoint, b.commit_seq AS commit_seq "
        f"FROM {b} AS b CROSS JOIN JSON_TABLE(b.occurrences, '$[*]' COLUMNS ("
        "t_occ BIGINT PATH '$[0]', event VARCHAR(255) PATH '$[1]', "
        "ts DOUBLE PATH '$[2]', detected_ts DOUBLE PATH '$[3]', "
        "source_class VARCHAR(255) PATH '$[4]', source_key LONGTEXT PATH '$[5]', "
        "params JSON PATH '$[6]')) AS e"
    )
    layers, final = _round_layers(
        "TRUNCATE({}, 0)",
        "FLOOR({})",
        "CAST({} AS SIGNED)",
        # DATETIME arithmetic: no session time zone applies
        "TIMESTAMPADD(MICROSECOND, {us}, TIMESTAMPADD(SECOND, {secs}, "
        "CAST('1970-01-01 00:00:00' AS DATETIME(6))))",
    )
    return _with_expired(_layers(base, layers, final), x)


def create_view_sql(dialect: str, tables: LogTables) -> str:
    """``CREATE VIEW`` of the per-occurrence view of ``tables`` on ``dialect``
    (``sqlite``, ``postgresql``, ``mysql`` or ``mariadb``).

    On SQLite the view's body names its tables without their schema (an
    attached database's alias may change; a view resolves unqualified names in
    its own database first)."""
    view = _q(dialect, tables.view_name, tables.schema)
    schema = None if dialect == "sqlite" else tables.schema
    b = _q(dialect, tables.batches.name, schema)
    x = _q(dialect, tables.expired.name, schema)
    if dialect == "sqlite":
        return f"CREATE VIEW {view} AS {_sqlite(b, x)}"
    if dialect == "postgresql":
        return f"CREATE VIEW {view} AS {_postgresql(b, x)}"
    if _mysql(dialect):
        return f"CREATE SQL SECURITY INVOKER VIEW {view} AS {_mariadb(b, x)}"
    raise NotImplementedError(f"the occurrences view has no SQL for {dialect}")


def drop_view_sql(dialect: str, tables: LogTables) -> str:
    """``DROP VIEW`` of the per-occurrence view on ``dialect``."""
    return f"DROP VIEW IF EXISTS {_q(dialect, tables.view_name, tables.schema)}"
