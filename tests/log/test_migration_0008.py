"""Migration 0008 (issue 34): ``rule_firings.partition_key`` and its indexes
come and go, with a schema and a prefix, on SQLite, PostgreSQL and MariaDB; the
firings already logged stay, with a NULL key, and stay again after a
downgrade; the writer stores keys once upgraded."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from sentinel.log import SCHEMA_VERSION, Firing, LogReader, LogWriter, migrate

AT = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
INDEXES = {"rule_key": ["rule", "partition_key", "id"], "key": ["partition_key", "id"]}


def _firings(schema: str | None, prefix: str) -> sa.TableClause:
    """``rule_firings`` as revision 0007 has it (the columns a row needs)."""
    return sa.table(
        f"{prefix}rule_firings",
        *(sa.column(c) for c in ("rule", "scope", "t_occ", "constituents", "coupling", "status")),
        # typed: sqlite3's default datetime adapter is deprecated (Python 3.12)
        sa.column("fired_at", sa.DateTime(timezone=True)),
        schema=schema,
    )


def _columns(engine: sa.Engine, schema: str | None, prefix: str) -> list[str]:
    return [c["name"] for c in sa.inspect(engine).get_columns(f"{prefix}rule_firings", schema)]


def _indexes(engine: sa.Engine, schema: str | None, prefix: str) -> dict[str, list[str]]:
    table = f"{prefix}rule_firings"
    return {
        i["name"].removeprefix(f"ix_{table}_"): i["column_names"]
        for i in sa.inspect(engine).get_indexes(table, schema=schema)
    }


def _round_trip(engine: sa.Engine, schema: str | None, prefix: str) -> None:
    migrate.upgrade(engine, "0007", schema=schema, prefix=prefix)
    old = _firings(schema, prefix)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(old),
            [
                {
                    "rule": f"old-{i}",
                    "scope": f"tx-{i}",
                    "t_occ": i,
                    "constituents": f'[["tx-{i}", {i}]]',
                    "coupling": "immediate",
                    "status": "fired",
                    "fired_at": AT.replace(tzinfo=None)
                    if engine.dialect.name != "postgresql"
                    else AT,
                }
                for i in (1, 2)
            ],
        )
    assert "partition_key" not in _columns(engine, schema, prefix)

    # to the newest revision (the reader below expects it), through 0008
    migrate.upgrade(engine, schema=schema, prefix=prefix)
    assert migrate.current(engine, schema=schema, prefix=prefix) == SCHEMA_VERSION
    assert _columns(engine, schema, prefix)[-1] == "partition_key"
    got = _indexes(engine, schema, prefix)
    for name, columns in INDEXES.items():
        assert got[name] == columns
    assert got["fired_at"] == ["fired_at"]
    with engine.begin() as conn:
        LogWriter(schema=schema, prefix=prefix, check_schema=False).write_firings(
            conn,
            [
                Firing(
                    rule="new",
                    scope="tx-3",
                    t_occ=3,
                    constituents=(("tx-3", 3),),
                    coupling="immediate",
                    status="fired",
                    fired_at=AT,
                    partition=(("Paid", "order_id", 7),),
                )
            ],
        )
    with LogReader(engine, schema=schema, prefix=prefix) as reader:
        assert [(f.rule, f.key, f.fired_at) for f in reader.firings()] == [
            ("old-1", None, AT),
            ("old-2", None, AT),
            ("new", "[7]", AT),
        ]
        assert [f.rule for f in reader.firings(keys=["7"])] == ["new"]

    migrate.downgrade(engine, "0007", schema=schema, prefix=prefix)
    assert migrate.current(engine, schema=schema, prefix=prefix) == "0007"
    assert "partition_key" not in _columns(engine, schema, prefix)
    assert set(_indexes(engine, schema, prefix)) == {"scope_t_occ", "rule"}
    with engine.connect() as conn:
        rows = conn.execute(sa.select(old.c.rule, old.c.t_occ).order_by(old.c.t_occ)).all()
    assert [tuple(r) for r in rows] == [("old-1", 1), ("old-2", 2), ("new", 3)]

    migrate.upgrade(engine, schema=schema, prefix=prefix)
    with LogReader(engine, schema=schema, prefix=prefix) as reader:
        assert [f.key for f in reader.firings()] == [None, None, None]


def test_round_trip(engine: sa.Engine) -> None:
    _round_trip(engine, None, "sentinel_")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])  # SQLite has no schemas
def test_round_trip_in_a_schema_with_a_prefix(engine: sa.Engine, extra_schema: str) -> None:
    _round_trip(engine, extra_schema, "audit_")
    assert sa.inspect(engine).get_table_names() == []  # nothing in the default schema


@pytest.mark.parametrize(
    "url", ["sqlite://", "postgresql+psycopg://u@h/db", "mariadb+pymysql://u@h/db"]
)
def test_offline_sql(url: str) -> None:
    out = io.StringIO()
    migrate.upgrade(url, "0007:0008", sql=True, stdout=out)
    sql = out.getvalue()
    assert "ADD COLUMN partition_key VARCHAR(191)" in sql
    assert "CREATE INDEX ix_sentinel_rule_firings_rule_key" in sql
    out = io.StringIO()
    migrate.downgrade(url, "0008:0007", sql=True, stdout=out)
    assert "DROP COLUMN partition_key" in out.getvalue()
