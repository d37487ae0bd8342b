"""Absolute events on a detector: signalled by the clock in the process scope,
armed only while listened."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sentinel import LocalEventDetector, VirtualClock, timers
from tests.temporal.timeline import Timeline


def clock_at(*args: int, tz: str = "UTC") -> VirtualClock:
    from zoneinfo import ZoneInfo

    zone = UTC if tz == "UTC" else ZoneInfo(tz)
    return VirtualClock(datetime(*args, tzinfo=zone), tz=zone)  # type: ignore[misc]


def times(seen: list[Any], tz: Any = UTC) -> list[str]:
    return [datetime.fromtimestamp(o.timestamp, tz).isoformat() for o in seen]


def test_daily_report_across_a_leap_day_and_a_month() -> None:
    tl = Timeline(clock=clock_at(2024, 2, 28, 16))
    seen = tl.watch("report", "<(17:00:00)*/*/*>")
    tl.clock.advance(3 * 86_400)
    assert times(seen) == [
        "2024-02-28T17:00:00+00:00",
        "2024-02-29T17:00:00+00:00",
        "2024-03-01T17:00:00+00:00",
    ]
    occ = seen[0]
    assert occ.scope == tl.det.process_scope.id and occ.params == {}
    assert occ.timestamp == occ.detected_timestamp  # a virtual clock fires on time


def test_every_minute_across_a_year_boundary() -> None:
    tl = Timeline(clock=clock_at(2024, 12, 31, 23, 58, 30))
    seen = tl.watch("tick", "<(*:*:00)*/*/*>")
    tl.clock.advance(150)
    assert times(seen) == [
        "2024-12-31T23:59:00+00:00",
        "2025-01-01T00:00:00+00:00",
        "2025-01-01T00:01:00+00:00",
    ]


def test_wild_card_granularity_every_second_of_an_hour() -> None:
    tl = Timeline(clock=clock_at(2024, 6, 1, 16, 59, 58))
    seen = tl.watch("all", "<(17:*:*)*/*/*>")
    tl.clock.advance(3600 + 10)
    assert len(seen) == 3600
    assert times(seen)[0] == "2024-06-01T17:00:00+00:00"
    assert times(seen)[-1] == "2024-06-01T17:59:59+00:00"


def test_in_the_clock_time_zone() -> None:
    tl = Timeline(clock=clock_at(2024, 3, 30, 12, tz="Europe/Paris"))
    seen = tl.watch("night", "<(02:30:00)*/*/*>")
    tl.clock.advance(2 * 86_400)
    # 02:30 does not exist in Paris on 2024-03-31
    assert times(seen, tl.clock.tz) == ["2024-04-01T02:30:00+02:00"]


def test_a_fixed_time_fires_once_and_a_past_one_never() -> None:
    tl = Timeline(clock=clock_at(2029, 12, 31, 23, 59, 59))
    once = tl.watch("once", "<(00:00:00)01/01/30>")
    past = tl.watch("past", "<(14:00:00)03/15/94>")
    tl.clock.advance(10 * 86_400)
    assert times(once) == ["2030-01-01T00:00:00+00:00"] and past == []
    assert timers(tl.det).scheduled_absolute() == {}


def test_armed_only_while_listened() -> None:
    tl = Timeline(clock=clock_at(2024, 1, 1))
    seen = tl.watch("r", "<(12:00:00)*/*/*>")
    svc = timers(tl.det)
    noon = datetime(2024, 1, 1, 12, tzinfo=UTC).timestamp()
    assert svc.scheduled_absolute() == {"<(12:00:00)*/*/*>": noon}
    rule = tl.det.get_rule("r")
    rule.disable()
    assert svc.scheduled_absolute() == {}
    tl.clock.advance(86_400)
    assert seen == [] and not [o for o in tl.log if o.event.startswith("<")]
    rule.enable()  # armed again, for the next match after now
    tl.clock.advance(86_400)
    assert times(seen) == ["2024-01-02T12:00:00+00:00"]


def test_one_timer_per_absolute_event_whatever_the_rules() -> None:
    tl = Timeline(clock=clock_at(2024, 1, 1))
    a = tl.watch("a", "<(12:00:00)*/*/*>")
    b = tl.watch("b", "E1 ; <(12:00:00)*/*/*>", "chronicle")
    tl.run("E1", 86_400)
    assert len(a) == 1 and len(b) == 1
    assert a[0] == b[0].parts[-1]  # one occurrence (one t_occ) reached both rules
    assert len([o for o in tl.log if o.event.startswith("<")]) == 1


def test_relative_to_an_absolute_event() -> None:
    tl = Timeline(clock=clock_at(2024, 1, 1))
    seen = tl.watch("r", "<(09:00:00)*/*/*> + [00:30:00]")
    tl.clock.advance(86_400)
    assert times([o.terminator for o in seen]) == ["2024-01-01T09:30:00+00:00"]


@pytest.mark.parametrize("flush", [True, False])
def test_combining_with_a_transaction_needs_flush_false(flush: bool) -> None:
    # The clock signals absolute events in the process scope: only process-wide
    # detection (flush=False) combines them with a transaction's events.
    tl = Timeline(clock=clock_at(2024, 1, 1, 16))
    seen = tl.watch("late", "E1 ; <(17:00:00)*/*/*>", flush=flush)
    with tl.det.transaction():
        tl.det.signal("E1")
    tl.clock.advance(3600)
    assert len(seen) == (0 if flush else 1)


def test_default_detector_clock_is_a_system_clock_started_lazily() -> None:
    from sentinel import SystemClock

    det = LocalEventDetector()
    det.explicit("E1")
    det.rule("r", "E1 + [01:00:00]", action=print)
    svc = timers(det)
    assert isinstance(svc.clock, SystemClock) and not svc.clock.running
    try:
        det.signal("E1")
        assert svc.clock.running and svc.pending() == 1
    finally:
        svc.clock.close()
    assert not svc.clock.running


def test_a_rule_change_while_an_absolute_event_fires_does_not_skip_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clock's thread pops a due match, then waits for the detector's lock;
    a rule changed meanwhile (by the thread holding it) re-armed the timer from
    now, and the firing found it re-armed and signalled nothing: that second
    was lost. Here the change is made where the wait would be."""
    from sentinel.temporal.service import TemporalService

    tl = Timeline(clock=clock_at(2024, 1, 1, 12, 0, 0))
    seen = tl.watch("tick", "<(*:*:*)*/*/*>")
    real = TemporalService.fire_absolute
    changes = iter(range(10))

    def fire(self: TemporalService, timer: Any, seq: int) -> None:
        n = next(changes, None)
        if n is not None:  # another thread defines a rule meanwhile
            tl.det.rule(f"unrelated{n}", "txn:begin", action=lambda o: None)
        real(self, timer, seq)

    monkeypatch.setattr(TemporalService, "fire_absolute", fire)
    tl.clock.advance(5)
    assert times(seen) == [f"2024-01-01T12:00:0{s}+00:00" for s in range(1, 6)]
