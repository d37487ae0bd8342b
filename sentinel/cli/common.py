"""What every ``sentinel`` command shares: error reporting, the database options,
the progress bar, and loading an application's rules."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

__all__ = [
    "MAX_COUNT",
    "MAX_ROWS",
    "Seconds",
    "aborted",
    "count",
    "db_options",
    "errors",
    "lasting_database",
    "load_reference",
    "print_table",
    "progress",
    "quiet_broken_pipe",
    "require_database",
    "stop_on_signals",
]

F = TypeVar("F", bound=Callable[..., Any])


#: The longest duration an option takes: a century (a lease of 1e300 s failed
#: deep inside with an OverflowError; datetime arithmetic stops near 2.7e12 s).
MAX_SECONDS = 100 * 365.25 * 86_400


#: The most rows a listing shows (``--limit``/``-n``): more than a terminal or
#: a pipe needs, and far below what breaks (a ``deque`` of 2**63 entries, a
#: SQL ``LIMIT`` past a 64-bit integer failed with an ``OverflowError``).
MAX_ROWS = 1_000_000

#: The most of anything else counted by an integer option (attempts, files,
#: partitions, chunk rows): bounded so a value stored in, or compared with, a
#: database integer column cannot overflow it.
MAX_COUNT = 1_000_000_000


def count(min: int, max: int = MAX_COUNT) -> click.IntRange:
    """The type of an integer option: from ``min`` to ``max`` (click reports a
    value outside as a one-line usage error, before any work)."""
    return click.IntRange(min=min, max=max)


class Seconds(click.FloatRange):
    """A duration in seconds of at least ``min``: a finite number, at most
    :data:`MAX_SECONDS` (click's ``FloatRange`` lets ``nan`` and ``inf``
    through, which made a lease or a poll interval fail deep inside with a
    traceback, or spin)."""

    name = "seconds"

    def __init__(self, min: float) -> None:
        super().__init__(min=min)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        if seconds > MAX_SECONDS:
            self.fail(f"{value!r} seconds is more than a century", param, ctx)
        return seconds


def stop_on_signals(stop: Any, command: str) -> None:
    """Make SIGINT (Ctrl-C) and SIGTERM stop a long-running command: the first
    sets ``stop`` (the action running finishes, those not started are handed
    back to the outbox) and says so on stderr; the second aborts at once with
    a ``KeyboardInterrupt`` (the interrupted action's entry is retried: its
    claim is recorded as a failed attempt, or expires), which
    :func:`aborted` turns into exit status 130."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        line = f"{command}: stopping after the current action; Ctrl-C again to abort\n"
        # not click.echo: the main thread may be writing to stderr right now
        with contextlib.suppress(OSError):
            os.write(2, line.encode())

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def aborted(command: str) -> click.exceptions.Exit:
    """What a command stopped by a second signal (:func:`stop_on_signals`)
    raises: a one-line message on stderr, exit status 130 (128 + SIGINT, as
    a shell reports a command Ctrl-C ended)."""
    click.echo(f"{command}: aborted; the interrupted action runs again later", err=True)
    return click.exceptions.Exit(130)


def quiet_broken_pipe() -> NoReturn:
    """Exit with status 0, saying nothing, when the reader of standard output
    went away (``sentinel log show | head -1``: ``head`` took what it wanted).
    Standard output is pointed at the null device first, so what is still
    buffered is not written again at exit (which would fail the same way).

    Status 0, not 141 (128 + SIGPIPE, a shell's status for a command the
    signal killed): the reader had what it asked for, and a script with
    ``set -o pipefail`` must not fail on ``sentinel log show | head -1``."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's buffer)
        pass
    sys.exit(0)


def lasting_database(url: str, schema: str | None = None) -> None:
    """Refuse, before any work, a SQLite database no command can use: an
    in-memory one (empty, and gone when the command ends: the advice to run
    ``sentinel db upgrade`` on it could only fail), and a ``--schema`` other
    than ``main`` (a SQLite schema is a database attached to a connection, and
    the commands attach none: every statement on it would fail)."""
    import sqlalchemy as sa

    from sentinel.log.schema import sqlite_file

    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        return  # reported where the URL is used (or not a URL: an export directory)
    if parsed.get_backend_name() != "sqlite":
        return
    if sqlite_file(parsed) is None:
        raise click.UsageError(
            f"{url} is an in-memory SQLite database: empty, and gone when this command "
            "ends; give the path of a database file (sqlite:///path/to/app.db)"
        )
    if schema not in (None, "main"):
        raise click.UsageError(
            f"--schema {schema}: a SQLite database has no such schema (SQLite's schemas "
            "are databases attached to a connection, and sentinel's commands attach "
            "none); leave --schema out"
        )


def require_database(url: str, schema: str | None = None) -> None:
    """Refuse a SQLite URL whose file does not exist (connecting would create an
    empty database, only to find no log in it): a mistyped path is reported as
    such, and nothing is made. Refuses what :func:`lasting_database` does
    first."""
    import sqlalchemy as sa

    from sentinel.log.schema import sqlite_file

    lasting_database(url, schema)
    try:
        file = sqlite_file(url)
    except sa.exc.ArgumentError:
        return  # reported where the URL is used
    if file is not None and not file.exists():
        raise click.ClickException(f"no SQLite database at {file}")


def errors(fn: F) -> F:
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
        except ModuleNotFoundError as err:
            # A database driver or an optional package that an extra brings.
            from sentinel.errors import MissingExtraError
            from sentinel.extras import extra_for_module

            extra = extra_for_module(err.name)
            if extra is None:
                raise click.ClickException(
                    f"a module this command needs is not installed: {err}. For a database "
                    "URL, install its driver, or name one that sentinel's extras bring "
                    "(postgresql+psycopg://, mysql+pymysql://)"
                ) from err
            feature = "this database URL" if extra in ("postgresql", "mysql") else "this command"
            missing = MissingExtraError(feature, extra, err.name)
            raise click.ClickException(str(missing)) from err
        except (sqlalchemy.exc.DatabaseError, sqlalchemy.exc.InterfaceError) as err:
            # unreachable, refused, or not a database at all (a file that is not SQLite)
            orig = getattr(err, "orig", None) or err
            raise click.ClickException(f"cannot use the database: {orig}") from err
        except sqlalchemy.exc.ArgumentError as err:
            raise click.ClickException(f"bad database URL: {err}") from err
        except BrokenPipeError:
            raise  # the reader of the output went away: main exits quietly
        except OSError as err:  # a file the user named (too long, missing, ...), a socket
            name = str(err.filename or "")
            if not name:
                raise click.ClickException(f"{type(err).__name__}: {err}") from err
            if len(name) > 80:
                name = f"{name[:60]}... ({len(name):,} characters)"
            raise click.ClickException(f"cannot use {name}: {err.strerror or err}") from err

    return wrapper  # type: ignore[return-value]


class EnvOption(click.Option):
    """An option that can come from its environment variable instead: when both
    are missing, the error names the variable too (click's names the option only)."""

    def process_value(self, ctx: click.Context, value: Any) -> Any:
        try:
            return super().process_value(ctx, value)
        except click.MissingParameter as err:
            if not self.envvar:
                raise
            raise click.MissingParameter(
                ctx=ctx, param=self, message=f"Give it, or set {self.envvar}."
            ) from err


def db_options(fn: F) -> F:
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
        cls=EnvOption,
        required=True,
        envvar="SENTINEL_URL",
        help="SQLAlchemy database URL, e.g. sqlite:///app.db or "
        "postgresql+psycopg://user@host/db (or set SENTINEL_URL).",
    )(fn)
    return fn


def progress(console: Any) -> Any:
    """The progress bar of the long-running commands (on stderr, gone when done);
    nothing at all where ``console`` is not a terminal (a bar is not a log
    line: piped, rich would still write an empty line)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def importable_from_cwd() -> None:
    """Make the current directory's modules importable, as ``python -m`` does:
    in this process and in the processes it starts (local Spark workers read
    ``PYTHONPATH``). Every command that takes ``--rules`` calls this first, so
    ``--rules bank:detector`` works the same everywhere."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, *paths) if p)


def load_reference(reference: str, kinds: tuple[type, ...], *, hint: str = "") -> Any:
    """The object ``--rules`` names (``package.module:attribute``), imported with
    the current directory importable. Raises
    :class:`~sentinel.errors.RuleReferenceError` saying which step failed."""
    from sentinel.rules.reference import import_reference

    importable_from_cwd()
    return import_reference(reference, kinds, hint=hint)


def print_table(
    title: str,
    columns: list[str],
    rows: list[list[str]],
) -> None:
    """Print ``rows`` under ``columns``: as a rich table on a terminal wide enough
    for every value on one line; otherwise (piped, redirected, a narrow
    terminal) as plain lines, columns separated by two spaces, nothing wrapped or
    cut, so ``grep`` and ``cut`` see whole values whatever the width. Every
    value is printed as it is: a logged value holding ``[bold]`` or ``[/x]`` is
    text, not rich markup (which would restyle it, hide it, or fail)."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    if _on_terminal() and sum(widths) + 3 * len(widths) + 1 <= shutil.get_terminal_size()[0]:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(title))
        for name in columns:
            table.add_column(Text(name), no_wrap=True)
        for row in rows:
            table.add_row(*(Text(value) for value in row))
        Console().print(table)
        return
    click.echo(f"# {title}")
    for row in [columns, *rows]:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _on_terminal() -> bool:
    """Whether standard output is a terminal (:func:`print_table` draws a rich
    table there)."""
    return sys.stdout.isatty()
