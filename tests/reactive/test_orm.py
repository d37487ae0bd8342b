"""Reactive SQLAlchemy 2.x declarative classes (``Mapped``, ``mapped_column``).

The reactive layer never imports SQLAlchemy; it reads a persistent object's
identity from its instance state. (Attaching to sessions and transactions is the
ORM layer's job; here the mapped classes only signal method events.)
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import ForeignKey, String, create_engine, select
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    mapped_column,
    reconstructor,
    relationship,
    validates,
)

from sentinel import LocalEventDetector, ObjectRef, Reactive, event, object_ref, on
from sentinel.reactive import set_scope_hook
from tests.reactive.conftest import Recorder, fired


@pytest.fixture
def model(det: LocalEventDetector) -> Any:
    class Base(Reactive, DeclarativeBase, detector=det):
        pass

    class Stock(Base):
        __tablename__ = "stock"
        id: Mapped[int] = mapped_column(primary_key=True)
        name: Mapped[str] = mapped_column(String(20))
        kind: Mapped[str] = mapped_column(String(20), default="stock")
        price: Mapped[float] = mapped_column(default=0.0)
        holder_id: Mapped[int | None] = mapped_column(ForeignKey("holder.id"))
        holder: Mapped[Holder | None] = relationship(back_populates="stocks")
        __mapper_args__ = {"polymorphic_on": "kind", "polymorphic_identity": "stock"}

        @event(begin="e2", end="e3")
        def set_price(self, price: float) -> None:
            """Set the price."""
            self.price = price

        @event
        def transfer(self, to: Holder) -> None:
            self.holder = to

    class TechStock(Stock):  # single-table inheritance
        __mapper_args__ = {"polymorphic_identity": "tech"}

    class Holder(Base):
        __tablename__ = "holder"
        id: Mapped[int] = mapped_column(primary_key=True)
        stocks: Mapped[list[Stock]] = relationship(back_populates="holder")

    class Model:
        pass

    m = Model()
    m.Base, m.Stock, m.TechStock, m.Holder = Base, Stock, TechStock, Holder  # type: ignore[attr-defined]
    return m


@pytest.fixture
def session(model: Any) -> Iterator[Session]:
    engine = create_engine("sqlite://")
    model.Base.metadata.create_all(engine)
    with Session(engine) as s:
        yield s
    engine.dispose()


def test_mapped_methods_keep_signature_and_docs(model: Any, det: LocalEventDetector) -> None:
    fired(det, "r", model.Stock.set_price.end)
    assert str(inspect.signature(model.Stock.set_price)) == "(self, price: 'float') -> 'None'"
    assert model.Stock.set_price.__doc__ == "Set the price."
    assert model.Stock.set_price.begin == on(model.Stock).e2


def test_mapping_still_works_with_wrappers_installed(
    model: Any, det: LocalEventDetector, session: Session
) -> None:
    got = fired(det, "r", model.Stock.set_price.end)
    s = model.Stock(name="IBM")
    session.add(s)
    s.set_price(115.0)
    session.commit()
    assert session.scalars(select(model.Stock.price)).one() == 115.0
    assert len(got) == 1


def test_transient_then_persistent_references(
    model: Any, det: LocalEventDetector, session: Session
) -> None:
    rec = Recorder(det)
    s = model.Stock(name="IBM")
    s.set_price(1.0)  # not flushed: a process-local reference
    assert rec.occurrences[-1].source.transient
    session.add(s)
    session.flush()
    s.set_price(2.0)
    assert rec.occurrences[-1].source == ObjectRef("Stock", (s.id,))
    assert repr(object_ref(s)) == f"<Stock {s.id}>"


def test_the_reference_changes_during_the_call_that_flushes(
    model: Any, det: LocalEventDetector, session: Session
) -> None:
    class Flushing(model.Stock):
        __mapper_args__ = {"polymorphic_identity": "flushing"}

        def set_price(self, price: float) -> None:
            super().set_price(price)
            session.add(self)
            session.flush()

    rec = Recorder(det)
    f = Flushing(name="F")
    f.set_price(3.0)
    begin, end = rec.occurrences
    assert begin.source.transient  # when it began, f had no primary key
    assert end.source == ObjectRef("Flushing", (f.id,))


def test_a_persistent_reference_is_made_once_per_identity_key(
    model: Any, det: LocalEventDetector, session: Session
) -> None:
    """Every decorated call of a persistent object needs its reference: it is
    made once and kept with the object's state, and made again when the
    primary key changes (a new identity key after the flush)."""
    rec = Recorder(det)
    s = model.Stock(name="IBM")
    session.add(s)
    session.flush()
    s.set_price(1.0)
    s.set_price(2.0)
    first, again = rec.occurrences[-1].source, rec.occurrences[-3].source
    assert first == ObjectRef("Stock", (s.id,)) and first is again
    old = s.id
    s.id = old + 100
    session.flush()
    s.set_price(3.0)
    assert rec.occurrences[-1].source == ObjectRef("Stock", (old + 100,))
    assert object_ref(s) == ObjectRef("Stock", (old + 100,))


def test_instance_level_event_follows_the_row(
    model: Any, det: LocalEventDetector, session: Session
) -> None:
    s = model.Stock(name="IBM")
    session.add(s)
    session.commit()
    ibm = on(s).set_price.begin
    got = fired(det, "ibm", ibm)
    # Another session loads the same row as another Python object.
    with Session(session.get_bind()) as other:
        again = other.get(model.Stock, s.id)
        assert again is not s
        again.set_price(7.0)
    assert [o.params["price"] for o in got] == [7.0]


def test_polymorphic_subclass_selectors(
    model: Any, det: LocalEventDetector, session: Session
) -> None:
    on_tech = fired(det, "tech", model.TechStock.set_price.end)
    on_all = fired(det, "all", model.Stock.set_price.end)
    session.add_all([model.Stock(name="A"), model.TechStock(name="T")])
    session.commit()
    session.expunge_all()
    for s in session.scalars(select(model.Stock).order_by(model.Stock.id)):
        s.set_price(1.0)
    assert [o.source.class_name for o in on_all] == ["Stock", "TechStock"]
    assert [o.source.class_name for o in on_tech] == ["TechStock"]


def test_reactive_objects_as_parameters(
    model: Any, det: LocalEventDetector, session: Session
) -> None:
    got = fired(det, "r", model.Stock.transfer.end)
    h = model.Holder()
    s = model.Stock(name="IBM")
    session.add_all([h, s])
    session.flush()
    s.transfer(h)
    assert got[0].params["to"] == ObjectRef("Holder", (h.id,))


def test_scope_hook(model: Any, det: LocalEventDetector) -> None:
    # The ORM layer decides each object's scope (its session's transaction).
    scope = det.begin("session-1")
    seen: list[Any] = []

    def hook(obj: Any) -> Any:
        seen.append(obj)
        return scope

    set_scope_hook(det, hook)
    try:
        got = fired(det, "r", model.Stock.set_price.end)
        s = model.Stock(name="IBM")
        s.set_price(1.0)
        assert got[0].scope == "session-1"
        assert seen == [s]
    finally:
        set_scope_hook(det, None)
    s.set_price(2.0)
    assert got[1].scope == det.process_scope.id


def test_validators_and_reconstructors_signal_when_sqlalchemy_calls_them(
    det: LocalEventDetector,
) -> None:
    """``@event`` above ``@validates`` / ``@reconstructor``: SQLAlchemy calls the
    function it found when it mapped the class (on an attribute set, on a load),
    and those calls signal as the method's own calls do, while something
    listens, and cost nothing extra while nothing does."""

    class Base(Reactive, DeclarativeBase, detector=det):
        pass

    class Item(Base):
        __tablename__ = "item"
        id: Mapped[int] = mapped_column(primary_key=True)
        price: Mapped[float] = mapped_column(default=0.0)

        @event(end="checked")
        @validates("price")
        def check_price(self, key: str, value: float) -> float:
            if value < 0:
                raise ValueError("negative")
            return value

        @event(end="loaded")
        @reconstructor
        def on_load(self) -> None:
            self.seen = True

    class Gadget(Item):
        pass

    unlistened = Item(price=1.0)
    assert unlistened.price == 1.0
    checked = fired(det, "v", "Item.checked")
    loaded_events = fired(det, "l", "Item.loaded")
    item = Item(price=3.0)
    item.price = 4.0
    item.check_price("price", 5.0)  # a direct call, as before
    Gadget(price=6.0)
    with pytest.raises(ValueError, match="negative"):
        item.price = -1.0
    assert [(o.params["value"], o.params["result"]) for o in checked] == [
        (3.0, 3.0),
        (4.0, 4.0),
        (5.0, 5.0),
        (6.0, 6.0),
    ]
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.add(Item(id=1, price=2.0))
        s.commit()
    with Session(engine) as s:
        loaded = s.get(Item, 1)
        assert loaded is not None and loaded.seen
    engine.dispose()
    assert [o.source for o in loaded_events] == [ObjectRef("Item", (1,))]
