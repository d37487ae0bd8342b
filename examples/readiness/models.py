"""The military readiness application's data (Sentinel report, 4.5).

Units have a readiness rating from 1 (combat ready) to 5 (overhaul); a rating of
2 or better is what a unit assigned to a plan must keep. Plans (for a crisis)
have units assigned to them. The methods that change ratings and assignments are
event generators; alerts and the notices sent to command are rows too.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from sentinel import Reactive, event

__all__ = ["Alert", "Base", "Notice", "Plan", "Unit", "assignment"]


class Base(Reactive, DeclarativeBase):
    """Reactive declarative base: the classes' event methods signal events."""


assignment = sa.Table(
    "assignment",
    Base.metadata,
    sa.Column("plan_id", sa.ForeignKey("plan.id"), primary_key=True),
    sa.Column("unit_id", sa.ForeignKey("unit.id"), primary_key=True),
)


class Unit(Base):
    __tablename__ = "unit"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(40), unique=True)
    location: Mapped[str] = mapped_column(sa.String(40))
    rating: Mapped[int] = mapped_column(default=1)
    plans: Mapped[list[Plan]] = relationship(secondary=assignment, back_populates="units")

    @event(begin="rating_report")
    def report_readiness(self, rating: int) -> None:
        """A readiness report for the unit (personnel, training, supplies ...)."""
        self.rating = rating

    def __repr__(self) -> str:
        return f"{self.name} (rating {self.rating})"


class Plan(Base):
    __tablename__ = "plan"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(40), unique=True)
    crisis: Mapped[str] = mapped_column(sa.String(80))
    min_units: Mapped[int] = mapped_column(default=2)
    units: Mapped[list[Unit]] = relationship(secondary=assignment, back_populates="plans")

    @event(end="assigned")
    def assign(self, unit: Unit) -> None:
        self.units.append(unit)

    @event(end="released")
    def release(self, unit: Unit) -> None:
        self.units.remove(unit)


class Alert(Base):
    """A plan at risk, raised by the deferred rule at commit."""

    __tablename__ = "alert"
    id: Mapped[int] = mapped_column(primary_key=True)
    plan_id: Mapped[int] = mapped_column(sa.ForeignKey("plan.id"))
    message: Mapped[str] = mapped_column(sa.String(200))


class Notice(Base):
    """A notice sent to command about an alert (by the detached rule), once."""

    __tablename__ = "notice"
    id: Mapped[int] = mapped_column(primary_key=True)
    alert_id: Mapped[int] = mapped_column(sa.ForeignKey("alert.id"))
    idempotency_key: Mapped[str] = mapped_column(sa.String(64), unique=True)
    text: Mapped[str] = mapped_column(sa.String(250))
