"""The toy reactive model of the ORM tests (importable without pytest: the
crash tests run it in a child process)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sentinel import LocalEventDetector, Reactive, event


def make_model(det: LocalEventDetector) -> Any:
    """Reactive mapped classes bound to ``det`` (new classes on each call)."""

    class Base(Reactive, DeclarativeBase, detector=det):
        pass

    class Stock(Base):
        __tablename__ = "stock"
        id: Mapped[int] = mapped_column(primary_key=True)
        name: Mapped[str] = mapped_column(sa.String(20))
        kind: Mapped[str] = mapped_column(sa.String(20), default="stock")
        price: Mapped[float] = mapped_column(default=0.0)
        qty: Mapped[int] = mapped_column(default=0)
        __mapper_args__ = {"polymorphic_on": "kind", "polymorphic_identity": "stock"}

        @event(begin="e2", end="e3")
        def set_price(self, price: float) -> None:
            self.price = price

        @event(end="e1")
        def sell_stock(self, qty: int) -> int:
            self.qty -= qty
            return self.qty

    class TechStock(Stock):
        __mapper_args__ = {"polymorphic_identity": "tech"}

    class Holder(Base):
        __tablename__ = "holder"
        id: Mapped[int] = mapped_column(primary_key=True)
        name: Mapped[str] = mapped_column(sa.String(20))

    sa.Table(
        "effects",
        Base.metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("rule", sa.String(50)),
        sa.Column("ikey", sa.String(80)),
        sa.Column("value", sa.Float, nullable=True),
        sa.Column("note", sa.String(50), nullable=True),
    )

    class Model:
        pass

    m: Any = Model()
    m.Base, m.Stock, m.TechStock, m.Holder = Base, Stock, TechStock, Holder
    return m
