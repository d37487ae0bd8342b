"""``sentinel log``: inspect and export the event log."""

from __future__ import annotations

import json

import click

from sentinel.cli.common import (
    MAX_ROWS,
    count,
    db_options,
    errors,
    print_table,
    progress,
    require_database,
)

__all__ = ["log"]


@click.group()
def log() -> None:
    """Inspect the event log."""


@log.command()
@db_options
@click.option(
    "-n",
    "--limit",
    default=20,
    show_default=True,
    type=count(1, MAX_ROWS),
    help="How many of the latest rows to show.",
)
@click.option("--event", "events", multiple=True, help="Only this event (repeatable).")
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeatable).")
@errors
def show(
    url: str,
    schema: str | None,
    prefix: str,
    limit: int,
    events: tuple[str, ...],
    scopes: tuple[str, ...],
) -> None:
    """Print the latest rows of the event log as a table, oldest first."""
    from sentinel.log import LogReader
    from sentinel.log.records import encode_params

    require_database(url, schema)
    with LogReader(url, schema=schema, prefix=prefix) as reader:
        rows = reader.latest(limit, events=events or None, scopes=scopes or None)
    table = []
    for row in rows:
        occ, outcome, rid = row
        if row.savepoint is not None:  # undone by that savepoint's rollback
            outcome = f"{outcome} ({row.savepoint})"
        params = json.dumps(
            encode_params(occ.params, event=occ.event), sort_keys=True, separators=(",", ":")
        )
        table.append(
            [
                str(rid),
                str(occ.scope),
                str(occ.t_occ),
                occ.event,
                occ.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                "" if occ.source is None else repr(occ.source),
                params,
                outcome or "-",
            ]
        )
    print_table(
        f"sentinel event log: last {len(rows)} row(s)",
        ["id", "scope", "t_occ", "event", "at (UTC)", "source", "params", "outcome"],
        table,
    )


@log.command(name="export")
@db_options
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write the export to (must be new or empty).",
)
@click.option(
    "--buckets",
    default=16,
    show_default=True,
    type=count(1, 100_000),
    help="Files to deal the scopes into (by a hash of the scope): the most "
    "parallelism a replay of the export gets.",
)
@click.option(
    "--chunk-size",
    default=10_000,
    show_default=True,
    type=count(1, MAX_ROWS),
    help="Rows per database query (memory is bounded by this and --buckets).",
)
@click.option("--overwrite", is_flag=True, help="Replace what --out holds.")
@errors
def export(
    url: str,
    schema: str | None,
    prefix: str,
    out: str,
    buckets: int,
    chunk_size: int,
    overwrite: bool,
) -> None:
    """Export the event log to Parquet, in the layout replay reads fastest."""
    from rich.console import Console

    from sentinel.replay.export import export_log
    from sentinel.replay.sources import DatabaseSource

    require_database(url, schema)
    db = DatabaseSource(url, schema=schema, prefix=prefix, chunk_size=chunk_size)
    try:
        db.check()
        total = db.count()
    finally:
        db.close()
    console = Console(stderr=True)
    with progress(console) as bar:
        task = bar.add_task("exporting", total=total)
        manifest = export_log(
            url,
            out,
            buckets=buckets,
            schema=schema,
            prefix=prefix,
            chunk_size=chunk_size,
            overwrite=overwrite,
            progress=lambda n: bar.advance(task, n),
        )
    click.echo(
        f"exported {manifest['rows']:,} occurrences into {len(manifest['files'])} "
        f"bucket file(s) under {out}"
    )
