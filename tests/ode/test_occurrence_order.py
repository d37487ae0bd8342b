"""Ode events in a rule in occurrence-time order: a point may arrive before one
it follows, and the records list the points in the order the automaton read
them (occurrence time), each once, as the same events fed in that order do."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import LocalEventDetector, VirtualClock, ode
from sentinel.occurrence import CompositeOccurrence

EXPRESSIONS = [
    "sequence(a, b)",
    "prior(a, b, c)",
    "relative(a, !before(c)) ^ b",
    "<2> a",
    "(a || b) | sequence(b, b)",
    "firstAfter(a, b, c)",
    "a * b",
]

LATENESS = 5.0


def shape(occ: Any) -> Any:
    """A record as the events' ``i`` in record order, composites nested by label."""
    if len(occ) == 8:
        return occ.params["i"]
    comp = occ if isinstance(occ, CompositeOccurrence) else CompositeOccurrence(*occ)
    return (str(comp.event), tuple(shape(p) for p in comp.parts))


def _detector() -> tuple[LocalEventDetector, VirtualClock]:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock)
    for name in "abc":
        det.explicit(name)
    return det, clock


def occurrence_order(events: list[tuple[float, float, str, int]], expr: str) -> list[Any]:
    det, clock = _detector()
    out: list[Any] = []
    det.rule(
        "r",
        ode.event(expr, over=list("abc")),
        flush=False,
        order="occurrence",
        lateness=LATENESS,
        action=lambda o: out.append(shape(o)),
    )
    for arrival, at, name, i in sorted(events):
        clock.set(arrival)
        det.signal_at(name, at, i=i)
    clock.advance(100)
    return out


def fed_sorted(events: list[tuple[float, float, str, int]], expr: str) -> list[Any]:
    det, _clock = _detector()
    out: list[Any] = []
    det.rule(
        "r", ode.event(expr, over=list("abc")), flush=False, action=lambda o: out.append(shape(o))
    )
    arrived = sorted(events)
    for _arrival, at, name, i in sorted(arrived, key=lambda e: (e[1], arrived.index(e))):
        det.signal_at(name, at, i=i)
    return out


@settings(max_examples=150, deadline=None)
@given(
    history=st.lists(
        st.tuples(
            st.integers(10, 30), st.sampled_from([0, 1, 2, 4, 5, -3]), st.sampled_from("abc")
        ),
        min_size=2,
        max_size=7,
    ),
    expr=st.sampled_from(EXPRESSIONS),
)
def test_records_in_occurrence_order_are_those_of_the_sorted_stream(
    history: list[tuple[int, int, str]], expr: str
) -> None:
    events = [(float(o + d), float(o), name, i) for i, (o, d, name) in enumerate(history)]
    assert sorted(map(repr, occurrence_order(events, expr))) == sorted(
        map(repr, fed_sorted(events, expr))
    )


def test_a_terminator_that_arrived_first_is_listed_last_and_once() -> None:
    """b occurred at 9 and arrived first, a occurred at 8: the record is a, b."""
    events = [(9.0, 9.0, "b", 1), (10.0, 8.0, "a", 0)]
    assert occurrence_order(events, "sequence(a, b)") == [
        ("ode{sequence(a, b) over (a, b, c)}", (0, 1))
    ]
