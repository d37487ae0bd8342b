"""The application: accounts whose deposits are events, and a detached rule that
writes a receipt for each deposit after the deposit committed."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Flask, current_app
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sentinel import LocalEventDetector, Reactive, event
from sentinel.log import migrate
from sentinel.orm import detached_context

detector = LocalEventDetector()


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


class Account(Reactive, db.Model, detector=detector):
    id: Mapped[int] = mapped_column(primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(40))
    balance: Mapped[int] = mapped_column(default=0)

    @event(end="deposited")
    def deposit(self, amount: int) -> None:
        self.balance += amount


class Receipt(db.Model):
    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int]
    amount: Mapped[int]
    text: Mapped[str] = mapped_column(sa.String(100))
    key: Mapped[str] = mapped_column(sa.String(64), unique=True)


def write_receipt(occ: Any) -> None:
    """The detached action: runs after the deposit committed, in a worker thread,
    inside the application's context (``attach(..., context=app.app_context)``),
    so ``current_app`` and the engines of ``db`` are there."""
    ctx = detached_context()
    (account_id,) = occ.source.key
    amount = occ.params["amount"]
    ctx.session.add(
        Receipt(
            account_id=account_id,
            amount=amount,
            text=current_app.config["RECEIPT_TEXT"].format(amount=amount),
            key=ctx.idempotency_key,
        )
    )


detector.rule("receipt", "Account.deposited", action=write_receipt, coupling="detached")


def create_app(database_url: str) -> Flask:
    """The Flask application on ``database_url``, with its tables and sentinel's
    created (sentinel is attached by the caller)."""
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = database_url
    app.config["RECEIPT_TEXT"] = "Thank you for your deposit of {amount}."
    db.init_app(app)
    with app.app_context():
        db.create_all()
        migrate.upgrade(db.engine)

    @app.post("/accounts")
    def open_account() -> dict[str, Any]:
        account = Account(owner="ann")
        db.session.add(account)
        db.session.commit()
        return {"id": account.id}

    @app.post("/accounts/<int:account_id>/deposit/<int:amount>")
    def deposit(account_id: int, amount: int) -> dict[str, Any]:
        account = db.get_or_404(Account, account_id)
        account.deposit(amount)
        db.session.commit()
        return {"balance": account.balance}

    @app.get("/accounts/<int:account_id>/receipts")
    def receipts(account_id: int) -> list[str]:
        rows = db.session.scalars(
            sa.select(Receipt.text).where(Receipt.account_id == account_id).order_by(Receipt.id)
        )
        return list(rows)

    return app
