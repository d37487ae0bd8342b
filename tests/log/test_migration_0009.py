"""Migration 0009 (issue 33): MariaDB numbers commits with a sequence that
starts after the counter's last number, in the default schema or another, with
a prefix; the downgrade hands the counter the sequence's last number. Elsewhere
the revision changes nothing but the revision."""

from __future__ import annotations

import io

import pytest
import sqlalchemy as sa

from sentinel.errors import LogTablesMissingError
from sentinel.global_detector.order import CommitReader
from sentinel.log import SCHEMA_VERSION, LogWriter, migrate
from sentinel.log.tables import log_tables
from sentinel.occurrence import Occurrence
from tests.global_detector.forge import element, forge


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


@pytest.mark.parametrize("url", ["mariadb+pymysql://u@h/db", "mysql+pymysql://u@h/db"])
def test_offline_sql_on_mariadb_or_mysql(url: str) -> None:
    """Offline the script cannot ask the server what it is: its statements are
    MariaDB executable comments, which MariaDB 10.3 and later run and MySQL
    skips (a ``mysql://`` URL may mean either)."""
    out = io.StringIO()
    migrate.upgrade(url, "0008:0009", sql=True, stdout=out)
    sql = out.getvalue()
    assert "/*M!100300 SET @sentinel_next_commit = GREATEST(" in sql
    assert "/*M!100300 EXECUTE IMMEDIATE CONCAT('CREATE SEQUENCE `sentinel_commit_seq`" in sql
    out = io.StringIO()
    migrate.downgrade(url, "0009:0008", sql=True, stdout=out)
    sql = out.getvalue()
    assert "SELECT next_not_cached_value - 1 FROM `sentinel_commit_seq`" in sql
    assert "/*M!100300 DROP SEQUENCE `sentinel_commit_seq` */" in sql


@pytest.mark.parametrize("backend", ["mysql"])
def test_the_offline_script_runs_on_mariadb(engine: sa.Engine) -> None:
    """The script ``--sql`` writes for 0008 -> 0009, run statement by
    statement on MariaDB, makes the sequence, after the counter's number."""
    migrate.upgrade(engine, "0008")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_commit_counter SET n = 9 WHERE id = 1"))
    out = io.StringIO()
    migrate.upgrade(str(engine.url), "0008:0009", sql=True, stdout=out)
    lines = [line for line in out.getvalue().splitlines() if not line.startswith("--")]
    statements = [s.strip() for s in "\n".join(lines).split(";\n") if s.strip()]
    assert any(s.startswith("/*M!100300 SET") for s in statements)
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement.replace("%", "%%"))
    assert migrate.current(engine) == "0009"
    assert _write(engine, LogWriter(commit_order=True), "a") == 10


@pytest.mark.parametrize("backend", ["mysql"])
def test_the_sequence_starts_after_the_log_when_the_counter_row_was_deleted(
    engine: sa.Engine,
) -> None:
    migrate.upgrade(engine, "0008")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_commit_counter SET n = 3 WHERE id = 1"))
        forge(conn, [element(1, "order", 1001.0, {"customer": 1})], seq=3, scope="old")
        conn.execute(sa.text("DELETE FROM sentinel_commit_counter"))
    migrate.upgrade(engine)
    assert _write(engine, LogWriter(commit_order=True), "new") == 4


@pytest.mark.parametrize("url", ["sqlite://", "postgresql+psycopg://u@h/db"])
def test_offline_sql_elsewhere_only_moves_the_revision(url: str) -> None:
    out = io.StringIO()
    migrate.upgrade(url, "0008:0009", sql=True, stdout=out)
    assert "SEQUENCE" not in out.getvalue()
    assert "0009" in out.getvalue()


@pytest.mark.parametrize("backend", ["mysql"])
def test_a_log_at_0009_without_its_sequence_is_refused_by_name(engine: sa.Engine) -> None:
    """A log migrated to 0009 while the server was a MariaDB before 10.3 (no
    sequence made), used after the server's upgrade: the writer says which
    object is missing and how to make it. (Checked when a write fails, not
    with the schema: an account may not see the sequence in the catalog.)"""
    migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP SEQUENCE sentinel_commit_seq"))
    with pytest.raises(LogTablesMissingError, match="no commit sequence sentinel_commit_seq"):
        _write(engine, LogWriter(commit_order=True), "a")
    migrate.downgrade(engine, "0008")  # what the message says: down, then up
    migrate.upgrade(engine)
    assert _write(engine, LogWriter(commit_order=True), "a") == 1
