"""The firing log of an attached application records a partitioned rule's key
(issue 34): immediate, deferred and detached rules (the worker's firings are
the global detector's too), one key, two, an object; NULL for the others; the
log's policy applies to it."""

from __future__ import annotations

import json

from sentinel.log import LogPolicy

from . import actions
from .conftest import ORM


def _ref(stock: int) -> str:
    return json.dumps({"$ref": ["Stock", [stock]]}, separators=(",", ":"))


def test_immediate_firings_log_their_key(orm: ORM) -> None:
    (ibm,) = orm.add_stocks("IBM")
    orm.attach()
    for name, event in [
        ("by_source", "(Stock.e2 ; Stock.e3) by @source"),
        ("by_price", "(Stock.e2 ; Stock.e3) by price"),
        ("by_both", "((Stock.e2 ; Stock.e3) by price) by @source"),
        ("plain", "Stock.e2 ; Stock.e3"),
    ]:
        orm.det.rule(name, event, action=lambda occ: None)
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(10.5)
    got = {f.rule: f.key for f in orm.firings()}
    assert got == {
        "by_source": f"[{_ref(ibm)}]",
        "by_price": "[10.5]",
        "by_both": f"[{_ref(ibm)},10.5]",
        "plain": None,
    }


def test_a_deferred_firing_has_a_key_when_its_detections_share_one(orm: ORM) -> None:
    ibm, sun = orm.add_stocks("IBM", "SUN")
    orm.attach()
    orm.det.rule(
        "D", "(Stock.e2 ; Stock.e3) by @source", action=lambda occ: None, coupling="deferred"
    )
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(1.0)
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(2.0)
        s.get(orm.model.Stock, sun).set_price(3.0)
    assert [f.key for f in orm.firings()] == [f"[{_ref(ibm)}]", None]


def test_a_detached_rule_logs_its_key_when_pending_and_when_done(orm: ORM) -> None:
    (ibm,) = orm.add_stocks("IBM")
    att = orm.attach()
    orm.det.rule("R", "(Stock.e2 ; Stock.e3) by price", action=actions.record, coupling="detached")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(4.25)
    assert att.wait_detached(60)
    got = sorted((f.status, f.key) for f in orm.firings())
    assert got == [("done", "[4.25]"), ("pending", "[4.25]")]


def test_the_policy_applies_to_the_key(orm: ORM) -> None:
    (ibm,) = orm.add_stocks("IBM")
    orm.attach(log=LogPolicy().redact("Stock.set_price:*", "price"))
    orm.det.rule("R", "(Stock.e2 ; Stock.e3) by price", action=lambda occ: None)
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(99.5)
    assert [f.key for f in orm.firings()] == ['["<redacted>"]']
