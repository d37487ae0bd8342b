"""``sentinel db``: create, upgrade and inspect sentinel's tables."""

from __future__ import annotations

import sys

import click

from sentinel.cli.common import db_options, errors

__all__ = ["db"]


@click.group()
def db() -> None:
    """Create, upgrade and inspect sentinel's tables (event log, rule firings,
    outbox). They keep their own version table, apart from your application's
    alembic history."""


@db.command()
@db_options
@click.argument("revision", default="head")
@click.option("--sql", is_flag=True, help="Print the DDL instead of running it.")
@errors
def upgrade(url: str, schema: str | None, prefix: str, revision: str, sql: bool) -> None:
    """Upgrade the log tables to REVISION (default: head, the newest)."""
    from sentinel.log import migrate

    before = None if sql else migrate.current(url, schema=schema, prefix=prefix)
    migrate.upgrade(
        url, revision, schema=schema, prefix=prefix, sql=sql, stdout=sys.stdout if sql else None
    )
    if not sql:
        after = migrate.current(url, schema=schema, prefix=prefix)
        if before == after:
            click.echo(f"sentinel log tables already at {after or 'base'}")
        else:
            click.echo(f"sentinel log tables upgraded: {before or 'base'} -> {after}")


@db.command()
@db_options
@click.argument("revision")
@click.option("--sql", is_flag=True, help="Print the DDL instead of running it.")
@click.option("--yes", is_flag=True, help="Do not ask before dropping data.")
@errors
def downgrade(
    url: str, schema: str | None, prefix: str, revision: str, sql: bool, yes: bool
) -> None:
    """Downgrade the log tables to REVISION ("base" drops them, with every row)."""
    from sentinel.log import migrate

    if not sql and not yes:
        click.confirm(
            f"Downgrading to {revision} may drop log tables and their rows. Continue?",
            abort=True,
        )
    before = None if sql else migrate.current(url, schema=schema, prefix=prefix)
    migrate.downgrade(
        url, revision, schema=schema, prefix=prefix, sql=sql, stdout=sys.stdout if sql else None
    )
    if not sql:
        after = migrate.current(url, schema=schema, prefix=prefix)
        click.echo(f"sentinel log tables downgraded: {before or 'base'} -> {after or 'base'}")


@db.command()
@db_options
@click.option(
    "--check",
    is_flag=True,
    help="Exit with status 1 unless the tables are at the revision this sentinel expects.",
)
@errors
def current(url: str, schema: str | None, prefix: str, check: bool) -> None:
    """Show the revision of the log tables and whether it is the expected one."""
    from sentinel.log import migrate
    from sentinel.log.schema import upgrade_command
    from sentinel.log.tables import SCHEMA_REVISIONS, SCHEMA_VERSION

    rev = migrate.current(url, schema=schema, prefix=prefix)
    upgrade = upgrade_command(url, schema, prefix)
    if rev is None:
        click.echo(f"none: sentinel's tables were never created here; run `{upgrade}`")
    elif rev == SCHEMA_VERSION:
        click.echo(f"{rev} (head)")
    elif rev in SCHEMA_REVISIONS:
        click.echo(f"{rev} (outdated: this sentinel expects {SCHEMA_VERSION}; run `{upgrade}`)")
    else:
        click.echo(
            f"{rev} (unknown to this sentinel, which expects {SCHEMA_VERSION}; upgrade sentinel)"
        )
    if check and rev != SCHEMA_VERSION:
        sys.exit(1)
