"""Fixtures of the BiCEPL tests: a database with sentinel's tables, processors on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.bicep import Processor
from sentinel.log import migrate
from sentinel.rules import LocalEventDetector


def at(text: str) -> int:
    """Seconds since the epoch of a thesis-style time '7.4.14 09:00' (UTC)."""
    date, _, clock = text.partition(" ")
    d, mo, y = (int(x) for x in date.split("."))
    h, mi = (int(x) for x in clock.split(":"))
    return int(datetime(2000 + y, mo, d, h, mi, tzinfo=UTC).timestamp())


@pytest.fixture
def migrated(engine: sa.Engine) -> sa.Engine:
    """This test's database with sentinel's tables (event log and BiCEPL system tables)."""
    migrate.upgrade(engine)
    return engine


@pytest.fixture
def make(migrated: sa.Engine) -> Iterator[Callable[..., Processor]]:
    """Build and install processors on the test's database."""
    made: list[Processor] = []

    def build(program: str, **kwargs: Any) -> Processor:
        kwargs.setdefault("detector", LocalEventDetector())
        kwargs.setdefault("require_actions", False)
        proc = Processor(program, migrated, **kwargs)
        proc.install()
        made.append(proc)
        return proc

    yield build
    for p in made:
        p.close()
