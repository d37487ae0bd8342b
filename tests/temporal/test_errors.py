"""Temporal events used wrongly: clear errors that say what and where, and
nothing half-applied."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import timers
from sentinel.detector import Mode, Subscription
from sentinel.detector.contexts import Context
from sentinel.errors import TemporalError, UnloggableParameter
from tests.temporal.timeline import Timeline


def test_an_unknown_sampler_is_refused_at_definition() -> None:
    tl = Timeline()
    tl.det.sampler("volume", lambda: 1)
    with pytest.raises(TemporalError, match=r"samples 'price'.*\(volume\).*sampler\('price', fn\)"):
        tl.watch("r", "P*(E1, [00:00:01] price, E3)")
    assert not tl.det.rules


def test_a_sampler_that_disappears_is_reported_when_due() -> None:
    tl = Timeline()
    tl.det.sampler("price", lambda: 1)
    seen = tl.watch("r", "P*(E1, [00:00:01] price, E3)")
    tl.run("E1")
    del tl.det.samplers["price"]
    with pytest.raises(TemporalError, match="not a sampler of this detector"):
        tl.clock.advance(1)
    tl.det.sampler("price", lambda: 2)
    tl.run(1, "E3")  # the interval went on after the failed tick
    (occ,) = seen
    assert occ.values("price") == (2,)


def test_a_failing_sampler_skips_its_tick() -> None:
    tl = Timeline()
    values = iter([1, None, 3])

    def sample() -> Any:
        v = next(values)
        if v is None:
            raise KeyError("no quote")
        return v

    tl.det.sampler("price", sample)
    seen = tl.watch("r", "P*(E1, [00:00:01] price, E3)")
    tl.run("E1", 1)
    with pytest.raises(TemporalError, match=r"sampler 'price' .* failed .*KeyError") as info:
        tl.clock.advance(1)
    assert isinstance(info.value.__cause__, KeyError)
    tl.run(1, "E3")
    (occ,) = seen
    assert occ.values("price") == (1, 3)
    assert [t.params["timer"]["n"] for t in occ.of("temporal:tick")] == [1, 3]


def test_an_unloggable_sample_is_refused() -> None:
    tl = Timeline()
    tl.det.sampler("price", lambda: object())
    tl.watch("r", "P*(E1, [00:00:01] price, E3)")
    tl.run("E1")
    with pytest.raises(UnloggableParameter, match="parameter 'price' of temporal:tick"):
        tl.clock.advance(1)


def test_a_temporal_node_wired_behind_the_detectors_back() -> None:
    from sentinel.algebra.syntax import parse

    tl = Timeline()
    # a hand-made subscription on an unresolved expression never met the detector's
    # timer service
    sub = Subscription(parse("E1 + [00:00:01]"), Mode(Context.RECENT), lambda o, s: None)
    tl.det.activate(sub)
    with pytest.raises(TemporalError, match="timers were never set up"):
        tl.det.signal("E1")


def test_counts_of_pending_timers() -> None:
    tl = Timeline()
    tl.watch("r", "E1 + [00:00:01]", "chronicle")
    tl.run("E1", "E1")
    assert timers(tl.det).pending() == 2 == timers(tl.det).clock.pending
    assert timers(tl.det) is timers(tl.det)
    with pytest.raises(TypeError):
        timers(object())  # type: ignore[arg-type]
