"""The event log agrees with the committed data, whatever the interleaving of
commits, rollbacks and savepoints (issue 4: "the log agrees with committed data
after random interleavings of commits and rollbacks")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

import sentinel

from .conftest import ORM

STOCKS = 3
#: A step: (stock index, new price), or a savepoint: ("sp", steps, rolled back?).
price_step = st.tuples(st.integers(0, STOCKS - 1), st.integers(1, 1000).map(float))
steps = st.lists(
    st.one_of(
        price_step,
        st.tuples(st.just("sp"), st.lists(price_step, min_size=1, max_size=3), st.booleans()),
    ),
    min_size=0,
    max_size=5,
)
#: A transaction: its steps, and whether it commits.
transactions = st.lists(st.tuples(steps, st.booleans()), min_size=1, max_size=6)

EXAMPLES = {"sqlite": 30, "postgresql": 12, "mysql": 12}


@dataclass
class Expected:
    prices: dict[int, float]
    #: Per committed transaction scope: the prices set in it that survived.
    committed: dict[str, list[tuple[int, float]]]
    aborted: set[str]
    #: Per committed scope: prices set in savepoints that were rolled back.
    rolled_back: dict[str, list[tuple[int, float]]]


def _run(orm: ORM, ids: list[int], txns: list[Any]) -> Expected:
    Stock = orm.model.Stock
    prices = {i: 0.0 for i in ids}
    exp = Expected(dict(prices), {}, set(), {})
    for txn_steps, commits in txns:
        s = orm.Session()
        stocks = [s.get(Stock, i) for i in ids]
        scope = sentinel.scope_of(s)
        assert scope is not None
        kept: list[tuple[int, float]] = []
        lost: list[tuple[int, float]] = []
        working = dict(exp.prices)
        for step in txn_steps:
            if step[0] == "sp":
                _, inner, rolls_back = step
                nested = s.begin_nested()
                for k, price in inner:
                    stocks[k].set_price(price)
                s.flush()
                if rolls_back:
                    nested.rollback()
                    lost.extend((ids[k], p) for k, p in inner)
                else:
                    nested.commit()
                    kept.extend((ids[k], p) for k, p in inner)
                    working.update((ids[k], p) for k, p in inner)
            else:
                k, price = step
                stocks[k].set_price(price)
                kept.append((ids[k], price))
                working[ids[k]] = price
        if commits:
            s.commit()
            exp.prices = working
            exp.committed[scope.id] = kept
            exp.rolled_back[scope.id] = lost
        else:
            s.rollback()
            exp.aborted.add(scope.id)
        s.close()
    return exp


def test_the_log_agrees_with_the_committed_data(orm: ORM) -> None:
    orm.attach()
    runs = {"n": 0}

    @settings(
        max_examples=EXAMPLES[orm.backend],
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(txns=transactions)
    def check(txns: list[Any]) -> None:
        runs["n"] += 1
        ids = orm.add_stocks(*(f"s{runs['n']}.{i}" for i in range(STOCKS)))
        exp = _run(orm, ids, txns)
        rows = [r for r in orm.log() if r.occurrence.scope in _scopes(exp)]
        # 1. what the data says
        with orm.Session() as s:
            data = {i: s.get(orm.model.Stock, i).price for i in ids}
        assert data == exp.prices
        # 2. the committed rows of each transaction: exactly the calls that
        # survived, in order, and the last update of each row is the data
        committed = [r.occurrence for r in rows if r.outcome == "committed"]
        for scope, kept in exp.committed.items():
            calls = [
                (o.source.key[0], o.params["price"])
                for o in committed
                if o.scope == scope and o.event == "Stock.set_price:begin"
            ]
            assert calls == kept
        last: dict[int, float] = {i: 0.0 for i in ids}
        for o in sorted(committed, key=lambda o: o.t_occ):
            if o.event == "Stock:update" and o.source.key[0] in last:
                last[o.source.key[0]] = o.params["new"]["price"]
        assert last == data
        # 3. aborted transactions and rolled-back savepoints are marked aborted
        for r in rows:
            scope = r.occurrence.scope
            if scope in exp.aborted or r.savepoint is not None:
                assert r.outcome == "aborted"
        for scope, lost in exp.rolled_back.items():
            in_savepoints = [
                (r.occurrence.source.key[0], r.occurrence.params["price"])
                for r in rows
                if r.occurrence.scope == scope
                and r.savepoint is not None
                and r.occurrence.event == "Stock.set_price:begin"
            ]
            assert in_savepoints == lost
        # 4. nothing twice
        assert len({(r.occurrence.scope, r.occurrence.t_occ) for r in rows}) == len(rows)

    check()


def _scopes(exp: Expected) -> set[str]:
    return set(exp.committed) | exp.aborted
