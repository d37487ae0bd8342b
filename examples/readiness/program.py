"""The military readiness application of the Sentinel report (4.5), as a
SQLAlchemy application on a SQLite file with sentinel attached.

Units report readiness ratings; plans get units assigned. Updates that break
the rules are disqualified at once (immediate rules raise, the update is rolled
back); each transaction's net effect on its plans is checked at commit (a
deferred rule raises alerts in the same transaction); command is notified of
each alert after the commit, once (a detached rule through the outbox).

Run with ``python -m examples.readiness``.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from examples.readiness.models import Alert, Base, Notice, Plan, Unit
from examples.readiness.rules import define_rules
from sentinel import LocalEventDetector, RuleError, attach, bind
from sentinel.log import LogReader, migrate

__all__ = ["main", "run"]


def _begin_immediate(engine: sa.Engine) -> None:
    """SQLite: let SQLAlchemy begin transactions itself (so savepoints work on
    pysqlite) and take the write lock at once (the outbox worker thread writes
    too); SQLAlchemy's documented recipe."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _unit(s: Session, name: str) -> Unit:
    return s.scalars(sa.select(Unit).where(Unit.name == name)).one()


def _plan(s: Session, name: str) -> Plan:
    return s.scalars(sa.select(Plan).where(Plan.name == name)).one()


def run(say: Any = print, database: str | Path | None = None) -> dict[str, Any]:
    """Run the scenario, telling ``say`` what happens; return what the database
    holds at the end (alerts, notices, ratings, log counts)."""
    det = LocalEventDetector()
    bind(Base, det)
    define_rules(det)
    with tempfile.TemporaryDirectory(prefix="sentinel-readiness-") as tmp:
        path = Path(database) if database is not None else Path(tmp) / "readiness.db"
        engine = sa.create_engine(f"sqlite:///{path}")
        _begin_immediate(engine)
        try:
            Base.metadata.create_all(engine)
            migrate.upgrade(engine)
            Session = sessionmaker(engine)
            with attach(Session, detector=det) as attachment:
                _scenario(Session, say)
                attachment.wait_detached(30)
            return _summary(Session, engine, say)
        finally:
            engine.dispose()


def _scenario(Session: sessionmaker[Session], say: Any) -> None:
    with Session.begin() as s:
        s.add_all(
            [
                Unit(name="1st Armored", location="Fort Bliss", rating=1),
                Unit(name="82nd Airborne", location="Fort Bragg", rating=2),
                Unit(name="10th Mountain", location="Fort Drum", rating=2),
                Unit(name="3rd Infantry", location="Fort Stewart", rating=4),
                Plan(name="Relief", crisis="flood relief, Gulf coast"),
            ]
        )
    say("Units and the plan Relief created.")

    with Session.begin() as s:
        relief = _plan(s, "Relief")
        relief.assign(_unit(s, "1st Armored"))
        relief.assign(_unit(s, "82nd Airborne"))
    say("1. Relief gets 1st Armored and 82nd Airborne: the plan is ready, no alert.")

    with Session.begin() as s:
        for name, rating in (("3rd Infantry", 7), ("3rd Infantry", 3), ("82nd Airborne", 4)):
            try:
                with s.begin_nested():  # a rejected report leaves the others alone
                    _unit(s, name).report_readiness(rating)
                say(f"2. {name} reports rating {rating}: accepted.")
            except RuleError as err:
                say(f"2. {name} reports rating {rating}: rejected by {err.rule} "
                    f"({err.__cause__})")  # fmt: skip

    with Session.begin() as s:
        relief = _plan(s, "Relief")
        relief.release(_unit(s, "1st Armored"))
        relief.assign(_unit(s, "10th Mountain"))
    say("3. Relief swaps 1st Armored for 10th Mountain in one transaction: the net effect "
        "is fine, no alert.")  # fmt: skip

    with Session.begin() as s:
        relief = _plan(s, "Relief")
        relief.release(_unit(s, "82nd Airborne"))
        _unit(s, "10th Mountain").report_readiness(1)
    say("4. Relief releases 82nd Airborne: one unit left; the deferred rule raises an alert "
        "at commit and command is notified after it.")  # fmt: skip


def _summary(Session: sessionmaker[Session], engine: sa.Engine, say: Any) -> dict[str, Any]:
    with Session() as s:
        alerts = [a.message for a in s.scalars(sa.select(Alert).order_by(Alert.id))]
        notices = [n.text for n in s.scalars(sa.select(Notice).order_by(Notice.id))]
        ratings = {u.name: u.rating for u in s.scalars(sa.select(Unit).order_by(Unit.id))}
    with LogReader(engine) as log:
        events = Counter((r.occurrence.event, r.outcome) for r in log.occurrences())
        firings = Counter((f.rule, f.status) for f in log.firings())
    say("\nAlerts:  " + ("; ".join(alerts) or "none"))
    say("Notices: " + ("; ".join(notices) or "none"))
    say("Ratings: " + ", ".join(f"{n} {r}" for n, r in ratings.items()))
    say("\nThe event log, by event and outcome:")
    for (name, outcome), n in sorted(events.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        say(f"  {n:3}  {name:<28} {outcome}")
    say("Rule firings:")
    for (rule, status), n in sorted(firings.items()):
        say(f"  {n:3}  {rule:<22} {status}")
    return {
        "alerts": alerts,
        "notices": notices,
        "ratings": ratings,
        "events": events,
        "firings": firings,
    }


def main() -> None:
    print("The military readiness application (Sentinel report, 4.5)\n")
    run()


if __name__ == "__main__":
    main()
