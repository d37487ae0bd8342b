"""within / not_within: the shorthands are the Snoop expressions they stand for,
and detect what those detect, in every context. WITHIN gives each E1 its own
window (its lifespan in the node), whatever the context."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import Context, Not, Primitive, not_within, parse, within
from sentinel.bitemporal import Within
from tests.temporal.timeline import Timeline

R, CH, CO, CU, U = (
    Context.RECENT,
    Context.CHRONICLE,
    Context.CONTINUOUS,
    Context.CUMULATIVE,
    Context.UNRESTRICTED,
)
E1, E2 = Primitive("E1"), Primitive("E2")


def test_definitions() -> None:
    assert within(E1, E2, "00:00:10") == Within(E1, E2, 10)
    assert not_within(E1, E2, 10) == Not(E2, E1, E1 + 10)
    assert str(within(E1, E2, 10, key="k")) == "WITHIN(E1, E2, [00:00:10]) by k"
    assert parse(str(within(E1, E2, 10, key="k"))) == within(E1, E2, 10, key="k")
    assert parse(str(not_within(E1, E2, 10))) == not_within(E1, E2, 10)


# E1 at 0 and 6; E2 at 3, 12 and 22; t = 10.
WITHIN_STEPS: list[Any] = ["E1", 3, "E2", 3, "E1", 6, "E2", 10, "E2", 10]
WITHIN = {
    # the latest E1 (its window restarts at 6, so runs to 16): exactly "within t"
    R: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
    # chronicle: E2 at 3 consumes the first E1; the second's window [6, 16) takes E2 at 12
    CH: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
    # continuous: E1s are not consumed, but the first's window has closed by 12
    CO: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
    # cumulative: the first E1 with the first E2, both discarded; then the second
    CU: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
    U: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
}


@pytest.mark.parametrize("context", [R, CH, CO, CU, U], ids=str)
def test_within_without_key(context: Context) -> None:
    tl = Timeline()
    tl.watch("w", within(tl.det.event("E1"), tl.det.event("E2"), 10), context)
    tl.run(*WITHIN_STEPS)
    assert tl.labelled("w") == WITHIN[context]


@pytest.mark.parametrize("context", [R, CH, CO, CU, U], ids=str)
def test_within_with_a_key_gives_each_e1_its_window(context: Context) -> None:
    tl = Timeline()
    tl.watch("w", within(tl.det.event("E1"), tl.det.event("E2"), 10, key="k"), context)
    tl.det.signal("E1", k="a")
    tl.clock.advance(3)
    tl.det.signal("E2", k="a")
    tl.clock.advance(3)
    tl.det.signal("E1", k="b")
    tl.clock.advance(6)
    tl.det.signal("E2", k="b")  # 6 after b's E1: within
    tl.clock.advance(10)
    tl.det.signal("E2", k="b")  # 16 after: not within
    tl.det.signal("E2", k="a")  # 22 after: not within
    assert tl.labelled("w") == ["{e1^1, e2^1}", "{e1^2, e2^2}"]


def test_within_excludes_the_deadline_instant() -> None:
    tl = Timeline()
    tl.watch("w", within(tl.det.event("E1"), tl.det.event("E2"), 10))
    tl.run("E1", 10, "E2")  # the timer fires before what is signalled at its instant
    assert tl.detections["w"] == []


# E1 at 0 (followed by E2 at 3) and at 6 (not followed): t = 10.
NOT_STEPS: list[Any] = ["E1", 3, "E2", 3, "E1", 20]
NOT_WITHIN = {
    # the latest E1 has its own deadline (16): exactly "not followed within t"
    R: ["{e1^2, e1^2, t16}"],
    # the first E1's deadline (10) is paired with the oldest pending E1 (NOT's E3
    # takes the head): the second E1 is reported at 10, with the first's tick
    CH: ["{e1^1, e1^2, t10}"],
    CO: ["{e1^1, e1^2, t10}"],
    # cumulative E1 + [t]: both E1 wait for the first one's deadline
    CU: ["{e1^1, e1^2, e1^2, t10}"],
    U: ["{e1^1, e1^2, t10}", "{e1^2, e1^2, t16}"],
}


@pytest.mark.parametrize("context", [R, CH, CO, CU, U], ids=str)
def test_not_within_without_key(context: Context) -> None:
    tl = Timeline()
    tl.watch("n", not_within(tl.det.event("E1"), tl.det.event("E2"), 10), context)
    tl.run(*NOT_STEPS)
    assert tl.labelled("n") == NOT_WITHIN[context]


@pytest.mark.parametrize("context", [R, CH, CO, CU, U], ids=str)
def test_not_within_with_a_key_fires_at_each_deadline(context: Context) -> None:
    tl = Timeline()
    tl.watch("n", not_within(tl.det.event("E1"), tl.det.event("E2"), 10, key="k"), context)
    tl.det.signal("E1", k="a")
    tl.clock.advance(3)
    tl.det.signal("E2", k="a")
    tl.clock.advance(3)
    tl.det.signal("E1", k="b")
    tl.clock.advance(10)  # b's deadline at 16, with no further event
    assert tl.labelled("n") == ["{e1^2, e1^2, t16}"]
    assert tl.detections["n"][0].terminator.timestamp == tl.start + 16


def test_not_within_an_e2_at_the_deadline_is_late() -> None:
    tl = Timeline()
    tl.watch("n", not_within(tl.det.event("E1"), tl.det.event("E2"), 10))
    tl.run("E1", 10, "E2")
    assert tl.labelled("n") == ["{e1^1, e1^1, t10}"]
