"""Session transactions as detection scopes: begin, commit, abort, savepoints,
and what the event log holds for each (issue 4, "Attach", "Savepoints", "The
event log")."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import sentinel
from sentinel.log import LogPolicy

from .conftest import ORM


def _seen(orm: ORM, name: str, event: Any, **options: Any) -> list[Any]:
    out: list[Any] = []
    orm.det.rule(name, event, action=out.append, **options)
    return out


def test_each_root_transaction_is_a_scope_and_is_logged_in_it(orm: ORM) -> None:
    orm.attach()
    (ibm,) = orm.add_stocks("IBM")
    scopes = []
    for price in (1.0, 2.0):
        with orm.Session.begin() as s:
            s.get(orm.model.Stock, ibm).set_price(price)
            scope = sentinel.scope_of(s)
            assert scope is not None and scope.active
            scopes.append(scope.id)
        assert sentinel.scope_of(s) is None
    assert scopes[0] != scopes[1]
    by_scope: dict[str, list[str]] = {}
    for row in orm.log():
        assert row.outcome == "committed"
        by_scope.setdefault(row.occurrence.scope, []).append(row.occurrence.event)
    for sid in scopes:
        assert by_scope[sid] == [
            "txn:begin",
            "Stock.set_price:begin",
            "Stock.set_price:end",
            "Stock:update",
            "txn:pre_commit",
            "txn:commit",
        ]


def test_read_only_transactions_write_nothing(orm: ORM) -> None:
    orm.attach()
    (ibm,) = orm.add_stocks("IBM")
    before = len(orm.log())
    for _ in range(3):
        with orm.Session.begin() as s:
            s.get(orm.model.Stock, ibm)
        with orm.Session() as s:
            s.get(orm.model.Stock, ibm)  # closed without commit: a rollback
    assert len(orm.log()) == before
    orm.attached.pop().detach()
    orm.attach(log_empty=True)
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm)
        scope = sentinel.scope_of(s)
        assert scope is not None
    assert [r.occurrence.event for r in orm.log() if r.occurrence.scope == scope.id] == [
        "txn:begin", "txn:pre_commit", "txn:commit",
    ]  # fmt: skip


def test_an_aborted_transaction_is_logged_as_aborted(orm: ORM) -> None:
    orm.attach()
    (ibm,) = orm.add_stocks("IBM")
    s = orm.Session()
    s.get(orm.model.Stock, ibm).set_price(7.0)
    s.flush()
    scope = sentinel.scope_of(s)
    assert scope is not None
    s.close()  # no commit: rolled back
    assert scope.status == "aborted"
    rows = [r for r in orm.log() if r.occurrence.scope == scope.id]
    assert {r.outcome for r in rows} == {"aborted"}
    assert [r.occurrence.event for r in rows] == [
        "txn:begin", "Stock.set_price:begin", "Stock.set_price:end", "Stock:update", "txn:abort",
    ]  # fmt: skip


def test_a_rolled_back_savepoint_is_gone_from_detection(orm: ORM) -> None:
    orm.attach()
    got = _seen(orm, "r", "Stock.e2 ; Stock.e1")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        with s.begin_nested() as sp:
            stock.set_price(1.0)
            sp.rollback()
        stock.sell_stock(1)
    assert got == []
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        with s.begin_nested():  # released
            stock.set_price(2.0)
        stock.sell_stock(1)
    assert [o.values("price") for o in got] == [(2.0,)]


def test_the_log_agrees_with_a_rolled_back_savepoint(orm: ORM) -> None:
    orm.attach()
    deferred = _seen(orm, "d", "Stock.e2", coupling="deferred", context="cumulative")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.set_price(1.0)
        outer = s.begin_nested()
        stock.set_price(2.0)
        inner = s.begin_nested()
        stock.set_price(3.0)
        inner.commit()  # released into outer...
        outer.rollback()  # ...which is rolled back: both gone
        stock.set_price(4.0)
        scope = sentinel.scope_of(s)
        assert scope is not None
    assert [o.values("price") for o in deferred] == [(1.0, 4.0)]
    rows = orm.log()
    mine = [r for r in rows if r.occurrence.scope == scope.id]
    committed = [r.occurrence for r in mine if r.savepoint is None]
    assert {r.outcome for r in mine if r.savepoint is None} == {"committed"}
    assert [o.params["price"] for o in committed if o.event == "Stock.set_price:begin"] == [
        1.0, 4.0,
    ]  # fmt: skip
    # in the transaction's scope, marked with the savepoint that undid them
    rolled_back = [r for r in mine if r.savepoint is not None]
    assert {r.savepoint for r in rolled_back} == {"sp1"}
    assert {r.outcome for r in rolled_back} == {"aborted"}
    assert [
        r.occurrence.params["price"]
        for r in rolled_back
        if r.occurrence.event == "Stock.set_price:begin"
    ] == [2.0, 3.0]
    # every occurrence is logged exactly once
    assert len({(r.occurrence.t_occ) for r in rows}) == len(rows)


def test_root_commit_with_a_savepoint_left_open(orm: ORM) -> None:
    """``with Session.begin()`` around a ``begin_nested()`` never released:
    SQLAlchemy releases the savepoint inside the root's commit; pre-commit still
    runs once, in the transaction."""
    orm.attach()
    deferred = _seen(orm, "d", "Stock.e2", coupling="deferred", context="cumulative")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.set_price(1.0)
        s.begin_nested()
        stock.set_price(2.0)
    assert [o.values("price") for o in deferred] == [(1.0, 2.0)]
    events = Counter(r.occurrence.event for r in orm.log())
    assert events["txn:pre_commit"] == 2  # add_stocks' and this one


def test_method_events_outside_a_transaction_go_to_the_sessions_next_one(orm: ORM) -> None:
    orm.attach()
    deferred = _seen(orm, "d", "Stock.e2", coupling="deferred")
    (ibm,) = orm.add_stocks("IBM")
    s = orm.Session(expire_on_commit=False)
    stock = s.get(orm.model.Stock, ibm)
    s.commit()
    assert s.get_transaction() is None
    stock.set_price(5.0)  # the session's next transaction begins here
    scope = sentinel.scope_of(s)
    assert scope is not None
    s.commit()
    s.close()
    assert len(deferred) == 1
    assert deferred[0].scope == scope.id


def test_transaction_events_in_expressions(orm: ORM) -> None:
    orm.attach()
    # a sale that ends a transaction without a price change in it
    got = _seen(orm, "r", "NOT(Stock.e2)[Stock.e1, txn:pre_commit]")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).sell_stock(1)
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.sell_stock(1)
        stock.set_price(1.0)
    assert len(got) == 1


def test_process_scope_and_late_rows(orm: ORM) -> None:
    att = orm.attach()
    orm.det.explicit("Tick")
    orm.det.signal("Tick", n=1)  # outside any transaction: the process scope
    with orm.det.transaction():  # a detection scope that is no session's
        orm.det.signal("Tick", n=2)
    assert att.sink is not None and len(att.sink.late) == 5
    att.sink.late_delay = float("inf")
    orm.add_stocks("IBM")  # late rows never travel in another transaction's batch
    assert len(att.sink.late) == 6  # add_stocks' own txn:commit joined them
    assert not [r for r in orm.log(flush=False) if r.occurrence.event == "Tick"]
    att.sink.late_delay = 0.0
    orm.add_stocks("MS")  # a transaction's end writes them once they waited late_delay
    assert len(att.sink.late) == 0  # MS ended after its txn:commit: all written
    rows = {r.occurrence.params.get("n"): r for r in orm.log() if r.occurrence.event == "Tick"}
    assert rows[1].outcome is None
    assert rows[1].occurrence.scope == orm.det.process_scope.id
    assert rows[2].outcome == "committed"
    assert att.sink.late == type(att.sink.late)()


def test_a_transaction_commit_row_is_written_later(orm: ORM) -> None:
    att = orm.attach()
    orm.add_stocks("IBM")
    assert att.sink is not None
    assert [item[1][0] for item in att.sink.late] == ["txn:commit"]
    assert att.flush_log() == 1
    assert att.sink.late == type(att.sink.late)()
    assert [r.occurrence.event for r in orm.log()][-1] == "txn:commit"


def test_log_policy_excludes_and_redacts(orm: ORM) -> None:
    orm.attach(log=LogPolicy({"Stock.set_price:*": {"redact": ["price"]},
                              "Stock:*": {"exclude": ["old", "new"]}}))  # fmt: skip
    got = _seen(orm, "r", "Stock.e2")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(99.0)
    assert got[0].params["price"] == 99.0  # rules see every value
    rows = {r.occurrence.event: r.occurrence.params for r in orm.log()}
    assert rows["Stock.set_price:begin"] == {"price": "<redacted>"}
    assert rows["Stock:update"] == {}


def test_rule_firings_are_logged(orm: ORM) -> None:
    orm.attach(log_condition_false=True)
    orm.det.rule("cheap", "Stock.e2", lambda o: o.params["price"] < 10, action=lambda o: None)
    orm.det.rule("net", "Stock.e2", action=lambda o: None, coupling="deferred")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.set_price(5.0)
        stock.set_price(50.0)
        scope = sentinel.scope_of(s)
        assert scope is not None
    firings = [(f.rule, f.status, f.coupling) for f in orm.firings()]
    assert firings == [
        ("cheap", "fired", "immediate"),
        ("cheap", "condition_false", "immediate"),
        ("net", "fired", "deferred"),
    ]
    net = orm.firings()[-1]
    assert net.scope == scope.id
    begins = [r.occurrence for r in orm.log() if r.occurrence.event == "Stock.set_price:begin"]
    assert [t for _, t in net.constituents] == [o.t_occ for o in begins]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_condition_false_runs_are_not_logged_by_default(orm: ORM) -> None:
    orm.attach()
    orm.det.rule("cheap", "Stock.e2", lambda o: o.params["price"] < 10, action=lambda o: None)
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(50.0)
    assert orm.firings() == []


def test_a_long_transaction_writes_at_flushes(orm: ORM) -> None:
    att = orm.attach(flush_every=5)
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        for i in range(6):
            stock.set_price(float(i))
        s.flush()  # more than 5 waiting: written now, in the transaction
        scope = sentinel.scope_of(s)
        assert scope is not None
        st = s.info["_sentinel_txn"]
        assert st.written == len(st.occurrences) > 5
        stock.set_price(9.0)
    assert att.sink is not None
    rows = [r for r in orm.log() if r.occurrence.scope == scope.id]
    # begin, 6 calls (begin and end), an update, one more call, its update,
    # pre-commit, commit
    assert len(rows) == 1 + 12 + 1 + 2 + 1 + 1 + 1
    assert [r.occurrence.t_occ for r in rows] == sorted(r.occurrence.t_occ for r in rows)


def test_a_transaction_begun_in_a_condition_signals_its_begin_as_its_commit(orm: ORM) -> None:
    """A condition runs with its thread's signals muted, but transaction events
    are never muted (as ``detector.begin`` and ``commit`` signal them): a
    session a condition opens has its ``txn:begin`` as well as its
    ``txn:commit``, so a deferred rule's ``A*(txn:begin, E, txn:pre_commit)``
    sees the whole of it."""
    from sentinel.detector.events import listen

    if orm.backend == "sqlite":
        pytest.skip("the fixture's SQLite transactions begin IMMEDIATE: a second would wait")
    orm.attach()
    (ibm,) = orm.add_stocks("IBM")
    seen: list[tuple[str, Any]] = []
    listen(orm.det, "occurrence", lambda occ: seen.append((occ[0], occ[6])))
    inner: list[Any] = []

    def looks_up(occ: Any) -> bool:
        with orm.Session.begin() as s:  # a read in a transaction of its own
            s.get(orm.model.Stock, ibm)
            inner.append(sentinel.scope_of(s).id)
        return False

    orm.det.rule("looks_up", "Stock.set_price:end", looks_up, action=print)
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(3.0)
    (scope,) = inner
    txn = [name for name, sid in seen if sid == scope]
    assert txn[0] == "txn:begin" and txn[-1] == "txn:commit", txn
