"""Migration 0009 (issue 33): MariaDB numbers commits with a sequence that
starts after the counter's last number, in the default schema or another, with
a prefix; the downgrade hands the counter the sequence's last number. Elsewhere
the revision changes nothing but the revision."""

from __future__ import annotations

import io

import pytest
import sqlalchemy as sa

from sentinel.global_detector.order import CommitReader
from sentinel.log import SCHEMA_VERSION, LogWriter, migrate
from sentinel.log.tables import log_tables
from sentinel.occurrence import Occurrence


def _write(engine: sa.Engine, writer: LogWriter, scope: str) -> int:
    """Write one numbered transaction; return its number."""
    with engine.begin() as conn:
        writer.write(conn, [Occurrence("order", 1, 1000.0, scope=scope)])
        b = writer.tables.batches
        return int(conn.execute(sa.select(b.c.commit_seq).where(b.c.scope == scope)).scalar_one())


def _round_trip(engine: sa.Engine, schema: str | None, prefix: str) -> None:
    tables = log_tables(schema, prefix)
    counter = tables.qualified(tables.commit_counter.name)
    migrate.upgrade(engine, "0008", schema=schema, prefix=prefix)
    with engine.begin() as conn:  # 41 numbers handed out by the counter
        conn.execute(sa.text(f"UPDATE {counter} SET n = 41 WHERE id = 1"))
    migrate.upgrade(engine, "0009", schema=schema, prefix=prefix)
    assert migrate.current(engine, schema=schema, prefix=prefix) == SCHEMA_VERSION == "0009"
    writer = LogWriter(commit_order=True, schema=schema, prefix=prefix)
    name = engine.dialect.name
    mariadb = name == "mysql"
    # PostgreSQL numbered with its own sequence before and after
    first = 1 if name == "postgresql" else 42
    assert _write(engine, writer, "a") == first
    if mariadb:
        names = set(sa.inspect(engine).get_sequence_names(schema=schema))
        assert names == {f"{prefix}commit_seq"}
        with engine.connect() as conn:
            assert CommitReader(tables).handed_out(conn) == 42
            # the counter is the writers' gate now: it no longer moves
            assert conn.execute(sa.text(f"SELECT n FROM {counter}")).scalar() == 41
    migrate.downgrade(engine, "0008", schema=schema, prefix=prefix)
    with engine.connect() as conn:
        assert conn.execute(sa.text(f"SELECT n FROM {counter}")).scalar() == (
            41 if name == "postgresql" else 42
        )
    if mariadb:
        assert sa.inspect(engine).get_sequence_names(schema=schema) == []
    migrate.upgrade(engine, schema=schema, prefix=prefix)
    assert _write(engine, writer, "b") == first + 1


def test_round_trip(engine: sa.Engine) -> None:
    _round_trip(engine, None, "sentinel_")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])  # SQLite has no schemas
def test_round_trip_in_a_schema_with_a_prefix(engine: sa.Engine, extra_schema: str) -> None:
    _round_trip(engine, extra_schema, "audit_")


def test_offline_sql_on_mariadb() -> None:
    out = io.StringIO()
    migrate.upgrade("mariadb+pymysql://u@h/db", "0008:0009", sql=True, stdout=out)
    sql = out.getvalue()
    assert "SET @sentinel_next_commit = (SELECT COALESCE(MAX(n), 0) + 1" in sql
    assert "CREATE SEQUENCE `sentinel_commit_seq` START WITH" in sql
    out = io.StringIO()
    migrate.downgrade("mariadb+pymysql://u@h/db", "0009:0008", sql=True, stdout=out)
    sql = out.getvalue()
    assert "SELECT next_not_cached_value - 1 FROM `sentinel_commit_seq`" in sql
    assert "DROP SEQUENCE `sentinel_commit_seq`" in sql


@pytest.mark.parametrize("url", ["sqlite://", "postgresql+psycopg://u@h/db"])
def test_offline_sql_elsewhere_only_moves_the_revision(url: str) -> None:
    out = io.StringIO()
    migrate.upgrade(url, "0008:0009", sql=True, stdout=out)
    assert "SEQUENCE" not in out.getvalue()
    assert "0009" in out.getvalue()
