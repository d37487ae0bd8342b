"""The processor on a database: installing and versioning programs, checking
queries on the real database, announcements, actions with sentinel's couplings,
actions as events that rules combine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sentinel import attach
from sentinel.bicep import ActionCall, Processor
from sentinel.errors import (
    BicepActionError,
    BicepAnnouncementError,
    BicepError,
    BicepProgramChangedError,
    BicepProgramError,
)
from sentinel.log import LogReader
from sentinel.rules import LocalEventDetector

from .conftest import at

#: Tests of the processor's own logic run on SQLite; what depends on the database
#: (queries checked at install, the outbox) runs on all three.
SQLITE = pytest.mark.parametrize("backend", ["sqlite"])

SHOP = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery (resource VARCHAR(30), amount NUMERIC)
  ID (resource) LIFESPAN(14d)
  ON CHANGE AND new.occTime > old.occTime DO informOwner('delayed', new.resource)
  ON ONTIME DO arrived(new.resource);
CREATE IMMUTABLE SUBSCRIBED EVENT CLASS ResourceLow (resource VARCHAR(30), amountLeft INTEGER)
  ID (resource) LIFESPAN(5d);
"""


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


@SQLITE
def test_install_creates_the_tables_of_listing_4_1_once(
    make: Callable[..., Processor], migrated: sa.Engine
) -> None:
    proc = make(SHOP, name="shop")
    insp = sa.inspect(migrated)
    now = proc.tables.classes["resourcelow"].now.name
    history = proc.tables.classes["resourcelow"].history.name
    assert {now, history} <= _tables(migrated)
    assert insp.get_pk_constraint(now)["constrained_columns"] == ["resource"]
    columns = {c["name"] for c in insp.get_columns(history)}
    assert {"occtime", "dettime", "resource", "amountleft"} <= columns
    assert proc.install() == 1  # again: nothing to do
    # the as-of-now view of a class, for the application's own queries
    t = at("1.4.14 10:00")
    proc.announce("ResourceLow", resource="Milk", amountLeft=3, occ=t, det=t)
    proc.run_until(t)
    with migrated.connect() as conn:
        view = proc.tables.name("v", "resourcelow")
        assert conn.exec_driver_sql(f"SELECT resource, amountleft, occtime FROM {view}").all() == [
            ("Milk", 3, t)
        ]


@SQLITE
def test_a_changed_program_is_a_new_version(
    make: Callable[..., Processor], migrated: sa.Engine
) -> None:
    proc = make(SHOP, name="shop", chronon="15m")
    proc.announce(
        "ResourceLow", resource="Milk", amountLeft=1, occ=at("1.4.14 10:00"), det=at("1.4.14 10:00")
    )
    proc.run_until(at("1.4.14 10:00"))
    changed = SHOP.replace("LIFESPAN(5d)", "LIFESPAN(6d)")
    other = Processor(
        changed, migrated, name="shop", detector=LocalEventDetector(), require_actions=False
    )
    with pytest.raises(BicepProgramChangedError) as info:
        other.install()
    assert info.value.installed == 1 and info.value.differences == ("class ResourceLow changed",)
    with pytest.raises(BicepProgramChangedError, match="install it"):
        other.run_until(at("1.4.14 11:00"))  # the database holds version 1
    with pytest.raises(BicepProgramChangedError):
        proc.install(upgrade=False) if False else Processor(
            SHOP, migrated, name="shop", chronon="10m", detector=LocalEventDetector()
        ).install()
    assert other.install(upgrade=True) == 2
    assert other.live("ResourceLow") == []  # a new version starts empty
    assert other.last_tick is not None  # the clock carries on
    with pytest.raises(BicepProgramChangedError):
        proc.run_until(at("1.4.14 11:00"))  # the old program may not run on version 2


@pytest.mark.parametrize(
    ("query", "message", "marker"),
    [
        # (a column no class has is refused before: tests/bicep/test_query_checks.py)
        (
            "SELECT d.resource FROM Delivery d JOIN suppliers s ON s.name = d.resource",
            "suppliers",
            "suppliers",
        ),
    ],
)
def test_the_database_checks_a_complex_query_at_install(
    migrated: sa.Engine, query: str, message: str, marker: str
) -> None:
    text = SHOP + (
        "CREATE COMPLEX EVENT CLASS Big (resource VARCHAR(30)) ID (resource) LIFESPAN(1d)\n"
        f"  AS {query} OCCURRING AT d.occTime;"
    )
    before = _tables(migrated)
    views = set(sa.inspect(migrated).get_view_names())
    proc = Processor(text, migrated, name="shop", detector=LocalEventDetector())
    with pytest.raises(BicepProgramError) as info:
        proc.install()
    err = info.value
    assert "the database rejects the query of Big" in str(err) and message in str(err)
    offset = text.index(marker)
    assert (err.line, err.column) == (
        text.count("\n", 0, offset) + 1,
        offset - text.rfind("\n", 0, offset),
    )
    # nothing of it stays behind
    assert _tables(migrated) == before
    assert set(sa.inspect(migrated).get_view_names()) == views
    with migrated.connect() as conn:
        assert conn.execute(sa.select(proc.system.programs)).all() == []


@SQLITE
def test_a_complex_class_may_read_application_tables(
    make: Callable[..., Processor], migrated: sa.Engine
) -> None:
    with migrated.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE suppliers (name VARCHAR(30), phone VARCHAR(20))")
        conn.exec_driver_sql("INSERT INTO suppliers VALUES ('Milk', '555-1')")
    proc = make(
        SHOP
        + """CREATE COMPLEX EVENT CLASS Call (resource VARCHAR(30), phone VARCHAR(20))
             ID (resource) LIFESPAN(1d)
             AS SELECT d.resource, s.phone FROM Delivery d JOIN suppliers s ON s.name = d.resource
             OCCURRING AT d.occTime ON ANNOUNCEMENT DO call(new.phone);""",
        name="shop",
    )
    proc.announce(
        "Delivery", resource="Milk", amount=1, occ=at("1.4.14 12:00"), det=at("1.4.14 10:00")
    )
    fired = [str(c) for r in proc.run_until(at("1.4.14 10:00")) for c in r.actions]
    assert fired == ["call('555-1')"]


@SQLITE
def test_bad_announcements_are_refused_and_nothing_is_written(
    make: Callable[..., Processor], migrated: sa.Engine
) -> None:
    proc = make(SHOP, name="shop")
    t = at("1.4.14 10:00")
    proc.announce("ResourceLow", resource="Milk", amountLeft=1, occ=t, det=t)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"event_class": "Deliverys", "resource": "x", "occ": t}, "did you mean 'Delivery'"),
        (
            {"event_class": "Delivery", "resource": "x", "amont": 1, "occ": t},
            "did you mean 'amount'",
        ),
        ({"event_class": "Delivery", "amount": 1, "occ": t}, "needs its key resource"),
        ({"event_class": "Delivery", "resource": "x"}, "needs its occurrence time"),
        ({"event_class": "Delivery", "resource": "x", "occ": "tomorrow"}, "must be a time"),
        ({"event_class": "Delivery", "resource": "x", "occ": -5}, "before 1970"),
        ({"event_class": "Delivery", "resource": 5, "occ": t}, "is text, not int"),
        (
            {"event_class": "ResourceLow", "resource": "Milk", "amountLeft": 0, "occ": t},
            "IMMUTABLE",
        ),
        ({"event_class": "ResourceLow", "resource": "Milk", "revoke": True}, "IMMUTABLE"),
        ({"event_class": "Delivery", "resource": "Eggs", "revoke": True}, "no such event is live"),
    ]
    for kwargs, message in cases:
        with pytest.raises(BicepAnnouncementError, match=message):
            proc.announce(**kwargs)
    inbox = proc.tables.classes["delivery"].inbox
    with migrated.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(inbox)).scalar() == 0


@SQLITE
def test_missing_system_tables_say_how_to_create_them(engine: sa.Engine) -> None:
    proc = Processor(SHOP, engine, name="shop", detector=LocalEventDetector())
    with pytest.raises(BicepError, match="sentinel db upgrade"):
        proc.install()


# -- actions ------------------------------------------------------------------------------------
@SQLITE
def test_every_action_needs_a_callable_before_ticks_run(migrated: sa.Engine) -> None:
    proc = Processor(SHOP, migrated, name="shop", detector=LocalEventDetector())
    proc.install()
    with pytest.raises(BicepActionError) as info:
        proc.run_until(at("1.4.14 10:00"))
    assert info.value.action == "informOwner"
    assert "line 4, column 46" in str(info.value) and "also unregistered: arrived" in str(
        info.value
    )
    with pytest.raises(BicepActionError, match="did you mean 'informOwner'"):
        proc.action("informowners", lambda call: None)


@SQLITE
def test_actions_run_as_rules_and_are_events_rules_combine(make: Callable[..., Processor]) -> None:
    det = LocalEventDetector()
    proc = make(SHOP, name="shop", detector=det, require_actions=True)
    calls: list[ActionCall] = []
    proc.action("informOwner", calls.append)
    proc.action("arrived", calls.append, coupling="deferred")
    combined: list[Any] = []
    det.rule(
        "late_then_arrived", "shop.informOwner ; shop.arrived", action=combined.append, flush=False
    )
    proc.announce(
        "Delivery", resource="Milk", amount=2, occ=at("3.4.14 17:00"), det=at("3.4.14 16:01")
    )
    proc.announce(
        "Delivery", resource="Milk", amount=2, occ=at("3.4.14 17:30"), det=at("3.4.14 16:27")
    )
    proc.run_until(at("3.4.14 18:00"))
    assert [(c.action, c.args, c.tick.strftime("%H:%M")) for c in calls] == [
        ("informOwner", ("delayed", "Milk"), "16:30"),
        ("arrived", ("Milk",), "17:30"),
    ]
    assert calls[0].event_class == "Delivery" and calls[0].key == {"resource": "Milk"}
    assert calls[1].occ_time is not None and calls[1].occ_time.strftime("%H:%M") == "17:30"
    assert len(combined) == 1
    occ = combined[0].constituents[0]
    assert occ.event == "shop.informOwner" and occ.at.strftime("%H:%M") == "17:30"


def record_detached(call: ActionCall) -> None:
    DETACHED.append(call)


DETACHED: list[ActionCall] = []


def test_a_detached_action_goes_through_the_outbox_and_everything_is_logged(
    migrated: sa.Engine,
) -> None:
    det = LocalEventDetector()
    Session = sessionmaker(migrated)
    attachment = attach(Session, detector=det, workers=0)
    try:
        proc = Processor(SHOP, Session, name="shop", require_actions=False)
        assert proc.detector is det  # the attachment's
        proc.install()
        proc.action("informOwner", record_detached, coupling="detached")
        DETACHED.clear()
        proc.announce(
            "Delivery", resource="Milk", amount=2, occ=at("3.4.14 17:00"), det=at("3.4.14 16:01")
        )
        proc.announce(
            "Delivery", resource="Milk", amount=2, occ=at("3.4.14 17:30"), det=at("3.4.14 16:27")
        )
        proc.run_until(at("3.4.14 16:30"))
        assert DETACHED == []  # waiting in the outbox, committed with the tick
        report = attachment.drain()
        assert report.done == 1
        assert [str(c) for c in DETACHED] == ["informOwner('delayed', 'Milk')"]
        with LogReader(migrated) as reader:
            events = [r.occurrence.event for r in reader.occurrences()]
        assert events.count("shop:Delivery") == 2
        assert events.count("shop@tick") == 2 and events.count("shop.informOwner") == 1
    finally:
        attachment.detach()


@SQLITE
def test_sentinel_events_can_be_announcements(make: Callable[..., Processor]) -> None:
    from sentinel.bicep.sources import connect_event

    det = LocalEventDetector(clock=lambda: float(at("3.4.14 16:27")))
    proc = make(SHOP, name="shop", detector=det)
    connect_event(proc, "Delivery", "delivery_announced")
    det.signal("delivery_announced", resource="Milk", amount=2, occ_time=at("3.4.14 17:00"))
    det.notify(
        det._explicit["delivery_announced"],
        {"resource": "Milk", "amount": 2},
        timestamp=float(at("3.4.14 17:30")),
    )
    history = [(r["occTime"], r["detTime"]) for r in proc.history("Delivery")]
    assert history == []  # announced, not read yet
    proc.run_until(at("3.4.14 17:00"))
    assert [
        (r["occTime"].strftime("%H:%M"), r["detTime"].strftime("%H:%M"))
        for r in proc.history("Delivery")
    ] == [("17:30", "16:27")]  # both announcements in one chronon: the last one counts
