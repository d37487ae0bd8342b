"""Checking that a database holds the log at the schema revision this code expects.

Sentinel's migrations record their revision in their own version table
(``<prefix>alembic_version``), never in an application's ``alembic_version``.
:func:`check_schema` reads it (and checks that the log tables exist) and raises a
:class:`~sentinel.errors.LogSchemaError` that says what to run.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sentinel.errors import (
    LogSchemaOutdatedError,
    LogSchemaUnknownError,
    LogTablesMissingError,
)
from sentinel.log.tables import DEFAULT_PREFIX, SCHEMA_REVISIONS, SCHEMA_VERSION, LogTables

__all__ = [
    "check_schema",
    "location",
    "schema_revision",
    "sqlite_file",
    "upgrade_command",
    "upgrade_hint",
]


def sqlite_file(url: str | sa.URL) -> Path | None:
    """The file of a SQLite URL (``None`` for another database or an in-memory
    one): where connecting would create an empty database if none is there."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def location(conn: Connection, tables: LogTables) -> str:
    """The database (URL without password) and schema, for messages."""
    where = conn.engine.url.render_as_string(hide_password=True)
    if tables.schema:
        where += f" (schema {tables.schema})"
    return where


def upgrade_command(url: str | sa.URL, schema: str | None, prefix: str = DEFAULT_PREFIX) -> str:
    """``sentinel db upgrade`` for this database, schema and prefix, as a shell
    command (the password hidden), so that it upgrades the tables asked about and
    does not create a second set elsewhere."""
    shown = sa.make_url(url).render_as_string(hide_password=True)
    cmd = f"sentinel db upgrade --url {shlex.quote(shown)}"
    if schema:
        cmd += f" --schema {shlex.quote(schema)}"
    if prefix != DEFAULT_PREFIX:
        cmd += f" --prefix {shlex.quote(prefix)}"
    return cmd


def upgrade_hint(conn: Connection, tables: LogTables) -> str:
    """The command that upgrades this database's log."""
    return f"run `{upgrade_command(conn.engine.url, tables.schema, tables.prefix)}`"


def schema_revision(conn: Connection, tables: LogTables) -> str | None:
    """The revision in sentinel's version table, or ``None`` when the table is
    missing or empty. Issues catalog queries only, so it is safe inside a
    transaction that must not see an error."""
    if not sa.inspect(conn).has_table(tables.version_table, schema=tables.schema):
        return None
    version = sa.table(tables.version_table, sa.column("version_num"), schema=tables.schema)
    rows = conn.execute(sa.select(version.c.version_num)).scalars().all()
    if not rows:
        return None
    # One linear history: a single row. Report anything else as it is.
    return rows[0] if len(rows) == 1 else ",".join(sorted(rows))


def check_schema(conn: Connection, tables: LogTables) -> str:
    """Return the log's revision if it is :data:`SCHEMA_VERSION` and every log
    table exists; otherwise raise:

    - :class:`~sentinel.errors.LogTablesMissingError` when sentinel's version
      table or a log table is missing;
    - :class:`~sentinel.errors.LogSchemaOutdatedError` when the revision is an
      older one this code knows;
    - :class:`~sentinel.errors.LogSchemaUnknownError` when this code does not
      know the revision (a newer sentinel migrated the database).

    Runs only catalog queries and one SELECT on ``conn``.
    """
    where = location(conn, tables)
    found = schema_revision(conn, tables)
    insp = sa.inspect(conn)
    missing = [n for n in tables.names if not insp.has_table(n, schema=tables.schema)]
    if found is None:
        what = (
            f"the event log tables are missing from {where}"
            if missing
            else f"the event log tables in {where} are not under sentinel's migrations "
            f"(no revision in {tables.qualified(tables.version_table)})"
        )
        raise LogTablesMissingError(
            f"{what}; {upgrade_hint(conn, tables)} to create them",
            location=where,
            found=None,
            expected=SCHEMA_VERSION,
            missing=missing,
        )
    if found not in SCHEMA_REVISIONS:
        raise LogSchemaUnknownError(
            f"the event log in {where} is at schema revision {found!r}, which this version "
            f"of sentinel does not know (it knows {', '.join(SCHEMA_REVISIONS)} and expects "
            f"{SCHEMA_VERSION}); it was probably migrated by a newer sentinel: upgrade "
            "sentinel, or downgrade the log with the sentinel that migrated it",
            location=where,
            found=found,
            expected=SCHEMA_VERSION,
            missing=missing,
        )
    if found != SCHEMA_VERSION:
        raise LogSchemaOutdatedError(
            f"the event log in {where} is at schema revision {found}, older than "
            f"{SCHEMA_VERSION} which this version of sentinel expects; "
            f"{upgrade_hint(conn, tables)}",
            location=where,
            found=found,
            expected=SCHEMA_VERSION,
            missing=missing,
        )
    if missing:
        raise LogTablesMissingError(
            f"the event log in {where} is at revision {found} but table(s) "
            f"{', '.join(tables.qualified(m) for m in missing)} are missing; restore them "
            f"or recreate the log (`sentinel db downgrade` then `sentinel db upgrade`)",
            location=where,
            found=found,
            expected=SCHEMA_VERSION,
            missing=missing,
        )
    return found
