"""Replay of savepoints (issue 11, items 1 and 2): what a rolled-back savepoint
took with it is in the log under its transaction's scope, marked with the
savepoint; replay rolls detection back where the online run did, and every
constituent the firing log names is a row of the event log."""

from __future__ import annotations

from typing import Any

import sentinel
from sentinel.replay import replay

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
