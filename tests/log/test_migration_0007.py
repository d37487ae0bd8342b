"""Migration 0007 (issue 34): the rule switches table comes and goes, with a
schema and a prefix, on SQLite, PostgreSQL and MariaDB; the log's rows stay as
they were; a log at 0006 is refused by the switch request with the command that
upgrades it, and takes requests once upgraded."""

from __future__ import annotations

import io

import pytest
import sqlalchemy as sa

from sentinel.errors import LogTablesMissingError
from sentinel.log import LogReader, LogWriter, migrate
from sentinel.log.switches import latest_switches, request_switch
from sentinel.log.tables import log_tables

from .conftest import occ


def _tables(engine: sa.Engine, schema: str | None) -> set[str]:
    return set(sa.inspect(engine).get_table_names(schema=schema))


def _round_trip(engine: sa.Engine, schema: str | None, prefix: str) -> None:
    tables = log_tables(schema, prefix)
    name = f"{prefix}rule_switches"
    migrate.upgrade(engine, "0006", schema=schema, prefix=prefix)
    with engine.begin() as conn:
        LogWriter(schema=schema, prefix=prefix, check_schema=False).write(conn, [occ("E", 1)])
    assert name not in _tables(engine, schema)
    with pytest.raises(LogTablesMissingError, match=r"sentinel db upgrade") as err:
        request_switch(engine, tables, "paid", False)
    assert (prefix == "sentinel_") == ("--prefix" not in str(err.value))
    assert (schema is None) == ("--schema" not in str(err.value))

    migrate.upgrade(engine, "0007", schema=schema, prefix=prefix)
    assert migrate.current(engine, schema=schema, prefix=prefix) == "0007"
    assert name in _tables(engine, schema)
    indexes = sa.inspect(engine).get_indexes(name, schema=schema)
    assert [(i["name"], i["column_names"]) for i in indexes] == [
        (f"ix_{prefix}rule_switches_detector_position", ["detector", "position"])
    ]
    asked = request_switch(engine, tables, "paid", False, by="tester")
    with engine.connect() as conn:
        (got,) = latest_switches(conn, tables)
    assert (got.id, got.rule, got.enabled, got.requested_by, got.state) == (
        asked.id,
        "paid",
        False,
        "tester",
        "pending",
    )
    assert got.requested_at.tzinfo is not None

    migrate.downgrade(engine, "0006", schema=schema, prefix=prefix)
    assert migrate.current(engine, schema=schema, prefix=prefix) == "0006"
    assert name not in _tables(engine, schema)
    with LogReader(engine, schema=schema, prefix=prefix, check=False) as reader:
        assert reader.count() == 1  # the log's rows are untouched
    migrate.upgrade(engine, schema=schema, prefix=prefix)
    with engine.connect() as conn:
        assert latest_switches(conn, tables) == []  # a downgrade forgets them


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
    migrate.upgrade(url, "0006:0007", sql=True, stdout=out)
    assert "CREATE TABLE sentinel_rule_switches" in out.getvalue()
    out = io.StringIO()
    migrate.downgrade(url, "0007:0006", sql=True, stdout=out)
    assert "DROP TABLE sentinel_rule_switches" in out.getvalue()
