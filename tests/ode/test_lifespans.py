"""Ode events and lifespans: an automaton's state stands for the whole history
it read, so it cannot let one occurrence expire; a lifespan that would apply
to one is refused when the rule is defined, and the detector is unchanged."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sentinel import LocalEventDetector, VirtualClock, announce, event_class, ode
from sentinel.errors import BitemporalError


def _det() -> tuple[LocalEventDetector, VirtualClock]:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock)
    det.explicit("a")
    det.explicit("b")
    det.explicit("c")
    return det, clock


@pytest.mark.parametrize(
    "event",
    [
        lambda: ode.event("sequence(a, b)"),
        lambda: ode.event("relative(a, b)"),
        lambda: ode.event("prior(a, b)").by("k"),
        lambda: "ode{prior(a, b)} ; c",
    ],
    ids=["sequence", "relative", "keyed", "inside-snoop"],
)
def test_a_rule_lifespan_on_an_ode_event_is_refused_at_definition(event: Any) -> None:
    det, clock = _det()
    seen: list[Any] = []
    det.rule("plain", "a ; b", action=seen.append, context="chronicle")
    with pytest.raises(BitemporalError, match="cannot let its occurrences expire"):
        det.rule("r", event(), lifespan=timedelta(seconds=10), action=seen.append)
    assert list(det.rules) == ["plain"]
    # the detector works on: the timer ticks (it raised IndexError) and detects
    det.signal("a", k=1)
    clock.advance(20)
    det.signal("b", k=1)
    det.signal("c", k=1)
    clock.advance(20)
    assert len(seen) == 1  # "plain" paired a with b


def test_an_ode_event_reading_an_event_class_with_a_lifespan_is_refused() -> None:
    det, clock = _det()
    event_class(det, "D", key="k", lifespan="10s")
    with pytest.raises(BitemporalError, match="event class 'D' it reads has a lifespan"):
        det.rule("r", ode.event("relative(D, a)"), action=print)
    assert list(det.rules) == []
    announce(det, "D", 0.0, k=1)
    clock.advance(30)  # the class's own purge runs


def test_an_ode_event_that_remembers_nothing_takes_a_lifespan() -> None:
    """``ode{a}``: one state, no registers; nothing to expire, nothing refused."""
    det, clock = _det()
    seen: list[Any] = []
    det.rule("r", ode.event("a"), lifespan=timedelta(seconds=10), action=seen.append)
    det.signal("a")
    clock.advance(20)
    det.signal("a")
    assert len(seen) == 2
