"""Revision 0002 creates exactly the BiCEPL system tables sentinel/bicep/tables.py
declares, and downgrades to 0001 without them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from sentinel.bicep.tables import system_tables
from sentinel.log import migrate
from sentinel.log.tables import log_tables

NAMES = set(system_tables().names)


def _describe(engine: sa.Engine) -> dict[str, Any]:
    insp = sa.inspect(engine)
    out: dict[str, Any] = {}
    for table in sorted(NAMES):
        out[table] = {
            "columns": [
                (c["name"], c["type"].compile(dialect=engine.dialect), c["nullable"])
                for c in insp.get_columns(table)
            ],
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                for i in insp.get_indexes(table)
            ),
            "pk": insp.get_pk_constraint(table)["constrained_columns"],
        }
    return out


def test_revision_0002_creates_the_declared_system_tables(
    engine: sa.Engine, tmp_path: Path, namespaces: Any
) -> None:
    migrate.upgrade(engine)
    by_migration = _describe(engine)
    other = (
        sa.create_engine(f"sqlite:///{tmp_path / 'declared.db'}")
        if namespaces is None
        else sa.create_engine(namespaces.url(namespaces.new()))
    )
    try:
        system_tables().metadata.create_all(other)
        assert _describe(other) == by_migration
    finally:
        other.dispose()

    migrate.downgrade(engine, "0001")
    tables = set(sa.inspect(engine).get_table_names())
    t = log_tables()
    revision_0001 = {f"{t.prefix}events", t.firings.name, t.outbox.name}
    assert not NAMES & tables and revision_0001 <= tables
    migrate.upgrade(engine)
    assert set(sa.inspect(engine).get_table_names()) >= NAMES
