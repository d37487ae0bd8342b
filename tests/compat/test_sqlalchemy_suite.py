"""SQLAlchemy's own ORM tests give the same outcome, test by test, with sentinel
attached to ``Session`` (rules on every transaction event and a deferred rule on
a database event) as without it, on SQLite and PostgreSQL.

The tests come from SQLAlchemy's source distribution for the installed version
(downloaded once and cached, see :mod:`tests.compat.sources`); they run against
the installed SQLAlchemy. A test that fails on this machine without sentinel
must fail the same way with it: only differences count.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.compat.harness import compare, run_both
from tests.compat.sources import SourceUnavailable, source_tree
from tests.conftest import SESSION_TAG, Server, _admin

pytestmark = pytest.mark.slow

FILES = [
    "test/orm/test_events.py",
    "test/orm/test_session.py",
    "test/orm/test_transaction.py",
    "test/orm/test_unitofworkv2.py",
    "test/orm/test_scoping.py",
]


@pytest.fixture(scope="module")
def sqlalchemy_tree() -> Path:
    try:
        return source_tree("SQLAlchemy")
    except SourceUnavailable as err:
        pytest.skip(f"SQLAlchemy's test suite is not available: {err}")


@pytest.fixture
def pg_databases(postgresql_server: Server) -> Iterator[tuple[str, str]]:
    """Two empty databases on the PostgreSQL server (one per run), with the
    schemas SQLAlchemy's suite expects."""
    names = [f"sentinel_compat_{SESSION_TAG}_{x}" for x in ("with", "without")]
    admin = _admin(postgresql_server.url)
    try:
        with admin.connect() as conn:
            for n in names:
                conn.exec_driver_sql(f'CREATE DATABASE "{n}"')
        urls = []
        for n in names:
            url = postgresql_server.url.set(database=n)
            eng = _admin(url)
            with eng.connect() as conn:
                for schema in ("test_schema", "test_schema_2"):
                    conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
            eng.dispose()
            urls.append(url.render_as_string(hide_password=False))
        yield urls[0], urls[1]
    finally:
        with admin.connect() as conn:
            for n in names:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)')
        admin.dispose()


def _check(sqlalchemy_tree: Path, tmp_path: Path, dburi: tuple[str, str] | None) -> None:
    with_run, without_run = run_both(
        sqlalchemy_tree,
        FILES,
        tmp_path,
        args_with=[] if dburi is None else ["--dburi", dburi[0]],
        args_without=[] if dburi is None else ["--dburi", dburi[1]],
    )
    assert len(without_run.outcomes) > 800, f"too few tests ran; see {without_run.output}"
    differences = compare(with_run, without_run)
    assert not differences, "\n".join(differences)
    # sentinel really was attached, its rules ran, and it survived SQLAlchemy's
    # fixtures clearing the session listeners
    stats = with_run.stats
    for event in ("txn:begin", "txn:pre_commit", "txn:commit", "txn:abort"):
        assert stats.get(event, 0) > 100, stats
    assert stats.get("listeners put back", 0) > 0, stats
    assert without_run.stats == {}


def test_sqlalchemy_orm_suite_on_sqlite(sqlalchemy_tree: Path, tmp_path: Path) -> None:
    _check(sqlalchemy_tree, tmp_path, None)


def test_sqlalchemy_orm_suite_on_postgresql(
    sqlalchemy_tree: Path, tmp_path: Path, pg_databases: tuple[str, str]
) -> None:
    _check(sqlalchemy_tree, tmp_path, pg_databases)


def test_the_comparison_sees_a_difference(tmp_path: Path) -> None:
    """The comparison is not blind: one test's outcome changed is reported."""
    from tests.compat.harness import Run

    a = Run({"t::x": "passed", "t::y": "failed"}, {}, {}, tmp_path)
    b = Run({"t::x": "passed", "t::y": "passed"}, {"t::y": "boom"}, {}, tmp_path)
    assert compare(a, a) == []
    (line,) = compare(a, b)
    assert line.startswith("t::y: with sentinel failed, without passed")
    assert sa.__version__  # the suite is for the installed version
