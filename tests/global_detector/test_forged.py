"""Forged or stale log rows: the log is a table anyone with database access can
write. A row with an absurd time must not move the global detector's clock; a
row numbered behind the cursor, which it never reads, is reported."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sentinel import LocalEventDetector
from sentinel.global_detector import GlobalDetector, replay_committed
from sentinel.global_detector.detect import CommitFeeder
from sentinel.log import LogWriter, migrate
from sentinel.occurrence import Occurrence

from . import rules
from .forge import element, forge

#: 9999-12-31 23:59:59 UTC
YEAR_9999 = 253_402_300_799.0


@pytest.fixture
def log_db(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    rules.make_effects(engine)
    return engine


def _occ(event: str, ts: float, scope: str, customer: int) -> Occurrence:
    return Occurrence(event, 1, ts, scope=scope, params={"customer": customer})


def _forge(conn: sa.Connection, ts: float, seq: int, customer: int, scope: str = "forged") -> int:
    """Insert by hand a row of one ``order``, numbered ``seq``; return its id."""
    return forge(conn, [element(1, "order", ts, {"customer": customer})], seq=seq, scope=scope)


def _temporal_service(engine: sa.Engine, now: list[float]) -> GlobalDetector:
    """A service of the "not paid within a second" rule that only enqueues, on a
    clock reading ``now[0]``, refusing rows more than a minute ahead of it."""
    return GlobalDetector(
        rules.temporal,
        engine,
        lease=10,
        run_actions=False,
        clock=lambda: now[0],
        clock_grace=0,
        max_ahead=60,
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_row_from_the_year_9999_is_skipped_not_a_clock_jump(
    log_db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A finite but absurd occurrence time moved the clock as far as an
    infinite one: "not paid within a second" fired for an order paid in time.
    A row more than ``max_ahead`` ahead of the machine's clock is reported,
    naming the row, and skipped; one a little ahead (a writer's clock running
    fast) is read; the rest are detected as in the log without the forged row."""
    now = [1010.0]
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1001.0, "o1", 1)])
    with log_db.begin() as conn:
        forged = _forge(conn, YEAR_9999, writer.take_commit_seq(conn), customer=2)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 1001.5, "p1", 1)])  # in time
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 1060.0, "fast", 3)])  # 50 s ahead: read
    service = _temporal_service(log_db, now)
    r = service.step()
    assert (r.rows, r.detections) == (4, 0)
    feeder = service._feeder
    assert feeder is not None
    assert feeder.log_time == 1060.0
    [(row_id, why)] = feeder.skipped
    assert row_id == forged
    assert "is more than 60 s ahead of this machine's clock" in why
    assert "9999-12-31T23:59:59+00:00" in why
    assert f"log row {forged} (order in scope forged) cannot be read" in caplog.text
    now[0] = 1100.0  # customer 1 paid in time; the forged customer 2 is no order
    for _ in range(3):
        assert service.step().detections == 0
    service.close()
    assert replay_committed(rules.temporal, log_db) == []


def _periodic() -> LocalEventDetector:
    det = LocalEventDetector()
    rules.events(det)
    det.rule(
        "reminder",
        "P(order, [00:01:00], payment) by customer",
        action=rules.record,
        coupling="detached",
        context="continuous",
        flush=False,
    )
    return det


def _rows(engine: sa.Engine) -> list[object]:
    from sentinel.global_detector.order import CommitReader
    from sentinel.log.tables import log_tables

    with engine.connect() as conn:
        return list(CommitReader(log_tables()).read(conn, 0))


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_row_far_behind_the_clock_is_skipped_not_a_storm_of_ticks(log_db: sa.Engine) -> None:
    """A forged order two days behind the log's clock opened a one-minute
    periodic interval two days back: at the next row its 2880 missed ticks
    fired at once (and a periodic rule a year back, half a million). A row more
    than ``max_late`` behind the clock is reported and skipped when the rules
    have temporal events; a late row within it is read, and ticks as it should.
    The detections are those of the log without the forged row (an independent
    count: one tick per elapsed minute of each open interval)."""
    t0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", t0, "o1", 1)])
    with log_db.begin() as conn:
        forged = _forge(conn, t0 - 2 * 86_400, writer.take_commit_seq(conn), customer=2)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", t0 - 600, "late", 3)])  # 10 minutes late: read
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", t0 + 150, "p1", 1)])
    feeder = CommitFeeder(_periodic(), max_late=3_600)
    got = feeder.feed(_rows(log_db))
    [(row_id, why)] = feeder.skipped
    assert row_id == forged
    assert "is more than 3600 s behind the log's clock (2026-01-01T00:00:00+00:00)" in why
    # customer 1: ticks at t0 + 60 and + 120, then paid; customer 3 (opened at
    # t0 - 600): ticks at t0 - 540, ..., t0 + 120 (12), still open
    per_customer = sorted(
        d.occurrence.constituents[0].params["customer"] for d in got if d.rule == "reminder"
    )
    assert per_customer == [1] * 2 + [3] * 12
    # a rule set without timers has no use for the bound: the row is read
    plain = CommitFeeder(rules.detector, max_late=3_600)
    plain.feed(_rows(log_db))
    assert plain.skipped == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_rows_numbered_behind_the_cursor_are_reported(
    log_db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A row numbered at or behind a commit the service has read (forged, or
    written with a stale ``commit_seq``) is never read, and nothing said so.
    The service's look for rows it will not read (when idle) counts them: rows
    added behind where it stood at the last look, and rows added to commits it
    read since. Legitimate commits in between are not counted."""
    writer = LogWriter(commit_order=True)
    for i, event in enumerate(["order", "order", "payment"]):
        with log_db.begin() as conn:
            writer.write(conn, [_occ(event, 1001.0 + i, f"t{i}", 1)])
    service = GlobalDetector(rules.detector, log_db, lease=10, run_actions=False)
    service.unnumbered_every = 0.0
    assert service.step().rows == 3
    assert service.step().rows == 0  # idle: the first look
    with log_db.begin() as conn:
        first = int(
            conn.execute(sa.text("SELECT min(commit_seq) FROM sentinel_occurrences")).scalar()
        )
        _forge(conn, 1002.0, first, customer=1, scope="stale")  # behind the last look
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1004.0, "t3", 2)])
    assert service.step().rows == 1  # the legitimate commit
    with log_db.begin() as conn:
        last = int(
            conn.execute(sa.text("SELECT max(commit_seq) FROM sentinel_occurrences")).scalar()
        )
        _forge(conn, 1004.5, last, customer=2, scope="added")  # to a commit read since
    assert "numbered at or behind" not in caplog.text
    assert service.step().rows == 0
    assert "2 log row(s) written since the last look are numbered at or behind" in caplog.text
    caplog.clear()
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 1005.0, "t4", 2)])
    assert service.step().rows == 1
    assert service.step().rows == 0
    assert "numbered at or behind" not in caplog.text  # reported once; legitimate rows are not
    assert service.step().detections == 0
    service.close()
    assert len(_rows(log_db)) == 7  # they are in the log: batch replay reads them


@pytest.mark.parametrize("backend", ["sqlite"])
def test_events_announced_for_later_or_reported_late_are_read_on_their_detection_time(
    log_db: sa.Engine,
) -> None:
    """An event's occurrence time may be far from when it was detected (an order
    announced for next week, one reported two days after it was placed:
    ``signal_at``). The clock follows detection times, so neither is taken for a
    forged row: both are read, the announced order's interval opens next week
    (no tick before then), and the late one's opened two days back (its missed
    ticks, one per elapsed minute, as a local detector would fire them). Before,
    the bounds were on occurrence times and both rows were skipped."""
    t0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", t0, "o1", 1)])
    with log_db.begin() as conn:
        writer.write(
            conn,
            [Occurrence("order", 1, t0 + 7 * 86_400, t0 + 1, scope="next-week",
                        params={"customer": 2})],
        )  # fmt: skip
    with log_db.begin() as conn:
        writer.write(
            conn,
            [Occurrence("order", 1, t0 - 2 * 86_400, t0 + 2, scope="reported-late",
                        params={"customer": 3})],
        )  # fmt: skip
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", t0 + 150, "p1", 1)])
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", t0 + 150, "p3", 3)])
    feeder = CommitFeeder(_periodic(), max_ahead=300, max_late=3_600, now=lambda: t0 + 200)
    got = feeder.feed(_rows(log_db))
    assert feeder.skipped == []
    assert feeder.log_time == t0 + 150
    per_customer = sorted(
        d.occurrence.constituents[0].params["customer"] for d in got if d.rule == "reminder"
    )
    # customer 1: t0 + 60, + 120; customer 2: none yet; customer 3: every minute
    # from t0 - 2 days to its payment at t0 + 150
    assert per_customer == [1] * 2 + [3] * ((2 * 86_400 + 150) // 60)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_rules_without_timers_read_a_row_from_a_fast_clock(log_db: sa.Engine) -> None:
    """Without temporal events no detection depends on a row's time: a payment
    written by a host whose clock runs ten minutes fast is read (it was skipped
    as more than ``max_ahead`` ahead, and the service, a restarted one and
    batch replay disagreed)."""
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1001.0, "o1", 1)])
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 1001.0 + 600, "p1", 1)])
    service = GlobalDetector(
        rules.detector, log_db, lease=10, run_actions=False, clock=lambda: 1010.0
    )
    r = service.step()
    assert (r.rows, r.detections) == (2, 1)
    assert service._feeder is not None and service._feeder.skipped == []
    service.close()
    assert [d.rule for d in replay_committed(rules.detector, log_db)] == ["paid"]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_refused_first_row_does_not_start_the_clock(log_db: sa.Engine) -> None:
    """When the first rows read are all refused (a forged row from the year
    9999), the clock starts at the first row it can stand at, not at the refused
    time (where it stayed: no timer fired again). Two orders never paid are
    detected as without the forged row."""
    now = [1010.0]
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        _forge(conn, YEAR_9999, writer.take_commit_seq(conn), customer=9)
    service = _temporal_service(log_db, now)
    r = service.step()
    assert (r.rows, r.detections) == (1, 0)
    feeder = service._feeder
    assert feeder is not None and feeder.detector is None and len(feeder.skipped) == 1
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1001.0, "o1", 1)])
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1002.0, "o2", 2)])
    found = 0
    for t in (1010.0, 1011.0, 1012.0, 1013.0):
        now[0] = t
        found += service.step().detections
    assert found == 2
    service.close()
    assert len(replay_committed(rules.temporal, log_db, max_ahead=60)) == 2


def _pair(log_db: sa.Engine, writer: LogWriter, customer: int, ts: float) -> None:
    for i, event in enumerate(["order", "payment"]):
        with log_db.begin() as conn:
            writer.write(conn, [_occ(event, ts + i, f"{event}{customer}", customer)])


def test_a_row_numbered_ahead_of_the_counter_does_not_stop_the_reading(
    log_db: sa.Engine, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A row numbered far ahead of every number handed out (written by hand,
    imported, or left after a sequence reset) moved the cursor past it, and no
    later commit was ever read, silently. The service reads only numbers the
    counter (PostgreSQL: the sequence) has handed out: it reports the row,
    naming it, does not move its cursor past the last number handed out, and
    goes on detecting the commits after it."""
    writer = LogWriter(commit_order=True)
    _pair(log_db, writer, 1, 1001.0)
    service = GlobalDetector(rules.detector, log_db, lease=10, run_actions=False)
    assert service.step().detections == 1
    with log_db.begin() as conn:
        head = int(
            conn.execute(sa.text("SELECT max(commit_seq) FROM sentinel_occurrences")).scalar()
        )
        # one row of two occurrences: one row to report
        orders = [element(t, "order", 1003.0, {"customer": 9}) for t in (1, 2)]
        forged = forge(conn, orders, seq=head + 1_000_000, scope="ahead")
    _pair(log_db, writer, 2, 1004.0)
    _pair(log_db, writer, 3, 1006.0)
    assert sum(service.step().detections for _ in range(3)) == 2
    with log_db.connect() as conn:
        position = conn.execute(sa.text("SELECT position FROM sentinel_global_cursors")).scalar()
        real = conn.execute(
            sa.text("SELECT max(commit_seq) FROM sentinel_occurrences WHERE scope <> 'ahead'")
        ).scalar()
    assert position == real
    said = f"log row {forged} (order in scope ahead) is numbered {head + 1_000_000}"
    assert caplog.text.count(said) == 1
    assert service.ahead == [(forged, head + 1_000_000)]
    # the genuine commits after it are read as they come
    _pair(log_db, writer, 4, 1008.0)
    assert sum(service.step().detections for _ in range(2)) == 1
    service.close()
    # a cursor moved past such a row before (by an earlier version) is reported
    with log_db.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_global_cursors SET position = :p"), {"p": 2_000_000})
    caplog.clear()
    service = GlobalDetector(rules.detector, log_db, lease=10, run_actions=False)
    assert service.step().rows == 0
    assert "its cursor stands at 2000000, ahead of the last commit number handed out" in (
        caplog.text
    )
    service.close()


def test_the_streaming_source_offset_stops_at_the_last_number_handed_out(
    log_db: sa.Engine, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The Spark source's offset was the largest number in the log: one row
    numbered ahead of the counter moved it there, and the commits numbered
    below it were never read. It stops at the largest number handed out."""
    pytest.importorskip("pyspark")
    from sentinel.global_detector.source import _URL_OPTION, _CommitStreamReader

    writer = LogWriter(commit_order=True)
    _pair(log_db, writer, 1, 1001.0)
    with log_db.begin() as conn:
        head = int(
            conn.execute(sa.text("SELECT max(commit_seq) FROM sentinel_occurrences")).scalar()
        )
        _forge(conn, 1003.0, head + 1_000_000, customer=9, scope="ahead")
    _pair(log_db, writer, 2, 1004.0)
    source = _CommitStreamReader({_URL_OPTION: db_url})
    try:
        assert source.latestOffset({"commit_seq": 0}) == {"commit_seq": head + 2}
    finally:
        source.stop()
    assert f"rows numbered up to {head + 1_000_000}, ahead of the last commit number" in (
        caplog.text
    )
