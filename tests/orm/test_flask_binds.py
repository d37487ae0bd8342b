"""A Flask-SQLAlchemy application bound to databases by bind key only (no
default database): attached to ``db.session`` with its home database named,
each transaction's log goes to the databases it used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import sentinel
from sentinel import LocalEventDetector
from sentinel.log import LogReader, migrate

flask = pytest.importorskip("flask")
flask_sqlalchemy = pytest.importorskip("flask_sqlalchemy")


def test_a_flask_app_with_binds_only_logs_on_the_databases_it_used(tmp_path: Path) -> None:
    det = LocalEventDetector()
    det.explicit("priced")
    app = flask.Flask(__name__, instance_path=str(tmp_path))
    app.config["SQLALCHEMY_BINDS"] = {
        "shop": f"sqlite:///{tmp_path / 'shop.db'}",
        "people": f"sqlite:///{tmp_path / 'people.db'}",
    }
    db = flask_sqlalchemy.SQLAlchemy(app)

    class Stock(db.Model):  # type: ignore[name-defined, misc]
        __bind_key__ = "shop"
        id = sa.Column(sa.Integer, primary_key=True)
        price = sa.Column(sa.Float, default=0.0)

    class Person(db.Model):  # type: ignore[name-defined, misc]
        __bind_key__ = "people"
        id = sa.Column(sa.Integer, primary_key=True)
        name = sa.Column(sa.String(20))

    seen: list[Any] = []
    det.rule("reprice", "priced", action=seen.append, coupling="deferred")

    def signal(event: str) -> None:
        scope = sentinel.scope_of(db.session())
        assert scope is not None
        with det.use_scope(scope):
            det.signal(event)

    with app.app_context():
        db.create_all(bind_key=["shop", "people"])
        shop, people = db.engines["shop"], db.engines["people"]
        for e in (shop, people):
            migrate.upgrade(e)
        att = sentinel.attach(db.session, detector=det, workers=0)
        try:
            db.session.add(Person(name="x"))
            signal("priced")
            with pytest.raises(sentinel.AttachError, match="log_bind"):
                db.session.commit()  # no default database: where would late rows go?
            db.session.rollback()  # logged as aborted on the database it used
        finally:
            att.detach()
        att = sentinel.attach(db.session, detector=det, workers=0, log_bind=shop)
        try:
            db.session.add(Person(name="ann"))
            signal("priced")
            db.session.commit()
            db.session.add(Stock(price=9.5))
            signal("priced")
            db.session.commit()
            att.flush_log()
        finally:
            att.detach()
        logs = {}
        for name, e in (("people", people), ("shop", shop)):
            with LogReader(e) as r:
                logs[name] = [
                    (o.occurrence.scope, o.occurrence.event, o.outcome) for o in r.occurrences()
                ]
        for e in (shop, people):
            e.dispose()  # Flask-SQLAlchemy leaves its engines to the application
    assert len(seen) == 3  # the deferred rule ran in the commit that then failed too
    aborted = {s for s, ev, out in logs["people"] if ev == "priced" and out == "aborted"}
    first = {s for s, ev, out in logs["people"] if ev == "priced" and out == "committed"}
    second = {s for s, ev, out in logs["shop"] if ev == "priced" and out == "committed"} - first
    assert len(aborted) == 1 and len(first) == 1 and len(second) == 1
    # the first transaction used "people" only: its log is there; the second, "shop"
    assert not second & {s for s, _, _ in logs["people"]}
