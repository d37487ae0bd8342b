"""Test databases: an empty database per test on SQLite, PostgreSQL and MariaDB.

Request ``engine`` (or ``db_url``) and the test runs once per backend:

``sqlite``
    a database file in the test's ``tmp_path``.
``postgresql``
    a fresh schema (made the connection's ``search_path``) in a database created
    for this test session and dropped at its end. The server is
    ``SENTINEL_TEST_POSTGRES_URL`` or ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``;
    when the default answers nothing and ``initdb``/``pg_ctl`` exist (in PATH or
    ``/usr/lib/postgresql/*/bin``), a throwaway server is started in a temp dir
    (as ``nobody`` when running as root) and stopped at session end.
``mysql``
    a fresh database per test on ``SENTINEL_TEST_MYSQL_URL`` or
    ``mysql+pymysql://root@127.0.0.1:3306/test`` (MariaDB or MySQL).

Every name created on a server carries this session's random tag, so state left
by other runs never changes a result. A backend with no reachable server is
skipped with a message saying how to point the tests at one. Setting a URL
variable to ``skip`` skips that backend; ``SENTINEL_TEST_POSTGRES_URL=throwaway``
forces the throwaway PostgreSQL server. To run one backend only, override the
``backend`` fixture in a test with ``@pytest.mark.parametrize("backend", [...])``.
See DEVELOPERS.md.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest
import sqlalchemy as sa
from hypothesis import settings

# Hypothesis profiles (DEVELOPERS.md, "Property tests"). Every run, `make test`'s
# (and so CI's) and a plain `pytest`, uses "fixed" unless asked otherwise: every
# property draws the same examples on every run (seeded from the test function),
# so a result depends on the code alone and an unrelated change cannot turn it
# red with a newly drawn example; a failure prints the blob that reproduces it.
# New examples are asked for: `--hypothesis-profile=explore` (random, failures
# kept in .hypothesis/ and replayed first), or `make explore` (the long
# properties too). Tests set their own max_examples; profiles do not change it.
settings.register_profile("fixed", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("fixed")

BACKENDS = ("sqlite", "postgresql", "mysql")
POSTGRES_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
MYSQL_DEFAULT = "mysql+pymysql://root@127.0.0.1:3306/test"
SESSION_TAG = uuid.uuid4().hex[:8]
CONNECT_TIMEOUT = 3


def _render(url: sa.URL) -> str:
    return url.render_as_string(hide_password=False)


def _reachable(url: sa.URL) -> str | None:
    """None if a connection to ``url`` works, else the reason it does not."""
    engine = sa.create_engine(
        url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": CONNECT_TIMEOUT}
    )
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return None
    except Exception as err:  # any driver error means "not usable"
        orig = getattr(err, "orig", None) or err
        return str(orig).strip().splitlines()[0] if str(orig).strip() else repr(orig)
    finally:
        engine.dispose()


def _admin(url: sa.URL) -> sa.Engine:
    return sa.create_engine(
        url,
        poolclass=sa.pool.NullPool,
        isolation_level="AUTOCOMMIT",
        connect_args={"connect_timeout": CONNECT_TIMEOUT},
    )


@dataclass
class Server:
    """A reachable server: ``url`` is the session's own database on it."""

    name: str
    url: sa.URL
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    _admin_engine: sa.Engine | None = None

    def admin(self) -> sa.Engine:
        """An AUTOCOMMIT engine on the session's database that keeps one
        connection for the session: each test's namespaces are made and dropped
        through it, without a new server connection each time."""
        if self._admin_engine is None:
            self._admin_engine = sa.create_engine(
                self.url,
                pool_size=1,
                max_overflow=4,
                pool_pre_ping=True,
                isolation_level="AUTOCOMMIT",
                connect_args={"connect_timeout": CONNECT_TIMEOUT},
            )
            self.cleanups.insert(0, self._admin_engine.dispose)
        return self._admin_engine


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (a CI timeout, ``timeout``, a closed terminal) ends the run as
    Ctrl-C does, through the session fixtures' teardown: a throwaway
    PostgreSQL server (detached by ``pg_ctl``) is stopped and its data removed,
    where a plain SIGTERM left it running."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupted)


# -- PostgreSQL ----------------------------------------------------------------------
_PG_HINT = (
    "set SENTINEL_TEST_POSTGRES_URL to a server where that user may CREATE DATABASE "
    "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/postgres), or install PostgreSQL "
    "(initdb/pg_ctl) so the tests can start a throwaway server"
)


def _unavailable(backend: str, message: str) -> NoReturn:
    """Skip the tests needing ``backend``, or fail them where
    ``SENTINEL_TEST_REQUIRE`` (a comma-separated list: ``postgresql,mysql``, as
    CI sets it) says the backend must be there: a server gone missing must not
    turn a third of the suite into skips and a green run."""
    required = {b.strip() for b in os.environ.get("SENTINEL_TEST_REQUIRE", "").split(",")}
    if backend in required:
        pytest.fail(f"{message} (SENTINEL_TEST_REQUIRE requires {backend})", pytrace=False)
    pytest.skip(message)


def _version(bindir: str) -> tuple[int, ...]:
    """The version in ``/usr/lib/postgresql/<version>/bin/initdb``, as numbers."""
    name = Path(bindir).parent.parent.name
    return tuple(int(p) for p in re.findall(r"\d+", name))


def _pg_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl", path=str(Path(found).parent)):
        return Path(found).parent
    # the newest first, by number (as text, 9.6 came before 16)
    for initdb in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version, reverse=True):
        bindir = Path(initdb).parent
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_throwaway_postgres(bindir: Path) -> tuple[sa.URL, Callable[[], None]]:
    """initdb + pg_ctl start in a temp dir; returns the URL and a stop function.
    PostgreSQL refuses to run as root, so as root it runs as ``nobody``."""
    root = Path(tempfile.mkdtemp(prefix="sentinel-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
        prefix = ["runuser", "-u", "nobody", "--"]
    data, logfile, port = root / "data", root / "server.log", _free_port()

    def run(*args: str) -> None:
        subprocess.run(
            [*prefix, *args], check=True, capture_output=True, text=True, timeout=120, cwd=root
        )

    try:
        run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        run(
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(logfile),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
        detail = getattr(err, "stderr", "") or ""
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"could not start a throwaway PostgreSQL: {err} {detail}") from err

    def stop() -> None:
        with contextlib.suppress(Exception):
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)

    return sa.make_url(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"), stop


def _postgres_server() -> Server:
    configured = os.environ.get("SENTINEL_TEST_POSTGRES_URL", "").strip()
    if configured.lower() == "skip":
        _unavailable("postgresql", "PostgreSQL tests disabled (SENTINEL_TEST_POSTGRES_URL=skip)")
    cleanups: list[Callable[[], None]] = []
    if configured and configured.lower() != "throwaway":
        admin = sa.make_url(configured)
        why = _reachable(admin)
        if why:
            _unavailable(
                "postgresql",
                f"PostgreSQL at SENTINEL_TEST_POSTGRES_URL is not reachable ({why}): fix "
                "the URL (a server where that user may CREATE DATABASE), or unset it to "
                f"use {POSTGRES_DEFAULT} or a throwaway server from initdb/pg_ctl "
                "(SENTINEL_TEST_POSTGRES_URL=throwaway: always the latter)",
            )
    else:
        admin = sa.make_url(POSTGRES_DEFAULT)
        why = None if configured.lower() == "throwaway" else _reachable(admin)
        if configured.lower() == "throwaway" or why:
            bindir = _pg_bindir()
            if bindir is None:
                _unavailable(
                    "postgresql",
                    f"no PostgreSQL at {POSTGRES_DEFAULT} ({why}) and no initdb/pg_ctl "
                    "to start one; " + _PG_HINT,
                )
            try:
                admin, stop = _start_throwaway_postgres(bindir)
            except RuntimeError as err:
                _unavailable(
                    "postgresql",
                    f"no PostgreSQL at {POSTGRES_DEFAULT} ({why}) and {err}; " + _PG_HINT,
                )
            cleanups.append(stop)
    name = f"sentinel_test_{SESSION_TAG}"
    eng = _admin(admin)
    try:
        with eng.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            major = conn.dialect.server_version_info[0]
    finally:
        eng.dispose()
    force = " WITH (FORCE)" if major >= 13 else ""  # FORCE came with PostgreSQL 13

    def drop() -> None:
        eng = _admin(admin)
        try:
            with eng.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"{force}')
        except Exception as err:
            warnings.warn(f"could not drop test database {name}: {err}", stacklevel=1)
        finally:
            eng.dispose()

    cleanups.insert(0, drop)
    return Server("postgresql", admin.set(database=name), cleanups)


# -- MariaDB / MySQL -----------------------------------------------------------------
_MYSQL_HINT = (
    "set SENTINEL_TEST_MYSQL_URL to a MariaDB/MySQL server where that user may CREATE "
    "DATABASE (e.g. mysql+pymysql://root@127.0.0.1:3306/test)"
)


def _mysql_server() -> Server:
    configured = os.environ.get("SENTINEL_TEST_MYSQL_URL", "").strip()
    if configured.lower() == "skip":
        _unavailable("mysql", "MariaDB tests disabled (SENTINEL_TEST_MYSQL_URL=skip)")
    url = sa.make_url(configured or MYSQL_DEFAULT)
    why = _reachable(url)
    if why:
        where = "SENTINEL_TEST_MYSQL_URL" if configured else MYSQL_DEFAULT
        _unavailable("mysql", f"MariaDB/MySQL at {where} is not reachable ({why}); " + _MYSQL_HINT)
    return Server("mysql", url.update_query_dict({"charset": "utf8mb4"}))


# -- session servers and per-test namespaces -----------------------------------------
#: Modules with tests of a quarter of a minute or more that are in the fast tier
#: (not marked ``slow`` or ``spark``): they run first too.
LONG_MODULES = frozenset(
    {
        "tests/detector/test_model.py",
        "tests/detector/test_spelling.py",
        "tests/log/test_reader_merge.py",
        "tests/algebra/test_deep_expressions.py",
        "tests/ode/test_docs.py",
        "tests/test_params_fuzz.py",
        "tests/test_pytest_plugin.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with long tests (marked ``slow`` or ``spark``, or in
    :data:`LONG_MODULES`) run first, each module's tests together (its fixtures
    are made once), so that no long test is left to run alone at the end of a
    parallel run while the other workers wait.

    Long randomized runs (``@pytest.mark.explore``) belong to ``make explore``:
    skipped unless ``SENTINEL_LONG_PROPERTIES=1`` asks for them."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    long = {
        module(item)
        for item in items
        if item.get_closest_marker("slow") or item.get_closest_marker("spark")
    } | LONG_MODULES
    items.sort(key=lambda item: module(item) not in long)  # stable: order kept within
    if os.environ.get("SENTINEL_LONG_PROPERTIES"):
        return
    skip = pytest.mark.skip(reason="a long randomized run: make explore runs it")
    for item in items:
        if item.get_closest_marker("explore"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[Server]:
    server = _postgres_server()
    yield server
    for cleanup in server.cleanups:
        cleanup()


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[Server]:
    yield _mysql_server()


class Namespaces:
    """Creates empty schemas (PostgreSQL) or databases (MariaDB) for one test and
    drops them afterwards."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.created: list[str] = []

    def new(self) -> str:
        name = f"t_{SESSION_TAG}_{uuid.uuid4().hex[:10]}"
        with self.server.admin().connect() as conn:
            if self.server.name == "postgresql":
                conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
            else:
                conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        self.created.append(name)
        return name

    def url(self, name: str) -> sa.URL:
        """A URL whose default schema (PostgreSQL) or database (MariaDB) is ``name``."""
        if self.server.name == "postgresql":
            return self.server.url.update_query_dict({"options": f"-csearch_path={name}"})
        return self.server.url.set(database=name)

    def drop_all(self) -> None:
        with self.server.admin().connect() as conn:
            for name in reversed(self.created):
                try:
                    if self.server.name == "postgresql":
                        conn.exec_driver_sql("SET lock_timeout = '10s'")
                        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
                    else:
                        conn.exec_driver_sql("SET SESSION lock_wait_timeout = 10")
                        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
                except Exception as err:  # left for the session's database drop
                    warnings.warn(f"could not drop test namespace {name}: {err}", stacklevel=1)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The database backend of this test: ``sqlite``, ``postgresql`` or ``mysql``."""
    return str(request.param)


@pytest.fixture
def namespaces(backend: str, request: pytest.FixtureRequest) -> Iterator[Namespaces | None]:
    """Per-test schema/database factory for server backends (None for SQLite)."""
    if backend == "sqlite":
        yield None
        return
    server = request.getfixturevalue(f"{backend}_server")
    ns = Namespaces(server)
    yield ns
    ns.drop_all()


@pytest.fixture
def db_url(backend: str, namespaces: Namespaces | None, tmp_path: Path) -> str:
    """The URL (password included) of an empty database for this test."""
    if namespaces is None:
        return f"sqlite:///{tmp_path / 'test.db'}"
    return _render(namespaces.url(namespaces.new()))


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    """An Engine on this test's empty database, disposed after the test. On SQLite
    a writer waits up to 60 s for the lock (pysqlite's default is 5 s): tests that
    queue many writers run beside other xdist workers on a busy machine."""
    args = {"timeout": 60} if db_url.startswith("sqlite") else {}
    eng = sa.create_engine(db_url, connect_args=args)
    yield eng
    eng.dispose()


@pytest.fixture
def extra_schema(backend: str, namespaces: Namespaces | None) -> str:
    """The name of a second empty schema reachable through ``engine`` (a schema on
    PostgreSQL, a database on MariaDB); SQLite tests are skipped."""
    if namespaces is None:
        pytest.skip("SQLite has no schemas (short of ATTACH)")
    return namespaces.new()
