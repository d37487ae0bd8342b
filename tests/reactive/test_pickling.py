"""Listened classmethods and staticmethods pickle and copy as unlistened ones do
(a bound classmethod as ``getattr(cls, name)``, a staticmethod's function by its
qualified name), and what comes back still signals."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from sentinel import LocalEventDetector, Reactive, event
from sentinel.detector.events import listen, remove
from sentinel.occurrence import finished
from sentinel.reactive.info import class_info

DET = LocalEventDetector()  # module-level classes: pickle finds them by name


class Maker(Reactive, detector=DET):
    @event
    @classmethod
    def make(cls, x: int) -> int:
        return x

    @event
    @staticmethod
    def double(x: int) -> int:
        return 2 * x


class SubMaker(Maker):
    pass


CALLABLES = [
    ("Maker.make", lambda: Maker.make),
    ("SubMaker.make", lambda: SubMaker.make),
    ("Maker().make", lambda: Maker().make),
    ("Maker.double", lambda: Maker.double),
    ("SubMaker.double", lambda: SubMaker.double),
]


@pytest.fixture
def listened() -> Iterator[list[str]]:
    """Every event method of DET listened (an occurrence listener): the wrappers
    are in the classes. The events signalled meanwhile."""
    seen: list[str] = []

    def record(occ: Any) -> None:
        seen.append(finished(occ).event)

    listen(DET, "occurrence", record)
    try:
        info = class_info(Maker)
        assert info is not None and info.entries["make"].installed
        yield seen
    finally:
        remove(DET, "occurrence", record)


@pytest.mark.parametrize(("label", "get"), CALLABLES, ids=[c[0] for c in CALLABLES])
def test_a_listened_classmethod_or_staticmethod_pickles_as_unlistened(
    listened: Any, label: str, get: Any
) -> None:
    plain = get()
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(plain, protocol))
        assert back(3) == plain(3)
    assert listened[-1] in ("Maker.make:end", "Maker.double:end")  # the copy signals


@pytest.mark.parametrize(("label", "get"), CALLABLES, ids=[c[0] for c in CALLABLES])
def test_a_listened_classmethod_or_staticmethod_copies_as_unlistened(
    listened: Any, label: str, get: Any
) -> None:
    f = get()
    assert copy.copy(f)(4) == f(4)
    assert copy.deepcopy(f)(4) == f(4)
