"""``sentinel worker``: run the detached rules waiting in the outbox."""

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

__all__ = ["worker_command"]


@click.command(name="worker")
@db_options
@click.option(
    "--rules",
    "rules",
    cls=EnvOption,
    envvar="SENTINEL_RULES",
    required=True,
    help="The application's rules as package.module:attribute: a LocalEventDetector, "
    "an Attachment (sentinel.attach's result), or a zero-argument callable returning one. "
    "Or set SENTINEL_RULES.",
)
@click.option("--once", is_flag=True, help="Drain what is due now, then exit.")
@click.option(
    "--poll",
    default=1.0,
    show_default=True,
    type=Seconds(0.01),
    help="Seconds to wait when nothing is due.",
)
@click.option(
    "--lease",
    default=60.0,
    show_default=True,
    type=Seconds(0.1),
    help="Seconds a claim outlives its worker's last heartbeat (renewed every lease/3 s "
    "while a rule runs); a worker that dies leaves its entry to others after that.",
)
@click.option(
    "--max-attempts",
    default=5,
    show_default=True,
    type=count(1, 1_000_000),
    help="Attempts per entry before it is marked failed.",
)
@click.option(
    "--retry-failed",
    is_flag=True,
    help="First set every failed entry back to pending, with its attempts reset "
    "(after fixing what made them fail).",
)
@errors
def worker_command(
    url: str,
    schema: str | None,
    prefix: str,
    rules: str,
    once: bool,
    poll: float,
    lease: float,
    max_attempts: int,
    retry_failed: bool,
) -> None:
    """Run the detached rules waiting in the outbox (after a restart, or as the
    dedicated worker of applications attached with workers=0)."""
    import threading

    import sqlalchemy as sa
    from sqlalchemy.orm import sessionmaker

    from sentinel.orm import Attachment, attach
    from sentinel.orm.worker import serve

    importable_from_cwd()

    target = load_target(rules)
    if isinstance(target, Attachment):
        _check_attachment(target, url, rules)
        attachment = target
        owned = False
    else:
        require_database(url, schema)
        _check_detached(target, rules)
        engine = sa.create_engine(url)
        try:
            attachment = attach(
                sessionmaker(engine),
                detector=target,
                schema=schema,
                prefix=prefix,
                workers=0,
                lease=lease,
                max_attempts=max_attempts,
            )
        except BaseException:
            engine.dispose()  # attach's schema check left a connection in its pool
            raise
        owned = True
    stop = threading.Event()
    if not once:
        stop_on_signals(stop, "sentinel worker")

    def report(drain: Any) -> None:
        click.echo(
            f"{drain.done} done, {drain.retried} to retry, {drain.failed} failed, "
            f"{drain.skipped} skipped"
        )

    try:
        if retry_failed:
            with attachment.engine().begin() as conn:
                n = attachment.runner.store.requeue(conn)
            click.echo(f"{n} failed entr{'y' if n == 1 else 'ies'} set back to pending")
        total = serve(attachment, poll=poll, once=once, stop=stop, report=report)
    except KeyboardInterrupt:
        if not stop.is_set():  # --once: Ctrl-C as click reports it
            raise
        raise aborted("sentinel worker") from None
    finally:
        if owned:
            attachment.detach()
            engine.dispose()  # the command made it: detach() leaves an engine to its maker
    click.echo(
        f"sentinel worker: {total.done} done, {total.retried} to retry, {total.failed} failed"
    )
    if once and total.failed:
        sys.exit(1)  # for cron and deploy hooks: entries failed for good in this run


def _check_detached(detector: Any, rules: str) -> None:
    """Refuse a rule set without detached rules: every entry of the outbox is a
    detached rule's, and the worker would mark each failed (a mistyped
    ``--rules``, not the application's rules)."""
    from sentinel.rules import Coupling

    detached = (Coupling.DETACHED, Coupling.DETACHED_INDEPENDENT)
    if not any(r.coupling in detached for r in detector.rules.values()):
        raise click.UsageError(
            f"--rules {rules} has no detached rule: the outbox holds detached rules' "
            "entries only, and each would fail; name the application's rules"
        )


def _check_attachment(attachment: Any, url: str, rules: str) -> None:
    """``--rules`` naming an attachment: it drains its own database, with its own
    settings. Refuse a ``--url`` of another database, and options given that it
    would ignore (instead of draining another outbox than the one asked for)."""
    import sqlalchemy as sa

    ctx = click.get_current_context()
    given = [
        f"--{name.replace('_', '-')}"
        for name in ("schema", "prefix", "lease", "max_attempts")
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        raise click.UsageError(
            f"--rules {rules} names an attachment, whose own settings apply: "
            f"{', '.join(given)} would be ignored; set them in attach(...), or name a "
            "detector instead"
        )
    mine = attachment.engine().url
    asked = sa.make_url(url)
    if _database(mine) != _database(asked):
        raise click.UsageError(
            f"--rules {rules} names an attachment on "
            f"{mine.render_as_string(hide_password=True)}, not on --url "
            f"{asked.render_as_string(hide_password=True)}: give its URL, or name a "
            "detector instead"
        )


def _database(url: Any) -> tuple[Any, ...]:
    """What tells databases apart in a URL (not the driver, not the password)."""
    from pathlib import Path

    if url.get_backend_name() == "sqlite":
        db = url.database
        return ("sqlite", str(Path(db).resolve()) if db not in (None, "", ":memory:") else db)
    return (url.get_backend_name(), url.host, url.port, url.database, url.username)


def load_target(reference: str) -> Any:
    """What ``sentinel worker --rules package.module:attribute`` names: a
    :class:`~sentinel.LocalEventDetector`, an
    :class:`~sentinel.orm.Attachment`, or a zero-argument callable returning
    one. Raises :class:`~sentinel.errors.RuleReferenceError` saying which step
    failed."""
    from sentinel.orm import Attachment
    from sentinel.rules import LocalEventDetector
    from sentinel.rules.reference import import_reference

    return import_reference(reference, (LocalEventDetector, Attachment))
