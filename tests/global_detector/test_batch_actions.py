"""The service acts on the detections of one read batch in one transaction:
two commits per batch (entries, claims and cursor; the actions and their
``done`` marks), however many detections it holds, in the service's thread
and in a worker thread alike. An action that fails is
rolled back alone and retried; one that ends the shared transaction fails for
good and the others run again, each alone: every database effect exactly once."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from sentinel import LocalEventDetector
from sentinel.global_detector import GlobalDetector
from sentinel.log import LogWriter, migrate
from sentinel.occurrence import Occurrence
from sentinel.orm import detached_context, global_actions

from . import rules


@pytest.fixture
def log_db(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    rules.make_effects(engine)
    return engine


#: Customers whose action raises, and whose action commits its session.
FAIL: set[int] = set()
END: set[int] = set()
#: The customer of every call of :func:`act`, in order.
CALLS: list[int] = []


def act(occ: Any) -> None:
    """Record the detection; raise for a customer in ``FAIL``, commit the
    session for one in ``END``."""
    customer = occ.constituents[0].params["customer"]
    CALLS.append(customer)
    ctx = detached_context()
    ctx.session.execute(
        sa.insert(rules.EFFECTS).values(
            rule=ctx.rule, ikey=ctx.idempotency_key, detail=str(customer)
        )
    )
    if customer in FAIL:
        raise RuntimeError(f"customer {customer} refused")
    if customer in END:
        ctx.session.commit()


def _detector(fail: set[int], end: set[int]) -> LocalEventDetector:
    """Order then payment by customer, acted on by :func:`act`."""
    FAIL.clear()
    FAIL.update(fail)
    END.clear()
    END.update(end)
    CALLS.clear()
    det = LocalEventDetector()
    rules.events(det)
    det.rule(
        "paid",
        "(order ; payment) by customer",
        action=act,
        coupling="detached",
        context="chronicle",
        flush=False,
    )
    return det


def _orders_and_payments(engine: sa.Engine, customers: range) -> None:
    """Each customer's order and payment in two transactions: one detection each."""
    writer = LogWriter(commit_order=True)
    for c in customers:
        for t, event in ((2 * c, "order"), (2 * c + 1, "payment")):
            with engine.begin() as conn:
                occ = Occurrence(event, t, 1000.0 + t, scope=f"s{t}", params={"customer": c})
                writer.write(conn, [occ])


def _effects(engine: sa.Engine) -> list[int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT detail FROM gd_effects ORDER BY id")).scalars()
        return sorted(int(d) for d in rows)


def _statuses(engine: sa.Engine) -> list[tuple[str, int]]:
    with engine.connect() as conn:
        q = "SELECT status, attempts FROM sentinel_outbox ORDER BY id"
        return [(s, int(a)) for s, a in conn.execute(sa.text(q))]


def _step_counting_commits(engine: sa.Engine, service: GlobalDetector) -> tuple[Any, int]:
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    sa.event.listen(engine, "commit", count)
    try:
        r = service.step()
    finally:
        sa.event.remove(engine, "commit", count)
    return r, len(commits)


def test_a_batch_of_detections_is_acted_on_in_one_transaction(log_db: sa.Engine) -> None:
    """Five detections read in one step: one commit for their entries, claims
    and the cursor, one for the five actions and their done marks (six
    before: one per action)."""
    service = GlobalDetector(_detector(set(), set()), log_db, lease=10, actions=global_actions)
    try:
        service.step()  # takes the lease: nothing to read yet
        _orders_and_payments(log_db, range(1, 6))
        r, commits = _step_counting_commits(log_db, service)
        assert r.detections == 5
        assert commits == 2
        assert _effects(log_db) == [1, 2, 3, 4, 5]
        assert _statuses(log_db) == [("done", 1)] * 5
    finally:
        service.close()


def test_a_worker_thread_acts_on_a_batch_in_one_transaction(log_db: sa.Engine) -> None:
    """With a worker thread running the actions (``workers=1``, ``sentinel global
    --workers 1``), five detections read in one step cost two commits,
    as in the service's thread: one for their entries, claims and the cursor,
    one for the five actions and their done marks, run as one job of the
    pool (eleven before: a claim and an action per detection)."""
    service = GlobalDetector(
        _detector(set(), set()), log_db, lease=10, workers=1, actions=global_actions
    )
    runner = service.attachment.runner
    try:
        service.step()
        _orders_and_payments(log_db, range(1, 6))
        commits: list[object] = []

        def count(conn: object) -> None:
            commits.append(conn)

        sa.event.listen(log_db, "commit", count)
        try:
            assert service.step().detections == 5
            assert runner.wait(30)
        finally:
            sa.event.remove(log_db, "commit", count)
        assert len(commits) == 2
        assert _effects(log_db) == [1, 2, 3, 4, 5]
        assert _statuses(log_db) == [("done", 1)] * 5
    finally:
        service.close()


def test_batches_queued_behind_a_busy_worker_thread_are_acted_on_together(
    log_db: sa.Engine,
) -> None:
    """When the actions fall behind the reading, the worker thread takes the
    read batches waiting in its queue as one job: one transaction for all of
    them (here two batches of two detections while it acts on the first)."""
    service = GlobalDetector(
        _detector(set(), set()), log_db, lease=10, workers=1, actions=global_actions
    )
    runner = service.attachment.runner
    entered, release = threading.Event(), threading.Event()
    jobs: list[int] = []
    run_batch = runner.run_batch

    def sized(claims: Any) -> None:
        jobs.append(len(claims))
        run_batch(claims)

    @contextlib.contextmanager
    def busy_first() -> Any:
        if not entered.is_set():
            entered.set()
            assert release.wait(30)
        yield

    try:
        service.step()
        runner.run_batch = sized  # type: ignore[method-assign]
        runner.context = busy_first
        _orders_and_payments(log_db, range(1, 3))
        assert service.step().detections == 2
        assert entered.wait(30)  # the thread acts on the first batch: busy
        _orders_and_payments(log_db, range(3, 5))
        assert service.step().detections == 2
        _orders_and_payments(log_db, range(5, 7))
        assert service.step().detections == 2
        release.set()
        assert runner.wait(30)
    finally:
        release.set()
        service.close()
    assert jobs == [2, 4]
    assert _effects(log_db) == [1, 2, 3, 4, 5, 6]
    assert _statuses(log_db) == [("done", 1)] * 6


def test_closing_the_service_while_a_worker_thread_commits_a_batch_lets_it_commit(
    log_db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The service closed while its worker thread commits a batch (``sentinel
    global`` stopped, a benchmark's end): the pool is stopped before the
    session listeners are removed, so the batch commits in its one
    transaction, each action run once. Before, SQLAlchemy's listeners were
    removed while the thread was running them: the commit failed
    (``RuntimeError: deque mutated during iteration``) and each entry ran
    again, alone and unfollowed."""
    factory = sessionmaker(log_db)
    entered = threading.Event()

    def hold(session: Session) -> None:
        # the batch's commit (not a savepoint's): held until the listeners
        # are gone (the close has begun), or half a second at most
        if session.in_nested_transaction() or entered.is_set():
            return
        entered.set()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline and all(
            sa.event.contains(factory, name, fn) for name, fn in service.attachment._handlers
        ):
            time.sleep(0.005)

    sa.event.listen(factory, "before_commit", hold)
    service = GlobalDetector(
        _detector(set(), set()),
        log_db,
        lease=10,
        workers=1,
        actions=global_actions,
        session_factory=factory,
    )
    try:
        service.step()
        _orders_and_payments(log_db, range(1, 6))
        assert service.step().detections == 5
        assert entered.wait(30)
    finally:
        with caplog.at_level(logging.WARNING, logger="sentinel"):
            service.close()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert CALLS == [1, 2, 3, 4, 5]
    assert _effects(log_db) == [1, 2, 3, 4, 5]
    assert _statuses(log_db) == [("done", 1)] * 5


def test_an_action_that_fails_is_rolled_back_alone_and_retried(log_db: sa.Engine) -> None:
    """The batch's other actions commit; the failing one's work is undone, its
    entry is pending for a retry (attempt 1 recorded), and it is not done."""
    service = GlobalDetector(_detector({3}, set()), log_db, lease=10, actions=global_actions)
    try:
        service.step()
        _orders_and_payments(log_db, range(1, 6))
        assert service.step().detections == 5
        assert _effects(log_db) == [1, 2, 4, 5]
        with log_db.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT status, attempts, last_error FROM sentinel_outbox ORDER BY id")
            ).all()
        assert [(s, a) for s, a, _ in rows] == [("done", 1)] * 2 + [("pending", 1)] + [
            ("done", 1)
        ] * 2
        assert "customer 3 refused" in rows[2].last_error
    finally:
        service.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_an_action_ending_the_shared_transaction_fails_and_the_others_run_alone(
    log_db: sa.Engine, workers: int
) -> None:
    """An action that commits the session itself is refused, as it is alone
    (failed for good, nothing of it committed); the others of its batch, whose
    work that undid, run again each in a transaction of its own: each effect
    exactly once."""
    service = GlobalDetector(
        _detector(set(), {2}), log_db, lease=10, workers=workers, actions=global_actions
    )
    try:
        service.step()
        _orders_and_payments(log_db, range(1, 5))
        assert service.step().detections == 4
        assert service.attachment.runner.wait(30)
        assert _effects(log_db) == [1, 3, 4]
        assert [s for s, _ in _statuses(log_db)] == ["done", "failed", "done", "done"]
    finally:
        service.close()
    with log_db.connect() as conn:
        err = conn.execute(
            sa.text("SELECT last_error FROM sentinel_outbox WHERE status = 'failed'")
        ).scalar_one()
    assert "commit()" in err


#: A claim to take from the service while the batch's actions run (customer
#: whose action steals, the entry stolen: its customer).
STEAL: dict[int, int] = {}


def steal(occ: Any) -> None:
    """:func:`act`, and for a customer in ``STEAL`` another worker takes the
    claim of another entry of the batch (its lease ended), in a transaction
    of its own."""
    act(occ)
    customer = occ.constituents[0].params["customer"]
    if customer in STEAL:
        ctx = detached_context()
        engine = ctx.session.get_bind()
        victim = STEAL[customer]
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE sentinel_outbox SET claimed_by = 'another worker' WHERE "
                    "idempotency_key = (SELECT ikey FROM (SELECT o.idempotency_key AS ikey "
                    "FROM sentinel_outbox o ORDER BY o.id) x LIMIT 1 OFFSET :n)"
                ),
                {"n": victim - 1},
            )


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_claim_lost_while_the_batch_ran_commits_nothing_twice(
    log_db: sa.Engine, workers: int
) -> None:
    """Another worker takes one entry's claim while the batch's actions run:
    the done marks cannot all be written, nothing of the shared transaction
    commits, and each entry runs again alone: the taken one is skipped (its
    new holder runs it), every other is done, each effect once."""
    _detector(set(), set())
    det = LocalEventDetector()
    rules.events(det)
    det.rule(
        "paid",
        "(order ; payment) by customer",
        action=steal,
        coupling="detached",
        context="chronicle",
        flush=False,
    )
    service = GlobalDetector(det, log_db, lease=10, workers=workers, actions=global_actions)
    try:
        service.step()
        _orders_and_payments(log_db, range(1, 5))
        STEAL.clear()  # the first action steals the third entry's claim
        STEAL[1] = 3
        assert service.step().detections == 4
        assert service.attachment.runner.wait(30)
        STEAL.clear()
        with log_db.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT status, claimed_by FROM sentinel_outbox ORDER BY id")
            ).all()
        assert [s for s, _ in rows] == ["done", "done", "running", "done"]
        assert rows[2].claimed_by == "another worker"
        assert _effects(log_db) == [1, 2, 4]
    finally:
        service.close()


def test_a_failing_step_is_retried_with_growing_waits_and_one_traceback(
    log_db: sa.Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The database away: the first failure is logged with its traceback, the
    next ones one line each, the waits doubling (it logged a traceback every
    poll, at a fixed wait); working again is said once."""
    service = GlobalDetector(
        _detector(set(), set()), log_db, lease=10, min_wait=0.01, max_wait=0.01, run_actions=False
    )
    real_step = service.step
    tries = {"n": 0}
    waits: list[float] = []

    stop = threading.Event()

    def step() -> Any:
        tries["n"] += 1
        if tries["n"] <= 4:
            raise sa.exc.OperationalError("SELECT 1", {}, Exception("database is away"))
        stop.set()
        return real_step()

    real_wait = stop.wait

    def wait(timeout: float | None = None) -> bool:
        if timeout is not None and tries["n"] <= 4:
            waits.append(timeout)
        return real_wait(0)

    monkeypatch.setattr(service, "step", step)
    monkeypatch.setattr(stop, "wait", wait)
    try:
        with caplog.at_level(logging.WARNING, logger="sentinel.global"):
            service.run(stop=stop)
    finally:
        service.close()
    assert waits[:4] == [0.01, 0.02, 0.04, 0.08]
    failing = [
        r for r in caplog.records if "a step failed" in r.getMessage() or "still" in r.getMessage()
    ]
    assert [r.exc_info is not None for r in failing] == [True, False, False, False]
    assert "still failing (4 tries)" in failing[-1].getMessage()
    assert any("working again after 4 failed tries" in r.getMessage() for r in caplog.records)
    assert service.close_errors == []
