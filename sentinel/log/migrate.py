"""Running sentinel's migrations: upgrade, downgrade and inspect the log's schema.

The migrations live in the repository's top-level ``migrations/`` directory and
ship inside the package (``sentinel/migrations`` in the wheel; as an alembic
``script_location``: ``sentinel:migrations``), so they are found wherever sentinel
is installed, and in a source checkout. They keep their revision in their own version table
(``sentinel_alembic_version``; ``<prefix>alembic_version`` with another prefix),
apart from any application's alembic history.

``bind`` is a URL (string or :class:`~sqlalchemy.URL`), an Engine, or a
Connection. With an Engine or URL each call runs in its own transaction and
commits; with a Connection in a transaction the caller commits, and with one
not in a transaction the call begins one and commits it (PostgreSQL and SQLite run DDL
transactionally; MariaDB commits each DDL statement implicitly). Inside an
application's alembic environment on a backend alembic treats as
non-transactional (SQLite, MariaDB/MySQL), each of sentinel's migrations commits
on its own, as the application's do there.

Usable from an application's own alembic ``env.py`` (after its
``context.run_migrations()``, on the same connection)::

    from sentinel.log import migrate
    with connectable.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          include_name=migrate.exclude_sentinel_tables)
        with context.begin_transaction():
            context.run_migrations()
            migrate.upgrade(connection)

This module imports alembic; ``sentinel.log`` does not import it.
"""

from __future__ import annotations

import io
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import cache
from pathlib import Path
from typing import Any, TextIO

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from sentinel.log.schema import sqlite_file
from sentinel.log.system_tables import system_tables
from sentinel.log.tables import DEFAULT_PREFIX, log_tables

__all__ = [
    "SCRIPT_LOCATION",
    "alembic_config",
    "current",
    "downgrade",
    "exclude_sentinel_tables",
    "head",
    "history",
    "script_directory",
    "upgrade",
]

#: Where an installed sentinel's migrations live, as an alembic ``script_location``.
SCRIPT_LOCATION = "sentinel:migrations"


def script_directory() -> Path:
    """The directory of sentinel's alembic environment: inside the installed
    package, or the top-level ``migrations/`` of a source checkout (an editable
    install imports the package from the checkout)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file() and (candidate / "versions").is_dir():
            return candidate
    raise RuntimeError(  # pragma: no cover - a broken installation
        f"sentinel's migrations are missing: neither {package / 'migrations'} nor "
        f"{package.parent / 'migrations'} holds env.py; reinstall sentinel"
    )


Bind = str | sa.URL | Engine | Connection


def alembic_config(
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    url: str | sa.URL | None = None,
    stdout: TextIO | None = None,
) -> Config:
    """An alembic :class:`~alembic.config.Config` for sentinel's migrations (no ini
    file needed). ``url`` is only needed for offline (``--sql``) runs."""
    log_tables(schema, prefix)  # validates the prefix
    # alembic writes messages to ``stdout`` and offline DDL to ``output_buffer``.
    cfg = Config(stdout=stdout, output_buffer=stdout) if stdout is not None else Config()
    # A plain path keeps alembic's error messages readable.
    cfg.set_main_option("script_location", str(script_directory()))
    cfg.attributes["sentinel_schema"] = schema
    cfg.attributes["sentinel_prefix"] = prefix
    if url is not None:
        cfg.attributes["url"] = sa.make_url(url).render_as_string(hide_password=False)
    return cfg


@cache
def _script() -> ScriptDirectory:
    # The shipped revisions do not change while the process runs: read them once.
    return ScriptDirectory.from_config(alembic_config())


def head() -> str:
    """The newest revision the shipped migrations reach."""
    heads = _script().get_heads()
    if len(heads) != 1:  # pragma: no cover - guards the shipped history
        raise RuntimeError(f"sentinel's migrations have {len(heads)} heads: {heads}")
    return heads[0]


def history() -> list[str]:
    """Every shipped revision, oldest first."""
    return [s.revision for s in reversed(list(_script().walk_revisions()))]


@contextmanager
def _connection(bind: Bind) -> Iterator[Connection]:
    if isinstance(bind, Connection):
        if bind.in_transaction():
            yield bind  # the caller's transaction: the caller commits
            return
        # not in a transaction: the migration commits, as alembic's own would,
        # in one transaction that holds :func:`_serialize`'s lock to its end
        # (unless an application's env.py run commits it earlier, see _run_alone)
        trans = bind.begin()
        try:
            yield bind
        except BaseException:
            if trans.is_active:
                trans.rollback()
            raise
        if trans.is_active:
            trans.commit()
        return
    if isinstance(bind, Engine):
        with bind.begin() as conn:
            yield conn
        return
    engine = sa.create_engine(bind, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


@contextmanager
def _outer_alembic_context() -> Iterator[MigrationContext | None]:
    """Let sentinel's migrations run while an application's alembic environment
    is active (from its env.py); yields that environment's migration context, if
    any. Alembic keeps one module-level proxy for the running environment; running
    ours replaces and then removes it, so the application's is reinstalled
    afterwards."""
    from alembic import context as ctx_module
    from alembic import op as op_module

    outer_ctx = getattr(ctx_module, "_proxy", None)
    outer_op = getattr(op_module, "_proxy", None)
    outer_migration = None
    if outer_ctx is not None:
        with suppress(Exception):  # not configured yet: no context
            outer_migration = outer_ctx.get_context()
        outer_ctx._remove_proxy()
    if outer_op is not None:
        outer_op._remove_proxy()
    try:
        yield outer_migration
    finally:
        if outer_ctx is not None:
            outer_ctx._install_proxy()
        if outer_op is not None:
            outer_op._install_proxy()


#: Alembic keeps the running migration's context in module-level proxies, which
#: :func:`_outer_alembic_context` swaps: one migration run at a time per process.
_RUNNING = threading.RLock()


def _serialize(conn: Connection, schema: str | None, prefix: str) -> None:
    """Make a migration of these tables wait until any other one (another
    process's) has committed, so that it finds them where that one left them.
    PostgreSQL: an advisory lock held until this transaction ends. SQLite: the
    database's write lock, taken now (``BEGIN IMMEDIATE``; Python's sqlite3
    would run each DDL statement in a transaction of its own), which also makes
    the migration one transaction. MariaDB/MySQL commit each DDL statement, so
    there is nothing to hold a lock across."""
    name = conn.dialect.name
    if name == "postgresql":
        key = zlib.crc32(f"sentinel migrations {schema or ''}.{prefix}".encode())
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
    elif name == "sqlite" and conn.dialect.driver == "pysqlite":
        driver: Any = conn.connection.driver_connection
        if not driver.in_transaction and driver.isolation_level is not None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def _run(
    fn: Any,
    bind: Bind,
    revision: str,
    schema: str | None,
    prefix: str,
    sql: bool,
    stdout: TextIO | None,
) -> None:
    with _RUNNING:
        _run_alone(fn, bind, revision, schema, prefix, sql, stdout)


def _run_alone(
    fn: Any,
    bind: Bind,
    revision: str,
    schema: str | None,
    prefix: str,
    sql: bool,
    stdout: TextIO | None,
) -> None:
    if sql:
        url = bind.engine.url if isinstance(bind, (Engine, Connection)) else bind
        cfg = alembic_config(schema=schema, prefix=prefix, url=url, stdout=stdout)
        with _outer_alembic_context():
            fn(cfg, revision, sql=True)
        return
    with _connection(bind) as conn:
        _serialize(conn, schema, prefix)
        if fn is command.upgrade and _create_at_head(conn, revision, schema, prefix):
            return
        cfg = alembic_config(schema=schema, prefix=prefix, stdout=stdout or io.StringIO())
        cfg.attributes["connection"] = conn
        with _outer_alembic_context() as outer:
            if outer is not None and not outer.impl.transactional_ddl and conn.in_transaction():
                # Called from an application's env.py on a backend whose DDL is not
                # transactional (SQLite, MariaDB/MySQL): there alembic commits each
                # migration on its own and never the transaction its bookkeeping
                # queries began, so with no application revision to run nothing
                # would commit our version row (the tables, being DDL, would stay).
                # Commit that transaction, as alembic's first migration would, so
                # ours commit per migration like the application's.
                conn.commit()
            fn(cfg, revision)


def _create_at_head(conn: Connection, revision: str, schema: str | None, prefix: str) -> bool:
    """Create the log's tables at the newest revision in one step, when
    ``revision`` is the newest and none of them exists yet; return whether it
    did. This is alembic's recipe for a new database (create the current
    schema, then stamp its revision): the tables, indexes, view and sequence
    are those declared in :mod:`sentinel.log.tables` and
    :mod:`sentinel.log.system_tables`, which tests hold equal, rows included,
    to what the migrations make one by one on every backend. A new database
    is then made in about half the statements, without running each
    migration. Within an application's alembic environment, or where any table
    or view named with the log's prefix exists, the migrations run as usual."""
    if revision not in ("head", "heads") and revision != head():
        return False
    from alembic import context as ctx_module

    if getattr(ctx_module, "_proxy", None) is not None:
        return False  # an application's env.py is running: its context decides
    tables = log_tables(schema, prefix)
    inspector = sa.inspect(conn)
    existing = set(inspector.get_table_names(schema=schema))
    existing.update(inspector.get_view_names(schema=schema))
    if any(name.startswith(prefix) for name in existing):
        return False  # some of the log (or of an older one) is there: migrate it
    tables.metadata.create_all(conn, checkfirst=False)
    system_tables(schema, prefix).metadata.create_all(conn, checkfirst=False)
    MigrationContext.configure(
        conn, opts={"version_table": tables.version_table, "version_table_schema": schema}
    ).stamp(_script(), "head")
    return True


def upgrade(
    bind: Bind,
    revision: str = "head",
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    sql: bool = False,
    stdout: TextIO | None = None,
) -> None:
    """Upgrade the log's tables to ``revision`` (default: the newest).

    ``sql=True`` writes the DDL to ``stdout`` (default ``sys.stdout``) instead of
    running it (alembic's offline mode). Raises alembic's and SQLAlchemy's errors
    as they are (a failed upgrade on PostgreSQL or SQLite leaves nothing behind).

    >>> upgrade("sqlite:///app.db")                 # doctest: +SKIP
    >>> upgrade(engine, schema="audit")             # doctest: +SKIP
    """
    _run(command.upgrade, bind, revision, schema, prefix, sql, stdout)


def downgrade(
    bind: Bind,
    revision: str = "base",
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    sql: bool = False,
    stdout: TextIO | None = None,
) -> None:
    """Downgrade the log's tables to ``revision`` (default ``"base"``: drop them,
    and every row in them)."""
    if sql and revision != "base" and ":" not in revision:
        # alembic's offline downgrade needs an explicit start: head:target.
        revision = f"{head()}:{revision}"
    elif sql and revision == "base":
        revision = f"{head()}:base"
    _run(command.downgrade, bind, revision, schema, prefix, sql, stdout)


def current(bind: Bind, *, schema: str | None = None, prefix: str = DEFAULT_PREFIX) -> str | None:
    """The log's revision in ``bind`` (``None``: sentinel's migrations never ran)."""
    tables = log_tables(schema, prefix)
    if not isinstance(bind, (Engine, Connection)):
        path = sqlite_file(bind)
        if path is not None and not path.exists():
            return None  # do not create an empty database file just to look
    with _connection(bind) as conn:
        mc = MigrationContext.configure(
            conn,
            opts={"version_table": tables.version_table, "version_table_schema": schema},
        )
        return mc.get_current_revision()


def exclude_sentinel_tables(name: str | None, type_: str, parent_names: Any) -> bool:
    """An ``include_name`` hook for an application's alembic ``env.py``: keeps
    autogenerate from proposing to drop sentinel's tables (any table whose name
    starts with ``sentinel_``), which the application's models do not declare.
    (Autogenerate does not compare views, so the view ``sentinel_occurrences``
    never shows; its name is excluded all the same.)"""
    if type_ == "table" and name is not None:
        return not name.startswith(DEFAULT_PREFIX)
    return True
