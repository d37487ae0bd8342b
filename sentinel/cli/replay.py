"""``sentinel replay``: replay the event log through an application's rules."""

from __future__ import annotations

import click

from sentinel.cli.common import (
    EnvOption,
    count,
    errors,
    importable_from_cwd,
    progress,
    require_database,
)

__all__ = ["replay_command"]


@click.command(name="replay")
@click.option(
    "--rules",
    "rules",
    cls=EnvOption,
    envvar="SENTINEL_RULES",
    required=True,
    help="The rules as package.module:attribute (a LocalEventDetector, or a "
    "zero-argument callable returning one). Or set SENTINEL_RULES.",
)
@click.option(
    "--url",
    "--source",
    "source",
    cls=EnvOption,
    required=True,
    envvar="SENTINEL_URL",
    help="A database URL (e.g. sqlite:///app.db) or the directory of a `sentinel log export` "
    "(--source is the same option). Or set SENTINEL_URL.",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default="local",
    show_default=True,
    help="Replay in this process, or on Spark.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory to write the detections to, as Parquet (default: only count them).",
)
@click.option("--overwrite", is_flag=True, help="Replace what --out holds.")
@click.option(
    "--partitions",
    type=count(1, 100_000),
    default=None,
    help="Spark: partitions to replay in (default: from the log's size, one per "
    "50,000 rows, at most four per core and one per export bucket).",
)
@click.option(
    "--partition-key",
    default=None,
    help="Spark: the parameter that splits rules with flush=False into "
    "partitions (default: they replay in one).",
)
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Spark master URL (ignored with --remote or under spark-submit).",
)
@click.option(
    "--remote", default=None, help="Spark Connect URL (sc://host:15002) instead of --master."
)
@click.option(
    "--fast-start/--no-fast-start",
    default=True,
    show_default=True,
    help="Spark, local master: start the JVM with the C1 compiler only and from a class "
    "archive kept in the cache directory (written by the first run; see docs/replay.md).",
)
@click.option(
    "--run-actions",
    is_flag=True,
    help="Local engine: run the actions of rules whose condition holds.",
)
@click.option(
    "--schema",
    default=None,
    envvar="SENTINEL_SCHEMA",
    help="Database schema holding the log tables.",
)
@click.option(
    "--prefix",
    default="sentinel_",
    show_default=True,
    envvar="SENTINEL_PREFIX",
    help="Table-name prefix of the log tables.",
)
@errors
def replay_command(
    rules: str,
    source: str,
    engine: str,
    out: str | None,
    overwrite: bool,
    partitions: int | None,
    partition_key: str | None,
    master: str,
    remote: str | None,
    fast_start: bool,
    run_actions: bool,
    schema: str | None,
    prefix: str,
) -> None:
    """Replay the event log through RULES and summarise the detections per rule."""
    import time

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from sentinel.replay import replay  # MissingExtraError names the extra to install
    from sentinel.replay.rules import cross_scope_rules, load_rules, per_scope_rules
    from sentinel.replay.sources import open_source

    importable_from_cwd()  # here and in local Spark workers
    started = time.perf_counter()
    det = load_rules(rules)  # a bad reference fails before any I/O
    require_database(source, schema)  # a URL (not an export's directory)
    if engine != "local" and run_actions:
        raise click.UsageError("--run-actions works with the local engine only")
    console = Console(stderr=True)
    # the source is checked (it exists, it is a log at this sentinel's schema
    # revision) before any work: before Spark starts, too
    src = open_source(source, schema=schema, prefix=prefix)
    total = 0
    try:
        src.check()
        # each pass reads the log (the occurrence-time pass only the events
        # its rules need: it ends short of its share, the bar then completes)
        if engine == "local":
            total = src.count() * (bool(per_scope_rules(det)) + bool(cross_scope_rules(det)))
    finally:
        close = getattr(src, "close", None)
        if close is not None:
            close()
    if engine == "local":
        with progress(console) as bar:
            task = bar.add_task("replaying", total=total)
            result = replay(
                source,
                rules,
                out=out,
                overwrite=overwrite,
                schema=schema,
                prefix=prefix,
                run_actions=run_actions,
                progress=lambda n: bar.advance(task, n),
            )
            bar.update(task, completed=total)
    else:
        from sentinel.replay.spark import session

        spark = session(master, remote=remote, fast_start=fast_start)
        result = replay(
            source,
            rules,
            engine="spark",
            spark=spark,
            out=out,
            overwrite=overwrite,
            partitions=partitions,
            partition_key=partition_key,
            schema=schema,
            prefix=prefix,
        )
        if result.per_rule is None:
            from sentinel.replay.spark import count_detections

            count_detections(result, rules)
    elapsed = time.perf_counter() - started
    per_rule, total = result.per_rule or {}, result.detections or 0
    failed = result.failed or {}
    console = Console()
    if console.is_terminal:
        table = Table(title=f"sentinel replay ({engine})")
        table.add_column("rule")
        table.add_column("detections", justify="right")
        if failed:
            table.add_column("of which failed", justify="right")
        for name, n in per_rule.items():
            # a rule's name is text, not rich markup (``alert[high]`` would lose
            # ``[high]``, ``[/x]paid`` would fail)
            table.add_row(Text(name), f"{n:,}", *([f"{failed.get(name, 0):,}"] if failed else []))
        table.add_row(
            Text("total", style="bold"),
            Text(f"{total:,}", style="bold"),
            *([Text(f"{sum(failed.values()):,}", style="bold")] if failed else []),
        )
        console.print(table)
    else:  # piped or redirected: plain lines a program can read (tab-separated)
        click.echo(f"sentinel replay ({engine})\nrule\tdetections" + ("\tfailed" if failed else ""))
        for name, n in [*per_rule.items(), ("total", total)]:
            if failed:
                k = sum(failed.values()) if name == "total" else failed.get(name, 0)
                click.echo(f"{name}\t{n}\t{k}")
            else:
                click.echo(f"{name}\t{n}")
    if failed:
        click.echo(
            f"{sum(failed.values()):,} detection(s) of {', '.join(failed)} failed: the "
            "condition (or action) raised, as it did online; the error column says what"
        )
    rate = result.events / elapsed if elapsed > 0 else 0.0
    click.echo(
        f"{result.events:,} events read from {result.source} in {elapsed:.2f} s "
        f"({rate:,.0f} events/s)" + (f"; detections written to {out}" if out else "")
    )
