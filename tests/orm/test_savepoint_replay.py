"""Replay of savepoints (issue 11, items 1 and 2): what a rolled-back savepoint
took with it is in the log under its transaction's scope, marked with the
savepoint; replay rolls detection back where the online run did, and every
constituent the firing log names is a row of the event log."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

import sentinel
from sentinel.replay import replay
from sentinel.replay.explain import detections_for

from .conftest import ORM


def _live(orm: ORM) -> list[tuple[Any, ...]]:
    return sorted(
        (f.rule, f.scope, f.t_occ, f.constituents) for f in orm.firings() if f.status == "fired"
    )


def _replayed(orm: ORM) -> list[tuple[Any, ...]]:
    table = replay(orm.engine, orm.det).table
    assert table is not None
    return sorted(
        (
            d["rule"],
            d["scope"],
            d["t_occ"],
            tuple(zip(d["constituent_scopes"], d["constituent_t_occs"], strict=True)),
        )
        for d in table.to_pylist()
    )


def _logged_ids(orm: ORM) -> set[tuple[str, int]]:
    return {(r.occurrence.scope, r.occurrence.t_occ) for r in orm.log()}


def test_a_detection_inside_a_rolled_back_savepoint_replays(orm: ORM) -> None:
    """The issue's minimal case: ``e2 ; e1`` whose initiator predates the
    savepoint and whose terminator is rolled back with it."""
    orm.attach()
    seen: list[Any] = []
    orm.det.rule("r", "Stock.e2 ; Stock.e1", action=seen.append)
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.set_price(1.0)
        scope = sentinel.scope_of(s)
        assert scope is not None
        sp = s.begin_nested()
        stock.sell_stock(2)
        sp.rollback()
        s.commit()
    assert len(seen) == 1
    [(e2, e1)] = [tuple(c.t_occ for c in o.constituents) for o in seen]
    live = _live(orm)
    assert live == [("r", scope.id, e1, ((scope.id, e2), (scope.id, e1)))]
    assert _replayed(orm) == live
    for f in orm.firings():
        assert set(f.constituents) <= _logged_ids(orm)
    # the detection behind the firing is found (sentinel log firings --rules)
    firings = orm.firings()
    explained = detections_for(orm.engine, firings, orm.det)
    assert [o.t_occ for o in explained.values()] == [e1]


def test_a_spanning_rule_names_rows_of_a_rolled_back_savepoint_as_logged(orm: ORM) -> None:
    """Issue 11 item 2: a ``flush=False`` rule combines an occurrence of a
    rolled-back savepoint with a later transaction's event; the firing names
    the occurrence by the id the event log holds it under."""
    orm.attach()
    orm.det.rule("span", "Stock.e2 ; Stock.e1", action=print, flush=False)
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session() as s:
        sp = s.begin_nested()
        first = sentinel.scope_of(s)
        assert first is not None
        s.get(orm.model.Stock, ibm).set_price(1.0)
        sp.rollback()
        s.commit()
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).sell_stock(1)
    [firing] = orm.firings()
    e2 = firing.constituents[0]
    assert e2[0] == first.id
    rows = {(r.occurrence.scope, r.occurrence.t_occ): r for r in orm.log()}
    assert (rows[e2].outcome, rows[e2].savepoint) == ("aborted", "sp1")
    assert _replayed(orm) == _live(orm)


def test_savepoints_two_deep(orm: ORM) -> None:
    """Released and rolled-back savepoints nested two deep: what each detection
    combines, online and in replay, and the paths the log holds."""
    orm.attach()
    orm.det.rule("r", "Stock.e2 ; Stock.e1", action=print, context="chronicle")
    orm.det.rule("d", "Stock.e1", action=print, coupling="deferred", context="cumulative")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session() as s:
        stock = s.get(orm.model.Stock, ibm)
        outer = s.begin_nested()  # sp1, released
        stock.set_price(1.0)
        inner = s.begin_nested()  # sp2, rolled back: consumes then restores 1.0
        stock.sell_stock(1)
        inner.rollback()
        outer.commit()
        outer = s.begin_nested()  # sp3, rolled back
        inner = s.begin_nested()  # sp4, released inside it
        stock.set_price(2.0)
        inner.commit()
        stock.sell_stock(2)  # pairs 1.0 (chronicle: oldest first)
        outer.rollback()
        stock.sell_stock(3)  # pairs 1.0 again: sp3 restored it
        s.commit()
    paths = {r.occurrence.t_occ: r.savepoint for r in orm.log() if r.savepoint is not None}
    assert sorted(set(paths.values())) == ["sp1/sp2", "sp3"]
    live = _live(orm)
    assert [len(c) for rule, _s, _t, c in live if rule == "r"] == [2, 2, 2]
    assert [rule for rule, *_ in live].count("d") == 1
    assert _replayed(orm) == live
    firings = sorted((f.t_occ, f.savepoint) for f in orm.firings() if f.rule == "r")
    assert [path for _, path in firings] == ["sp1/sp2", "sp3", None]


def test_a_detached_detection_inside_a_rolled_back_savepoint_is_dropped(orm: ORM) -> None:
    from . import actions

    orm.attach()
    orm.det.rule("det", "Stock.e2 ; Stock.e1", action=actions.record, coupling="detached")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.set_price(1.0)
        sp = s.begin_nested()
        stock.sell_stock(1)  # detected, then dropped with the savepoint
        sp.rollback()
        stock.sell_stock(2)
        s.commit()
    pending = [f for f in orm.firings() if f.status == "pending"]
    assert len(pending) == 1
    table = replay(orm.engine, orm.det).table
    assert table is not None
    assert [d["t_occ"] for d in table.to_pylist()] == [pending[0].t_occ]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_commit_that_fails_after_the_log_was_written_keeps_savepoint_rows(orm: ORM) -> None:
    """The log is written in the transaction; when the database commit then
    fails (a deferred constraint), the aborted transaction's log still holds
    what its rolled-back savepoints took."""
    orm.attach()
    orm.det.rule("r", "Stock.e2 ; Stock.e1", action=print)
    with orm.engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE child (id INTEGER PRIMARY KEY, stock_id INTEGER REFERENCES stock(id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
    (ibm,) = orm.add_stocks("IBM")
    s = orm.Session()
    stock = s.get(orm.model.Stock, ibm)
    stock.set_price(1.0)
    scope = sentinel.scope_of(s)
    assert scope is not None
    sp = s.begin_nested()
    stock.sell_stock(1)
    sp.rollback()
    s.execute(sa.text("INSERT INTO child VALUES (1, 999)"))
    with pytest.raises(sa.exc.IntegrityError):
        s.commit()
    s.close()
    mine = [r for r in orm.log() if r.occurrence.scope == scope.id]
    assert {r.outcome for r in mine} == {"aborted"}
    assert [r.occurrence.event for r in mine if r.savepoint == "sp1"] == [
        "Stock.sell_stock:end",
    ]
    ids = {(r.occurrence.scope, r.occurrence.t_occ) for r in orm.log()}
    [firing] = orm.firings()
    assert set(firing.constituents) <= ids and firing.savepoint == "sp1"
