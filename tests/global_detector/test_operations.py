"""Operating the global detector: a lease taken over mid-step surfaces as
``LeaseLost`` (logged without a traceback) and the detection is acted on once;
the lag reads 0 after a clean stop; a method event called before the flush
has a process-local source; SQLite's busy timeout and the pool's retry delay
are the service's options."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

import sentinel
from sentinel import SOURCE, LocalEventDetector, ObjectRef, Reactive, event
from sentinel.errors import GlobalDetectorError, LeaseLost, LogWriteError
from sentinel.global_detector import GlobalDetector, replay_committed
from sentinel.log import LogWriter, migrate
from sentinel.log.tables import log_tables
from sentinel.occurrence import Occurrence
from sentinel.orm import global_actions

from . import rules

CURSORS = log_tables().global_cursors
LAG = sa.text(
    "SELECT (SELECT max(commit_seq) FROM sentinel_occurrences) - position "
    "FROM sentinel_global_cursors WHERE name = 'global'"
)


@pytest.fixture
def log_db(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    rules.make_effects(engine)
    return engine


def _write(engine: sa.Engine, event: str, t: int, scope: str) -> None:
    with engine.begin() as conn:
        LogWriter(commit_order=True).write(
            conn, [Occurrence(event, t, 1000.0 + t, scope=scope, params={"customer": 1})]
        )


def _count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar() or 0)


def _expire(engine: sa.Engine) -> None:
    """The holder's lease ends (it stalled: a pause, a slow disk)."""
    with engine.begin() as conn:
        conn.execute(sa.update(CURSORS).values(lease_until=datetime(2000, 1, 1, tzinfo=UTC)))


def _taken_over_mid_step(first: GlobalDetector, second: GlobalDetector) -> None:
    """While ``first`` detects (its rows read, its transaction not begun), its
    lease ends and ``second`` takes the cursor over and commits the same batch."""
    feeder = first._feeder
    assert feeder is not None
    feed = feeder.feed

    def feed_then_lose_the_lease(rows: Any, ranks: Any = None) -> Any:
        out = feed(rows, ranks)
        _expire(first.engine)
        r = second.step()
        assert (r.leader, r.detections) == (True, 1)
        return out

    feeder.feed = feed_then_lose_the_lease  # type: ignore[method-assign]


def _leader_at_the_order(log_db: sa.Engine) -> tuple[GlobalDetector, GlobalDetector]:
    first = GlobalDetector(rules.detector, log_db, lease=60, actions=global_actions)
    second = GlobalDetector(rules.detector, log_db, lease=60, actions=global_actions)
    _write(log_db, "order", 1, "t1")
    assert first.step().leader  # reads the order
    assert not second.step().leader
    _write(log_db, "payment", 2, "t2")
    return first, second


def test_a_lease_taken_over_mid_step_is_lease_lost_and_acted_on_once(
    log_db: sa.Engine,
) -> None:
    """The holder's lease is taken over after it read and detected a batch and
    before its transaction: the other instance commits the batch (its entry
    and the cursor) first, and the holder's transaction fails on the cursor
    with LeaseLost before it writes an entry (not on the entry's idempotency
    key, nor in a deadlock); the action runs once."""
    first, second = _leader_at_the_order(log_db)
    try:
        _taken_over_mid_step(first, second)
        with pytest.raises(LeaseLost, match=r"lost the cursor's lease at position 1"):
            first.step()
        assert _count(log_db, "sentinel_outbox") == 1
        assert _count(log_db, "gd_effects") == 1
        assert not first.step().leader  # it stands by
        assert second.step().detections == 0
        with log_db.connect() as conn:
            assert conn.execute(sa.select(CURSORS.c.holder)).scalar() == second.id
    finally:
        first.close()
        second.close()
    assert _count(log_db, "gd_effects") == 1


def test_run_logs_a_lost_lease_without_a_traceback_and_stands_by(log_db: sa.Engine) -> None:
    """``run`` reports LeaseLost as one warning, without a traceback (not as
    "a step failed; retrying"), and the instance stands by."""
    first, second = _leader_at_the_order(log_db)
    records: list[logging.LogRecord] = []
    stop = threading.Event()

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)
            stop.set()

    handler = Catch(logging.WARNING)
    logger = logging.getLogger("sentinel.global")
    logger.addHandler(handler)
    try:
        _taken_over_mid_step(first, second)
        first.run(stop=stop)
    finally:
        logger.removeHandler(handler)
        first.close()
        second.close()
    assert [(r.levelno, r.exc_info) for r in records] == [(logging.WARNING, None)]
    assert "lost the cursor's lease" in records[0].getMessage()
    assert "stands by" in records[0].getMessage()
    assert not first._leader
    assert _count(log_db, "gd_effects") == 1


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_batch_failing_after_a_takeover_is_lease_lost(
    log_db: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's transaction that fails (here: its entry's idempotency key) is
    reported as LeaseLost, chained to the failure, when the cursor is another
    instance's by then; as the failure itself when it is still this one's."""
    first = GlobalDetector(rules.detector, log_db, lease=60, run_actions=False)
    _write(log_db, "order", 1, "t1")
    assert first.step().leader

    def enqueue(conn: Any, entries: Any) -> list[str]:
        raise LogWriteError("an outbox entry with the same idempotency key exists")

    monkeypatch.setattr(first.enqueuer, "write", enqueue)
    _write(log_db, "payment", 2, "t2")
    with pytest.raises(LogWriteError):
        first.step()  # the cursor is still first's: the failure as it is
    read = first.cursor.read

    def taken_over_then_read(conn: Any) -> Any:
        with log_db.begin() as other:
            other.execute(sa.update(CURSORS).values(holder="other", position=2))
        return read(conn)

    first._feeder = first._rebuild(1)  # the failed step dropped it; its lease is current
    monkeypatch.setattr(first.cursor, "read", taken_over_then_read)
    with pytest.raises(LeaseLost) as err:
        first.step()
    assert isinstance(err.value.__cause__, LogWriteError)
    assert not first._leader
    first.close()
    assert _count(log_db, "sentinel_outbox") == 0


@pytest.mark.parametrize("workers", [0, 1])
def test_the_lag_reads_0_after_a_clean_stop(log_db: sa.Engine, workers: int) -> None:
    """The actions' transactions write late log rows (their ``txn:commit``)
    after the service read the log; a clean stop reads past them, so the lag
    query of docs/global.md reads 0."""
    _write(log_db, "order", 1, "t1")
    _write(log_db, "payment", 2, "t2")
    service = GlobalDetector(
        rules.detector, log_db, lease=60, workers=workers, actions=global_actions
    )
    try:
        service.run(until_idle=True)
        assert service.attachment.runner.wait(60)
    finally:
        service.close()
    assert _count(log_db, "gd_effects") == 1
    with log_db.connect() as conn:
        late = conn.execute(
            sa.text("SELECT count(*) FROM sentinel_occurrences WHERE event = 'txn:commit'")
        ).scalar()
        assert late == 1  # the action's, written at the stop
        assert conn.execute(LAG).scalar() == 0
    # a restart reads nothing new and acts on nothing again
    with GlobalDetector(rules.detector, log_db, lease=60, actions=global_actions) as again:
        assert again.step().rows == 0
    assert _count(log_db, "gd_effects") == 1


class _Base(DeclarativeBase):
    pass


_app = LocalEventDetector()


class _Item(_Base, Reactive, detector=_app):
    __tablename__ = "gd_item"
    id: Mapped[int] = mapped_column(primary_key=True)

    @event
    def touch(self, n: int) -> None:
        pass


def _touched_twice() -> LocalEventDetector:
    det = LocalEventDetector()
    touch = det.explicit("_Item.touch:end")
    det.rule(
        "twice", touch >> touch, action=rules.record, key=SOURCE, coupling="detached", flush=False
    )
    return det


def test_a_method_event_before_the_flush_has_a_local_source_globally(log_db: sa.Engine) -> None:
    """docs/global.md, "Objects as keys": a method called on an object not yet
    flushed is logged with the object's process-local reference, so a global
    rule ``by @source`` does not pair it with the calls made on the same row
    once it has its primary key (in this transaction or another process's)."""
    _Base.metadata.create_all(log_db)
    session = sessionmaker(log_db)
    attachment = sentinel.attach(session, detector=_app, commit_order=True)
    try:
        with session.begin() as s:
            item = _Item()
            s.add(item)
            item.touch(1)  # before the flush: <_Item ~n>
            s.flush()
            item.touch(2)  # <_Item 1>
        with session.begin() as s:
            got = s.get(_Item, 1)
            assert got is not None
            got.touch(3)
    finally:
        attachment.detach()
    with log_db.connect() as conn:
        keys = conn.execute(
            sa.text(
                "SELECT source_key FROM sentinel_occurrences "
                "WHERE event = '_Item.touch:end' ORDER BY id, t_occ"
            )
        ).scalars()
        before, *after = (json.loads(k) for k in keys)
    assert before[0] == "local"
    assert after == [[1], [1]]
    service = GlobalDetector(_touched_twice(), log_db, lease=60, run_actions=False)
    try:
        assert service.step().detections == 1
    finally:
        service.close()
    [d] = replay_committed(_touched_twice(), log_db)
    assert [(c.params["n"], c.source) for c in d.occurrence.constituents] == [
        (2, ObjectRef("_Item", (1,))),
        (3, ObjectRef("_Item", (1,))),
    ]


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_batch_the_pool_could_not_run_is_tried_again_after_the_retry_delay(
    log_db: sa.Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker thread that cannot run a batch of entries (its database locked
    past the busy timeout before the transaction began) tries it again, with
    the claims made when the entries were enqueued, after the service's
    ``retry_delay``, not after the outbox runner's longest back-off (60 s),
    and runs it once."""
    service = GlobalDetector(
        rules.detector, log_db, workers=1, retry_delay=0.05, actions=global_actions
    )
    runner = service.attachment.runner
    failed: list[bool] = []

    def locked_once() -> Any:
        if not failed:
            failed.append(True)
            raise sa.exc.OperationalError("BEGIN", {}, Exception("database is locked"))
        return contextlib.nullcontext()

    try:
        service.step()  # takes the lease (and runs what is pending: nothing)
        monkeypatch.setattr(runner, "context", locked_once)
        _write(log_db, "order", 1, "t1")
        _write(log_db, "payment", 2, "t2")
        with caplog.at_level(logging.ERROR, logger="sentinel.orm"):
            assert service.step().detections == 1
            assert runner.wait(30)
    finally:
        service.close()
    assert failed
    assert "a batch of 1 claimed entries could not be run; trying again in 0.05 s" in caplog.text
    assert _count(log_db, "gd_effects") == 1
    with log_db.connect() as conn:
        q = "SELECT status, attempts FROM sentinel_outbox"
        assert [tuple(r) for r in conn.execute(sa.text(q))] == [("done", 1)]


def test_the_service_waits_for_sqlites_lock_as_long_as_its_busy_timeout(tmp_path: Any) -> None:
    """A service given a SQLite URL waits ``busy_timeout`` seconds (30 by
    default) for another connection's write lock; bad values are refused."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    for kwargs, ms in [({}, 30_000), ({"busy_timeout": 0.5}, 500)]:
        service = GlobalDetector(rules.detector, url, run_actions=False, **kwargs)
        try:
            with service.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == ms
        finally:
            service.close()
    with pytest.raises(GlobalDetectorError, match="busy_timeout and retry_delay"):
        GlobalDetector(rules.detector, url, run_actions=False, retry_delay=float("nan"))
