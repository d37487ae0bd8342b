"""The global event detector: processes committing interleaved transactions,
a rule spanning them, detections equal to batch replay in commit order and to
an independent model; commit order across a gap; the cursor's lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from sentinel import LocalEventDetector
from sentinel.errors import GlobalDetectorError, LeaseLost
from sentinel.global_detector import GlobalDetector, replay_committed
from sentinel.log import LogWriter, migrate
from sentinel.occurrence import Occurrence
from sentinel.orm import global_actions

from . import rules
from .forge import element, forge
from .model import committed_rows, expected_details

ROOT = Path(__file__).resolve().parents[2]


def _url(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def _children(engine: sa.Engine, n: int, txns: int, seed: int) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.global_detector.child",
                _url(engine),
                str(i),
                str(txns),
                str(seed),
            ],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]


def _wait(children: list[subprocess.Popen[str]]) -> None:
    for child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err


def _effects(engine: sa.Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return [
            (k, d)
            for k, d in conn.execute(sa.text("SELECT ikey, detail FROM gd_effects ORDER BY id"))
        ]


@pytest.fixture
def log_db(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    rules.make_effects(engine)
    return engine


def test_four_processes_equal_batch_replay_and_the_model(log_db: sa.Engine) -> None:
    """Four OS processes commit, roll back and use savepoints while the service
    tails the log; its detections (acted on once each) equal batch replay of the
    committed log in commit order and a hand-written model of the rule."""
    service = GlobalDetector(
        rules.detector, log_db, lease=10, min_wait=0.01, max_wait=0.1, actions=global_actions
    )
    stop = threading.Event()
    failures: list[BaseException] = []

    def tail() -> None:
        try:
            service.run(stop=stop)
        except BaseException as err:  # pragma: no cover - reported below
            failures.append(err)

    t = threading.Thread(target=tail)
    t.start()
    try:
        _wait(_children(log_db, 4, 25, seed=7))
    finally:
        stop.set()
        t.join(60)
    assert not failures
    service.run(until_idle=True)  # what committed after the last step
    service.close()

    expected = expected_details(log_db)
    assert len(expected) >= 10  # the workload makes the rule fire, across processes
    scopes = {s for _, s, _ in committed_rows(log_db)}
    assert len(scopes) > 20
    effects = _effects(log_db)
    # each detection acted on exactly once, in commit order
    assert [d for _, d in effects] == expected
    assert len({k for k, _ in effects}) == len(effects)
    replayed = replay_committed(rules.detector, log_db)
    assert [rules.describe(d.occurrence) for d in replayed] == expected
    # rolled-back transactions and savepoints reached the log, and were not detected
    with log_db.connect() as conn:
        aborted = conn.execute(
            sa.text("SELECT count(*) FROM sentinel_occurrences WHERE outcome = 'aborted'")
        ).scalar()
    assert aborted
    # the processes' pairs span processes
    procs = [{p["proc"] for _, _, p in json.loads(d)} for d in expected]
    assert any(len(p) > 1 for p in procs)


def _occ(event: str, t: int, scope: str, **params: object) -> Occurrence:
    return Occurrence(event, t, 1000.0 + t, scope=scope, params=params)


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_smaller_id_committing_later_is_detected_in_commit_order(log_db: sa.Engine) -> None:
    """Transaction A writes its payment first (a long transaction's flush: the
    smaller id) and commits after B, whose order has a larger id. The service,
    tailing in between, must not skip A's row, and must see it after B's: in
    commit order, order then payment is a detection; in id order it is not."""
    writer = LogWriter(commit_order=True)
    service = GlobalDetector(rules.detector, log_db, lease=10, run_actions=False)
    a = log_db.connect()
    try:
        a.begin()
        writer.write_groups(
            a, [([_occ("payment", 1, "txA", customer=1)], "committed")], sequence=False
        )
        with log_db.begin() as b:
            writer.write(b, [_occ("order", 1, "txB", customer=1)])
        q = sa.text("SELECT scope, id FROM sentinel_occurrences")
        with log_db.connect() as conn:
            visible = dict(conn.execute(q).all())
        assert "txA" not in visible
        assert dict(a.execute(q).all())["txA"] < visible["txB"]  # the gap
        first = service.step()
        assert (first.rows, first.detections) == (1, 0)
        writer.write_groups(a, [], restamp="txA")  # A's commit: its number now
        a.commit()
    finally:
        a.close()
    second = service.step()
    assert (second.rows, second.detections) == (1, 1)
    service.close()
    with log_db.connect() as conn:
        seqs = dict(
            conn.execute(sa.text("SELECT scope, commit_seq FROM sentinel_occurrences")).all()
        )
        (payload,) = conn.execute(sa.text("SELECT rule FROM sentinel_outbox")).scalars().all()
    assert seqs["txB"] < seqs["txA"]
    assert payload == "paid"
    assert [rules.describe(d.occurrence) for d in replay_committed(rules.detector, log_db)] == (
        expected_details(log_db)
    )


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_has_one_writer_so_ids_commit_in_order(log_db: sa.Engine, tmp_path: Path) -> None:
    """On SQLite a second writer cannot insert while a transaction holding an
    uncommitted log row is open: ids (and commit numbers) are taken in commit
    order."""
    writer = LogWriter(commit_order=True)
    other = sa.create_engine(_url(log_db), connect_args={"timeout": 0.2})
    a = log_db.connect()
    try:
        a.begin()
        writer.write(a, [_occ("payment", 1, "txA", customer=1)])
        with pytest.raises(Exception, match="locked"), other.begin() as b:
            writer.write(b, [_occ("order", 1, "txB", customer=1)])
        a.commit()
    finally:
        a.close()
        other.dispose()


def test_two_instances_one_acts(log_db: sa.Engine) -> None:
    """Two instances on one cursor: only the lease holder reads and acts; a
    holder whose lease was taken over cannot commit its batch (LeaseLost, nothing
    written); the other continues from the committed position."""
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1, "t1", customer=1)])
    first = GlobalDetector(rules.detector, log_db, lease=0.5, run_actions=False)
    # second's lease outlives the test: on a loaded machine a short one could
    # lapse between its steps, and first would take the lead back
    second = GlobalDetector(rules.detector, log_db, lease=60, run_actions=False)
    assert first.step().leader
    assert not second.step().leader  # the lease is first's
    # first stops renewing; once its lease ends, second takes over
    import time

    time.sleep(0.7)
    assert second.step().leader
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 1, "t2", customer=1)])
    with pytest.raises(LeaseLost):
        # first still believes it leads at its old position: its batch is refused
        first._leader = True
        feeder = first._feeder
        assert feeder is not None
        with log_db.connect() as conn:
            rows = first.reader.read(conn, feeder.position)
        dets = feeder.feed(rows)
        with log_db.begin() as conn:
            first.enqueuer.write(conn, first.enqueuer.entries(dets))
            first.cursor.advance(conn, first.id, 1, feeder.position, 0.5)
    with log_db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM sentinel_outbox")).scalar() == 0
    r = second.step()
    assert (r.rows, r.detections) == (1, 1)
    assert not first.step().leader
    first.close()
    second.close()


def test_rules_must_be_detached() -> None:
    det = LocalEventDetector()
    det.explicit("order")
    det.rule("now", "order", action=print)
    with pytest.raises(GlobalDetectorError, match=r"'now'.*not detached"):
        GlobalDetector(det, "sqlite://")


def test_running_actions_needs_the_runner_handed_in() -> None:
    """The global detector does not depend on the ORM layer: without
    ``actions`` (the ORM layer's runner) it refuses to start, naming the two
    ways out, rather than silently only enqueueing."""
    with pytest.raises(GlobalDetectorError, match=r"actions=sentinel\.orm\.global_actions"):
        GlobalDetector(rules.detector, "sqlite://")
    GlobalDetector(rules.detector, "sqlite://", run_actions=False).close()


def test_temporal_events_fire_when_due_with_nothing_committing(log_db: sa.Engine) -> None:
    """ "Not paid within a second": the order's deadline passes while nothing
    commits; the service commits a clock row and the rule fires, for the unpaid
    customer only; batch replay of the log (clock row included) agrees."""
    now = [0.0]
    writer = LogWriter(commit_order=True)

    def occ(event: str, ts: float, scope: str, customer: int) -> Occurrence:
        return Occurrence(event, 1, ts, scope=scope, params={"customer": customer})

    with log_db.begin() as conn:
        writer.write(conn, [occ("order", 1001.0, "o1", 1), occ("order", 1001.2, "o2", 2)])
    with log_db.begin() as conn:
        writer.write(conn, [occ("payment", 1001.5, "p2", 2)])
    service = GlobalDetector(
        rules.temporal, log_db, lease=10, run_actions=False, clock=lambda: now[0], clock_grace=0
    )
    now[0] = 1001.9
    r = service.step()
    assert (r.rows, r.detections, r.clock) == (3, 0, False)
    assert not service.step().clock  # nothing due yet: no row written
    now[0] = 1002.1  # order 1's deadline (1002.0) has passed; nothing committed
    assert service.step().clock
    r = service.step()
    assert (r.rows, r.detections) == (1, 1)
    now[0] = 1010.0  # order 2 was paid in time: whatever its timer does, no detection
    for _ in range(3):
        assert service.step().detections == 0
    service.close()
    with log_db.connect() as conn:
        (payload,) = conn.execute(sa.text("SELECT payload FROM sentinel_outbox")).scalars().all()
        clock_rows = (
            conn.execute(
                sa.text("SELECT ts FROM sentinel_occurrences WHERE event = 'sentinel:global_clock'")
            )
            .scalars()
            .all()
        )
    assert clock_rows[0] == 1002.1
    text = (payload if isinstance(payload, str) else json.dumps(payload)).replace(" ", "")
    assert '"customer":1' in text
    assert '"customer":2' not in text
    replayed = replay_committed(rules.temporal, log_db)
    assert [d.rule for d in replayed] == ["unpaid"]
    orders = [c for c in replayed[0].occurrence.constituents if c.event == "order"]
    assert {c.params["customer"] for c in orders} == {1}


def test_a_row_written_by_hand_is_skipped_not_fatal(
    log_db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A forged row whose parameters cannot be read (a bad tagged value, a
    JSON array) is reported and skipped; the commits around it are detected."""
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1, "t1", customer=1)])
    with log_db.begin() as conn:
        bad = [{"customer": {"$decimal": "abc"}}, [1, 2]]
        forged = forge(
            conn,
            [element(i, "payment", 1.0, params) for i, params in enumerate(bad)],
            seq=writer.take_commit_seq(conn),
        )
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 2, "t2", customer=1)])
    service = GlobalDetector(rules.detector, log_db, lease=10, run_actions=False)
    r = service.step()
    assert (r.rows, r.detections) == (4, 1)
    feeder = service._feeder
    assert feeder is not None
    assert [row_id for row_id, _ in feeder.skipped] == [forged, forged]
    whys = [why for _, why in feeder.skipped]
    assert [why.split(":")[0] for why in whys] == ["ReplaySourceError", "ReplaySourceError"]
    assert "(InvalidOperation: " in whys[0]
    assert "(a JSON list, not an object)" in whys[1]
    assert "cannot be read and is skipped" in caplog.text
    service.close()


def test_a_row_whose_partition_key_is_not_hashable_is_skipped_not_blocking(
    log_db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A process whose own rules do not partition by ``customer`` may log a
    payment whose ``customer`` is a mapping. The global rule partitions by it:
    that row stopped every step at its commit, so no later commit was ever
    detected. It is reported, naming the row, and skipped before any rule sees
    it; the detections are those of the log without it."""
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1, "t1", customer=1)])
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 2, "odd", customer={"id": 1})])
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 3, "t3", customer=1)])
    with log_db.connect() as conn:
        odd = conn.execute(
            sa.text("SELECT id FROM sentinel_occurrences WHERE scope = 'odd'")
        ).scalar_one()
    service = GlobalDetector(rules.detector, log_db, lease=10, run_actions=False)
    r = service.step()
    assert (r.rows, r.detections) == (3, 1)
    feeder = service._feeder
    assert feeder is not None
    [(row_id, why)] = feeder.skipped
    assert row_id == odd
    assert "its parameter 'customer', which rules are partitioned by" in why
    assert f"log row {odd} (payment in scope odd) cannot be read" in caplog.text
    service.close()
    [d] = replay_committed(rules.detector, log_db)
    assert [str(c.scope) for c in d.occurrence.constituents] == ["t1", "t3"]


def test_a_mapping_is_refused_only_where_a_rule_partitions_by_it(log_db: sa.Engine) -> None:
    """A ``customer`` mapping on an event no rule partitions by ``customer`` is
    no partition key: the unkeyed rule on it detects it; nothing is skipped."""
    det = LocalEventDetector()
    rules.events(det)
    det.explicit("note")
    det.rule(
        "paid",
        "(order ; payment) by customer",
        action=rules.record,
        coupling="detached",
        context="chronicle",
        flush=False,
    )
    det.rule("noted", "note", action=rules.record, coupling="detached", flush=False)
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1, "t1", customer=1)])
    with log_db.begin() as conn:
        writer.write(conn, [_occ("note", 2, "t2", customer={"id": 1})])
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 3, "t3", customer=1)])
    service = GlobalDetector(det, log_db, lease=10, run_actions=False)
    r = service.step()
    assert (r.rows, r.detections) == (3, 2)
    assert service._feeder is not None and service._feeder.skipped == []
    service.close()


#: (backend, the forged time as the row's JSON spells it): SQLite keeps the
#: text Python's json writes for infinities and NaN; PostgreSQL's JSONB and
#: MariaDB's JSON hold neither, but take a number too large for a float, which
#: reads as an infinity
_FORGED_TIMES = [
    pytest.param("sqlite", "Infinity", id="sqlite-inf"),
    pytest.param("sqlite", "-Infinity", id="sqlite--inf"),
    pytest.param("sqlite", "NaN", id="sqlite-nan"),
    pytest.param("postgresql", "1e999", id="postgresql-1e999"),
    pytest.param("postgresql", "-1e999", id="postgresql--1e999"),
    pytest.param("mysql", "1e999", id="mysql-1e999"),
]


@pytest.mark.parametrize(("backend", "forged_ts"), _FORGED_TIMES)
def test_a_row_whose_time_is_not_finite_is_skipped_not_a_clock_jump(
    log_db: sa.Engine, forged_ts: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A forged row whose occurrence time is not a finite number must not move
    the log's clock: at infinity every timer fires at once ("not paid within a
    second" for an order paid in time), and a periodic one fires for ever. It
    is reported, naming the row, and skipped (it does not stop the reading
    either: JSONB gives ``1e999`` back as an integer no float holds); the
    detections are those of the log without it."""
    now = [0.0]
    writer = LogWriter(commit_order=True)

    def occ(event: str, ts: float, scope: str) -> Occurrence:
        return Occurrence(event, 1, ts, scope=scope, params={"customer": 1})

    with log_db.begin() as conn:
        writer.write(conn, [occ("order", 1001.0, "o1")])
    with log_db.begin() as conn:
        text = f'[[1, "order", {forged_ts}, 1.0, null, null, {{"customer": 2}}]]'
        forged = forge(conn, text, seq=writer.take_commit_seq(conn))
    with log_db.begin() as conn:
        writer.write(conn, [occ("payment", 1001.5, "p1")])  # in time
    service = GlobalDetector(
        rules.temporal, log_db, lease=10, run_actions=False, clock=lambda: now[0], clock_grace=0
    )
    now[0] = 1001.6
    r = service.step()
    assert (r.rows, r.detections) == (3, 0)
    feeder = service._feeder
    assert feeder is not None
    assert feeder.log_time == 1001.5
    [(row_id, why)] = feeder.skipped
    assert (row_id, "is not a finite number") == (forged, why[-len("is not a finite number") :])
    assert f"log row {forged} (order in scope forged) cannot be read" in caplog.text
    now[0] = 1010.0  # customer 1 paid in time; the forged customer 2 is no order
    for _ in range(3):
        assert service.step().detections == 0
    service.close()
    assert replay_committed(rules.temporal, log_db) == []


def test_rows_without_a_commit_number_are_reported(
    log_db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Commit numbers are opt-in: a process writing the log without them is
    invisible to the service, which says so (once per look, counting only rows
    written since it started), and still detects the numbered rows."""
    numbered, unnumbered = LogWriter(commit_order=True), LogWriter()
    with log_db.begin() as conn:
        unnumbered.write(conn, [_occ("order", 1, "before", customer=9)])
    service = GlobalDetector(rules.detector, log_db, lease=10, run_actions=False)
    service.unnumbered_every = 0.0
    service.step()
    assert "without a commit number" not in caplog.text  # rows before it started
    with log_db.begin() as conn:
        unnumbered.write(conn, [_occ("order", 1, "t1", customer=1)])
    with log_db.begin() as conn:
        numbered.write(conn, [_occ("order", 2, "t2", customer=2)])
    with log_db.begin() as conn:
        numbered.write(conn, [_occ("payment", 3, "t3", customer=2)])
    r = service.step()
    assert (r.rows, r.detections) == (2, 1)
    service.step()
    assert "1 log row(s) written without a commit number" in caplog.text
    caplog.clear()
    service.step()
    assert "without a commit number" not in caplog.text
    service.close()
    with log_db.connect() as conn:
        n = conn.execute(
            sa.text("SELECT count(*) FROM sentinel_occurrences WHERE commit_seq IS NULL")
        )
        assert n.scalar() == 2


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgresql_commits_notify_the_service(log_db: sa.Engine) -> None:
    """While a reader sleeps (its listener holds the log's advisory lock), a
    commit that writes log rows sends a NOTIFY on the log's channel, at the
    commit (none for a rolled-back one); while no reader sleeps, commits do
    not notify (PostgreSQL serializes notifying commits)."""
    from sentinel.global_detector.order import PostgresListener, waiter
    from sentinel.log.commit_order import notify_channel
    from sentinel.log.tables import log_tables

    listener = waiter(log_db, log_tables(), min_wait=0.05, max_wait=1.0)
    assert isinstance(listener, PostgresListener)
    raw = log_db.raw_connection()
    try:
        conn = raw.driver_connection
        assert conn is not None
        conn.autocommit = True
        conn.execute(f'LISTEN "{notify_channel(log_tables())}"')
        writer = LogWriter(commit_order=True)
        with log_db.begin() as c:
            writer.write(c, [_occ("order", 1, "nobody-sleeps", customer=1)])
        assert list(conn.notifies(timeout=0.5, stop_after=1)) == []
        listener.prepare()
        assert listener.ready
        with log_db.connect() as c:
            c.begin()
            writer.write(c, [_occ("order", 1, "rolled-back", customer=1)])
            c.rollback()
        assert list(conn.notifies(timeout=0.5, stop_after=1)) == []
        with log_db.begin() as c:
            writer.write(c, [_occ("order", 1, "committed", customer=1)])
        (note,) = list(conn.notifies(timeout=30, stop_after=1))
        assert note.channel == notify_channel(log_tables())
        listener.wait(threading.Event(), 5.0)  # woken by that commit; awake now
        assert not listener.ready
        with log_db.begin() as c:
            writer.write(c, [_occ("order", 1, "awake", customer=1)])
        assert list(conn.notifies(timeout=0.5, stop_after=1)) == []
    finally:
        raw.close()
        listener.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_absolute_events_start_from_the_log_not_from_1970(log_db: sa.Engine) -> None:
    """A daily 17:00 rule fires once per day the log's clock passes, from the
    first row's day on: not for every day since 1970."""
    from datetime import UTC, datetime

    day = datetime(2026, 1, 1, 10, 0, tzinfo=UTC).timestamp()
    now = [day]
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(conn, [Occurrence("order", 1, day, scope="o", params={"customer": 1})])
    service = GlobalDetector(
        rules.daily, log_db, lease=10, run_actions=False, clock=lambda: now[0], clock_grace=0
    )
    assert service.step().detections == 0
    now[0] = day + 2 * 86_400  # two days later: Jan 1 and Jan 2, 17:00
    assert service.step().clock
    assert service.step().detections == 2
    service.close()
    assert len(replay_committed(rules.daily, log_db)) == 2


def test_a_rule_set_that_keeps_timers_on_its_own_clock_is_warned_about(
    log_db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """An absolute event is armed on the default system clock when its rule is
    defined: imported by the service, workers and writers, such a rule set
    fired in each of them and ran its detached rules in process, outside the
    outbox. The service says so (and how to define one that keeps no time)."""
    import logging

    from sentinel import ReplayClock
    from sentinel.temporal import Absolute, timers

    own = LocalEventDetector()
    rules.events(own)
    own.rule("closing", Absolute("(17:00:00)*/*/*"), action=rules.record, coupling="detached")
    with caplog.at_level(logging.WARNING, logger="sentinel.global"):
        GlobalDetector(own, log_db, run_actions=False).close()
        GlobalDetector(rules.daily, log_db, run_actions=False).close()
    said = [r.getMessage() for r in caplog.records if "keeps timers" in r.getMessage()]
    assert len(said) == 1 and "closing" not in said[0]  # (the event's name, not the rule's)
    assert "LocalEventDetector(clock=ReplayClock())" in said[0]
    timers(own).clock.close()
    assert isinstance(timers(rules.daily).clock, ReplayClock)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_action_run_by_the_service_costs_two_commits(log_db: sa.Engine) -> None:
    """Running actions in its own thread, the service claims a detection's
    entry in the transaction that enqueues it: one commit for the entry, its
    claim and the cursor, one for the action and its ``done`` mark (the claim
    had a commit of its own before). The action runs once, and its entry is
    done."""
    writer = LogWriter(commit_order=True)
    service = GlobalDetector(rules.detector, log_db, lease=10, actions=global_actions)
    service.step()  # takes the lease: nothing to read yet
    with log_db.begin() as conn:
        writer.write(conn, [_occ("order", 1, "t1", customer=1)])
    with log_db.begin() as conn:
        writer.write(conn, [_occ("payment", 2, "t2", customer=1)])
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    sa.event.listen(log_db, "commit", count)
    try:
        r = service.step()
    finally:
        sa.event.remove(log_db, "commit", count)
    assert r.detections == 1
    assert len(commits) == 2
    [detail] = [d for _, d in _effects(log_db)]
    assert json.loads(detail) == [
        ["order", "t1", {"customer": 1}],
        ["payment", "t2", {"customer": 1}],
    ]
    with log_db.connect() as conn:
        assert conn.execute(sa.text("SELECT status FROM sentinel_outbox")).scalars().all() == [
            "done"
        ]
    service.close()
