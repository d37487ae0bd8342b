"""Occurrence-time order: any arrival order within the allowed lateness gives
the detections of the sorted stream; later occurrences are counted and reach
LATE(E) of the rule, never silently dropped."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import Context, LocalEventDetector, RuleDefinitionError, VirtualClock
from sentinel.bitemporal import too_late
from tests.bitemporal.model import sorted_stream

EXPRESSIONS = ["A ; B", "A ^ B", "A(A, B, C)", "A*(A, B, C)", "NOT(B)[A, C]", "(A ; B) by k"]


def in_operator_order(occ: Any) -> tuple[int, ...]:
    """The constituents' ``i`` in the order the operators combined them (their
    ``t_occ`` order is arrival order, which occurrence-time order changes)."""
    if not hasattr(occ, "parts"):
        return (occ.params["i"],)
    return tuple(i for p in occ.parts for i in in_operator_order(p))


def detections(
    det: LocalEventDetector, name: str, expression: str, context: Context, **kw: Any
) -> list[Any]:
    out: list[Any] = []
    det.rule(
        name,
        expression,
        context=context,
        flush=False,
        action=lambda o: out.append(in_operator_order(o)),
        **kw,
    )
    return out


@st.composite
def shuffled_within(draw: Any, lateness: float) -> tuple[list[tuple[str, float, int]], list[float]]:
    """Events with distinct occurrence times, and for each an arrival time no more
    than ``lateness`` after its occurrence (so arrival order is a permutation
    within the lateness)."""
    n = draw(st.integers(1, 25))
    names = draw(st.lists(st.sampled_from("ABC"), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    times, t = [], 0.0
    for g in gaps:
        t += g / 4  # 0.25 s steps
        times.append(t)
    delays = draw(
        st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, lateness]), min_size=n, max_size=n)
    )
    events = [(names[i], times[i], i) for i in range(n)]
    arrivals = [times[i] + delays[i] for i in range(n)]
    return events, arrivals


@pytest.mark.parametrize("context", list(Context), ids=str)
@pytest.mark.parametrize("expression", EXPRESSIONS)
@settings(max_examples=25, deadline=None)
@given(data=shuffled_within(1.0), chronon=st.sampled_from([None, 0.25, 1.0]))
def test_any_arrival_order_within_the_lateness_detects_as_the_sorted_stream(
    expression: str, context: Context, data: Any, chronon: float | None
) -> None:
    events, arrivals = data
    # the reference: the same events signalled in occurrence-time order, arrival order rule
    ref_det = LocalEventDetector(clock=VirtualClock(0.0))
    for e in "ABC":
        ref_det.explicit(e)
    want = detections(ref_det, "ref", expression, context)
    for name, _t, i in sorted_stream(events):
        ref_det.signal(name, i=i, k=i % 2)

    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=chronon)
    for e in "ABC":
        det.explicit(e)
    got = detections(det, "ordered", expression, context, order="occurrence", lateness=1.0)
    for (name, t, i), arrive in sorted(
        zip(events, arrivals, strict=True), key=lambda ea: (ea[1], ea[0][2])
    ):
        clock.set(arrive)
        det.signal_at(name, t, i=i, k=i % 2)
    clock.advance(5)
    assert got == want
    assert too_late(det, "ordered") == {}


def test_a_later_occurrence_is_counted_and_reaches_late_of_the_rule() -> None:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=0.5)
    det.explicit("A")
    det.explicit("B")
    seen: list[tuple[str, int]] = []
    r = det.rule(
        "pairs",
        "(A ; B) | LATE(A) | LATE(B, [00:00:02], [00:01:00])",
        flush=False,
        order="occurrence",
        lateness=1,
        action=lambda o: seen.append((str(o.event), *in_operator_order(o))),
    )
    clock.set(1.0)
    det.signal_at("A", 1.0, i=1)
    clock.set(2.0)
    det.signal_at("B", 1.5, i=2)
    clock.set(4.0)  # A and B released at the 2.5 tick: the watermark is 1.5
    assert seen == [("A ; B", 1, 2)]
    det.signal_at("A", 0.5, i=3)  # behind the watermark: too late for "A ; B"
    det.signal_at("B", 1.0, i=4)  # too late, delay 3 s: LATE(B, 2 s, 1 min)
    det.signal_at("B", 3.5, i=5)  # in time: waits for its release
    assert seen[1:] == [("A", 3), ("B", 4)]
    clock.set(10.0)
    assert too_late(det, r) == {"A": 1, "B": 1}
    assert seen[3:] == [("A ; B", 1, 5)]  # recent: A 1 still initiates; A 3 never took part


def test_it_needs_flush_false() -> None:
    det = LocalEventDetector()
    det.explicit("A")
    with pytest.raises(RuleDefinitionError, match="needs flush=False"):
        det.rule("r", "A", order="occurrence", action=print)
    with pytest.raises(RuleDefinitionError, match="order is 'arrival' or 'occurrence'"):
        det.rule("r", "A", order="time", flush=False, action=print)


def test_arrival_order_stays_the_default_and_unhooked() -> None:
    det = LocalEventDetector()
    det.explicit("A")
    det.explicit("B")
    r = det.rule("r", "A ; B", action=lambda o: None)
    assert r.lateness is None and r.lifespan is None
    det.signal("A")
    assert not det.graph.leaf_hooks  # no bitemporal service was needed


def test_late_bounds_mean_the_same_delay_in_both_orders() -> None:
    """Issue 29.2: ``LATE(E, min, max)`` compares the delay in chronons in
    occurrence-time order too, as in arrival order (chronon 1 s: A occurring at
    1001.9 and arriving at 1003 is 2 chronons late, not 1.1 s)."""
    clock = VirtualClock(1000.0)
    det = LocalEventDetector(clock=clock, chronon=1)
    det.explicit("A")
    det.explicit("X")
    late = "LATE(A, [00:00:02], [00:00:03])"
    by_arrival: list[float] = []
    by_occurrence: list[float] = []
    det.rule("arrival", late, action=lambda o: by_arrival.append(o.timestamp))
    det.rule(
        "occurrence",
        f"X | {late}",
        flush=False,
        order="occurrence",
        lateness=1,
        action=lambda o: by_occurrence.append(o.timestamp) if str(o.event) != "X" else None,
    )
    clock.set(1002.0)
    det.signal_at("X", 1002.0)  # released at the 1003 tick: the watermark is then 1002
    clock.set(1003.0)
    det.signal_at("A", 1001.9)  # behind the watermark: too late, 2 chronons
    assert too_late(det, "occurrence") == {"A": 1}
    assert by_arrival == by_occurrence == [1001.9]


@pytest.mark.parametrize("with_c", [False, True], ids=["alone", "with an unrelated rule"])
def test_an_unrelated_rule_never_moves_a_rules_watermark(with_c: bool) -> None:
    """Issue 29.1: lateness 1, A at 1000, C occurring at 1004 arriving at 1005, B
    occurring at 1002 arriving at 1006. "A ; B" detects whether or not a rule
    over C (same context and lateness) exists: C does not advance its watermark,
    and is not counted as too late for it."""
    clock = VirtualClock(1000.0)
    det = LocalEventDetector(clock=clock)
    for e in "ABC":
        det.explicit(e)
    seen: list[tuple[str, ...]] = []
    det.rule(
        "pairs",
        "(A ; B) | LATE(B)",
        flush=False,
        order="occurrence",
        lateness=1,
        action=lambda o: seen.append((str(o.event), *(str(c.event) for c in o.constituents))),
    )
    cs: list[float] = []
    if with_c:
        det.rule(
            "cs",
            "C",
            flush=False,
            order="occurrence",
            lateness=1,
            action=lambda o: cs.append(o.timestamp),
        )
    det.signal_at("A", 1000.0)
    clock.set(1005.0)
    det.signal_at("C", 1004.0)
    clock.set(1006.0)
    det.signal_at("B", 1002.0)
    clock.set(1010.0)
    assert seen == [("A ; B", "A", "B")]
    assert too_late(det, "pairs") == {}
    if with_c:
        assert cs == [1004.0]
        assert too_late(det, "cs") == {}
