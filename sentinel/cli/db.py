"""``sentinel db``: create, upgrade and inspect sentinel's tables."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from sentinel.cli.common import db_options, errors, lasting_database

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

    _known(revision)
    if not sql:
        _lasting(url, schema)
    before = None if sql else _current(url, schema, prefix)
    _not_back(before, revision)
    with _alembic_errors(revision):
        migrate.upgrade(
            url, revision, schema=schema, prefix=prefix, sql=sql, stdout=sys.stdout if sql else None
        )
    if not sql:
        after = migrate.current(url, schema=schema, prefix=prefix)
        if before == after:
            click.echo(f"sentinel log tables already at {after or 'base'}")
        else:
            click.echo(f"sentinel log tables upgraded: {before or 'base'} -> {after}")


# a relative step (`-1`) is an argument, not an unknown option
@db.command(context_settings={"ignore_unknown_options": True})
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

    _known(revision)
    if not sql:
        _lasting(url, schema)
    before = None if sql else _current(url, schema, prefix)
    if not sql and before is None:
        # nothing of sentinel's here (alembic would still create its version
        # table, in another application's database)
        click.echo("nothing to downgrade: sentinel's log tables are not here")
        return
    if not sql and not yes:
        click.confirm(
            f"Downgrading to {revision} may drop log tables and their rows. Continue?",
            abort=True,
        )
    with _alembic_errors(revision):
        migrate.downgrade(
            url, revision, schema=schema, prefix=prefix, sql=sql, stdout=sys.stdout if sql else None
        )
    if not sql:
        after = migrate.current(url, schema=schema, prefix=prefix)
        click.echo(f"sentinel log tables downgraded: {before or 'base'} -> {after or 'base'}")


def _lasting(url: str, schema: str | None) -> None:
    """Refuse a SQLite database that could not outlast the command: an
    in-memory one (the tables would be made, or looked for, in a database that
    is gone when the command ends), or a file in a directory that does not
    exist (where an upgrade cannot make it); and a ``--schema`` SQLite does not
    have (:func:`~sentinel.cli.common.lasting_database`)."""
    import sqlalchemy as sa

    from sentinel.log.schema import sqlite_file

    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        return  # reported where the URL is used
    if parsed.get_backend_name() != "sqlite":
        return
    file = sqlite_file(parsed)
    if file is None:
        raise click.UsageError(
            f"{url} is an in-memory SQLite database, gone when this command ends: give the "
            "path of a database file (sqlite:///path/to/app.db)"
        )
    if not file.parent.exists():
        raise click.ClickException(
            f"no directory {file.parent} for the SQLite database {file.name}: make it, or "
            "correct the path"
        )
    lasting_database(url, schema)


def _revisions() -> str:
    from sentinel.log.tables import SCHEMA_REVISIONS

    return ", ".join(SCHEMA_REVISIONS)


def _not_back(before: str | None, revision: str) -> None:
    """Refuse ``db upgrade REVISION`` to a revision older than the tables' (it
    would do nothing and say "already at" the newer one): exit status 1, naming
    ``db downgrade``, which goes back."""
    from sentinel.log.tables import SCHEMA_REVISIONS

    if before not in SCHEMA_REVISIONS or revision not in SCHEMA_REVISIONS:
        return
    if SCHEMA_REVISIONS.index(before) > SCHEMA_REVISIONS.index(revision):
        raise click.ClickException(
            f"the log tables are at schema revision {before}, newer than {revision}: "
            f"`sentinel db upgrade` only goes forward; `sentinel db downgrade {revision}` "
            "goes back (it may drop tables and their rows)"
        )


def _known(revision: str) -> None:
    """Refuse a target revision that is none of sentinel's (nor ``head``,
    ``base`` or a relative step such as ``-1``) before anything runs."""
    from sentinel.log.tables import SCHEMA_REVISIONS

    if ":" in revision or revision in (*SCHEMA_REVISIONS, "head", "heads", "base"):
        return
    if re.fullmatch(r"(\w+)?[+-]\d+", revision):
        return
    if revision.startswith("-"):  # downgrade takes unknown options as its argument
        raise click.UsageError(f"No such option: {revision}")
    raise click.ClickException(
        f"unknown revision {revision!r}: sentinel's revisions are {_revisions()} "
        "(or head; base to drop the tables)"
    )


def _current(url: str, schema: str | None, prefix: str) -> str | None:
    """The tables' revision; a revision this sentinel does not know (a newer
    sentinel migrated them) is an error: it cannot migrate from there."""
    from sentinel.log import migrate
    from sentinel.log.tables import SCHEMA_REVISIONS

    rev = migrate.current(url, schema=schema, prefix=prefix)
    if rev is not None and rev not in SCHEMA_REVISIONS:
        raise click.ClickException(
            f"the log tables are at schema revision {rev!r}, which this sentinel does not "
            f"know (it knows {_revisions()}); upgrade sentinel, or migrate with the "
            "sentinel that wrote that revision"
        )
    return rev


@contextmanager
def _alembic_errors(revision: str) -> Iterator[None]:
    from alembic.util import CommandError

    try:
        yield
    except CommandError as err:
        raise click.ClickException(
            f"cannot migrate to {revision!r}: {err} (sentinel's revisions are {_revisions()})"
        ) from err


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
    from sentinel.log.tables import SCHEMA_REVISIONS, SCHEMA_VERSION, log_tables

    _lasting(url, schema)
    rev = migrate.current(url, schema=schema, prefix=prefix)
    upgrade = upgrade_command(url, schema, prefix)
    missing = _missing_tables(url, schema, prefix) if rev in (None, SCHEMA_VERSION) else []
    tables = log_tables(schema, prefix)
    ok = False
    if rev is None and len(missing) < len(tables.names):
        click.echo(
            "none: sentinel's tables are here, but not their revision (no row in "
            f"{tables.qualified(tables.version_table)}); `sentinel db upgrade` cannot run "
            "on them: restore that table from a backup, or recreate the log "
            "(drop the tables, then upgrade)"
        )
    elif rev is None:
        click.echo(f"none: sentinel's tables were never created here; run `{upgrade}`")
    elif rev == SCHEMA_VERSION and missing:
        click.echo(
            f"{rev} (head), but table(s) {', '.join(tables.qualified(m) for m in missing)} "
            "are missing: restore them, or recreate the log (`sentinel db downgrade` then "
            "`sentinel db upgrade`)"
        )
    elif rev == SCHEMA_VERSION:
        click.echo(f"{rev} (head)")
        ok = True
    elif rev in SCHEMA_REVISIONS:
        click.echo(f"{rev} (outdated: this sentinel expects {SCHEMA_VERSION}; run `{upgrade}`)")
    else:
        click.echo(
            f"{rev} (unknown to this sentinel, which expects {SCHEMA_VERSION}; upgrade sentinel)"
        )
    if check and not ok:
        sys.exit(1)


def _missing_tables(url: str, schema: str | None, prefix: str) -> list[str]:
    """The log tables (of ``log_tables(schema, prefix).names``) that ``url``'s
    database lacks; all of them where a SQLite file does not exist (which is
    not created to look)."""
    import sqlalchemy as sa

    from sentinel.log.schema import sqlite_file
    from sentinel.log.tables import log_tables

    names = list(log_tables(schema, prefix).names)
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        file = sqlite_file(parsed)
        if file is None or not file.exists():
            return names
    engine = sa.create_engine(parsed)
    try:
        with engine.connect() as conn:
            insp = sa.inspect(conn)
            return [n for n in names if not insp.has_table(n, schema=schema)]
    finally:
        engine.dispose()
