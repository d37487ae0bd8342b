"""Bad bitemporal input: a clear error naming the event, and nothing signalled,
detected or logged for it."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from sentinel import (
    BitemporalError,
    DuplicateEventError,
    LocalEventDetector,
    Occurrence,
    OccurrenceTimeError,
    Reactive,
    UnloggableParameter,
    VirtualClock,
    announce,
    event,
    event_class,
    revoke,
)
from sentinel.bitemporal import bitemporal


class Setup:
    def __init__(self, chronon: float | None = None) -> None:
        self.clock = VirtualClock(datetime(2024, 1, 1, tzinfo=UTC))
        self.det = LocalEventDetector(clock=self.clock, chronon=chronon)
        self.det.explicit("E")
        event_class(self.det, "Delivery", key="resource")
        event_class(self.det, "ResourceLow", key="resource", mutable=False)
        self.logged: list[Occurrence] = []
        self.det.add_listener(self.logged.append)
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
        event_class(s.det, "E", key="k")
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
