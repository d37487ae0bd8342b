"""The thesis's worked examples (Burgstaller 2014, 2.7, 2.8, 4.4, 4.5) on SQLite,
PostgreSQL and MariaDB, each also checked against the in-memory reference
evaluator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from sentinel.bicep import Processor
from sentinel.bicep.times import as_datetime

from .conftest import at
from .reference import Reference
from .reference import plain_args as _plain

FIFTEEN = 15 * 60

DELIVERY = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery (resource
  VARCHAR(30), amount NUMERIC)
  ID (resource) LIFESPAN(14d)
  ON CHANGE AND new.occTime > old.occTime DO
  informOwner('delayed', new.resource,new.occTime),
  ON CHANGE AND new.occTime <= old.occTime DO
  twitterEarlyDelivery('Delivery company delivers %s
  amazingly fast!',new.resource);
"""


def _fired(results: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (int(c.tick.timestamp()), c.action, c.event_class, tuple(c.key.values()), _plain(c.args))
        for r in results
        for c in r.actions
    ]


def test_example_2_7_a_delayed_delivery_informs_the_owner_at_16_30(
    make: Callable[..., Processor],
) -> None:
    proc = make(DELIVERY, name="grocery", chronon="15m")
    ref = Reference(proc.program, FIFTEEN)
    history = [  # Table 2.1
        (at("7.4.14 09:00"), at("3.4.14 16:01")),
        (at("7.4.14 17:00"), at("3.4.14 16:27")),
    ]
    for occ, det in history:
        proc.announce("Delivery", resource="Milk", amount=2, occ=occ, det=det)
        ref.announce("Delivery", resource="Milk", amount=2, occ=occ, det=det)

    results = proc.run_until(at("3.4.14 16:15"))
    assert [r.tick for r in results] == [as_datetime(at("3.4.14 16:15"))]
    assert results[0].actions == []  # 16:15: the first announcement, nothing fires
    assert [row["occTime"] for row in proc.live("Delivery")] == [as_datetime(at("7.4.14 09:00"))]

    results += proc.run_until(at("3.4.14 18:00"))
    fired = _fired(results)
    assert fired == [
        (
            at("3.4.14 16:30"),
            "informOwner",
            "Delivery",
            ("Milk",),
            ("delayed", "Milk", at("7.4.14 17:00")),
        )
    ]
    assert [f.row() for f in ref.run_until(at("3.4.14 18:00"))] == fired
    assert [row["occTime"] for row in proc.history("Delivery")] == [
        as_datetime(at("7.4.14 09:00")),
        as_datetime(at("7.4.14 17:00")),
    ]


EXPIRY = """
CREATE IMMUTABLE SUBSCRIBED EVENT CLASS ResourceEmpty (resource VARCHAR(30))
  ID (resource) LIFESPAN(3d);
CREATE COMPLEX EVENT CLASS InstantReplenishingNeeded (resource VARCHAR(30))
  ID (resource) LIFESPAN(5d)
  AS SELECT resource FROM ResourceEmpty OCCURRING AT ResourceEmpty.occTime;
"""


def _instant(snap: dict[str, list[dict[str, Any]]], now: int) -> Any:
    return [
        (
            {"resource": r["resource"], "occtime": r["occtime"]},
            [("resourceempty", (r["resource"],))],
        )
        for r in snap["resourceempty"]
    ]


def test_example_2_8_both_expire_at_14_4_9_00_and_go_at_the_next_tick(
    make: Callable[..., Processor], migrated: sa.Engine
) -> None:
    proc = make(EXPIRY, name="purging", chronon="15m", archive=True)
    ref = Reference(proc.program, FIFTEEN, {"InstantReplenishingNeeded": _instant})
    occ, det = at("9.4.14 09:00"), at("9.4.14 09:30")  # Table 2.2
    proc.announce("ResourceEmpty", resource="Milk", occ=occ, det=det)
    ref.announce("ResourceEmpty", resource="Milk", occ=occ, det=det)
    proc.run_until(at("9.4.14 10:00"))
    ref.run_until(at("9.4.14 10:00"))

    derived = proc.live("InstantReplenishingNeeded")
    assert [(r["resource"], r["occTime"], r["detTime"]) for r in derived] == [
        ("Milk", as_datetime(at("9.4.14 09:00")), as_datetime(at("9.4.14 09:30")))
    ]
    expected = as_datetime(at("14.4.14 09:00"))  # MAX(9.4 9:00 + 5d, 9.4 9:00 + 3d)
    assert proc.expirations() == {
        "ResourceEmpty": {("Milk",): expected},
        "InstantReplenishingNeeded": {("Milk",): expected},
    }
    assert {
        name: {k: as_datetime(v) for k, v in d.items()} for name, d in ref.expirations().items()
    } == proc.expirations()

    # the lifespan of ResourceEmpty is prolonged by two days: still there at 14.4 9:00
    proc.run_until(at("14.4.14 09:00"))
    assert proc.live("ResourceEmpty") and proc.live("InstantReplenishingNeeded")
    results = proc.run_until(at("14.4.14 09:15"))
    assert [(r.tick, r.purged) for r in results] == [(as_datetime(at("14.4.14 09:15")), 2)]
    assert proc.live("ResourceEmpty") == [] == proc.live("InstantReplenishingNeeded")
    assert proc.history("ResourceEmpty") == [] == proc.history("InstantReplenishingNeeded")
    assert [r["resource"] for r in proc.archived("ResourceEmpty")] == ["Milk"]
    assert [r["resource"] for r in proc.archived("InstantReplenishingNeeded")] == ["Milk"]


POTENTIAL = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery (resource VARCHAR(30), amount NUMERIC)
  ID (resource) LIFESPAN(14d)
  ON ONTIME DO delivered(new.resource);
"""


def test_example_4_4_ontime_runs_only_at_the_potential_clock_tick(
    make: Callable[..., Processor], migrated: sa.Engine
) -> None:
    proc = make(POTENTIAL, name="potential", chronon="15m")
    proc.announce(
        "Delivery", resource="Milk", amount=1, occ=at("14.5.14 09:00"), det=at("12.5.14 15:00")
    )
    first = proc.run_until(at("12.5.14 15:00"))
    assert [(r.tick, r.potential, r.actions) for r in first] == [
        (as_datetime(at("12.5.14 15:00")), False, [])
    ]
    pot = proc.system.potential_ticks
    with migrated.connect() as conn:
        assert conn.execute(sa.select(pot.c.class_ident, pot.c.tick)).all() == [
            ("delivery", at("14.5.14 09:00"))
        ]
    # between 12.5 15:00 and 14.5 9:00 no tick runs at all; 9:00 is a potential clock tick
    results = proc.run_until(at("15.5.14 12:00"))
    assert [(r.tick, r.potential) for r in results] == [(as_datetime(at("14.5.14 09:00")), True)]
    assert [str(c) for c in results[0].actions] == ["delivered('Milk')"]
    with migrated.connect() as conn:
        assert conn.execute(sa.select(pot.c.tick)).all() == []
        ticks = proc.system.ticks
        assert conn.execute(sa.select(ticks.c.tick).order_by(ticks.c.tick)).scalars().all() == [
            at("12.5.14 15:00"),
            at("14.5.14 09:00"),
        ]


FRIDGE = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS ResourceLow (resource VARCHAR(30), amountLeft VARCHAR(10))
  ID (resource) LIFESPAN(5d)
  ON FUTURE DO expectLow(new.resource, new.occTime);
CREATE COMPLEX EVENT CLASS ReplenishingNeeded (resource VARCHAR(30)) ID (resource) LIFESPAN(5d)
  AS SELECT resource FROM ResourceLow OCCURRING AT ResourceLow.occTime
  ON ONTIME DO orderResource(new.resource)
  ON LATE DO order1Day(new.resource);
"""


def _replenishing(snap: dict[str, list[dict[str, Any]]], now: int) -> Any:
    return [
        ({"resource": r["resource"], "occtime": r["occtime"]}, [("resourcelow", (r["resource"],))])
        for r in snap["resourcelow"]
    ]


def test_example_4_5_future_then_ontime_orders_the_resource(
    make: Callable[..., Processor],
) -> None:
    proc = make(FRIDGE, name="fridge", chronon="15m")
    ref = Reference(proc.program, FIFTEEN, {"ReplenishingNeeded": _replenishing})
    stream = [  # Example 4.5: 11:00 detected at 10:30, then changed to 10:45 at 10:45
        (at("1.4.14 11:00"), at("1.4.14 10:30"), "50g"),
        (at("1.4.14 10:45"), at("1.4.14 10:45"), "100g"),
    ]
    for occ, det, left in stream:
        proc.announce("ResourceLow", resource="Yoghurt", amountLeft=left, occ=occ, det=det)
        ref.announce("ResourceLow", resource="Yoghurt", amountLeft=left, occ=occ, det=det)
    results = proc.run_until(at("1.4.14 12:00"))
    fired = _fired(results)
    assert fired == [
        (
            at("1.4.14 10:30"),
            "expectLow",
            "ResourceLow",
            ("Yoghurt",),
            ("Yoghurt", at("1.4.14 11:00")),
        ),
        (at("1.4.14 10:45"), "orderResource", "ReplenishingNeeded", ("Yoghurt",), ("Yoghurt",)),
    ]
    assert [f.row() for f in ref.run_until(at("1.4.14 12:00"))] == fired
    # Table 4.17: two versions in the history, one in the as-of-now table
    assert [(r["occTime"], r["amountLeft"]) for r in proc.history("ResourceLow")] == [
        (as_datetime(at("1.4.14 11:00")), "50g"),
        (as_datetime(at("1.4.14 10:45")), "100g"),
    ]
    assert [(r["occTime"], r["amountLeft"]) for r in proc.live("ResourceLow")] == [
        (as_datetime(at("1.4.14 10:45")), "100g")
    ]
    assert [
        (r["resource"], r["occTime"], r["detTime"]) for r in proc.live("ReplenishingNeeded")
    ] == [("Yoghurt", as_datetime(at("1.4.14 10:45")), as_datetime(at("1.4.14 10:45")))]
