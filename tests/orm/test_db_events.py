"""Insert, update and delete of reactive mapped objects as primitive events
(issue 4, "Database events"): class- and instance-level, old and new values."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

import sentinel
from sentinel import LocalEventDetector, ObjectRef, Reactive, on
from sentinel.errors import ReactiveError, UnknownEventError
from sentinel.orm import db_events

from .conftest import ORM


def _seen(orm: ORM, name: str, event: Any) -> list[Any]:
    out: list[Any] = []
    orm.det.rule(name, event, action=out.append)
    return out


def test_insert_update_delete_with_old_and_new_values(orm: ORM) -> None:
    orm.attach()
    Stock = orm.model.Stock
    inserts = _seen(orm, "i", "Stock:insert")
    updates = _seen(orm, "u", "Stock:update")
    deletes = _seen(orm, "d", "Stock:delete")
    with orm.Session.begin() as s:
        ibm = Stock(name="IBM", price=1.5)
        s.add(ibm)
        s.flush()
        ibm_id = ibm.id
    (ins,) = inserts
    assert ins.source == ObjectRef("Stock", (ibm_id,))
    assert dict(ins.params["new"]) == {
        "id": ibm_id, "name": "IBM", "kind": "stock", "price": 1.5, "qty": 0,
    }  # fmt: skip
    with orm.Session.begin() as s:
        ibm = s.get(Stock, ibm_id)
        ibm.set_price(2.5)
        ibm.name = "I.B.M."
        ibm.qty = 0  # set to the value it has: no change
    (upd,) = updates
    assert dict(upd.params["old"]) == {"price": 1.5, "name": "IBM"}
    assert dict(upd.params["new"]) == {"price": 2.5, "name": "I.B.M."}
    with orm.Session.begin() as s:
        s.delete(s.get(Stock, ibm_id))
    (dele,) = deletes
    assert dict(dele.params["old"])["name"] == "I.B.M."
    assert "new" not in dele.params
    assert len(inserts) == len(updates) == 1


def test_no_update_event_without_a_net_change(orm: ORM) -> None:
    orm.attach()
    updates = _seen(orm, "u", "Stock:update")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.price = 3.0
        stock.price = 0.0  # back to what it was
    assert updates == []


def test_events_come_in_flush_order_within_the_transaction(orm: ORM) -> None:
    orm.attach()
    seen = _seen(orm, "all", "Stock:insert | Stock:update | Stock.e2")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.set_price(1.0)
        s.flush()
        stock.set_price(2.0)
    assert [o.event for o in seen] == [
        "Stock:insert",
        "Stock.set_price:begin",
        "Stock:update",
        "Stock.set_price:begin",
        "Stock:update",
    ]
    assert len({o.scope for o in seen[1:]}) == 1
    assert [o.t_occ for o in seen] == sorted(o.t_occ for o in seen)


def test_subclass_and_instance_level_events(orm: ORM) -> None:
    orm.attach()
    Stock, TechStock = orm.model.Stock, orm.model.TechStock
    (plain,) = orm.add_stocks("IBM")
    (tech,) = orm.add_stocks("ARM", cls=TechStock)
    any_stock = _seen(orm, "any", db_events(Stock).update)
    tech_only = _seen(orm, "tech", "TechStock:update")
    with orm.Session() as s:
        arm = s.get(Stock, tech)
        one_row = _seen(orm, "one", db_events(arm).update)
    with orm.Session.begin() as s:
        for i in (plain, tech):
            s.get(Stock, i).price = 9.0
    assert [o.source for o in any_stock] == [ObjectRef("Stock", (plain,)),
                                             ObjectRef("TechStock", (tech,))]  # fmt: skip
    assert [o.source for o in tech_only] == [ObjectRef("TechStock", (tech,))]
    assert [o.event for o in one_row] == ["Stock:update"]  # the root's channel
    assert [o.source for o in one_row] == [ObjectRef("TechStock", (tech,))]


def test_database_events_combine_with_method_events(orm: ORM) -> None:
    """``Stock:update ; Stock.e1`` is detected per transaction, like any other
    expression over primitive events."""
    orm.attach()
    got = _seen(orm, "r", "Stock:update ; Stock.e1")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.price = 5.0
        s.flush()
        stock.sell_stock(3)
    assert len(got) == 1
    assert [c.event for c in got[0].constituents] == ["Stock:update", "Stock.sell_stock:end"]


def test_handles_and_errors(orm: ORM) -> None:
    Stock = orm.model.Stock
    assert str(db_events(Stock).insert) == "Stock:insert"
    assert db_events(orm.model.TechStock).delete.label == "TechStock:delete"
    with pytest.raises(ReactiveError, match="'insert', 'update' or 'delete'"):
        db_events(Stock).event("upsert")
    with pytest.raises(ReactiveError, match="no primary key yet"):
        db_events(Stock(name="draft"))
    with pytest.raises(ReactiveError, match="no database events"):
        db_events(int)
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session() as s:
        stock = s.get(Stock, ibm)
        assert repr(db_events(stock)) == f"<database events of Stock[{ibm}]>"
        with pytest.raises(ReactiveError, match="insert events never occur"):
            _ = db_events(stock).insert
    with pytest.raises(UnknownEventError):
        orm.det.rule("r", "Stock:upsert", action=print)
    # method events and database events sit side by side in on()/db_events()
    assert on(Stock).set_price.begin.name == "Stock.set_price:begin"


def test_nobody_listening_costs_no_event(orm: ORM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a log and without rules on them, no database event is built (not
    even the row's reference)."""
    module = importlib.import_module("sentinel.orm.db_events")
    refs: list[Any] = []
    real = module.object_ref

    def spy(obj: Any) -> Any:
        refs.append(obj)
        return real(obj)

    monkeypatch.setattr(module, "object_ref", spy)
    orm.attach(log=False, outbox=False)
    (ibm,) = orm.add_stocks("IBM")
    holders = _seen(orm, "h", "Holder:insert")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).price = 2.0
        s.add(orm.model.Holder(name="h"))
    assert refs == []
    assert [c.event for c in holders] == ["Holder:insert"]
    updates = _seen(orm, "u", "Stock:update")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).price = 3.0
    assert len(refs) == 1
    assert [dict(u.params["new"]) for u in updates] == [{"price": 3.0}]


def _order_model(orm: ORM) -> tuple[Any, Any, Any]:
    """Orders whose lines are deleted as orphans (``delete-orphan``), with
    their own detector: ``(Order, Line, Session)``."""
    det = LocalEventDetector()

    class Base(Reactive, DeclarativeBase, detector=det):
        pass

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = mapped_column(primary_key=True)
        lines = relationship("Line", cascade="all, delete-orphan", back_populates="order")

    class Line(Base):
        __tablename__ = "order_line"
        id: Mapped[int] = mapped_column(primary_key=True)
        order_id: Mapped[int] = mapped_column(sa.ForeignKey("orders.id"))
        qty: Mapped[int] = mapped_column(default=0)
        order = relationship(Order, back_populates="lines")

    Base.metadata.create_all(orm.engine)
    orm.det = det
    return Order, Line, orm.Session


def _rows(orm: ORM, table: str) -> set[int]:
    with orm.engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.text(f"SELECT id FROM {table}"))}


def test_an_orphan_deleted_by_its_cascade_signals_its_delete(orm: ORM) -> None:
    """``delete-orphan``: a line removed from its order's collection is deleted
    by the flush without being in ``session.deleted``; its row's delete is an
    event all the same (and no update of a row that is gone)."""
    Order, Line, Session = _order_model(orm)
    with Session.begin() as s:
        s.add(Order(id=1, lines=[Line(id=1, qty=5), Line(id=2), Line(id=3)]))
    orm.attach()
    deletes = _seen(orm, "d", "Line:delete")
    updates = _seen(orm, "u", "Line:update")
    with Session.begin() as s:
        order = s.get(Order, 1)
        first = order.lines[0]
        order.lines.remove(first)
        first.qty = 7  # changed, then deleted as an orphan in the same flush
        order.lines[1].qty = 9
    gone = {1, 2, 3} - _rows(orm, "order_line")
    assert gone == {1}
    assert [(d.source, dict(d.params["old"])) for d in deletes] == [
        (ObjectRef("Line", (1,)), {"id": 1, "order_id": 1, "qty": 7})
    ]
    assert [u.source for u in updates] == [ObjectRef("Line", (3,))]
    with Session.begin() as s:
        order = s.get(Order, 1)
        order.lines.clear()
    assert {1, 2, 3} - _rows(orm, "order_line") == {1, 2, 3}
    assert sorted(d.source.key for d in deletes) == [(1,), (2,), (3,)]


def test_objects_the_flush_left_alone_signal_nothing(orm: ORM) -> None:
    """Only what a flush wrote signals: ``session.flush([a])`` (SQLAlchemy's
    deprecated subset flush) inserts ``a`` alone; ``b`` is inserted, and
    signalled, by the next flush, once."""
    import warnings

    orm.attach()
    Stock = orm.model.Stock
    inserts = _seen(orm, "i", "Stock:insert")
    updates = _seen(orm, "u", "Stock:update")
    with orm.Session.begin() as s:
        a, b = Stock(name="a"), Stock(name="b")
        s.add_all([a, b])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the objects argument is deprecated
            s.flush([a])
        assert [i.source for i in inserts] == [ObjectRef("Stock", (a.id,))]
        a.price = b.price = 2.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s.flush([a])
        assert [u.source for u in updates] == [ObjectRef("Stock", (a.id,))]
        s.flush()
        ids = a.id, b.id
    assert [i.source for i in inserts] == [ObjectRef("Stock", (i,)) for i in ids]
    assert dict(inserts[1].params["new"])["price"] == 2.0
    assert len(updates) == 1
    assert len(_rows(orm, "stock")) == 2


def test_a_row_replaced_in_one_flush_is_deleted_then_inserted(orm: ORM) -> None:
    """``session.delete(old)`` and ``session.add(new)`` with the same primary
    key in one flush: SQLAlchemy turns them into one UPDATE of the row (its
    "row switch"). The events, applied in order to the rows as they were, give
    the table as it is: the old row's delete comes before the new one's insert."""
    Stock = orm.model.Stock
    ids = orm.add_stocks("IBM", "DEC")
    orm.attach()
    events: list[Any] = []
    orm.det.rule("all", "Stock:insert | Stock:update | Stock:delete", action=events.append)
    rows = {i: name for i, name in zip(ids, ("IBM", "DEC"), strict=True)}
    with orm.Session.begin() as s:
        s.delete(s.get(Stock, ids[0]))
        s.add(Stock(id=ids[0], name="I.B.M."))
        s.add(Stock(id=ids[1] + 10, name="MS"))
    for occ in events:
        (key,) = occ.source.key
        if occ.event == "Stock:delete":
            del rows[key]
        else:
            rows[key] = occ.params["new"].get("name", rows.get(key))
    with orm.engine.connect() as conn:
        table = dict(conn.execute(sa.text("SELECT id, name FROM stock")).all())
    assert rows == table
    assert [o.event for o in events] == ["Stock:delete", "Stock:insert", "Stock:insert"]


class _CaseBlind(sa.types.TypeDecorator[str]):
    impl = sa.String
    cache_ok = True

    def compare_values(self, x: Any, y: Any) -> bool:
        return bool((x or "").lower() == (y or "").lower())


class _Cents(sa.types.TypeDecorator[float]):
    impl = sa.Float
    cache_ok = True

    def compare_values(self, x: Any, y: Any) -> bool:
        return x is not None and y is not None and round(x, 2) == round(y, 2)


def test_a_value_the_columns_type_finds_equal_is_no_change(orm: ORM) -> None:
    """SQLAlchemy compares an attribute's old and new values with the column
    type's ``compare_values``: "IBM" set to "ibm" under a case-blind type is no
    change, and no UPDATE is written. sentinel compared plain values with ``==``
    and logged an update of a row the database never updated."""
    det = LocalEventDetector()

    class Base(Reactive, DeclarativeBase, detector=det):
        pass

    class Ticker(Base):
        __tablename__ = "ticker"
        id: Mapped[int] = mapped_column(primary_key=True)
        name = mapped_column(_CaseBlind(20))
        price = mapped_column(_Cents)

    Base.metadata.create_all(orm.engine)
    orm.det = det
    orm.attach()
    updates = _seen(orm, "u", "Ticker:update")
    with orm.Session.begin() as s:
        s.add(Ticker(id=1, name="IBM", price=1.0))
    written: list[str] = []
    sa.event.listen(
        orm.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *a: written.append(statement),
    )
    with orm.Session.begin() as s:
        t = s.get(Ticker, 1)
        t.name, t.price = "ibm", 1.0001
    assert not [w for w in written if w.startswith("UPDATE")]
    assert updates == []
    with orm.Session.begin() as s:
        t = s.get(Ticker, 1)
        t.name, t.price = "ibm", 1.5  # the price changed: the UPDATE writes both
    assert [dict(u.params["new"]) for u in updates] == [{"price": 1.5}]
    assert not [o for o in orm.log() if o.occurrence.event == "Ticker:update" and
                dict(o.occurrence.params["new"]).get("name")]  # fmt: skip


def test_what_an_immediate_rule_changes_on_a_flushed_object_is_written(orm: ORM) -> None:
    """Immediate rules on a database event ran in ``after_flush``, before
    SQLAlchemy reset the flushed objects' history: a change a rule made to one
    of them (or to another clean object) was reset with it and never written,
    silently. They now run at the flush's end, and the next flush (the
    commit's) writes what they change; docs/orm.md promised as much."""
    ibm, ms = orm.add_stocks("IBM", "MS")
    orm.attach()
    Stock = orm.model.Stock

    def flag(occ: Any) -> None:
        session = sentinel.session_of(occ)
        assert session is not None
        session.get(Stock, occ.source.key[0]).qty = 1  # the object just flushed
        session.get(Stock, ms).qty = 2  # a clean one

    orm.det.rule(
        "flag", "Stock:update", lambda o: dict(o.params["new"]).get("price", 0) > 100, action=flag
    )
    updates = _seen(orm, "u", "Stock:update")
    with orm.Session.begin() as s:
        s.get(Stock, ibm).price = 500.0
    with orm.engine.connect() as conn:
        rows = dict(conn.execute(sa.text("SELECT id, qty FROM stock")).all())
    assert rows == {ibm: 1, ms: 2}
    # the rule's changes are database events of the next flush
    assert sorted((u.source.key[0], sorted(u.params["new"].items())) for u in updates) == [
        (ibm, [("price", 500.0)]),
        (ibm, [("qty", 1)]),
        (ms, [("qty", 2)]),
    ]


def test_an_attribute_set_to_a_sql_expression_signals_its_update(orm: ORM) -> None:
    """``stock.qty = Stock.qty + 5`` (an atomic increment): the flush writes it
    and SQLAlchemy expires the attribute, forgetting its old value; nothing
    after the flush tells that the row changed, and no update was signalled.
    It is, with the old value noted before the flush and no new one (the
    database computed it: read the object to see it)."""
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).qty = 10
    orm.attach()
    Stock = orm.model.Stock
    updates = _seen(orm, "u", "Stock:update")
    with orm.Session.begin() as s:
        s.get(Stock, ibm).qty = Stock.qty + 5
    with orm.Session.begin() as s:
        stock = s.get(Stock, ibm)
        stock.qty = Stock.qty + 5
        stock.name = "IBM2"
    assert [(dict(u.params["old"]), dict(u.params["new"])) for u in updates] == [
        ({"qty": 10}, {}),
        ({"qty": 15, "name": "IBM"}, {"name": "IBM2"}),
    ]
    with orm.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT qty FROM stock")).scalar() == 20
    logged = [o for o in orm.log() if o.occurrence.event == "Stock:update"]
    assert len(logged) == 2


def test_a_rule_changing_the_row_it_reacts_to_at_every_update_stops_at_the_cascade_limit(
    orm: ORM,
) -> None:
    """A rule's change to a flushed object is written by the next flush; a rule
    that changes the row it reacts to at every update (a counter) makes the
    commit flush again and again. The commit fails past the detector's cascade
    limit with a CascadeLimitError naming the rule (SQLAlchemy's own limit was
    a FlushError after 100 flushes), and nothing of the transaction stays."""
    from sentinel.errors import CascadeLimitError

    (ibm,) = orm.add_stocks("IBM")
    orm.attach()
    Stock = orm.model.Stock
    runs: list[Any] = []

    def count(occ: Any) -> None:
        runs.append(occ)
        session = sentinel.session_of(occ)
        assert session is not None
        session.get(Stock, occ.source.key[0]).qty += 1

    orm.det.rule("count", "Stock:update", action=count)
    s = orm.Session()
    s.get(Stock, ibm).price = 5.0
    with pytest.raises(CascadeLimitError, match="'count'"):
        s.commit()
    s.close()
    assert len(runs) == orm.det.scheduler.cascade_limit + 1
    with orm.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT price, qty FROM stock")).one() == (0.0, 0)
