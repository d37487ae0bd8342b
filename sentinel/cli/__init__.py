"""The ``sentinel`` command.

``sentinel db upgrade|downgrade|current`` manage the log's tables with the
migrations shipped in the package; ``sentinel log show`` prints the latest log
rows, ``sentinel log firings`` the latest rule firings and why each fired;
``sentinel log export`` writes the log to Parquet and ``sentinel replay``
replays it through an application's rules, locally or on Spark; ``sentinel
worker`` runs detached rules; ``sentinel global`` runs the global event
detector and ``sentinel rules enable|disable`` switches its rules while it
runs; ``sentinel graph`` shows the event graph of an
application's rules; ``sentinel bicep`` checks, installs and runs BiCEPL
programs; ``sentinel ui`` serves a read-only web view of the log (the ``ui``
extra). Every command that needs a database takes ``--url`` (or
``SENTINEL_URL``), ``--schema`` (or ``SENTINEL_SCHEMA``) and ``--prefix``; every
command that needs the application's rules takes ``--rules package.module:attribute``
and imports it as ``python -m`` would (the current directory first).

Adding a command: write it in a module of its own in this package with
``@click.command()`` (or a group with ``@click.group()``), import what it needs
(detector, Spark, alembic, rich) inside the function, so ``sentinel --help`` stays
fast, and add it to :data:`main` below. Use :mod:`sentinel.cli.common`:
``@errors`` turns a :class:`~sentinel.errors.SentinelError` into a one-line
message and exit status 1, ``@db_options`` adds the database options,
``load_reference`` loads ``--rules``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from sentinel.cli.bicep import bicep
from sentinel.cli.common import quiet_broken_pipe
from sentinel.cli.db import db
from sentinel.cli.firings import firings
from sentinel.cli.global_ import global_command
from sentinel.cli.graph import graph_command
from sentinel.cli.log import log
from sentinel.cli.replay import replay_command
from sentinel.cli.rules import rules_group
from sentinel.cli.ui import ui_command
from sentinel.cli.worker import worker_command
from sentinel.extras import DISTRIBUTION

__all__ = ["main"]


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    click.echo(f"sentinel, version {version(DISTRIBUTION)}")
    ctx.exit()


class _Main(click.Group):
    """The ``sentinel`` group: output cut short by its reader
    (``sentinel log show | head -1``) ends a command quietly, with status 0
    (:func:`~sentinel.cli.common.quiet_broken_pipe`), not with an error."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # here, not at exit, where a broken pipe is reported
            return result
        except BrokenPipeError:
            quiet_broken_pipe()


@click.group(name="sentinel", cls=_Main)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_version,
    help="Show the version and exit.",
)
def main() -> None:
    """sentinel: active-database rules for SQLAlchemy applications."""


for _command in (
    db,
    log,
    replay_command,
    worker_command,
    global_command,
    rules_group,
    graph_command,
    bicep,
    ui_command,
):
    main.add_command(_command)
log.add_command(firings)


if __name__ == "__main__":  # pragma: no cover
    main()
