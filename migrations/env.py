"""Alembic environment for sentinel's own tables (event log, rule firings, outbox).

It keeps its revision in its own version table, ``<prefix>alembic_version``, so it
never touches an application's ``alembic_version`` or history, and it only ever
looks at sentinel's tables.

Options, first found wins: ``config.attributes`` (``connection``,
``sentinel_schema``, ``sentinel_prefix``; set by :mod:`sentinel.log.migrate`),
``-x schema=... -x prefix=...`` on alembic's command line, and the ini options
``sentinel_schema`` / ``sentinel_prefix`` (for an ``alembic.ini`` section that
points ``script_location`` at ``sentinel:migrations``). The database is the
``connection`` attribute or ``sqlalchemy.url``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import context

from sentinel.bicep.tables import system_tables
from sentinel.log.tables import DEFAULT_PREFIX, log_tables

config = context.config


def _option(name: str) -> Any:
    key = f"sentinel_{name}"
    if config.attributes.get(key) is not None:
        return config.attributes[key]
    x = context.get_x_argument(as_dictionary=True)
    if x.get(name):
        return x[name]
    return config.get_main_option(key) or None


schema: str | None = _option("schema")
prefix: str = _option("prefix") or DEFAULT_PREFIX
tables = log_tables(schema, prefix)
bicep = system_tables(schema, prefix)
names = set(tables.names) | set(bicep.names)
metadata = sa.MetaData(schema=schema)
for _table in (*tables.metadata.sorted_tables, *bicep.metadata.sorted_tables):
    _table.to_metadata(metadata)


def _include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    # Autogenerate compares sentinel's tables only, never the application's.
    if type_ == "table":
        return name in names
    if type_ == "schema":
        return name == schema
    return True


_options: dict[str, Any] = {
    "target_metadata": metadata,
    "version_table": tables.version_table,
    "version_table_schema": schema,
    "include_name": _include_name,
    "include_schemas": schema is not None,
}


def run_offline() -> None:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    context.configure(url=url, literal_binds=True, dialect_opts={"paramstyle": "named"}, **_options)
    with context.begin_transaction():
        context.run_migrations(schema=schema, prefix=prefix)


def _run(connection: sa.Connection) -> None:
    context.configure(connection=connection, **_options)
    with context.begin_transaction():
        context.run_migrations(schema=schema, prefix=prefix)


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError(
            "no database for sentinel's migrations: set sqlalchemy.url in the ini section "
            "or pass a connection (sentinel.log.migrate.upgrade(engine))"
        )
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
