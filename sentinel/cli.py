"""The ``sentinel`` command.

``sentinel db upgrade|downgrade|current`` manage the log's tables with the
migrations shipped in the package; ``sentinel log show`` prints the latest log
rows; ``sentinel log export`` writes the log to Parquet and ``sentinel replay``
replays it through an application's rules, locally or on Spark. Every command
that needs a database takes ``--url`` (or ``SENTINEL_URL``), ``--schema`` (or
``SENTINEL_SCHEMA``) and ``--prefix``.

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
        "--prefix",
        default="sentinel_",
        show_default=True,
        envvar="SENTINEL_PREFIX",
        help="Table-name prefix of the log tables.",
    )(fn)
    fn = click.option(
        "--schema",
        default=None,
        envvar="SENTINEL_SCHEMA",
        help="Database schema holding the log tables (default: the connection's).",
    )(fn)
    fn = click.option(
        "--url",
        required=True,
        envvar="SENTINEL_URL",
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
@_db_options
@click.argument("revision")
@click.option("--sql", is_flag=True, help="Print the DDL instead of running it.")
@click.option("--yes", is_flag=True, help="Do not ask before dropping data.")
@_errors
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
@_db_options
@click.option(
    "--check",
    is_flag=True,
    help="Exit with status 1 unless the tables are at the revision this sentinel expects.",
)
@_errors
def current(url: str, schema: str | None, prefix: str, check: bool) -> None:
    """Show the revision of the log tables and whether it is the expected one."""
    from sentinel.log import migrate
    from sentinel.log.tables import SCHEMA_REVISIONS, SCHEMA_VERSION

    rev = migrate.current(url, schema=schema, prefix=prefix)
    if rev is None:
        click.echo(
            "none: sentinel's tables were never created here; run `sentinel db upgrade --url ...`"
        )
    elif rev == SCHEMA_VERSION:
        click.echo(f"{rev} (head)")
    elif rev in SCHEMA_REVISIONS:
        click.echo(
            f"{rev} (outdated: this sentinel expects {SCHEMA_VERSION}; "
            "run `sentinel db upgrade --url ...`)"
        )
    else:
        click.echo(
            f"{rev} (unknown to this sentinel, which expects {SCHEMA_VERSION}; upgrade sentinel)"
        )
    if check and rev != SCHEMA_VERSION:
        sys.exit(1)


# -- log ---------------------------------------------------------------------------
@main.group()
def log() -> None:
    """Inspect the event log."""


@log.command()
@_db_options
@click.option(
    "-n",
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many of the latest rows to show.",
)
@click.option("--event", "events", multiple=True, help="Only this event (repeatable).")
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeatable).")
@_errors
def show(
    url: str,
    schema: str | None,
    prefix: str,
    limit: int,
    events: tuple[str, ...],
    scopes: tuple[str, ...],
) -> None:
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
        params = json.dumps(
            encode_params(occ.params, event=occ.event), sort_keys=True, separators=(",", ":")
        )
        table.add_row(
            str(rid),
            str(occ.scope),
            str(occ.t_occ),
            occ.event,
            occ.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
            "" if occ.source is None else repr(occ.source),
            params,
            outcome or "-",
        )
    Console().print(table)


# -- log export and replay (sentinel.replay) ------------------------------------------
@log.command(name="export")
@_db_options
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
    type=click.IntRange(min=1),
    help="Files to deal the scopes into (by a hash of the scope): the most "
    "parallelism a replay of the export gets.",
)
@click.option(
    "--chunk-size",
    default=10_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows per database query (memory is bounded by this and --buckets).",
)
@click.option("--overwrite", is_flag=True, help="Replace what --out holds.")
@_errors
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

    db = DatabaseSource(url, schema=schema, prefix=prefix, chunk_size=chunk_size)
    try:
        db.check()
        total = db.count()
    finally:
        db.close()
    console = Console(stderr=True)
    with _progress(console) as bar:
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


@main.command(name="replay")
@click.option(
    "--rules",
    "rules",
    required=True,
    help="The rules as package.module:attribute (a LocalEventDetector, or a "
    "zero-argument callable returning one).",
)
@click.option(
    "--source",
    required=True,
    envvar="SENTINEL_URL",
    help="A database URL (e.g. sqlite:///app.db) or the directory of a `sentinel log export`.",
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
    type=click.IntRange(min=1),
    default=None,
    help="Spark: partitions to replay in (default: one per export bucket, "
    "else spark.sql.shuffle.partitions).",
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
@_errors
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
    import os
    import time

    from rich.console import Console
    from rich.table import Table

    try:
        from sentinel.replay import replay
        from sentinel.replay.rules import load_rules
        from sentinel.replay.sources import open_source
    except ImportError as err:
        raise click.ClickException(
            f"replay needs pyarrow and orjson (pip install 'sentinel[spark]'): {err}"
        ) from err

    # Like `python -m`: rules in the current directory are importable, here and by
    # local Spark workers.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, os.environ.get("PYTHONPATH")) if p)

    started = time.perf_counter()
    load_rules(rules)  # a bad reference fails before any I/O
    console = Console(stderr=True)
    if engine == "local":
        src = open_source(source, schema=schema, prefix=prefix)
        try:
            src.check()
            total = src.count()
        finally:
            close = getattr(src, "close", None)
            if close is not None:
                close()
        with _progress(console) as bar:
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
    else:
        if run_actions:
            raise click.UsageError("--run-actions works with the local engine only")
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
            counts = {
                r["rule"]: int(r["count"])
                for r in result.dataframe.groupBy("rule").count().collect()
            }
            result.per_rule = dict(sorted(counts.items()))
            result.detections = sum(counts.values())
    elapsed = time.perf_counter() - started
    table = Table(title=f"sentinel replay ({engine})")
    table.add_column("rule")
    table.add_column("detections", justify="right")
    for name, n in (result.per_rule or {}).items():
        table.add_row(name, f"{n:,}")
    table.add_row("[b]total[/b]", f"[b]{result.detections or 0:,}[/b]")
    Console().print(table)
    rate = result.events / elapsed if elapsed > 0 else 0.0
    click.echo(
        f"{result.events:,} events read from {result.source} in {elapsed:.2f} s "
        f"({rate:,.0f} events/s)" + (f"; detections written to {out}" if out else "")
    )


# -- worker (sentinel.orm) -------------------------------------------------------------
@main.command(name="worker")
@_db_options
@click.option(
    "--rules",
    "rules",
    required=True,
    help="The application's rules as package.module:attribute: a LocalEventDetector, "
    "an Attachment (sentinel.attach's result), or a zero-argument callable returning one.",
)
@click.option("--once", is_flag=True, help="Drain what is due now, then exit.")
@click.option(
    "--poll",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="Seconds to wait when nothing is due.",
)
@click.option(
    "--lease",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds an entry stays claimed; a worker that dies leaves it to others after that.",
)
@click.option(
    "--max-attempts",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Attempts per entry before it is marked failed.",
)
@_errors
def worker_command(
    url: str,
    schema: str | None,
    prefix: str,
    rules: str,
    once: bool,
    poll: float,
    lease: float,
    max_attempts: int,
) -> None:
    """Run the detached rules waiting in the outbox (after a restart, or as the
    dedicated worker of applications attached with workers=0)."""
    import os
    import signal
    import threading

    import sqlalchemy as sa
    from sqlalchemy.orm import sessionmaker

    from sentinel.orm import Attachment, attach
    from sentinel.orm.worker import load_target, serve

    cwd = os.getcwd()  # like `python -m`: rules in the current directory import
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    target = load_target(rules)
    if isinstance(target, Attachment):
        attachment = target
        owned = False
    else:
        engine = sa.create_engine(url)
        attachment = attach(
            sessionmaker(engine),
            detector=target,
            schema=schema,
            prefix=prefix,
            workers=0,
            lease=lease,
            max_attempts=max_attempts,
        )
        owned = True
    stop = threading.Event()
    if not once:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())

    def report(drain: Any) -> None:
        click.echo(
            f"{drain.done} done, {drain.retried} to retry, {drain.failed} failed, "
            f"{drain.skipped} skipped"
        )

    try:
        total = serve(attachment, poll=poll, once=once, stop=stop, report=report)
    finally:
        if owned:
            attachment.detach()
    click.echo(
        f"sentinel worker: {total.done} done, {total.retried} to retry, {total.failed} failed"
    )


if __name__ == "__main__":  # pragma: no cover
    main()


# -- graph ---------------------------------------------------------------------------------
@main.command(name="graph")
@click.option(
    "--rules",
    "rules_ref",
    required=True,
    help="The application's rules: 'package.module:attribute' naming a LocalEventDetector "
    "or a zero-argument callable returning one.",
)
@click.option("--dot", is_flag=True, help="Print the graph in Graphviz DOT instead.")
@_errors
def graph_command(rules_ref: str, dot: bool) -> None:
    """Show the event graph RULES compile to: one node per distinct sub-expression
    and parameter context in use, shared by the rules that need it.

    Pipe ``--dot`` into ``dot -Tsvg`` to draw it."""
    from sentinel.rules import LocalEventDetector
    from sentinel.rules.reference import import_reference

    det: LocalEventDetector = import_reference(rules_ref, (LocalEventDetector,))
    graph = det.graph
    graph.ensure()
    if dot:
        click.echo(_dot(det))
        return
    click.echo(f"{len(det.rules)} rule(s), {len(graph.handlers)} node(s) in use")
    for line in graph.describe():
        click.echo("  " + line)
    for rule in det.rules.values():
        state = "" if rule.enabled else " (disabled)"
        click.echo(
            f"  rule {rule.name}{state}: {rule.detected_expression} "
            f"[{rule.context}, {rule.coupling}, priority {rule.priority}]"
        )


def _dot(det: Any) -> str:
    """The graph as Graphviz DOT: primitive events, operator nodes per context,
    rules."""
    from sentinel.algebra import expressions as ex

    lines = ["digraph sentinel {", "  rankdir=BT;", '  node [fontname="Helvetica"];']

    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    ids: dict[Any, str] = {}
    for key, h in det.graph.handlers.items():
        expr, mode, _region = key
        ids[key] = f"h{h.hid}"
        label = f"{expr.op} ({mode.context}{'' if mode.flush else ', process-wide'})"
        lines.append(f"  h{h.hid} [shape=box, label={q(label)}, tooltip={q(str(expr))}];")
    leaves: set[str] = set()

    def source(child: Any, mode: Any, region: Any) -> str | None:
        if isinstance(child, ex.Keyed):
            inner = child.expression
            return (
                source(inner, mode, (*region, child))
                if not isinstance(inner, ex.Primitive)
                else source(inner, mode, region)
            )
        if isinstance(child, ex.Primitive):
            name = f"p_{abs(hash(child))}"
            if name not in leaves:
                leaves.add(name)
                lines.append(f"  {name} [shape=ellipse, label={q(child.label)}];")
            return name
        return ids.get((child, mode, region))

    for key in det.graph.handlers:
        expr, mode, region = key
        for slot, child in enumerate(expr.children):
            src = source(child, mode, region)
            if src is not None:
                lines.append(f"  {src} -> {ids[key]} [label={slot}];")
    for rule in det.rules.values():
        sub = rule._subscription
        name = f"r_{abs(hash(rule.name))}"
        lines.append(f"  {name} [shape=note, label={q('rule ' + rule.name)}];")
        src = source(sub.expression, sub.mode, ())
        if src is not None:
            lines.append(f"  {src} -> {name};")
    lines.append("}")
    return "\n".join(lines)


def _progress(console: Any) -> Any:
    """The progress bar of the long-running commands (on stderr, gone when done)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


# -- bicep (sentinel.bicep) ---------------------------------------------------------------
def _register_bicep() -> None:
    from sentinel.bicep.cli import bicep

    main.add_command(bicep)


_register_bicep()
