"""Running a complex class's query so that the database lets it only read.

The compiler refuses a query that names a function outside its allow-list
(:mod:`sentinel.bicep.sqlcheck`); the database is asked to refuse writes as
well, where it can switch a running transaction to read-only (a tick is one
transaction, and the query must see what the tick wrote before it):

- PostgreSQL: ``SET TRANSACTION READ ONLY`` in a savepoint, rolled back after
  the query (which undoes the setting, and nothing else: the query wrote
  nothing);
- SQLite: ``PRAGMA query_only`` on the connection for the duration, set back
  to what it was after;
- MariaDB and MySQL change a transaction's access mode only between
  transactions (``START TRANSACTION READ ONLY``), so there the allow-list is
  the guard.

A read-only query cannot write its rows into the class's staging table, so
where there is a guard the processor fetches them and inserts them itself
(:attr:`ReadOnly.fetches`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Connection

__all__ = ["PostgresReadOnly", "ReadOnly", "SQLiteReadOnly", "read_only_for"]


class ReadOnly:
    """No guard of the database's (MariaDB, MySQL): the allow-list alone."""

    #: Whether the query's rows are fetched and inserted by the processor
    #: (``False``: ``INSERT ... SELECT`` on the server).
    fetches = False

    @contextmanager
    def reading(self, conn: Connection) -> Iterator[None]:
        """Run the body's statements on ``conn`` unable to write."""
        yield


class PostgresReadOnly(ReadOnly):
    fetches = True

    @contextmanager
    def reading(self, conn: Connection) -> Iterator[None]:
        savepoint = conn.begin_nested()
        try:
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            yield
        finally:
            if savepoint.is_active:
                savepoint.rollback()


class SQLiteReadOnly(ReadOnly):
    fetches = True

    @contextmanager
    def reading(self, conn: Connection) -> Iterator[None]:
        before = int(conn.exec_driver_sql("PRAGMA query_only").scalar() or 0)
        conn.exec_driver_sql("PRAGMA query_only = 1")
        try:
            yield
        finally:
            conn.exec_driver_sql(f"PRAGMA query_only = {before}")


def read_only_for(dialect: str) -> ReadOnly:
    """The guard of a SQLAlchemy dialect name."""
    if dialect == "postgresql":
        return PostgresReadOnly()
    if dialect == "sqlite":
        return SQLiteReadOnly()
    return ReadOnly()
