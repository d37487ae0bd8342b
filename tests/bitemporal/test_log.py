"""The log and the bitemporal model: migration 0003 (upgrade and
downgrade with the data), both times of database events and method events in
the log, and the archive marks of expired occurrences."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from sentinel import LocalEventDetector, Reactive, VirtualClock, event
from sentinel.log import LogReader, LogWriter, migrate
from sentinel.log.tables import SCHEMA_VERSION, UTCDateTime, log_tables
from sentinel.orm import attach

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _rows_0001(engine: sa.Engine, n: int) -> None:
    """Rows as a 0001 log holds them (written before the upgrade)."""
    with engine.begin() as conn:
        for t in range(1, n + 1):
            conn.execute(
                sa.text(
                    "INSERT INTO sentinel_events (scope, t_occ, event, at, detected_at, ts, "
                    "detected_ts, params, outcome) VALUES (:s, :t, 'E', :at, :at, :ts, :ts, "
                    "'{}', 'committed')"
                ).bindparams(sa.bindparam("at", type_=UTCDateTime())),  # as the writer binds it
                {"s": "tx", "t": t, "at": T0, "ts": T0.timestamp() + t},
            )


def _marks(engine: sa.Engine) -> list[tuple[int, datetime | None]]:
    """``(t_occ, expired_at)`` of every occurrence, through the view."""
    tables = log_tables()
    view = sa.table(tables.view_name, sa.column("t_occ"), sa.column("expired_at", UTCDateTime()))
    with engine.connect() as conn:
        rows = conn.execute(sa.select(view.c.t_occ, view.c.expired_at).order_by(view.c.t_occ))
        return [(t, m) for t, m in rows]


def test_migration_0003_up_and_down_with_data(engine: sa.Engine) -> None:
    """Rows written at 0002 survive the upgrade to the head (through 0003's
    ``expired_at`` and 0006's one row per transaction), take archive marks
    there, and come back down: 0006's downgrade makes ``events`` again with
    the marks, 0003's drops them, and the times stay exact both ways."""
    migrate.upgrade(engine, "0002")
    _rows_0001(engine, 3)
    migrate.upgrade(engine)
    assert migrate.current(engine) == SCHEMA_VERSION
    with LogReader(engine) as r:
        assert [o.occurrence.t_occ for o in r.occurrences()] == [1, 2, 3]
    with engine.begin() as conn:
        assert LogWriter().mark_expired(conn, [("tx", 2, T0.timestamp() + 60)]) == 1
        LogWriter().mark_expired(conn, [("tx", 2, T0.timestamp() + 120)])  # keeps the first
    assert _marks(engine) == [(1, None), (2, T0 + timedelta(seconds=60)), (3, None)]

    migrate.downgrade(engine, "0005")  # 0006's downgrade: events again, from the view
    names = set(sa.inspect(engine).get_table_names())
    assert "sentinel_events" in names and "sentinel_event_batches" not in names
    with engine.connect() as conn:
        back = conn.execute(
            sa.text("SELECT t_occ, ts, expired_at FROM sentinel_events ORDER BY t_occ")
        ).all()
    assert [(t, ts) for t, ts, _ in back] == [(t, T0.timestamp() + t) for t in (1, 2, 3)]
    assert [m is not None for _, _, m in back] == [False, True, False]

    migrate.downgrade(engine, "0002")
    assert migrate.current(engine) == "0002"
    cols = {c["name"] for c in sa.inspect(engine).get_columns("sentinel_events")}
    assert "expired_at" not in cols
    with engine.connect() as conn:
        ts = conn.execute(sa.text("SELECT ts FROM sentinel_events ORDER BY t_occ")).scalars().all()
    assert ts == [T0.timestamp() + t for t in (1, 2, 3)]

    # and up again: the same occurrences, without marks
    migrate.upgrade(engine)
    with LogReader(engine) as r:
        back_up = [(o.occurrence.t_occ, o.occurrence.timestamp) for o in r.occurrences()]
    assert back_up == [(t, T0.timestamp() + t) for t in (1, 2, 3)]
    assert _marks(engine) == [(1, None), (2, None), (3, None)]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_database_and_method_events_carry_their_occurrence_time_into_the_log(
    engine: sa.Engine,
) -> None:
    migrate.upgrade(engine)
    clock = VirtualClock(T0)
    det = LocalEventDetector(clock=clock, chronon=60)

    class Base(Reactive, DeclarativeBase, detector=det):
        pass

    class Delivery(Base):
        __tablename__ = "delivery"
        __sentinel_occurred_at__ = "eta"
        id: Mapped[int] = mapped_column(primary_key=True)
        eta: Mapped[datetime | None] = mapped_column(sa.DateTime(timezone=True))

        @event(occurred_at="when")
        def arrived(self, when: datetime) -> None:
            pass

    Base.metadata.create_all(engine)
    Session = sessionmaker(engine)
    seen: list[tuple[str, Any]] = []
    det.rule("future", "FUTURE(Delivery:insert)", action=lambda o: seen.append(("future", o.at)))
    det.rule("late", "LATE(Delivery.arrived:end)", action=lambda o: seen.append(("late", o.at)))
    det.rule(
        "expire",
        "Delivery:insert ; Delivery.arrived:end",
        flush=False,
        lifespan=timedelta(hours=1),
        archive=True,
        action=lambda o: None,
    )
    tables = log_tables()
    view = sa.table(tables.view_name, sa.column("event"), sa.column("expired_at", UTCDateTime()))
    att = attach(Session, detector=det)

    def marked() -> list[Any]:
        att.flush_log()
        with engine.connect() as conn:
            return list(
                conn.execute(
                    sa.select(view.c.event, view.c.expired_at).where(view.c.expired_at.is_not(None))
                ).all()
            )

    try:
        eta = T0 + timedelta(days=1)
        with Session.begin() as s:
            s.add(Delivery(id=1, eta=eta))
        with Session.begin() as s:
            s.get(Delivery, 1).arrived(T0 - timedelta(minutes=5))  # reported late
        clock.advance(timedelta(hours=2))
        att.flush_log()
        with LogReader(engine) as r:
            rows = {o.occurrence.event: o.occurrence for o in r.occurrences()}
        assert seen == [("future", eta), ("late", T0 - timedelta(minutes=5))]
        ins = rows["Delivery:insert"]
        assert (ins.at, ins.detected_at) == (eta, T0)
        arr = rows["Delivery.arrived:end"]
        assert (arr.at, arr.detected_at) == (T0 - timedelta(minutes=5), T0)
        # The insert waits in "expire" as its initiator: its lifespan counts from its
        # occurrence time (the eta), so nothing has expired yet.
        assert marked() == []
        clock.set(eta + timedelta(hours=1, minutes=2))
        assert marked() == [("Delivery:insert", eta + timedelta(hours=1, minutes=1))]
    finally:
        att.detach()
