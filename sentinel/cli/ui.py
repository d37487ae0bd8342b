"""``sentinel ui``: serve the web view of a log, read-only unless
``--allow-actions`` (``docs/ui.md``)."""

from __future__ import annotations

import os
import socket

import click

from sentinel.cli.common import EnvOption, db_options, errors, load_reference, require_database

__all__ = ["ui_command"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: The ``Host`` headers answered when serving on the loopback interface: an
#: IPv6 address comes in brackets (``Host: [::1]:8000``), and Starlette
#: compares the host with them kept.
LOOPBACK_HOSTS = sorted(_LOOPBACK | {"[::1]"})
#: The environment variable holding the actions token (else a random one).
TOKEN_ENV = "SENTINEL_UI_TOKEN"


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
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Offer the actions that change state: retrying a failed outbox entry, and "
    "disabling or enabling a rule of a running global detector (sentinel global). "
    "A browser must first give the token printed at the start (or the value of "
    "SENTINEL_UI_TOKEN, at least 16 characters); every action is checked against "
    "CSRF and its origin.",
)
@errors
def ui_command(
    url: str,
    schema: str | None,
    prefix: str,
    rules_ref: str | None,
    host: str,
    port: int,
    allow_actions: bool,
) -> None:
    """Serve a web view of the log: rules and their event graph, rule firings
    and why each fired, the outbox and the global detectors' cursors, the
    event log. Read-only unless --allow-actions. Needs the ui extra."""
    from sentinel.extras import require

    require_database(url, schema)
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
    hosts = LOOPBACK_HOSTS if host in _LOOPBACK else None
    token = None
    if allow_actions:
        from sentinel.ui.actions import MIN_TOKEN, new_token

        given = os.environ.get(TOKEN_ENV)
        token = given if given else new_token()
        if len(token) < MIN_TOKEN:
            raise click.UsageError(
                f"{TOKEN_ENV} must be at least {MIN_TOKEN} characters (it has {len(token)}); "
                "unset it for a random token"
            )
    # Bound first: the URL shown is the one bound, and an address in use is an
    # error before anything is opened.
    sock = _bind(host, port)
    try:
        app = create_app(
            url,
            detector=det,
            schema=schema,
            prefix=prefix,
            allowed_hosts=hosts,
            actions_token=token,
        )
    except BaseException:
        sock.close()
        raise
    if host not in _LOOPBACK:
        what = "reads the log" + (", and may act with the token" if token else " (read-only)")
        click.echo(f"warning: serving on {host}: anyone who can reach it {what}", err=True)
    if token is not None:
        if os.environ.get(TOKEN_ENV):
            click.echo(f"actions allowed to a browser giving the token in {TOKEN_ENV}", err=True)
        else:
            click.echo(f"actions allowed to a browser giving the token {token}", err=True)
    click.echo(f"sentinel ui on {_url(sock)} (Ctrl+C stops it)", err=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to ``host`` and ``port`` (0: a free
    port), or a one-line error (the address in use, a host that does not
    resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise click.ClickException(f"cannot serve on {host}: {err.strerror or err}") from err
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise click.ClickException(
            f"cannot serve on {host} port {port}: {err.strerror or err}"
        ) from err
    return sock


def _url(sock: socket.socket) -> str:
    """The address ``sock`` is bound to, as a URL (an IPv6 address in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"
