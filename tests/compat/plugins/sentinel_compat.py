"""pytest plugin: another project's own test suite, with its outcome per test.

Loaded (``-p sentinel_compat``) into the pytest that runs SQLAlchemy's or
Flask-SQLAlchemy's tests from their source distribution, in both runs of the
compatibility suite. It always records each test's outcome to the JSON file
``$SENTINEL_COMPAT_RESULTS``. With ``SENTINEL_COMPAT_ATTACH=1`` it also
attaches sentinel to ``sqlalchemy.orm.Session`` (so to every session of the
process, Flask-SQLAlchemy's included) with rules on ``txn:begin``,
``txn:pre_commit``, ``txn:commit``, ``txn:abort`` and a deferred rule on a
database event, and puts sentinel's session listeners back before each test
(SQLAlchemy's fixtures clear every class-level session listener after the tests
of some classes). With ``SENTINEL_COMPAT_LOG=1`` the event log is on; Flask-SQLAlchemy's
engines are then migrated (sentinel's tables created by its alembic migrations)
as they are made. How often the rules ran, and how often the listeners had to be
put back, is recorded under ``"_sentinel"``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

RESULTS = os.environ["SENTINEL_COMPAT_RESULTS"]
ATTACH = os.environ.get("SENTINEL_COMPAT_ATTACH") == "1"
LOG = os.environ.get("SENTINEL_COMPAT_LOG") == "1"

_outcomes: dict[str, str] = {}
_stats: dict[str, int] = {}
_attachment: Any = None


def _count(name: str) -> Any:
    def action(occ: Any) -> None:
        _stats[name] = _stats.get(name, 0) + 1

    return action


def _attach() -> Any:
    import sqlalchemy as sa
    from sqlalchemy.orm import DeclarativeBase, Session

    import sentinel
    from sentinel import LocalEventDetector, Reactive
    from sentinel.orm import db_events

    det = LocalEventDetector()

    class _Base(Reactive, DeclarativeBase, detector=det):
        pass

    class CompatProbe(_Base):
        __tablename__ = "sentinel_compat_probe"
        id = sa.Column(sa.Integer, primary_key=True)

    for event in ("txn:begin", "txn:pre_commit", "txn:commit", "txn:abort"):
        det.rule(f"compat {event}", event, action=_count(event))
    det.rule(
        "compat deferred",
        db_events(CompatProbe).insert,
        action=_count("CompatProbe:insert"),
        coupling="deferred",
    )
    if LOG:
        _migrate_flask_engines()
    att = sentinel.attach(Session, detector=det, log=LOG, workers=0)
    write_groups = att.writer.write_groups

    def counted(conn: Any, groups: Any, **kw: Any) -> int:
        written = write_groups(conn, groups, **kw)
        _stats["log rows written"] = _stats.get("log rows written", 0) + written
        return written

    att.writer.write_groups = counted  # type: ignore[method-assign]
    return att


def _migrate_flask_engines() -> None:
    try:
        from flask_sqlalchemy import SQLAlchemy
    except ImportError:
        return
    import sqlalchemy as sa

    from sentinel.log import migrate

    make = SQLAlchemy._make_engine
    # new in-memory SQLite databases get a copy of one database the migrations
    # created (the same tables, made once instead of ~300 times)
    template = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool)
    migrate.upgrade(template)

    def _copy_template(dbapi_connection: Any, connection_record: Any) -> None:
        with template.connect() as src:
            src.connection.dbapi_connection.backup(dbapi_connection)

    def _make_engine(self: Any, bind_key: Any, options: Any, app: Any) -> Any:
        engine = make(self, bind_key, options, app)
        if engine.dialect.name == "sqlite" and engine.url.database in (None, "", ":memory:"):
            # copied into the database when it is first connected to, not now: a
            # connection opened here would stay in the engine's pool, which the
            # suite's tests that never connect do not dispose of (an unclosed
            # sqlite3 connection when the engine is collected)
            sa.event.listen(engine, "connect", _copy_template)
        else:
            migrate.upgrade(engine)
        _stats["engines migrated"] = _stats.get("engines migrated", 0) + 1
        return engine

    SQLAlchemy._make_engine = _make_engine  # type: ignore[method-assign]


_engines: list[Any] = []


def _track_flask_engines() -> None:
    """Each engine Flask-SQLAlchemy makes during a test is disposed of after the
    test (:func:`pytest_runtest_teardown`), in both runs: the suite never disposes
    of them, so an in-memory database's connection (kept by its ``StaticPool``) was
    closed only when the garbage collector reached the engine, a ResourceWarning
    its ``filterwarnings = error`` makes an error in whichever test then ran."""
    try:
        from flask_sqlalchemy import SQLAlchemy
    except ImportError:
        return
    make = SQLAlchemy._make_engine

    def _make_engine(self: Any, bind_key: Any, options: Any, app: Any) -> Any:
        engine = make(self, bind_key, options, app)
        _engines.append(engine)
        return engine

    SQLAlchemy._make_engine = _make_engine  # type: ignore[method-assign]


def _ensure_listening() -> None:
    from sqlalchemy import event as sa_event

    att = _attachment
    missing = [
        (name, fn) for name, fn in att._handlers if not sa_event.contains(att._listen_on, name, fn)
    ]
    if missing:
        # SessionEvents._clear() removed them: put all back, in their order
        for name, fn in att._handlers:
            if sa_event.contains(att._listen_on, name, fn):
                sa_event.remove(att._listen_on, name, fn)
        for name, fn in att._handlers:
            sa_event.listen(att._listen_on, name, fn)
        _stats["listeners put back"] = _stats.get("listeners put back", 0) + 1


def pytest_configure(config: pytest.Config) -> None:
    global _attachment
    _track_flask_engines()
    if ATTACH and _attachment is None:
        _attachment = _attach()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _attachment is not None:
        _ensure_listening()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    yield
    while _engines:
        _engines.pop().dispose()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = report.nodeid
    if report.when == "call" or report.failed or report.skipped:
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped:
            outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        else:
            outcome = "xpassed" if hasattr(report, "wasxfail") else "passed"
        if _outcomes.get(nodeid) in (None, "passed"):
            _outcomes[nodeid] = outcome
    if report.failed:
        _failures[nodeid] = report.longreprtext[-2000:]


_failures: dict[str, str] = {}


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _attachment is not None:
        _attachment.detach()
    with open(RESULTS, "w") as out:
        json.dump({"outcomes": _outcomes, "failures": _failures, "_sentinel": _stats}, out)
