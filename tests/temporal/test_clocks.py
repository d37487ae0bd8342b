"""Clocks: the virtual clock's determinism, the timer heap, the system clock's
scheduler thread (timing with a generous tolerance only) and its shutdown."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sentinel import LocalEventDetector, ReplayClock, SystemClock, VirtualClock, timers
from sentinel.errors import TemporalError
from sentinel.temporal import Clock


class TestVirtualClock:
    def test_moves_only_when_told(self) -> None:
        clock = VirtualClock(100.0)
        assert clock.now() == clock() == 100.0
        assert clock.advance(5) == 0 and clock.now() == 105.0
        assert clock.set(datetime(2024, 1, 1, tzinfo=UTC)) == 0
        assert clock.datetime() == datetime(2024, 1, 1, tzinfo=UTC)
        clock.advance(timedelta(hours=1))
        assert clock.datetime().hour == 1

    def test_fires_due_timers_in_order_each_at_its_time(self) -> None:
        clock = VirtualClock(0.0)
        fired: list[tuple[str, float]] = []
        for name, due in [("c", 3.0), ("a", 1.0), ("b", 2.0), ("a2", 1.0)]:
            clock.call_at(due, lambda n=name: fired.append((n, clock.now())))
        assert clock.pending == 4 and clock.next_due == 1.0
        assert clock.advance(2) == 3
        assert fired == [("a", 1.0), ("a2", 1.0), ("b", 2.0)]  # ties: order of scheduling
        assert clock.now() == 2.0
        clock.advance(10)
        assert fired[-1] == ("c", 3.0) and clock.pending == 0 and clock.next_due is None

    def test_timers_scheduled_while_moving_fire_in_the_same_move(self) -> None:
        clock = VirtualClock(0.0)
        fired: list[float] = []

        def again() -> None:
            fired.append(clock.now())
            if len(fired) < 5:
                clock.call_at(clock.now() + 1, again)

        clock.call_at(1, again)
        assert clock.advance(100) == 5 and fired == [1, 2, 3, 4, 5]

    def test_cancel_and_overdue(self) -> None:
        clock = VirtualClock(10.0)
        fired: list[str] = []
        t = clock.call_at(11, lambda: fired.append("x"))
        clock.cancel(t)
        clock.cancel(t)  # twice is fine
        clock.call_at(5, lambda: fired.append("late"))  # already due: next move
        assert clock.advance(0) == 1 and fired == ["late"]
        clock.advance(5)
        assert fired == ["late"] and clock.pending == 0

    def test_only_forward_and_not_from_its_own_timers(self) -> None:
        clock = VirtualClock(10.0)
        with pytest.raises(TemporalError, match="only moves forward"):
            clock.advance(-1)
        with pytest.raises(TemporalError, match="only moves forward"):
            clock.set(5)
        clock.call_at(11, lambda: clock.advance(1))
        with pytest.raises(TemporalError, match="moved from one of its own timers"):
            clock.advance(2)

    def test_a_failing_timer_stops_the_move_there(self) -> None:
        clock = VirtualClock(0.0)
        fired: list[float] = []
        clock.call_at(1, lambda: fired.append(1))
        clock.call_at(2, lambda: 1 / 0)
        clock.call_at(3, lambda: fired.append(3))
        with pytest.raises(ZeroDivisionError):
            clock.advance(10)
        assert clock.now() == 2 and fired == [1] and clock.pending == 1
        clock.advance(8)
        assert fired == [1, 3]

    def test_heap_is_compacted_when_mostly_cancelled(self) -> None:
        clock = VirtualClock(0.0)
        timers_ = [clock.call_at(float(i + 1), lambda: None) for i in range(10_000)]
        for t in timers_[:9_000]:
            clock.cancel(t)
        assert clock.pending == 1_000 and len(clock._heap) < 5_000
        assert clock.advance(20_000) == 1_000

    def test_time_zone_names(self) -> None:
        assert str(VirtualClock(tz="Europe/Paris").tz) == "Europe/Paris"
        assert VirtualClock(tz="UTC").tz is UTC
        with pytest.raises(TypeError):
            VirtualClock(tz=5)  # type: ignore[arg-type]


def test_replay_clock_never_fires() -> None:
    clock = ReplayClock(start=50.0)
    t = clock.call_at(1.0, lambda: pytest.fail("a replay clock fired"))
    assert t.armed and clock.pending == 1 and clock.now() == 50.0 and clock.next_due is None
    clock.cancel(t)
    assert clock.pending == 0


def test_a_detector_with_a_plain_function_clock_cannot_run_timers() -> None:
    det = LocalEventDetector(clock=lambda: 1000.0)
    det.explicit("E1")
    with pytest.raises(TemporalError, match="plain function"):
        det.rule("r", "E1 + [00:00:01]", action=print)
    assert not det.rules  # nothing half-applied
    det.signal("E1")  # the clock still stamps occurrences


def test_a_clock_object_stamps_occurrences() -> None:
    clock = VirtualClock(1234.5)
    det = LocalEventDetector(clock=clock)
    det.explicit("E1")
    occ = det.signal("E1")
    assert occ is not None and occ.timestamp == occ.detected_timestamp == 1234.5
    assert det.wall_clock is clock


# -- the system clock ------------------------------------------------------------------

#: How late a timer may fire on a loaded CI machine before the test calls it a
#: failure. The scheduler aims at the due time; this bounds nothing but bugs.
TOLERANCE = 2.0


class TestSystemClock:
    def test_a_timer_fires_on_time_from_the_scheduler_thread(self) -> None:
        with SystemClock() as clock:
            det = LocalEventDetector(clock=clock)
            det.explicit("E1")
            done = threading.Event()
            got: list[Any] = []

            def action(occ: Any) -> None:
                got.append((occ, threading.current_thread().name, time.time()))
                done.set()

            det.rule("r", "E1 + [00:00:00.2]", action=action)
            occ = det.signal("E1")
            assert occ is not None
            assert done.wait(10), "the timer never fired"
            ((detection, thread, ran_at),) = got
            tick = detection.terminator
            assert thread == "sentinel-timers"
            assert tick.timestamp == pytest.approx(occ.timestamp + 0.2, abs=1e-6)  # due
            assert tick.timestamp <= tick.detected_timestamp <= ran_at  # fired after due
            assert ran_at - tick.timestamp < TOLERANCE
        assert not clock.running

    def test_periodic_ticks_keep_their_schedule(self) -> None:
        with SystemClock() as clock:
            det = LocalEventDetector(clock=clock)
            det.explicit("start")
            det.explicit("stop")
            ticks: list[Any] = []
            three = threading.Event()

            def action(occ: Any) -> None:
                ticks.append(occ.terminator)
                if len(ticks) == 3:
                    three.set()

            det.rule("r", "P(start, [00:00:00.05], stop)", action=action)
            start = det.signal("start")
            assert start is not None and three.wait(10)
            det.signal("stop")
            first = [t for t in ticks[:3]]
            assert [t.params["timer"]["n"] for t in first] == [1, 2, 3]
            dues = [t.timestamp - start.timestamp for t in first]
            assert dues == pytest.approx([0.05, 0.10, 0.15], abs=1e-6)  # no drift
            assert all(t.detected_timestamp >= t.timestamp for t in first)
            time.sleep(0.15)
            n = len(ticks)
            time.sleep(0.2)
            assert len(ticks) == n  # stop closed the interval
            assert timers(det).pending() == 0

    def test_shuts_down_cleanly(self) -> None:
        clock = SystemClock()
        assert not clock.running  # no thread before the first timer
        fired = threading.Event()
        clock.call_at(time.time() + 0.01, fired.set)
        late = clock.call_at(time.time() + 3600, lambda: pytest.fail("fired after close"))
        assert clock.running and fired.wait(10)
        t0 = time.monotonic()
        clock.close()
        assert time.monotonic() - t0 < TOLERANCE  # woken at once, not after an hour
        assert not clock.running and clock.closed and late.armed
        clock.close()  # twice is fine
        with pytest.raises(TemporalError, match="closed"):
            clock.call_at(time.time(), lambda: None)

    def test_a_failing_timer_does_not_stop_the_scheduler(self) -> None:
        errors: list[BaseException] = []
        with SystemClock(on_error=errors.append) as clock:
            ok = threading.Event()
            now = time.time()
            clock.call_at(now + 0.01, lambda: 1 / 0)
            clock.call_at(now + 0.02, ok.set)
            assert ok.wait(10)
        assert len(errors) == 1 and isinstance(errors[0], ZeroDivisionError)

    @pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt, GeneratorExit])
    def test_a_timer_or_handler_raising_a_base_exception_does_not_end_the_thread(
        self, exc: type[BaseException]
    ) -> None:
        def raise_it(*_: Any) -> None:
            raise exc("from user code")

        for on_error in (None, raise_it):  # the timer raises; then its handler does too
            with SystemClock(on_error=on_error) as clock:
                ok = threading.Event()
                now = time.time()
                clock.call_at(now, raise_it)
                clock.call_at(now + 0.01, ok.set)
                assert ok.wait(10)
                assert clock.running

    def test_close_from_one_of_its_timers(self) -> None:
        clock = SystemClock()
        done = threading.Event()

        def stop() -> None:
            clock.close()
            done.set()

        clock.call_at(time.time(), stop)
        assert done.wait(10)
        deadline = time.monotonic() + TOLERANCE
        while clock.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not clock.running

    def test_local_time_zone_by_default(self) -> None:
        clock = SystemClock()
        assert clock.tz is None and clock.datetime().tzinfo is not None
        assert abs(clock.now() - time.time()) < TOLERANCE


def test_clock_is_abstract() -> None:
    with pytest.raises(NotImplementedError):
        Clock().now()


@pytest.mark.parametrize("amount", [float("nan"), float("inf"), float("-inf")])
def test_a_virtual_clock_refuses_a_time_that_is_not_finite(amount: float) -> None:
    """``advance(nan)`` fired a timer due in an hour and left the clock reading
    nan (every later advance fired whatever was pending); ``inf`` fired all."""
    clock = VirtualClock(100.0)
    fired: list[float] = []
    clock.call_at(3700.0, lambda: fired.append(clock.now()))
    with pytest.raises(TemporalError, match="a finite number of seconds"):
        clock.advance(amount)
    with pytest.raises(TemporalError, match="a finite number of seconds"):
        clock.set(amount)
    with pytest.raises(TemporalError, match="a finite number of seconds"):
        VirtualClock(amount)
    assert clock.now() == 100.0 and fired == []
    clock.advance(3600)
    assert fired == [3700.0]


def test_the_clock_threads_rules_in_a_transaction_keep_their_own_cascade_depth() -> None:
    """A transaction's timer fires in the clock's thread while the application
    runs a rule in the same transaction: both counted the cascade depth on the
    scope, each restoring the value it had read, and the depth at rest grew by
    one a round until every rule raised CascadeLimitError."""
    clock = SystemClock()
    det = LocalEventDetector(clock=clock, cascade_limit=3)
    try:
        a, b = det.explicit("A"), det.explicit("B")
        ticks: list[Any] = []
        det.rule(
            "timeout",
            a + timedelta(milliseconds=3),
            action=lambda o: (time.sleep(0.02), ticks.append(o)),
        )
        det.rule("onB", b, action=lambda o: time.sleep(0.01))
        with det.transaction() as scope:
            for _ in range(5):
                det.signal("A")  # this transaction's timer, due in 3 ms
                det.signal("B")  # a rule runs 10 ms here; the tick's rule starts meanwhile
                deadline = time.monotonic() + 2
                while len(ticks) < _ + 1 and time.monotonic() < deadline:
                    time.sleep(0.005)
                time.sleep(0.03)
                assert scope.depth == 0
        assert len(ticks) == 5
    finally:
        clock.close()


def test_a_dropped_detector_is_freed_and_an_idle_clocks_thread_ends() -> None:
    """The scheduler thread kept the last timer it fired in its locals while it
    slept, and with it the timer's handler, service and detector; and a clock
    nobody used any more (a detector's own) left its thread sleeping for ever."""
    import gc
    import weakref

    clock = SystemClock()
    clock.idle = 0.2
    det = LocalEventDetector(clock=clock)
    det.explicit("A")
    fired = threading.Event()
    det.rule("soon", det.event("A") + timedelta(milliseconds=5), action=lambda o: fired.set())
    det.signal("A")
    assert fired.wait(10)
    alive = weakref.ref(det)
    del det
    deadline = time.monotonic() + 5
    while (alive() is not None or clock.running) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert alive() is None
    assert not clock.running
    # a new timer starts a new thread
    again = LocalEventDetector(clock=clock)
    again.explicit("A")
    fired.clear()
    again.rule("soon", again.event("A") + timedelta(milliseconds=5), action=lambda o: fired.set())
    again.signal("A")
    assert fired.wait(10)
    clock.close()


def test_a_subscriber_in_the_clock_thread_that_ends_its_transaction_is_seen() -> None:
    """The clock's thread works in a transaction through a handle of its own
    (its own cascade depth); that handle reads the scope's status, so a
    subscriber there that ends the transaction is reported, as in any thread."""
    from sentinel.errors import ScopeError

    errors: list[BaseException] = []
    clock = SystemClock(on_error=errors.append)
    det = LocalEventDetector(clock=clock)
    try:
        det.explicit("A")
        ended = threading.Event()
        scope = det.begin()

        def end_it(occ: Any) -> None:
            det.abort(scope)
            ended.set()

        det.subscribe(det.event("A") + timedelta(milliseconds=5), end_it)
        with det.use_scope(scope):
            det.signal("A")
        assert ended.wait(10)
        deadline = time.monotonic() + 5
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [type(e) for e in errors] == [ScopeError]
        assert "ended the transaction it was called in" in str(errors[0])
    finally:
        clock.close()
