"""``sentinel rules enable|disable|switches``: switch a rule of a running global
detector (``sentinel global``), and list the switches asked for
(``docs/global.md``, "Switching a rule")."""

from __future__ import annotations

from typing import Any

import click

from sentinel.cli.common import (
    MAX_ROWS,
    EnvOption,
    count,
    db_options,
    errors,
    load_reference,
    print_table,
    require_database,
)

__all__ = ["rules_group"]


@click.group(name="rules")
def rules_group() -> None:
    """Enable or disable a global detector's rule while it runs (the request is
    written to the log; the service applies it between two reads, and records
    where)."""


def _engine(url: str, schema: str | None) -> Any:
    """An engine on ``url``; a SQLite file that does not exist is an error (not
    an empty database made just to find no log in it)."""
    import sqlalchemy as sa

    require_database(url, schema)
    return sa.create_engine(url)


def _check_log(engine: Any, tables: Any) -> None:
    """Refuse a log at another schema revision than this sentinel's (older:
    ``sentinel db upgrade``; newer: a newer sentinel's), as every command
    reading the log does, before anything is written to it."""
    from sentinel.log.schema import check_schema

    with engine.connect() as conn:
        check_schema(conn, tables)


def _detectors(engine: Any, tables: Any) -> list[str]:
    """The names of the global detectors that have run on the log (their cursors)."""
    import sqlalchemy as sa

    t = tables.global_cursors
    with engine.connect() as conn:
        return [str(n) for n in conn.execute(sa.select(t.c.name).order_by(t.c.name)).scalars()]


def _switch_command(enabled: bool) -> click.Command:
    verb = "enable" if enabled else "disable"

    @click.command(name=verb)
    @click.argument("rule")
    @db_options
    @click.option(
        "--detector",
        "--name",
        "detector",
        default="global",
        show_default=True,
        help="The global detector's name (its cursor's: `sentinel global --name`).",
    )
    @click.option(
        "--rules",
        "rules_ref",
        cls=EnvOption,
        envvar="SENTINEL_RULES",
        default=None,
        help="The global rules (package.module:attribute): a rule they do not define is "
        "refused here, before anything is written. Or set SENTINEL_RULES.",
    )
    @errors
    def command(
        rule: str,
        url: str,
        schema: str | None,
        prefix: str,
        detector: str,
        rules_ref: str | None,
    ) -> None:
        from sentinel.log.switches import request_switch
        from sentinel.log.tables import log_tables
        from sentinel.rules import LocalEventDetector

        names = None
        if rules_ref is not None:
            names = set(load_reference(rules_ref, (LocalEventDetector,)).rules)
        engine = _engine(url, schema)
        tables = log_tables(schema, prefix)
        try:
            _check_log(engine, tables)
            asked = request_switch(engine, tables, rule, enabled, detector=detector, rules=names)
            known = _detectors(engine, tables)
        finally:
            engine.dispose()
        click.echo(
            f"request #{asked.id}: {verb} rule {rule!r} of global detector {detector!r}; "
            "the service applies it before its next read (`sentinel rules switches` "
            "shows where)"
        )
        if detector not in known:
            # a typo waits forever; a detector yet to start applies it at its start
            click.echo(
                f"warning: no global detector named {detector!r} has run on this log "
                f"(those that have: {', '.join(map(repr, known)) or 'none'}); the request "
                "waits until one named so starts",
                err=True,
            )

    command.help = (
        f"{verb.capitalize()} RULE of a running global detector: write the request to the "
        "log; the service applies it between two reads and records the commit position "
        "where it did, so a restart applies it at the same place."
    )
    return command


@click.command(name="switches")
@db_options
@click.option("--detector", "--name", "detector", default=None, help="Only this detector's.")
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=count(1, MAX_ROWS),
    help="How many of the newest requests to show.",
)
@errors
def switches_command(
    url: str, schema: str | None, prefix: str, detector: str | None, limit: int
) -> None:
    """List the newest rule switch requests: pending, applied (after which
    commit) or refused (why)."""
    from sentinel.log.switches import latest_switches, require_switches
    from sentinel.log.tables import log_tables

    tables = log_tables(schema, prefix)
    engine = _engine(url, schema)
    try:
        _check_log(engine, tables)
        with engine.connect() as conn:
            require_switches(conn, tables)
            got = latest_switches(conn, tables, detector=detector, limit=limit)
    finally:
        engine.dispose()
    rows = [
        [
            str(s.id),
            s.detector,
            s.rule,
            "enable" if s.enabled else "disable",
            s.requested_at.isoformat(timespec="seconds"),
            s.requested_by or "",
            s.state if s.position is None else f"{s.state} after commit {s.position}",
            s.refused or "",
        ]
        for s in got
    ]
    print_table(
        "rule switches",
        ["#", "detector", "rule", "asked", "requested at", "by", "state", "why refused"],
        rows,
    )


rules_group.add_command(_switch_command(False))
rules_group.add_command(_switch_command(True))
rules_group.add_command(switches_command)
