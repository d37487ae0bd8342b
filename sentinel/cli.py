"""The ``sentinel`` command.

``sentinel db upgrade|downgrade|current`` manage the log's tables with the
migrations shipped in the package; ``sentinel log show`` prints the latest log
rows. Every command that needs a database takes ``--url`` (or ``SENTINEL_URL``),
``--schema`` (or ``SENTINEL_SCHEMA``) and ``--prefix``.

Adding a command: decorate a function with ``@main.command()`` (or a group with
``@main.group()``) in this module, and import what it needs (detector, Spark,
alembic, rich) inside the function, so ``sentinel --help`` stays fast. Raise
:class:`~sentinel.errors.SentinelError` for bad input; :func:`_errors` turns it
into a one-line message and exit status 1.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


def _errors(fn: F) -> F:
    """Report sentinel's errors and database connection failures as one-line
    messages (exit status 1) instead of tracebacks."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import sqlalchemy.exc

        from sentinel.errors import SentinelError

        try:
            return fn(*args, **kwargs)
        except SentinelError as err:
            raise click.ClickException(str(err)) from err
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as err:
            orig = getattr(err, "orig", None) or err
            raise click.ClickException(f"cannot use the database: {orig}") from err
        except sqlalchemy.exc.ArgumentError as err:
            raise click.ClickException(f"bad database URL: {err}") from err

    return wrapper  # type: ignore[return-value]


def _db_options(fn: F) -> F:
    fn = click.option(
        "--prefix", default="sentinel_", show_default=True, envvar="SENTINEL_PREFIX",
        help="Table-name prefix of the log tables.",
    )(fn)
    fn = click.option(
        "--schema", default=None, envvar="SENTINEL_SCHEMA",
        help="Database schema holding the log tables (default: the connection's).",
    )(fn)
    fn = click.option(
        "--url", required=True, envvar="SENTINEL_URL",
        help="SQLAlchemy database URL, e.g. sqlite:///app.db or "
             "postgresql+psycopg://user@host/db (or set SENTINEL_URL).",
    )(fn)
    return fn


@click.group(name="sentinel")
@click.version_option(package_name="sentinel", prog_name="sentinel")
def main() -> None:
    """sentinel: active-database rules for SQLAlchemy applications."""


# -- db ----------------------------------------------------------------------------
@main.group()
def db() -> None:
    """Create, upgrade and inspect sentinel's tables (event log, rule firings,
    outbox). They keep their own version table, apart from your application's
    alembic history."""


@db.command()
@_db_options
@click.argument("revision", default="head")
@click.option("--sql", is_flag=True, help="Print the DDL instead of running it.")
@_errors
def upgrade(url: str, schema: str | None, prefix: str, revision: str, sql: bool) -> None:
    """Upgrade the log tables to REVISION (default: head, the newest)."""
    from sentinel.log import migrate

    before = None if sql else migrate.current(url, schema=schema, prefix=prefix)
    migrate.upgrade(url, revision, schema=schema, prefix=prefix, sql=sql,
                    stdout=sys.stdout if sql else None)
    if not sql:
        after = migrate.current(url, schema=schema, prefix=prefix)
        if before == after:
            click.echo(f"sentinel log tables already at {after or 'base'}")
        else:
            click.echo(f"sentinel log tables upgraded: {before or 'base'} -> {after}")


@db.command()
@_db_options
@click.argument("revision")
@click.option("--sql", is_flag=True, help="Print the DDL instead of running it.")
@click.option("--yes", is_flag=True, help="Do not ask before dropping data.")
@_errors
def downgrade(url: str, schema: str | None, prefix: str, revision: str, sql: bool,
              yes: bool) -> None:
    """Downgrade the log tables to REVISION ("base" drops them, with every row)."""
    from sentinel.log import migrate

    if not sql and not yes:
        click.confirm(
            f"Downgrading to {revision} may drop log tables and their rows. Continue?",
            abort=True,
        )
    before = None if sql else migrate.current(url, schema=schema, prefix=prefix)
    migrate.downgrade(url, revision, schema=schema, prefix=prefix, sql=sql,
                      stdout=sys.stdout if sql else None)
    if not sql:
        after = migrate.current(url, schema=schema, prefix=prefix)
        click.echo(f"sentinel log tables downgraded: {before or 'base'} -> {after or 'base'}")


@db.command()
@_db_options
@click.option("--check", is_flag=True,
              help="Exit with status 1 unless the tables are at the revision this "
                   "sentinel expects.")
@_errors
def current(url: str, schema: str | None, prefix: str, check: bool) -> None:
    """Show the revision of the log tables and whether it is the expected one."""
    from sentinel.log import migrate
    from sentinel.log.tables import SCHEMA_REVISIONS, SCHEMA_VERSION

    rev = migrate.current(url, schema=schema, prefix=prefix)
    if rev is None:
        click.echo("none: sentinel's tables were never created here; "
                   "run `sentinel db upgrade --url ...`")
    elif rev == SCHEMA_VERSION:
        click.echo(f"{rev} (head)")
    elif rev in SCHEMA_REVISIONS:
        click.echo(f"{rev} (outdated: this sentinel expects {SCHEMA_VERSION}; "
                   "run `sentinel db upgrade --url ...`)")
    else:
        click.echo(f"{rev} (unknown to this sentinel, which expects {SCHEMA_VERSION}; "
                   "upgrade sentinel)")
    if check and rev != SCHEMA_VERSION:
        sys.exit(1)


# -- log ---------------------------------------------------------------------------
@main.group()
def log() -> None:
    """Inspect the event log."""


@log.command()
@_db_options
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(min=1),
              help="How many of the latest rows to show.")
@click.option("--event", "events", multiple=True, help="Only this event (repeatable).")
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeatable).")
@_errors
def show(url: str, schema: str | None, prefix: str, limit: int,
         events: tuple[str, ...], scopes: tuple[str, ...]) -> None:
    """Print the latest rows of the event log as a table, oldest first."""
    from rich.console import Console
    from rich.table import Table

    from sentinel.log import LogReader
    from sentinel.log.records import encode_params

    with LogReader(url, schema=schema, prefix=prefix) as reader:
        rows = reader.latest(limit, events=events or None, scopes=scopes or None)
    table = Table(title=f"sentinel event log: last {len(rows)} row(s)")
    for name in ("id", "scope", "t_occ", "event"):
        table.add_column(name, overflow="fold")
    table.add_column("at (UTC)", no_wrap=True)
    for name in ("source", "params", "outcome"):
        table.add_column(name, overflow="fold")
    for occ, outcome, rid in rows:
        params = json.dumps(encode_params(occ.params, event=occ.event), sort_keys=True,
                            separators=(",", ":"))
        table.add_row(
            str(rid), str(occ.scope), str(occ.t_occ), occ.event,
            occ.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
            "" if occ.source is None else repr(occ.source),
            params, outcome or "-",
        )
    Console().print(table)


if __name__ == "__main__":  # pragma: no cover
    main()
