"""``sentinel ui``: serve the read-only web view of a log (``docs/ui.md``)."""

from __future__ import annotations

import click

from sentinel.cli.common import EnvOption, db_options, errors, load_reference

__all__ = ["ui_command"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@click.command(name="ui")
@db_options
@click.option(
    "--rules",
    "rules_ref",
    cls=EnvOption,
    envvar="SENTINEL_RULES",
    default=None,
    help="The application's rules (package.module:attribute): adds the rules and their "
    "event graph. Or set SENTINEL_RULES.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@errors
def ui_command(
    url: str, schema: str | None, prefix: str, rules_ref: str | None, host: str, port: int
) -> None:
    """Serve a read-only web view of the log: rules and their event graph,
    rule firings and why each fired, the outbox and the global detectors'
    cursors, the event log. Needs the ui extra."""
    from sentinel.extras import require

    require("ui", "sentinel ui")
    import uvicorn

    from sentinel.rules import LocalEventDetector
    from sentinel.ui import create_app

    det = None
    if rules_ref is not None:
        det = load_reference(rules_ref, (LocalEventDetector,))
    # On the loopback interface, answer only requests addressed to it: a web
    # page elsewhere cannot reach the view through a name it controls (DNS
    # rebinding).
    hosts = sorted(_LOOPBACK) if host in _LOOPBACK else None
    app = create_app(url, detector=det, schema=schema, prefix=prefix, allowed_hosts=hosts)
    if host not in _LOOPBACK:
        click.echo(
            f"warning: serving on {host}: anyone who can reach it reads the log (read-only)",
            err=True,
        )
    click.echo(f"sentinel ui on http://{host}:{port}/ (Ctrl+C stops it)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
