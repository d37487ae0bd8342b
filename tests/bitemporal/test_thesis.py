"""The BiCEP thesis's examples (002_ec5db25a93873772.txt), on a virtual clock:
2.1/2.2 (the timing primitives of the grocery scenario), 2.7 (a changed delivery
informs the owner at the 16:30 tick), 2.8 with 4.3 (expiration times and the
tick that purges), 4.5 (a FUTURE ResourceLow changed to ONTIME orders)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sentinel import (
    FIRED,
    LocalEventDetector,
    VirtualClock,
    announce,
    event_class,
    revision,
)
from sentinel.bitemporal import KINDS, bitemporal
from sentinel.bitemporal.lifespan import expirations
from sentinel.detector.events import listen
from sentinel.occurrence import Occurrence

QUARTER = timedelta(minutes=15)
DAY = 86_400.0


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2014, 4, day, hour, minute, tzinfo=UTC)


def hhmm(clock: VirtualClock) -> str:
    return clock.datetime().strftime("%d.%m. %H:%M")


def watch_all(det: LocalEventDetector, clock: VirtualClock, cls: str) -> list[tuple[str, set[str]]]:
    """Every occurrence of ``cls`` with the primitives it matched, at the tick it
    was processed."""
    seen: dict[int, tuple[str, set[str]]] = {}
    for kind in KINDS:

        def note(o: Any, kind: str = kind) -> None:
            seen.setdefault(o.t_occ, (hhmm(clock), set()))[1].add(kind)

        det.rule(f"{cls} {kind}", f"{kind}({cls})", action=note)
    return seen  # type: ignore[return-value]


def test_example_2_2_timing_primitives() -> None:
    """ResourceLow detected at once: ANNOUNCEMENT and ONTIME. The delivery posted at
    17:02 but detected at 17:30: ANNOUNCEMENT and FUTURE. Delayed: CHANGE and
    FUTURE. Changed again after the delivery should have occurred: POSTPONE. Each
    standing FUTURE time becomes ONTIME when it comes."""
    clock = VirtualClock(at(7, 16, 50))
    det = LocalEventDetector(clock=clock, chronon=QUARTER)
    event_class(det, "ResourceLow", key="resource", mutable=False, lifespan=None)
    event_class(det, "Delivery", key="resource", lifespan=None)
    low = watch_all(det, clock, "ResourceLow")
    delivery = watch_all(det, clock, "Delivery")

    clock.set(at(7, 17))
    announce(det, "ResourceLow", at(7, 17), resource="milk", amountLeft=1)
    clock.set(at(7, 17, 30))  # posted 17:02, detected 17:30; delivery tomorrow 10:00
    announce(det, "Delivery", at(8, 10), resource="milk", amount=2)
    clock.set(at(7, 20))  # supply chain issues: delayed to 12:00
    announce(det, "Delivery", at(8, 12), resource="milk", amount=2)
    clock.set(at(8, 13))  # after it should have occurred: 15:00 now
    announce(det, "Delivery", at(8, 15), resource="milk", amount=2)
    clock.set(at(8, 16))

    assert list(low.values()) == [("07.04. 17:15", {"ANNOUNCEMENT", "ONTIME"})]
    assert list(delivery.values()) == [
        ("07.04. 17:45", {"ANNOUNCEMENT", "FUTURE"}),
        ("07.04. 20:15", {"CHANGE", "FUTURE"}),
        ("08.04. 12:00", {"ONTIME"}),  # the delayed time came (10:00 was superseded)
        ("08.04. 13:15", {"CHANGE", "POSTPONE"}),
        ("08.04. 15:00", {"ONTIME"}),  # and the postponed one
    ]


def test_example_2_7_changed_delivery_informs_the_owner_at_the_1630_tick() -> None:
    clock = VirtualClock(at(3, 15, 50))
    det = LocalEventDetector(clock=clock, chronon=QUARTER)
    event_class(det, "Delivery", key="resource", lifespan="14d")
    actions: list[tuple[str, str, Any]] = []

    def later(o: Any) -> bool:
        r = revision(o)
        return r.new_at > r.old_at  # type: ignore[operator, union-attr]

    det.rule(
        "informOwner",
        "CHANGE(Delivery)",
        condition=later,
        action=lambda o: actions.append(
            ("informOwner", hhmm(clock), ("delayed", o.params["resource"], o.at))
        ),
    )
    det.rule(
        "twitterEarlyDelivery",
        "CHANGE(Delivery)",
        condition=lambda o: not later(o),
        action=lambda o: actions.append(("twitterEarlyDelivery", hhmm(clock), None)),
    )
    ticks: list[str] = []
    det.rule(
        "seen",
        "ANNOUNCEMENT(Delivery) | CHANGE(Delivery)",
        action=lambda o: ticks.append(hhmm(clock)),
    )

    for hhmm_, occ in (((16, 1), at(7, 9)), ((16, 27), at(7, 17))):  # Table 2.1
        clock.set(at(3, *hhmm_))
        announce(det, "Delivery", occ, resource="Milk", amount=2)
    clock.set(at(3, 17))

    assert ticks == ["03.04. 16:15", "03.04. 16:30"]  # 16:00: nothing detected yet
    assert actions == [("informOwner", "03.04. 16:30", ("delayed", "Milk", at(7, 17)))]


def test_example_2_8_expiration_times() -> None:
    """ResourceEmpty (3 days) and the complex InstantReplenishingNeeded (5 days)
    derived from it, both occurring 9.4.14 9:00: both expire 14.4.14 9:00."""
    empty = Occurrence("ResourceEmpty", 1, at(9, 9).timestamp(), at(9, 9, 30).timestamp())
    irn = ("InstantReplenishingNeeded", 2, (empty,))  # occurring at ResourceEmpty.occTime
    lifespan = {"ResourceEmpty": 3 * DAY, "InstantReplenishingNeeded": 5 * DAY}
    exp = dict(expirations([irn], lambda o: lifespan[o[0]]))
    assert exp[irn] == at(14, 9).timestamp()  # MAX(9.4. 9:00 + 5d, 9.4. 9:00 + 3d)
    assert exp[empty] == at(14, 9).timestamp()  # MAX(9.4. 9:00 + 3d, 14.4. 9:00): +2 days


def test_example_4_3_the_purge_keeps_what_a_stored_detection_depends_on() -> None:
    """In the event graph: a ResourceEmpty (lifespan 3 days) is stored by the AND of
    a rule with lifespan 5 days, whose SEQ stores the AND's detection; the
    ResourceEmpty is kept as long as that detection, and both are purged at the
    first tick after 14.4.14 9:00 (9:15 with quarter-hour chronons)."""
    clock = VirtualClock(at(9, 8, 50))
    det = LocalEventDetector(clock=clock, chronon=QUARTER)
    event_class(det, "ResourceEmpty", key="resource", lifespan="3d", archive=True)
    det.explicit("Replenish")
    det.explicit("Delivery")
    det.rule(
        "InstantReplenishingNeeded",
        "(ResourceEmpty ^ Replenish) ; Delivery",
        action=lambda o: None,
        lifespan="5d",
        flush=False,
        archive=True,
    )
    expired: list[tuple[str, str]] = []
    listen(
        det,
        "expired",
        lambda items: expired.extend((e.occurrence.event, hhmm(clock)) for e in items),
    )
    det.signal_at("Replenish", at(9, 9))
    clock.set(at(9, 9, 30))
    announce(det, "ResourceEmpty", at(9, 9), resource="Milk")
    clock.set(at(9, 10))
    assert det.stored() == 3  # ResourceEmpty and Replenish in the AND, the pair in the SEQ

    clock.set(at(12, 9, 15))  # ResourceEmpty's own 3 days are over: the pair still needs it
    assert det.stored() == 3 and expired == []
    clock.set(at(14, 9))  # expiration time 14.4. 9:00 is not before the 9:00 tick
    assert det.stored() == 3
    clock.set(at(14, 9, 15))
    assert det.stored() == 0
    assert sorted(expired) == [("Replenish", "14.04. 09:15"), ("ResourceEmpty", "14.04. 09:15")]


def test_example_4_5_a_future_resource_low_changed_to_on_time_orders() -> None:
    """ResourceLow occurring at 11:00 detected at 10:30 (FUTURE), changed to occur at
    10:45, detected at 10:45 (CHANGE, ONTIME): orderResource, once."""
    clock = VirtualClock(at(7, 10, 20))
    det = LocalEventDetector(clock=clock, chronon=QUARTER)
    event_class(det, "ResourceLow", key="resource", lifespan=None)
    orders: list[tuple[str, Any, str]] = []
    det.rule(
        "orderResource",
        "ONTIME(ResourceLow)",
        condition=~FIRED,
        action=lambda o: orders.append((hhmm(clock), o.at, o.params["amountLeft"])),
    )
    clock.set(at(7, 10, 30))
    announce(det, "ResourceLow", at(7, 11), resource="Yoghurt", amountLeft="50g")
    clock.set(at(7, 10, 45))
    announce(det, "ResourceLow", at(7, 10, 45), resource="Yoghurt", amountLeft="100g")
    clock.set(at(7, 12))
    assert orders == [("07.04. 11:00", at(7, 10, 45), "100g")]
    assert bitemporal(det).instances["ResourceLow"][("Yoghurt",)].n == 2
