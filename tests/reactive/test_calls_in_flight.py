"""A call in flight while its hierarchy moves to another detector.

The call finishes with the wrapper it started with; its end event goes where the
hierarchy signals when the method returns, if someone there needs it (reactive.md,
"Thread-safety"). The detector and its channel are read together: never one
detector's channel signalled on another detector (whose event graph does not know
it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import sentinel
from sentinel import LocalEventDetector, Reactive, event
from tests.reactive.conftest import fired


def moving_class(home: LocalEventDetector, target: list[Any]) -> Any:
    """A class whose methods bind its hierarchy to ``target[0]`` while they run."""

    class A(Reactive, detector=home):
        @event
        def m(self, x: int) -> int:  # the generated end-only wrapper
            sentinel.bind(A, target[0])
            return x

        @event("both")
        def n(self, x: int) -> int:  # the general wrapper
            sentinel.bind(A, target[0])
            return x

        @event("both")
        @classmethod
        def c(cls, x: int) -> int:
            sentinel.bind(A, target[0])
            return x

    return A


@pytest.mark.parametrize("name", ["m", "n", "c"])
def test_a_call_that_moves_its_hierarchy_signals_its_end_on_the_new_detector(
    name: str,
) -> None:
    det1, det2 = LocalEventDetector(), LocalEventDetector()
    A = moving_class(det2, [det2])  # defined on det2 (its names too), then moved to det1
    on_det2 = fired(det2, "r2", f"A.{name}:end")
    sentinel.bind(A, det1)
    on_det1 = fired(det1, "r1", f"A.{name}:end")
    begins = fired(det1, "b1", f"A.{name}:begin") if name != "m" else []
    target = A if name == "c" else A()
    assert getattr(target, name)(7) == 7
    assert on_det1 == []  # the end happened after the move
    assert [o.params["result"] for o in on_det2] == [7]
    assert len(begins) == (0 if name == "m" else 1)  # the begin, before it


@pytest.mark.usefixtures("fresh_default")
@pytest.mark.parametrize("name", ["m", "n", "c"])
def test_a_call_that_detaches_its_hierarchy_signals_no_end(name: str) -> None:
    det1 = LocalEventDetector()
    A = moving_class(det1, [None])  # bind(A, None) with no default detector: detached
    got = fired(det1, "r1", f"A.{name}:end")
    target = A if name == "c" else A()
    assert getattr(target, name)(3) == 3
    assert got == []


def test_calls_in_flight_while_another_thread_replaces_the_default_detector() -> None:
    class B(Reactive):  # follows the default detector
        @event
        def m(self, x: int) -> int:
            time.sleep(0.0002)
            return x

        @event("both")
        def n(self, x: int) -> int:
            time.sleep(0.0002)
            return x

    dets = [LocalEventDetector(), LocalEventDetector()]
    ends: list[list[Any]] = [[], []]
    with sentinel.using_default_detector(dets[0]):
        for d, got in zip(dets, ends, strict=True):
            sentinel.set_default_detector(d)
            for name in ("m", "n"):
                d.rule(f"r_{name}", f"B.{name}:end", action=got.append)
        errors: list[BaseException] = []
        stop = threading.Event()

        def call() -> None:
            b = B()
            while not stop.is_set():
                try:
                    b.m(1)
                    b.n(1)
                except BaseException as e:  # pragma: no cover - reported below
                    errors.append(e)
                    return

        t = threading.Thread(target=call)
        t.start()
        try:
            for i in range(400):
                sentinel.set_default_detector(dets[i % 2])
                time.sleep(0.0002)
        finally:
            stop.set()
            t.join()
    assert errors == []
    assert ends[0] and ends[1]
