"""``sentinel bicep``: check, install and run BiCEPL programs.

Registered on the ``sentinel`` command in :mod:`sentinel.cli`; imports only click
at module level so ``sentinel --help`` stays fast.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from sentinel.cli.common import count, db_options, errors, lasting_database

__all__ = ["bicep"]


#: The longest program text read (a BiCEPL program is a few kilobytes; MariaDB
#: stores at most 64 KiB of one): a device or a runaway file is refused, not read
#: for ever.
MAX_PROGRAM = 1 << 20


def _log_tables(url: str, schema: str | None, prefix: str) -> None:
    """Create sentinel's tables where there are none; refuse a log at another
    schema revision (migrating one is ``sentinel db upgrade``'s decision, not a
    side effect of installing a program) or with tables missing."""
    import sqlalchemy as sa

    from sentinel.log import migrate
    from sentinel.log.schema import check_schema
    from sentinel.log.tables import log_tables

    if migrate.current(url, schema=schema, prefix=prefix) is None:
        migrate.upgrade(url, schema=schema, prefix=prefix)
        return
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            check_schema(conn, log_tables(schema, prefix))
    finally:
        engine.dispose()


def _read(path: str) -> tuple[str, str]:
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_PROGRAM + 1)
    except OSError as err:
        raise click.ClickException(f"cannot read {path}: {err.strerror}") from err
    if len(data) > MAX_PROGRAM:
        raise click.ClickException(
            f"{path} is not a BiCEPL program: longer than {MAX_PROGRAM:,} bytes"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise click.ClickException(
            f"{path} is not a BiCEPL program: not UTF-8 text (byte {err.start})"
        ) from err
    name = "".join(ch if ch.isalnum() else "_" for ch in p.stem.lower()).strip("_") or "bicep"
    if not name[0].isalpha():
        name = f"p_{name}"
    return text, name[:24]


@click.group()
def bicep() -> None:
    """BiCEPL: bitemporal event classes as SQL on your database (see docs/bicepl.md)."""


@bicep.command()
@click.argument("program", type=click.Path(dir_okay=False))
@click.option(
    "--dialect",
    default="sqlite",
    show_default=True,
    type=click.Choice(["sqlite", "postgresql", "mysql", "mariadb"]),
    help="The SQL dialect to read and write the queries in.",
)
@click.option("--name", default=None, help="The program's name (default: the file's name).")
@click.option(
    "--prefix",
    default="sentinel_",
    show_default=True,
    envvar="SENTINEL_PREFIX",
    help="Table-name prefix the program will be installed with: its class and action "
    "names must fit its tables' names.",
)
@errors
def check(program: str, dialect: str, name: str | None, prefix: str) -> None:
    """Compile PROGRAM and show its classes, the rewritten SQL of its complex
    classes and the SQL of its condition-action statements."""
    from sentinel.bicep.compiler import compile_program
    from sentinel.bicep.conditions import condition_sql, mentions_ontime
    from sentinel.bicep.tables import ProgramTables

    text, default = _read(program)
    compiled = compile_program(text, name=name or default, dialect=dialect, prefix=prefix)
    tables = ProgramTables(compiled, prefix=prefix)
    click.echo(
        f"program {compiled.name}: {len(compiled.classes)} class(es), "
        f"{len(compiled.actions)} action(s), digest {compiled.digest[:12]}"
    )
    for cls in compiled:
        d = cls.definition
        kind = "complex" if cls.complex else ("mutable" if cls.mutable else "immutable")
        life = "no lifespan" if d.lifespan is None else f"lifespan {d.lifespan} s"
        reads = (
            f", reads {', '.join(compiled.classes[c].name for c in cls.depends_on)}"
            if cls.depends_on
            else ""
        )
        click.echo(
            f"\n{d.name} ({kind}, stratum {cls.stratum}, key {', '.join(d.keys)}, {life}{reads})"
        )
        if cls.complex:
            click.echo("  rewritten query:")
            click.echo(f"    {compiled.logical_sql(d.name)}")
            sql, lineage = tables.physical_query(cls)
            click.echo("  as run on the database:")
            click.echo(f"    {sql}")
            if lineage is None:
                click.echo(
                    "  lineage: none (aggregates, DISTINCT or GROUP BY: results follow "
                    "their constituents as they expire)"
                )
        for i, st in enumerate(d.statements):
            click.echo(f"  statement {i + 1}: {st.text}")
            fired = "FIRED"
            cond = condition_sql(st.condition, dialect, fired)
            extra = "" if mentions_ontime(st.condition) else " (events that changed at the tick)"
            click.echo(f"    WHERE {cond}{extra}")


@bicep.command()
@click.argument("program", type=click.Path(dir_okay=False))
@db_options
@click.option("--name", default=None, help="The program's name (default: the file's name).")
@click.option(
    "--chronon", default="15m", show_default=True, help="Chronon length: seconds or 15m, 1h, ..."
)
@click.option("--archive", is_flag=True, help="Keep purged history in archive tables.")
@click.option("--upgrade", is_flag=True, help="Install a changed program as its next version.")
@click.option(
    "--keep",
    is_flag=True,
    help="With --upgrade: rename the old version's tables instead of dropping them.",
)
@errors
def install(
    program: str,
    url: str,
    schema: str | None,
    prefix: str,
    name: str | None,
    chronon: str,
    archive: bool,
    upgrade: bool,
    keep: bool,
) -> None:
    """Install PROGRAM in the database (creating sentinel's tables if needed)."""
    from sentinel.bicep.processor import Processor
    from sentinel.rules import LocalEventDetector

    if keep and not upgrade:
        raise click.UsageError("--keep goes with --upgrade (it keeps the old version's tables)")
    text, default = _read(program)
    chronon_value = _chronon(chronon)
    lasting_database(url, schema)
    # compiled first (Processor does, without connecting): a program that does
    # not compile creates nothing, sentinel's tables included
    proc = Processor(
        text,
        url,
        name=name or default,
        chronon=chronon_value,
        schema=schema,
        prefix=prefix,
        archive=archive,
        detector=LocalEventDetector(),
    )
    try:
        _log_tables(url, schema, prefix)
        version = proc.install(upgrade=upgrade, keep=keep)
    finally:
        proc.close()
    click.echo(f"program {proc.name} installed (version {version})")


def _chronon(value: str) -> int | str:
    from sentinel.bicep.times import duration

    chronon = int(value) if value.isascii() and value.isdigit() else value
    try:
        duration(chronon)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'--chronon'") from None
    return chronon


def _stream_times(records: list[dict[str, Any]]) -> list[int]:
    """The occurrence and detection times the stream's records name, in
    seconds; a time that is none is refused naming its line, as
    :func:`~sentinel.bicep.sources.load_stream` would."""
    from sentinel.bicep.times import seconds
    from sentinel.errors import BicepAnnouncementError

    out = []
    for r in records:
        for f in ("occ", "det"):
            if r.get(f) is None:
                continue
            try:
                out.append(seconds(r[f]))
            except (ValueError, TypeError) as err:
                raise BicepAnnouncementError(
                    f"{r.get('_where', '')}: {err}", event_class=str(r.get("class", "?"))
                ) from None
    return out


def _until(value: str | None) -> int | None:
    """``--until`` in seconds: an ISO 8601 time, or seconds since the epoch
    (digits, as the message refusing anything else lists them)."""
    import re

    from sentinel.bicep.times import seconds

    if value is None:
        return None
    number = re.fullmatch(r"\s*(\d+)(\.\d*)?\s*", value, flags=re.ASCII)
    try:
        if number is not None:
            whole = int(number.group(1))  # a fraction is dropped, as seconds() drops it
            return seconds(whole, what="--until")
        return seconds(value, what="--until")
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'--until'") from None


@bicep.command()
@click.argument("program", type=click.Path(dir_okay=False))
@db_options
@click.option(
    "--events",
    "events",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Stream file of announcements: JSON lines or CSV.",
)
@click.option("--name", default=None, help="The program's name (default: the file's name).")
@click.option(
    "--chronon", default="15m", show_default=True, help="Chronon length: seconds or 15m, 1h, ..."
)
@click.option(
    "--until",
    default=None,
    help=(
        "Process the ticks up to this time (ISO 8601, or seconds since the epoch; default: "
        "the tick of the latest"
        " occurrence or detection time in the stream file, so that all of it is acted on)."
    ),
)
@click.option("--archive", is_flag=True, help="Keep purged history in archive tables.")
@click.option("--upgrade", is_flag=True, help="Install a changed program as its next version.")
@click.option(
    "--max-ticks",
    default=1_000_000,
    show_default=True,
    type=count(1, 10**12),
    help="Refuse to start when a program with work at every tick (a class reading NOW) "
    "would process more ticks than this.",
)
@errors
def run(
    program: str,
    url: str,
    schema: str | None,
    prefix: str,
    events: str,
    name: str | None,
    chronon: str,
    until: str | None,
    archive: bool,
    upgrade: bool,
    max_ticks: int,
) -> None:
    """Run PROGRAM over the announcements in --events on the database at --url,
    tick by tick, and show the actions that fired."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from sentinel.bicep.pipeline import tick_of
    from sentinel.bicep.processor import Processor
    from sentinel.bicep.sources import load_stream, read_stream
    from sentinel.bicep.times import MAX_TIME, seconds
    from sentinel.cli.common import progress as _progress
    from sentinel.rules import LocalEventDetector

    text, default = _read(program)
    chronon_value, until_value = _chronon(chronon), _until(until)
    lasting_database(url, schema)
    # compiled first, as by `install`: a program that does not compile creates nothing
    proc = Processor(
        text,
        url,
        name=name or default,
        chronon=chronon_value,
        schema=schema,
        prefix=prefix,
        archive=archive,
        detector=LocalEventDetector(),
        require_actions=False,
    )
    try:
        _log_tables(url, schema, prefix)
        proc.install(upgrade=upgrade)
        records = list(read_stream(events))
        c = proc.chronon
        times = _stream_times(records)
        if until_value is None:
            # The tick of the latest instant the stream names (rounded up: a time
            # within a chronon is processed at the tick that ends it), so that
            # everything it announces is read and what it announces for the
            # future (an expiry, a delivery) is acted on at its tick.
            # (no tick falls after 9999-12-31: the last one before it)
            end = min(tick_of(max(times), c), (MAX_TIME // c) * c) if times else 0
        else:
            end = (until_value // c) * c  # what run_until processes: the ticks up to it
        every = proc.pipeline.every_tick
        if every:
            # each tick up to the end is processed (a year of one-second ticks:
            # days of work): refused before the stream is loaded
            # from the program's next tick (past ticks are not processed again;
            # for a program that ran before, that is after its last tick), else
            # from the stream's first
            pending = proc.next_tick()
            start = (
                int(pending.timestamp())
                if pending is not None
                else tick_of(min(times), c)
                if times
                else None
            )
            ticks = 0 if start is None else max(0, (end - start) // c + 1)
            if ticks > max_ticks:
                upto = f"{datetime.fromtimestamp(end, UTC):%Y-%m-%d %H:%M:%S} UTC"
                raise click.UsageError(
                    f"{ticks:,} ticks to process up to {upto}, each with work (class "
                    f"{', '.join(every)} reads the tick's time): more than --max-ticks "
                    f"{max_ticks:,}; give a nearer --until, a longer --chronon, or a larger "
                    "--max-ticks"
                )
        count = load_stream(proc, records)
        last = proc.last_tick
        if until_value is None and last is not None and int(last.timestamp()) >= end:
            # the program's clock is past the stream already (a run before, an
            # --upgrade): what it announces now is read at the next tick
            nxt = proc.next_tick()
            if nxt is not None:
                end = max(end, min(int(nxt.timestamp()), (MAX_TIME // c) * c))
        # what the stream holds that the ticks up to ``end`` leave out (an
        # announcement without ``det`` is detected now: after the stream's ticks)
        now = time.time()
        unread = sum(
            1 for r in records if (now if r.get("det") is None else seconds(r["det"])) > end
        )
        undated = sum(1 for r in records if r.get("det") is None)
        console = Console(stderr=True)
        first = proc.next_tick()
        total = 0 if first is None else max(0, (end - int(first.timestamp())) // c + 1)
        results: list[Any] = []
        with _progress(console) as bar:
            task = bar.add_task("ticks", total=total)

            def advance(result: Any) -> None:
                done = (int(result.tick.timestamp()) - int(first.timestamp())) // c + 1  # type: ignore[union-attr]
                bar.update(task, completed=min(done, total))
                results.append(result)

            proc.run_until(end, on_tick=advance)
            bar.update(task, completed=total)
    finally:
        proc.close()
    # every value is text, not rich markup: an announcement's "[/x] Milk" made
    # rich fail (after the ticks were committed), "[bold red]Eggs" showed as "Eggs"
    table = Table(title=Text(f"BiCEPL {proc.name}: actions"))
    for col in ("tick", "action", "event", "occurred", "because"):
        table.add_column(col)
    fired = 0
    for r in results:
        for a in r.actions:
            fired += 1
            key = ", ".join(f"{v}" for v in a.key.values())
            table.add_row(
                *(
                    Text(value)
                    for value in (
                        r.tick.strftime("%Y-%m-%d %H:%M"),
                        str(a),
                        f"{a.event_class} {key}",
                        "-" if a.occ_time is None else a.occ_time.strftime("%Y-%m-%d %H:%M"),
                        str(a.statement),
                    )
                )
            )
    Console().print(table)
    rejected = sum(len(r.rejected) for r in results)
    last = datetime.fromtimestamp(end, UTC)
    click.echo(
        f"{count} announcement(s), ticks up to {last:%Y-%m-%d %H:%M:%S} UTC, "
        f"{len(results)} tick(s) with work, {fired} action(s)"
        + (f", {rejected} announcement(s) rejected" if rejected else "")
        + (
            f", {unread} announcement(s) detected after the last tick not read yet"
            if unread
            else ""
        )
        + (
            f" ({undated} without a detection time ('det'), which is then now: give "
            "one, or --until)"
            if undated and unread
            else ""
        ),
        file=sys.stdout,
    )
