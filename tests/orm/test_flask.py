"""Detached rules in a Flask-SQLAlchemy application (issue 13, item 3, the
worker's part): rules run in worker threads inside the application's context
(``attach(..., context=app.app_context)``); attaching Flask-SQLAlchemy's
``Session`` class needs a session factory that can make sessions, and without
one the entry fails with a clear error instead of staying ``running``.

SQLite files: the example application of ``examples/flask_app``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy.session import Session as FlaskSession

from examples.flask_app import Account, Receipt, create_app, db, detector
from sentinel.log import LogReader
from sentinel.orm import attach


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    app = create_app(f"sqlite:///{tmp_path / 'bank.db'}")
    yield app
    with app.app_context():
        db.engine.dispose()


def _outbox(app: Flask) -> list[Any]:
    with app.app_context(), LogReader(db.engine) as r:
        return list(r.outbox())


def _receipts(app: Flask) -> list[tuple[int, int, str]]:
    with app.app_context():
        rows = db.session.execute(
            sa.select(Receipt.account_id, Receipt.amount, Receipt.text).order_by(Receipt.id)
        )
        return [tuple(r) for r in rows]


def test_detached_rules_run_in_the_application_context(app: Flask) -> None:
    with attach(db.session, detector=detector, context=app.app_context) as attachment:
        client = app.test_client()
        account = client.post("/accounts").json["id"]
        assert client.post(f"/accounts/{account}/deposit/50").json == {"balance": 50}
        assert client.post(f"/accounts/{account}/deposit/20").json == {"balance": 70}
        assert attachment.wait_detached(60)
        assert sorted(client.get(f"/accounts/{account}/receipts").json) == [  # two threads
            "Thank you for your deposit of 20.",
            "Thank you for your deposit of 50.",
        ]
    assert [(e.rule, e.status) for e in _outbox(app)] == [("receipt", "done")] * 2
    assert len(_receipts(app)) == 2


def test_without_the_context_the_rule_fails_and_says_why(app: Flask) -> None:
    """Not left running: each attempt's error is recorded, then the entry is
    failed (the worker thread has no application context)."""
    with attach(db.session, detector=detector, max_attempts=2, backoff=0.01) as attachment:
        client = app.test_client()
        account = client.post("/accounts").json["id"]
        client.post(f"/accounts/{account}/deposit/5")
        assert attachment.wait_detached(60)
    (entry,) = _outbox(app)
    assert (entry.status, entry.attempts) == ("failed", 2)
    assert "Working outside of application context" in str(entry.last_error)
    assert _receipts(app) == []


def _deposit_in_app(app: Flask, amount: int) -> None:
    with app.app_context():
        account = Account(owner="bob")
        db.session.add(account)
        db.session.commit()
        account.deposit(amount)
        db.session.commit()


def test_attaching_the_session_class_with_a_session_factory(app: Flask) -> None:
    """Flask-SQLAlchemy's ``Session`` cannot be called without ``db``: its
    sessionmaker (``db.session.session_factory``) makes the detached sessions."""
    with app.app_context():
        factory = db.session.session_factory
    with attach(
        FlaskSession, detector=detector, session_factory=factory, context=app.app_context
    ) as attachment:
        _deposit_in_app(app, 30)
        assert attachment.wait_detached(60)
    assert [r[1:] for r in _receipts(app)] == [(30, "Thank you for your deposit of 30.")]
    assert [e.status for e in _outbox(app)] == ["done"]


def test_attaching_the_session_class_without_a_factory_fails_clearly(app: Flask) -> None:
    with attach(
        FlaskSession, detector=detector, workers=0, max_attempts=1, context=app.app_context
    ) as attachment:
        _deposit_in_app(app, 30)
        report = attachment.drain()
    assert report.failed == 1
    (entry,) = _outbox(app)
    assert entry.status == "failed"
    assert "missing 1 required positional argument: 'db'" in str(entry.last_error)
    assert "attach(..., session_factory=...)" in str(entry.last_error)
    assert _receipts(app) == []
