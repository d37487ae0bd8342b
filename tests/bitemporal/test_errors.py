"""Bad bitemporal input: a clear error naming the event, and nothing signalled,
detected or logged for it."""

from __future__ import annotations

import math
import threading
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from sentinel import (
    LocalEventDetector,
    Occurrence,
    Reactive,
    VirtualClock,
    announce,
    event,
    event_class,
    revoke,
)
from sentinel.bitemporal import bitemporal
from sentinel.detector.events import listen
from sentinel.errors import (
    BitemporalError,
    DuplicateEventError,
    OccurrenceTimeError,
    UnloggableParameter,
)
from sentinel.occurrence import finished


class Setup:
    def __init__(self, chronon: float | None = None) -> None:
        self.clock = VirtualClock(datetime(2024, 1, 1, tzinfo=UTC))
        self.det = LocalEventDetector(clock=self.clock, chronon=chronon)
        self.det.explicit("E")
        event_class(self.det, "Delivery", key="resource", lifespan=None)
        event_class(self.det, "ResourceLow", key="resource", mutable=False, lifespan=None)
        self.logged: list[Occurrence] = []
        listen(self.det, "occurrence", lambda o: self.logged.append(finished(o)))
        self.detected: list[Any] = []
        for text in (
            "E",
            "ANNOUNCEMENT(Delivery) | CHANGE(Delivery) | CANCELLATION(Delivery)",
            "ANNOUNCEMENT(ResourceLow) | CHANGE(ResourceLow)",
        ):
            self.det.rule(text, text, action=self.detected.append)

    def nothing_happened(self) -> bool:
        self.clock.advance(3600)
        return not self.logged and not self.detected


@pytest.mark.parametrize(
    "value", ["tomorrow", None, math.nan, math.inf, True, date(2024, 1, 1), [1.0]], ids=repr
)
def test_an_occurrence_time_that_is_not_a_time(value: Any) -> None:
    s = Setup()
    with pytest.raises(OccurrenceTimeError, match="occurrence time of E must be") as info:
        s.det.signal_at("E", value)
    assert info.value.event == "E" and info.value.value is value
    with pytest.raises(OccurrenceTimeError, match="occurrence time of Delivery"):
        announce(s.det, "Delivery", value, resource="milk")
    assert s.nothing_happened()


@pytest.mark.parametrize("chronon", [None, 60.0])
def test_a_revision_of_an_immutable_class(chronon: float | None) -> None:
    s = Setup(chronon)
    announce(s.det, "ResourceLow", s.clock.now(), resource="milk", amountLeft=1)
    s.clock.advance(120)
    before = list(s.logged), list(s.detected)
    with pytest.raises(
        BitemporalError, match=r"ResourceLow is IMMUTABLE: its instance \(resource='milk'\)"
    ) as info:
        announce(s.det, "ResourceLow", s.clock.now(), resource="milk", amountLeft=0)
    assert info.value.event == "ResourceLow"
    with pytest.raises(BitemporalError, match="cannot be revoked"):
        revoke(s.det, "ResourceLow", resource="milk")
    s.clock.advance(3600)
    assert (s.logged, s.detected) == before
    assert bitemporal(s.det).instances["ResourceLow"][("milk",)].attrs == {
        "resource": "milk",
        "amountLeft": 1,
    }


@pytest.mark.parametrize("chronon", [None, 60.0])
def test_a_revocation_of_an_unknown_key(chronon: float | None) -> None:
    s = Setup(chronon)
    with pytest.raises(
        BitemporalError, match=r"revocation of Delivery \(resource='eggs'\): no such"
    ) as info:
        revoke(s.det, "Delivery", resource="eggs")
    assert info.value.event == "Delivery"
    assert s.nothing_happened()


def test_a_key_revoked_once_is_unknown_after() -> None:
    s = Setup()
    announce(s.det, "Delivery", s.clock.now(), resource="milk")
    revoke(s.det, "Delivery", resource="milk")
    with pytest.raises(BitemporalError, match="no such instance"):
        revoke(s.det, "Delivery", resource="milk")


@pytest.mark.parametrize(
    "lifespan", [-5, 0, timedelta(seconds=-1), "-00:00:01", "forever"], ids=repr
)
def test_a_lifespan_that_is_not_positive(lifespan: Any) -> None:
    s = Setup()
    with pytest.raises(BitemporalError, match="event class Orders") as info:
        event_class(s.det, "Orders", key="id", lifespan=lifespan)
    assert info.value.event == "Orders"
    assert "Orders" not in s.det.events
    with pytest.raises(BitemporalError, match="rule 'r' on E: ") as rule_info:
        s.det.rule("r", "E", lifespan=lifespan, action=print)
    assert rule_info.value.event == "E"
    assert "r" not in s.det.rules
    assert s.nothing_happened()


def test_other_bad_announcements() -> None:
    s = Setup()
    with pytest.raises(BitemporalError, match="lacks its key attribute"):
        announce(s.det, "Delivery", s.clock.now(), amount=2)
    with pytest.raises(UnloggableParameter, match="parameter 'amount' of Delivery"):
        announce(s.det, "Delivery", s.clock.now(), resource="milk", amount=object())
    with pytest.raises(BitemporalError, match="reserved"):
        announce(s.det, "Delivery", s.clock.now(), resource="milk", **{"$revision": 1})
    with pytest.raises(DuplicateEventError):
        event_class(s.det, "E", key="k", lifespan=None)
    with pytest.raises(BitemporalError, match="bad chronon"):
        LocalEventDetector(chronon=-1)
    with pytest.raises(BitemporalError, match="lateness"):
        s.det.rule("late", "E", flush=False, order="occurrence", lateness=-1, action=print)
    assert s.nothing_happened()


def test_a_method_event_with_a_bad_occurrence_time_does_not_run() -> None:
    s = Setup()
    ran: list[Any] = []

    class Shipment(Reactive, detector=s.det):
        @event(begin=True, end=True, occurred_at="when")
        def arrive(self, when: Any) -> None:
            ran.append(when)

    s.det.rule("arrivals", "Shipment.arrive:begin", action=s.detected.append)
    with pytest.raises(OccurrenceTimeError, match=r"Shipment\.arrive"):
        Shipment().arrive("soon")
    assert not ran and s.nothing_happened()
    Shipment().arrive(datetime(2023, 12, 31, tzinfo=UTC))
    assert ran and s.detected[0].at == datetime(2023, 12, 31, tzinfo=UTC)


def _finishes(work: Any, seconds: float = 10.0) -> Any:
    """``work()``'s result, failing the test if it is still running after
    ``seconds`` (the thread is left spinning: a daemon, gone with the process)."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as err:  # handed to the test's thread
            errors.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: a tick loops for ever"
    if errors:
        raise errors[0]
    return out[0]


@pytest.mark.parametrize(
    ("chronon", "at"),
    [
        # 1 µs: below a float's step there (about 30 µs). (Times past the year
        # 9999, such as 1e20 s, where a step of 60 s no longer moves the float,
        # are refused when signalled: no datetime, nor the log, holds them.)
        (1e-6, datetime(9999, 12, 31, 23, 59, tzinfo=UTC)),
        (1e-6, 253_402_300_799.0),
    ],
    ids=repr,
)
def test_a_far_occurrence_time_never_hangs_a_tick(chronon: float, at: Any) -> None:
    """Every chronon boundary after a time was found by stepping one chronon at a
    time from a float that no longer changes when a chronon is added: the
    announcement, the FUTURE event's due tick and the occurrence-time order's
    release looped for ever (this test failed on the old code by not finishing)."""
    s = Setup(chronon)
    event_class(s.det, "Far", key="r", lifespan=3600)
    ordered: list[Any] = []
    s.det.rule("ordered", "E", flush=False, order="occurrence", lateness=60, action=ordered.append)
    far: list[Any] = []
    s.det.rule("far", "ANNOUNCEMENT(Far) | FUTURE(Far) | ONTIME(Far)", action=far.append)

    def work() -> int:
        s.det.signal_at("E", at)
        announce(s.det, "Far", at, r="x")
        s.clock.advance(120)
        announce(s.det, "Far", s.clock.now(), r="y")  # a later, ordinary one still works
        s.det.signal("E")
        s.clock.advance(120)
        return len(far)

    assert _finishes(work) == 2  # x: announced, in the future; y: announced, on time
    assert len(ordered) == 1  # the ordinary E; the far one waits for its time


@pytest.mark.parametrize("chronon", [None, 60.0, 1e-6])
@pytest.mark.parametrize("lifespan", [1e300, timedelta.max, 10**30], ids=repr)
def test_a_huge_lifespan_is_forever(chronon: float | None, lifespan: Any) -> None:
    s = Setup(chronon)
    event_class(s.det, "Long", key="r", lifespan=lifespan)
    got: list[Any] = []
    s.det.rule("long", "ANNOUNCEMENT(Long)", action=got.append, lifespan=lifespan)

    def work() -> int:
        announce(s.det, "Long", s.clock.now(), r="x")
        s.clock.advance(120)
        return len(got)

    assert _finishes(work) == 1
    assert ("x",) in bitemporal(s.det).instances["Long"]


def test_the_boundary_after_a_time_is_the_old_one_where_that_one_ended() -> None:
    """Where stepping by chronons terminates (every time a clock reaches with a
    chronon of a second or more), the boundaries are the ones it gave."""
    from math import ceil, floor

    from sentinel.bitemporal.ordering import boundary_after, release_tick

    def stepped_after(t: float, c: float) -> float:
        b = (floor(t / c) + 1) * c
        while b <= t:
            b += c
        return b

    def stepped_release(t: float, c: float) -> float:
        b = ceil(t / c) * c
        while b < t:
            b += c
        return b

    for c in (1.0, 60.0, 900.0, 0.1, 1e-3):
        for t in (0.0, 59.999, 60.0, 1396861200.0, 1396861200.05, -61.0, 253402300799.0):
            assert boundary_after(t, c) == stepped_after(t, c) > t, (t, c)
            assert release_tick(t, c) == stepped_release(t, c) >= t, (t, c)


@pytest.mark.parametrize("chronon", [None, 1.0, 5.0])
def test_a_revocation_after_the_expiration_is_refused_before_the_tick(
    chronon: float | None,
) -> None:
    """Issue 29.3: lifespan 2, an instance at 1000, revoked at 1002.5 (after its
    expiration, before the tick that purges it): refused as an unknown key is,
    nothing logged, no CANCELLATION."""
    clock = VirtualClock(1000.0)
    det = LocalEventDetector(clock=clock, chronon=chronon)
    event_class(det, "Delivery", key="resource", lifespan=2)
    logged: list[Occurrence] = []
    listen(det, "occurrence", lambda o: logged.append(finished(o)))
    cancelled: list[Any] = []
    det.rule("cancelled", "CANCELLATION(Delivery)", action=cancelled.append)
    announce(det, "Delivery", 1000.0, resource="milk")
    clock.set(1002.5)
    with pytest.raises(
        BitemporalError, match=r"revocation of Delivery \(resource='milk'\): no such instance"
    ) as info:
        revoke(det, "Delivery", resource="milk")
    assert info.value.event == "Delivery"
    clock.set(1010.0)
    assert [o.params["$revision"]["kind"] for o in logged if o.event == "Delivery"] == ["announce"]
    assert cancelled == []
    assert ("milk",) not in bitemporal(det).instances["Delivery"]


def test_a_revocation_before_the_expiration_cancels_in_the_tick_that_purges() -> None:
    """A revocation detected before the expiration (1002.2 < 1002.5) and processed
    at the tick that also expires the instance (1003) is a CANCELLATION still."""
    clock = VirtualClock(1000.0)
    det = LocalEventDetector(clock=clock, chronon=1.0)
    event_class(det, "Delivery", key="resource", lifespan=2.5)
    cancelled: list[Any] = []
    det.rule("cancelled", "CANCELLATION(Delivery)", action=cancelled.append)
    announce(det, "Delivery", 1000.0, resource="milk")
    clock.set(1002.2)
    revoke(det, "Delivery", resource="milk")
    clock.set(1010.0)
    assert [o.detected_timestamp for o in cancelled] == [1002.2]
