"""``sentinel global``: the global event detector service (rules over every
process's committed events, see docs/global.md)."""

from __future__ import annotations

import sys
from typing import Any

import click

from sentinel.cli.common import (
    EnvOption,
    Seconds,
    aborted,
    count,
    db_options,
    errors,
    importable_from_cwd,
    require_database,
    stop_on_signals,
)

__all__ = ["global_command"]


def _named(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from sentinel.global_detector.service import NAME_MAX

    if not value.strip():
        raise click.BadParameter("a cursor needs a name (not empty)")
    if len(value) > NAME_MAX:
        raise click.BadParameter(
            f"a global detector's name is at most {NAME_MAX} characters, not {len(value)}"
        )
    return value


@click.command(name="global")
@db_options
@click.option(
    "--rules",
    "rules",
    cls=EnvOption,
    envvar="SENTINEL_RULES",
    required=True,
    help="The global rules as package.module:attribute: a LocalEventDetector whose rules "
    "are all detached, or a zero-argument callable returning one. Or set SENTINEL_RULES.",
)
@click.option(
    "--name",
    default="global",
    show_default=True,
    callback=_named,
    help="The cursor's name: instances with one name share a position and a lease.",
)
@click.option(
    "--lease",
    default=30.0,
    show_default=True,
    type=Seconds(0.1),
    help="Seconds the cursor's lease outlives its holder's last renewal; a standby "
    "instance takes over after that.",
)
@click.option(
    "--poll",
    default=1.0,
    show_default=True,
    type=Seconds(0.01),
    help="Longest wait between reads of the log (polling backs off from 0.05 s up to "
    "this; PostgreSQL waits for NOTIFY, at most this long).",
)
@click.option(
    "--workers",
    default=0,
    show_default=True,
    type=count(0, 1024),
    help="Threads running the rules' actions, a read batch's in one transaction (0: in the "
    "service's thread, which keeps up best with busy writers; N: for slow actions).",
)
@click.option(
    "--action-lease",
    default=60.0,
    show_default=True,
    type=Seconds(0.1),
    help="Seconds an action's claim outlives its worker's last heartbeat.",
)
@click.option(
    "--max-ahead",
    default=300.0,
    show_default=True,
    type=Seconds(0),
    help="Rules with temporal events: skip (and report) a log row whose detection time "
    "is more than this many seconds ahead of this machine's clock.",
)
@click.option(
    "--max-late",
    default=86_400.0,
    show_default=True,
    type=Seconds(0),
    help="Rules with temporal events: skip (and report) a log row more than this many "
    "seconds behind the log's clock.",
)
@click.option(
    "--busy-timeout",
    default=30.0,
    show_default=True,
    type=Seconds(0),
    help="SQLite: seconds a statement waits for another connection's write lock before it "
    "fails (the driver's default is 5 s); ignored on other databases.",
)
@click.option(
    "--retry-delay",
    default=1.0,
    show_default=True,
    type=Seconds(0),
    help="Seconds a worker thread waits before it tries again an action it could not claim, "
    "or a batch it could not start (the database away, or locked past --busy-timeout).",
)
@click.option("--no-actions", is_flag=True, help="Only enqueue; `sentinel worker` acts.")
@click.option(
    "--until-idle", is_flag=True, help="Exit once the log is read to its end (for cron, tests)."
)
@errors
def global_command(
    url: str,
    schema: str | None,
    prefix: str,
    rules: str,
    name: str,
    lease: float,
    poll: float,
    workers: int,
    action_lease: float,
    max_ahead: float,
    max_late: float,
    busy_timeout: float,
    retry_delay: float,
    no_actions: bool,
    until_idle: bool,
) -> None:
    """Run the global event detector: read the log's committed occurrences of
    every process in commit order, detect the rules' events, run the rules
    detached through the outbox."""
    import threading

    from sentinel.global_detector import GlobalDetector
    from sentinel.orm import global_actions

    importable_from_cwd()
    require_database(url, schema)
    stop = threading.Event()
    if not until_idle:
        stop_on_signals(stop, "sentinel global")
    service = GlobalDetector(
        rules,
        url,
        name=name,
        schema=schema,
        prefix=prefix,
        lease=lease,
        max_wait=max(poll, 0.05),
        workers=workers,
        action_lease=action_lease,
        run_actions=not no_actions,
        actions=global_actions,
        max_ahead=max_ahead,
        max_late=max_late,
        busy_timeout=busy_timeout,
        retry_delay=retry_delay,
    )
    totals = {"rows": 0, "detections": 0}

    def report(r: Any) -> None:
        totals["rows"] += r.rows
        totals["detections"] += r.detections
        if not until_idle:
            click.echo(f"commit {r.position}: {r.rows} rows, {r.detections} detections")

    try:
        try:
            service.run(stop=stop, report=report, until_idle=until_idle)
            if service.attachment is not None and workers and not stop.is_set():
                service.attachment.runner.wait(60)
        finally:
            service.close()
    except KeyboardInterrupt:
        if not stop.is_set():
            raise
        raise aborted(f"sentinel global {name!r}") from None
    click.echo(
        f"sentinel global {name!r}: {totals['rows']} rows read, {totals['detections']} detections"
    )
    if service.ahead:
        click.echo(
            f"sentinel global {name!r}: {len(service.ahead)} log row(s) numbered ahead of the "
            "last commit number handed out were not read (see the log above and "
            "docs/global.md, 'Rows it cannot read')",
            err=True,
        )
    failures = service.attachment.runner.failures if service.attachment is not None else None
    if failures is not None and (failures.failed or failures.retried):
        click.echo(
            f"sentinel global {name!r}: actions failed: {failures.failed} for good, "
            f"{failures.retried} attempt(s) to retry (see the log above, and "
            "`sentinel worker --retry-failed`)",
            err=True,
        )
    if service.close_errors:
        raise click.ClickException(
            f"sentinel global {name!r} did not stop cleanly: " + "; ".join(service.close_errors)
        )
    if until_idle and failures is not None and failures.failed:
        sys.exit(1)  # for cron: actions failed for good in this run, as `worker --once`
