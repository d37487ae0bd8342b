"""The global detector's rules in the tests: an order, then its payment,
same customer, in whichever processes they happen (chronicle: each payment
pairs with the oldest unpaid order of its customer)."""

from __future__ import annotations

import json
import os
from typing import Any

import sqlalchemy as sa

from sentinel import LocalEventDetector
from sentinel.orm import detached_context

EFFECTS = sa.table(
    "gd_effects",
    sa.column("rule", sa.String),
    sa.column("ikey", sa.String),
    sa.column("detail", sa.Text),
)


def make_effects(engine: sa.Engine) -> None:
    md = sa.MetaData()
    sa.Table(
        "gd_effects",
        md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("rule", sa.String(64)),
        sa.Column("ikey", sa.String(64)),
        sa.Column("detail", sa.Text),
    )
    md.create_all(engine)


def describe(occ: Any) -> str:
    """A detection as the test compares them: its constituents' events,
    scopes and parameters, in order."""
    return json.dumps(
        [[c.event, str(c.scope), dict(c.params)] for c in occ.constituents], sort_keys=True
    )


def record(occ: Any) -> None:
    ctx = detached_context()
    ctx.session.execute(
        sa.insert(EFFECTS).values(rule=ctx.rule, ikey=ctx.idempotency_key, detail=describe(occ))
    )
    if os.environ.get("SENTINEL_TEST_GLOBAL_KILL_IN_ACTION"):
        ctx.session.flush()
        os.kill(os.getpid(), 9)


def events(det: LocalEventDetector) -> None:
    det.explicit("order")
    det.explicit("payment")


detector = LocalEventDetector()
events(detector)
detector.rule(
    "paid",
    "(order ; payment) by customer",
    action=record,
    coupling="detached",
    context="chronicle",
    flush=False,
)


def _temporal() -> LocalEventDetector:
    from sentinel.temporal import not_within

    det = LocalEventDetector()
    events(det)
    det.rule(
        "unpaid",
        not_within(det.event("order"), det.event("payment"), 1.0, key="customer"),
        action=record,
        coupling="detached",
        flush=False,
    )
    return det


#: "an order not paid within a second, same customer", spanning processes
temporal = _temporal()


def _daily() -> LocalEventDetector:
    from sentinel.temporal import Absolute, ReplayClock

    # a clock that never fires: the rule's timers run on the log's time, in
    # the global detector (on the default clock the 17:00 timer would fire in
    # every process importing this module)
    det = LocalEventDetector(clock=ReplayClock())
    events(det)
    det.rule("closing", Absolute("(17:00:00)*/*/*"), action=record, coupling="detached")
    return det


#: every day at 17:00 UTC (the global detector's clock is the log's, in UTC)
daily = _daily()


def _lived() -> LocalEventDetector:
    det = LocalEventDetector()
    events(det)
    det.rule(
        "paid_soon",
        "(order ; payment) by customer",
        action=record,
        coupling="detached",
        context="chronicle",
        flush=False,
        lifespan=5.0,
    )
    return det


#: "paid" whose orders take part for 5 seconds of log time: an order not paid
#: by then is forgotten (the detector's state stays bounded)
lived = _lived()


def _refuse(occ: Any) -> None:
    raise RuntimeError("the payment service refused")


def _failing() -> LocalEventDetector:
    det = LocalEventDetector()
    events(det)
    det.rule(
        "paid",
        "(order ; payment) by customer",
        action=_refuse,
        coupling="detached",
        context="chronicle",
        flush=False,
    )
    return det


#: "paid" whose action always fails
failing = _failing()
