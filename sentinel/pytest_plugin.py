"""sentinel's pytest plugin: deterministic fixtures for testing an application's
rules. Installed with sentinel (a ``pytest11`` entry point), so the fixtures are
there in every test suite; ``-p no:sentinel`` turns it off.

Fixtures (each fresh per test):

``sentinel_clock``
    A :class:`~sentinel.VirtualClock` at 2025-01-01 00:00 UTC: time moves only
    when the test says (``sentinel_clock.advance(60)``), and temporal events fire
    then.
``sentinel_detector``
    A :class:`~sentinel.LocalEventDetector` on that clock, and the default
    detector for the test (reactive classes that follow the default signal to it).
``sentinel_recorder``
    A :class:`~sentinel.testing.RuleRecorder` of that detector's rule runs:
    ``sentinel_recorder.assert_fired("rule", values={"order_id": (7, 7)})``.
``sentinel_engine``
    An engine on an SQLite file in the test's ``tmp_path``, with sentinel's tables
    (event log, rule firings, outbox) migrated; create your own tables on it.
``sentinel_sessions``
    A ``sessionmaker`` on that engine, attached to ``sentinel_detector`` with no
    worker threads: detached rules wait in the outbox until
    ``sentinel_attachment.drain()`` runs them, in the test's thread.
``sentinel_attachment``
    The :class:`~sentinel.Attachment` of ``sentinel_sessions``.

Everything is undone after the test: the attachment detached, the default
detector restored, the engine disposed. See ``docs/testing.md``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # sentinel is imported when a fixture is used, not at pytest start-up
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from sentinel import Attachment, LocalEventDetector, VirtualClock
    from sentinel.testing import RuleRecorder

__all__ = [
    "START",
    "sentinel_attachment",
    "sentinel_clock",
    "sentinel_detector",
    "sentinel_engine",
    "sentinel_recorder",
    "sentinel_sessions",
]

#: Where ``sentinel_clock`` starts.
START = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
def sentinel_clock() -> VirtualClock:
    """A virtual clock at :data:`START` (2025-01-01 00:00 UTC)."""
    from sentinel import VirtualClock

    return VirtualClock(START)


@pytest.fixture
def sentinel_detector(sentinel_clock: VirtualClock) -> Iterator[LocalEventDetector]:
    """A fresh detector on ``sentinel_clock``, the default detector for the test."""
    from sentinel import LocalEventDetector, using_default_detector

    det = LocalEventDetector(clock=sentinel_clock)
    with using_default_detector(det):
        yield det


@pytest.fixture
def sentinel_recorder(sentinel_detector: LocalEventDetector) -> Iterator[RuleRecorder]:
    """Every rule run of ``sentinel_detector`` during the test."""
    from sentinel.testing import RuleRecorder

    with RuleRecorder(sentinel_detector) as recorder:
        yield recorder


@pytest.fixture
def sentinel_engine(tmp_path: Path) -> Iterator[Engine]:
    """An SQLite file database with sentinel's tables at the current revision."""
    import sqlalchemy as sa

    from sentinel.log import migrate

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'sentinel-test.db'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def sentinel_attachment(
    sentinel_engine: Engine, sentinel_detector: LocalEventDetector
) -> Iterator[Attachment]:
    """A ``sessionmaker`` on ``sentinel_engine`` attached to ``sentinel_detector``
    (no worker threads: ``drain()`` runs detached rules)."""
    from sqlalchemy.orm import sessionmaker

    from sentinel import attach

    attachment = attach(sessionmaker(sentinel_engine), detector=sentinel_detector, workers=0)
    try:
        yield attachment
    finally:
        attachment.detach()


@pytest.fixture
def sentinel_sessions(sentinel_attachment: Attachment) -> sessionmaker[Session]:
    """The attached ``sessionmaker``: its transactions are detection scopes."""
    sessions: sessionmaker[Session] = sentinel_attachment.target
    return sessions
