"""Fixtures for the reactive layer: a fresh detector per test, a clean default.

Toy reactive classes are defined inside the tests and bound to the test's own
detector (``class Stock(Reactive, detector=det)``), so tests never share event
names or wrappers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sentinel import LocalEventDetector, Occurrence, set_default_detector
from sentinel.detector.events import listen
from sentinel.occurrence import finished


@pytest.fixture
def det() -> LocalEventDetector:
    return LocalEventDetector()


@pytest.fixture
def fresh_default() -> Iterator[None]:
    """No default detector at the start of the test; the previous one is restored
    after it."""
    previous = set_default_detector(None)
    try:
        yield
    finally:
        set_default_detector(previous)


class Recorder:
    """Every primitive occurrence a detector sees (an occurrence listener, which
    also makes every event method of the detector signal)."""

    def __init__(self, det: LocalEventDetector) -> None:
        self.occurrences: list[Occurrence] = []
        listen(det, "occurrence", lambda o: self.occurrences.append(finished(o)))

    def events(self) -> list[str]:
        return [o.event for o in self.occurrences]

    def __iter__(self) -> Iterator[Occurrence]:
        return iter(self.occurrences)


def fired(det: LocalEventDetector, name: str, event: Any, **options: Any) -> list[Any]:
    """A rule ``name`` on ``event`` whose action records each detection."""
    out: list[Any] = []
    det.rule(name, event, action=out.append, **options)
    return out
