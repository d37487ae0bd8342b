"""Chronons: announcements of one chronon are processed at its closing tick, as
one instant's worth: the actions do not depend on how they were fed within it
(their order across instances, the clock readings, how many calls), with the
virtual and with the system clock."""

from __future__ import annotations

import random
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import LocalEventDetector, SystemClock, VirtualClock, announce, event_class, revoke
from sentinel.bitemporal import KINDS

CHRONON = 10.0

# (chronon, key, op, occurrence offset in chronons)
ANNOUNCEMENTS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.integers(0, 3),
        st.sampled_from(["set", "set", "revoke"]),
        st.integers(-2, 3),
    ),
    min_size=1,
    max_size=30,
)


def actions(det: LocalEventDetector) -> list[Any]:
    out: list[Any] = []
    for kind in KINDS:
        det.rule(
            kind,
            f"{kind}(D)",
            action=lambda o, kind=kind: out.append(
                (kind, o.params.get("k"), o.params["$revision"]["n"], o.timestamp)
            ),
        )
    det.rule(
        "pairs",
        "CHANGE(D) ; ANNOUNCEMENT(D)",
        context="chronicle",
        action=lambda o: out.append(("pair", *(c.params.get("k") for c in o.constituents))),
    )
    return out


def feed(items: list[tuple[int, int, str, int]], shuffle: random.Random | None) -> list[Any]:
    """Feed the announcements chronon by chronon: in the given order at each
    chronon's start, or (``shuffle``) at random readings within it, instances in
    a random order (each instance's own requests keep their order)."""
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=CHRONON)
    event_class(det, "D", key="k", lifespan=None)
    out = actions(det)
    alive: set[int] = set()
    for c in range(6):
        batch = [it for it in items if it[0] == c]
        if shuffle is not None:
            by_key: dict[int, list[Any]] = {}
            for it in batch:
                by_key.setdefault(it[1], []).append(it)
            order = [k for k in by_key for _ in by_key[k]]
            shuffle.shuffle(order)
            batch = [by_key[k].pop(0) for k in order]
            readings = sorted(shuffle.uniform(0, CHRONON * 0.999) for _ in batch)
        else:
            readings = [0.0] * len(batch)
        for (_c, k, op, offset), reading in zip(batch, readings, strict=True):
            clock.set(max(clock.now(), c * CHRONON + reading))
            if op == "revoke":
                if k in alive:
                    revoke(det, "D", k=k)
                    alive.discard(k)
            else:
                announce(det, "D", (c + offset) * CHRONON + 1, k=k)
                alive.add(k)
    clock.set(20 * CHRONON)
    return out


@settings(max_examples=80, deadline=None)
@given(items=ANNOUNCEMENTS, seed=st.integers(0, 2**16))
def test_any_chunking_within_chronons_gives_the_same_actions(
    items: list[tuple[int, int, str, int]], seed: int
) -> None:
    items = sorted(items, key=lambda it: it[0])  # chronon by chronon, stable within one
    assert feed(items, random.Random(seed)) == feed(items, None)


def test_within_a_chronon_only_the_net_effect_of_an_instance_counts() -> None:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=CHRONON)
    event_class(det, "D", key="k", lifespan=None)
    out = actions(det)
    announce(det, "D", 50.0, k=1)
    announce(det, "D", 60.0, k=1)  # same chronon: one announcement, at 60
    announce(det, "D", 70.0, k=2)
    revoke(det, "D", k=2)  # announced and revoked within the chronon: nothing
    assert out == []  # nothing before the tick
    clock.set(CHRONON)
    assert out == [("ANNOUNCEMENT", 1, 1, 60.0), ("FUTURE", 1, 1, 60.0)]


def test_ticks_run_on_the_system_clock() -> None:
    with SystemClock() as clock:
        det = LocalEventDetector(clock=clock, chronon=0.05)
        event_class(det, "D", key="k", lifespan=None)
        seen: list[float] = []
        det.rule("on time", "ONTIME(D)", action=lambda o: seen.append(time.time()))
        start = time.time()
        announce(det, "D", start, k=1)  # processed at the next tick
        announce(det, "D", start + 0.2, k=2)  # FUTURE, due at its chronon
        deadline = time.time() + 5
        while len(seen) < 2 and time.time() < deadline:
            time.sleep(0.01)
    assert len(seen) == 2
    assert seen[0] - start < 0.5 and seen[1] >= start + 0.15


def kinds_in_order(keys: list[Any], ops: list[tuple[str, Any, float]]) -> list[tuple[str, Any]]:
    """Announce ``keys`` in the chronon [0, 10) at occurrence time 1, then, in
    the chronon [100, 110), apply ``ops`` (``("set", key, o)`` or
    ``("revoke", key, _)``): the class's occurrences at the 110 tick, in order."""
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=CHRONON)
    event_class(det, "D", key="k", lifespan=None)
    out: list[tuple[str, Any]] = []
    det.rule(
        "all", "D", action=lambda o: out.append((o.params["$revision"]["kind"], o.params["k"]))
    )
    for k in keys:
        announce(det, "D", 1.0, k=k)
    clock.set(105.0)
    out.clear()
    for op, k, o in ops:
        if op == "revoke":
            revoke(det, "D", k=k)
        else:
            announce(det, "D", o, k=k)
    clock.set(110.0)
    return out


def test_a_revocation_takes_its_place_by_its_own_time() -> None:
    """Issue 29.4: a revocation occurs at its chronon's start (100), so an
    announcement occurring at 50 in the same chronon comes first, whatever the
    revoked instance's time (1)."""
    for ops in (
        [("revoke", "a", 0.0), ("set", "b", 50.0)],
        [("set", "b", 50.0), ("revoke", "a", 0.0)],
    ):
        assert kinds_in_order(["a"], ops) == [("announce", "b"), ("revoke", "a")]


def test_keys_sort_by_value() -> None:
    """Issue 29.4: keys 1, 2, 10 in that order, not "1", "10", "2"."""
    ops = [("set", k, 50.0) for k in (10, 2, 1)]
    assert kinds_in_order([], ops) == [("announce", 1), ("announce", 2), ("announce", 10)]
    ops = [("set", k, 50.0) for k in (1.5, 10, -3)]
    assert kinds_in_order([], ops) == [("announce", -3), ("announce", 1.5), ("announce", 10)]


def test_keys_that_cannot_be_compared_sort_numbers_first_then_by_type() -> None:
    """Numbers by value, then every other type by its name, values of a type by
    value (1, 2, 10, then the strings "a", "b"), whatever the arrival order."""
    want = [("announce", k) for k in (1, 2, 10, "a", "b")]
    keys: list[Any] = ["b", 10, "a", 2, 1]
    for shift in range(len(keys)):
        order = keys[shift:] + keys[:shift]
        assert kinds_in_order([], [("set", k, 50.0) for k in order]) == want
