"""The per-occurrence view of the event log, ``<prefix>occurrences``.

The log holds one row per transaction (``event_batches``, its occurrences in
one JSON column, see :mod:`sentinel.log.tables`); the view turns it back into
one row per occurrence with the columns the table had when it held one row per
occurrence (schema revision 0005): SQLite with ``json_each``, PostgreSQL with
``jsonb_array_elements``, MariaDB/MySQL with ``JSON_TABLE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentinel.log.tables import LogTables

__all__ = ["create_view_sql", "drop_view_sql"]


def _q(dialect: str, name: str, schema: str | None) -> str:
    quote = "`" if dialect in ("mysql", "mariadb") else '"'
    return f"{quote}{schema}{quote}.{quote}{name}{quote}" if schema else f"{quote}{name}{quote}"


def create_view_sql(dialect: str, tables: LogTables) -> str:
    """``CREATE VIEW`` of the per-occurrence view on ``dialect``."""
    view = _q(dialect, tables.view_name, tables.schema)
    b = _q(dialect, tables.batches.name, tables.schema)
    x = _q(dialect, tables.expired.name, tables.schema)
    if dialect == "sqlite":
        e = "json_extract(j.value, '$[{}]')"
        return (
            f"CREATE VIEW {view} AS SELECT b.id AS id, b.scope AS scope, "
            f"{e.format(0)} AS t_occ, {e.format(1)} AS event, "
            f"datetime({e.format(2)}, 'unixepoch') AS at, "
            f"datetime(coalesce({e.format(3)}, {e.format(2)}), 'unixepoch') AS detected_at, "
            f"{e.format(2)} AS ts, coalesce({e.format(3)}, {e.format(2)}) AS detected_ts, "
            f"{e.format(4)} AS source_class, {e.format(5)} AS source_key, "
            f"{e.format(6)} AS params, b.outcome AS outcome, x.expired_at AS expired_at, "
            f"b.savepoint AS savepoint, b.commit_seq AS commit_seq "
            f"FROM {b} AS b JOIN json_each(b.occurrences) AS j "
            f"LEFT JOIN {x} AS x ON x.scope = b.scope AND x.t_occ = {e.format(0)}"
        )
    if dialect == "postgresql":
        ts = "(j.e->>2)::float8"
        dts = "coalesce((j.e->>3)::float8, (j.e->>2)::float8)"
        return (
            f"CREATE VIEW {view} AS SELECT b.id AS id, b.scope AS scope, "
            f"(j.e->>0)::bigint AS t_occ, j.e->>1 AS event, "
            f"to_timestamp({ts}) AS at, to_timestamp({dts}) AS detected_at, "
            f"{ts} AS ts, {dts} AS detected_ts, j.e->>4 AS source_class, "
            f"j.e->>5 AS source_key, j.e->6 AS params, b.outcome AS outcome, "
            f"x.expired_at AS expired_at, b.savepoint AS savepoint, b.commit_seq AS commit_seq "
            f"FROM {b} AS b CROSS JOIN LATERAL jsonb_array_elements(b.occurrences) AS j(e) "
            f"LEFT JOIN {x} AS x ON x.scope = b.scope AND x.t_occ = (j.e->>0)::bigint"
        )
    if dialect in ("mysql", "mariadb"):
        epoch = "TIMESTAMP'1970-01-01 00:00:00'"
        return (
            f"CREATE VIEW {view} AS SELECT b.id AS id, b.scope AS scope, j.t_occ AS t_occ, "
            f"j.event AS event, "
            f"TIMESTAMPADD(MICROSECOND, ROUND(j.ts * 1000000), {epoch}) AS at, "
            f"TIMESTAMPADD(MICROSECOND, ROUND(coalesce(j.dts, j.ts) * 1000000), {epoch}) "
            f"AS detected_at, j.ts AS ts, coalesce(j.dts, j.ts) AS detected_ts, "
            f"j.source_class AS source_class, j.source_key AS source_key, "
            f"JSON_EXTRACT(j.e, '$[6]') AS params, b.outcome AS outcome, "
            f"x.expired_at AS expired_at, b.savepoint AS savepoint, b.commit_seq AS commit_seq "
            f"FROM {b} AS b CROSS JOIN JSON_TABLE(b.occurrences, '$[*]' COLUMNS ("
            f"t_occ BIGINT PATH '$[0]', event VARCHAR(255) PATH '$[1]', "
            f"ts DOUBLE PATH '$[2]', dts DOUBLE PATH '$[3]', "
            f"source_class VARCHAR(255) PATH '$[4]', source_key TEXT PATH '$[5]', "
            f"e JSON PATH '$')) AS j "
            f"LEFT JOIN {x} AS x ON x.scope = b.scope AND x.t_occ = j.t_occ"
        )
    raise NotImplementedError(dialect)


def drop_view_sql(dialect: str, tables: LogTables) -> str:
    """``DROP VIEW`` of the per-occurrence view on ``dialect``."""
    return f"DROP VIEW IF EXISTS {_q(dialect, tables.view_name, tables.schema)}"
