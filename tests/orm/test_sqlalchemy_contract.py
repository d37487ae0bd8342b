"""Attaching sentinel leaves SQLAlchemy's session contract as it is: what the
application's own listeners see, the sequence of session events, a flush that
fails at commit, and sessions dropped without ``close()``.

The reference is SQLAlchemy itself: each scenario runs on a session factory
sentinel is not attached to, and again on one it is attached to (with rules
on every transaction event and a deferred rule), and the two must agree.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.orm import Session, sessionmaker

import sentinel
from sentinel import LocalEventDetector
from sentinel.log import LogReader, migrate
from sentinel.orm import state as orm_state

from .conftest import sqlite_savepoints
from .models import make_model

SESSION_EVENTS = [
    "after_transaction_create",
    "after_transaction_end",
    "before_commit",
    "after_commit",
    "after_rollback",
    "after_soft_rollback",
    "before_flush",
    "after_flush",
    "after_flush_postexec",
    "after_begin",
    "before_attach",
    "after_attach",
]


def _nothing(occ: Any) -> None:
    pass


class World:
    """One engine, one model, two session factories: ``plain`` (never attached)
    and ``attached`` (sentinel attached with the log on, rules on every
    transaction event and a deferred rule on a database event)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.det = LocalEventDetector()
        self.model = make_model(self.det)
        self.model.Base.metadata.create_all(engine)
        migrate.upgrade(engine)
        self.plain = sessionmaker(engine)
        self.attached = sessionmaker(engine)
        self.ran: list[str] = []
        # the rules on transaction events are evaluated (their condition records
        # it) but do not fire, so a read-only transaction has nothing to log
        for ev in ("txn:begin", "txn:pre_commit", "txn:commit", "txn:abort"):
            self.det.rule(
                f"on {ev}", ev, lambda occ, ev=ev: self.ran.append(ev) is not None, action=_nothing
            )
        self.det.rule(
            "deferred insert",
            "Stock:insert",
            action=lambda occ: self.ran.append("deferred"),
            coupling="deferred",
        )
        self.attachment = sentinel.attach(self.attached, detector=self.det, workers=0)

    def both(self) -> list[tuple[str, sessionmaker[Session]]]:
        return [("without", self.plain), ("with", self.attached)]


@pytest.fixture
def world(engine: sa.Engine) -> Iterator[World]:
    w = World(engine)
    try:
        yield w
    finally:
        w.attachment.detach()


def _canary(session: Session) -> list[str]:
    calls: list[str] = []
    for name in SESSION_EVENTS:
        sa_event.listen(session, name, lambda *a, name=name, **k: calls.append(name))
    return calls


def _same_for_both(world: World, scenario: Callable[[sessionmaker[Session]], Any]) -> Any:
    without = scenario(world.plain)
    with_ = scenario(world.attached)
    assert with_ == without
    return with_


# -- what other listeners see ---------------------------------------------------------
@pytest.mark.parametrize("where", ["session", "sessionmaker", "Session added later"])
def test_a_before_commit_listener_sees_the_pending_objects_unflushed(
    world: World, where: str
) -> None:
    Stock = world.model.Stock

    def scenario(factory: sessionmaker[Session]) -> list[tuple[int, bool]]:
        seen: list[tuple[int, bool]] = []

        def look(session: Session) -> None:
            pending = list(session.new)
            seen.append((len(pending), all(sa.inspect(o).pending for o in pending)))

        target: Any = {"sessionmaker": factory, "Session added later": Session}.get(where)
        with factory() as s:
            if target is None:
                target = s
            sa_event.listen(target, "before_commit", look)
            try:
                s.add(Stock(name="IBM"))
                s.commit()
            finally:
                sa_event.remove(target, "before_commit", look)
        return seen

    assert _same_for_both(world, scenario) == [(1, True)]
    assert "deferred" in world.ran  # the deferred rule saw the insert nonetheless


# -- the event sequence ---------------------------------------------------------------
def test_an_empty_commit_sends_the_events_it_sends_without_sentinel(world: World) -> None:
    def scenario(factory: sessionmaker[Session]) -> list[str]:
        with factory() as s:
            calls = _canary(s)
            s.commit()
        return calls

    # SQLAlchemy's own test (test_standalone_on_commit_hook) expects exactly this
    assert _same_for_both(world, scenario) == [
        "after_transaction_create",
        "before_commit",
        "after_commit",
        "after_transaction_end",
    ]
    assert world.ran == ["txn:begin", "txn:pre_commit", "txn:commit"]


def test_a_commit_with_changes_sends_the_events_it_sends_without_sentinel(
    world: World,
) -> None:
    Stock = world.model.Stock

    def scenario(factory: sessionmaker[Session]) -> list[str]:
        with factory() as s:
            s.execute(sa.delete(Stock))
            s.add(Stock(id=1, name="IBM"))
            s.flush()
            calls = _canary(s)
            s.get(Stock, 1).price = 2.0
            s.add(Stock(id=2, name="DEC"))
            s.commit()
        return calls

    calls = _same_for_both(world, scenario)
    assert calls.count("after_transaction_create") == 1  # the flush's, no other
    assert world.ran.count("deferred") == 1


def test_a_before_commit_listener_that_flushes_sees_what_it_sees_without_sentinel(
    world: World,
) -> None:
    Stock = world.model.Stock

    def scenario(factory: sessionmaker[Session]) -> tuple[list[str], list[int]]:
        with factory() as s:
            s.execute(sa.delete(Stock))
            s.commit()
            calls = _canary(s)
            ids: list[int] = []

            @sa_event.listens_for(s, "before_commit")
            def flush_first(session: Session) -> None:
                pending = list(session.new)
                session.flush()
                ids.extend(o.id for o in pending)

            s.add(Stock(id=7, name="IBM"))
            s.commit()
        return calls, ids

    assert _same_for_both(world, scenario)[1] == [7]
    assert world.ran.count("deferred") == 1  # at the end of that listener's flush


def test_a_listener_that_begins_work_per_transaction_runs_once(world: World) -> None:
    """SQLAlchemy's test_autobegin_no_reentrant: an ``after_transaction_create``
    listener that runs a query sees one transaction per ``begin()`` block."""

    def scenario(factory: sessionmaker[Session]) -> list[int]:
        got: list[int] = []
        s = factory()

        @sa_event.listens_for(s, "after_transaction_create")
        def query(session: Session, transaction: Any) -> None:
            got.append(session.execute(sa.text("SELECT 1")).scalar_one())

        with s.begin():
            pass
        s.close()
        return got

    assert _same_for_both(world, scenario) == [1]


def test_a_flush_failing_at_commit_looks_as_it_does_without_sentinel(world: World) -> None:
    """SQLAlchemy's test_rollback_hook: an IntegrityError in the flush inside
    ``commit()``: the same events, every ``before_commit`` listener ran, the
    same state afterwards; sentinel counts the transaction as aborted."""
    Stock = world.model.Stock

    def scenario(factory: sessionmaker[Session]) -> tuple[list[str], list[str], str]:
        s = factory()
        s.execute(sa.delete(Stock))
        s.add(Stock(id=1, name="IBM"))
        s.commit()
        calls = _canary(s)
        before: list[str] = []
        sa_event.listen(s, "before_commit", lambda session: before.append("ran"))
        s.add(Stock(id=1, name="IBM again"))
        with pytest.raises(sa.exc.IntegrityError):
            s.commit()
        with pytest.raises(sa.exc.PendingRollbackError) as info:
            s.execute(sa.text("SELECT 1"))
        state = type(info.value).__name__
        s.rollback()
        s.close()
        return calls, before, state

    calls, before, _ = _same_for_both(world, scenario)
    assert before == ["ran"]
    assert calls[-2:] == ["after_transaction_end", "after_soft_rollback"]
    assert world.ran[-1] == "txn:abort"


def test_a_failing_deferred_rule_fails_the_commit_like_a_failing_flush(world: World) -> None:
    """With pending changes the deferred rules run at the end of SQLAlchemy's
    flush at commit: their failure is that flush's failure (the transaction is
    rolled back, ``commit()`` raises, the session wants ``rollback()``)."""
    Stock = world.model.Stock

    def fail(occ: Any) -> None:
        raise ValueError("no")

    world.det.rule("strict", "Stock:insert", action=fail, coupling="deferred")
    s = world.attached()
    calls = _canary(s)
    s.add(Stock(name="IBM"))
    with pytest.raises(sentinel.RuleError):
        s.commit()
    with pytest.raises(sa.exc.PendingRollbackError, match="no"):
        s.execute(sa.text("SELECT 1"))
    s.rollback()
    s.close()
    flush_at = calls.index("before_flush")
    assert calls[:flush_at] == [
        "after_transaction_create",
        "before_attach",
        "after_attach",
        "before_commit",
    ]
    assert "after_commit" not in calls
    with world.plain() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Stock)) == 0


def test_a_savepoint_left_open_is_released_before_the_deferred_rules_run(
    world: World, backend: str
) -> None:
    """``with Session.begin()`` around a ``begin_nested()`` never released:
    SQLAlchemy releases (and flushes) the savepoint inside the root's commit; the
    deferred rules see the insert flushed there, and the events are SQLAlchemy's."""
    if backend == "sqlite":  # SAVEPOINT needs SQLAlchemy's recipe (docs/orm.md, SQLite)
        sqlite_savepoints(world.engine, {"sql": "BEGIN"})
        world.engine.dispose()  # connections made from now on follow it
    Stock = world.model.Stock

    def scenario(factory: sessionmaker[Session]) -> list[str]:
        with factory() as s:
            s.execute(sa.delete(Stock))
            s.commit()
            calls = _canary(s)
            with s.begin():
                s.begin_nested()
                s.add(Stock(id=1, name="IBM"))
        return calls

    _same_for_both(world, scenario)
    assert world.ran.count("deferred") == 1


def _savepoints(world: World, backend: str) -> None:
    if backend == "sqlite":  # SAVEPOINT needs SQLAlchemy's recipe (docs/orm.md, SQLite)
        sqlite_savepoints(world.engine, {"sql": "BEGIN"})
        world.engine.dispose()  # connections made from now on follow it


def _committed(world: World) -> list[tuple[str, float]]:
    Stock = world.model.Stock
    with world.plain() as s:
        return [(o.name, o.price) for o in s.scalars(sa.select(Stock).order_by(Stock.id))]


def test_a_commit_inside_a_savepoints_block_commits_as_without_sentinel(
    world: World, backend: str
) -> None:
    """``session.commit()`` inside ``with session.begin_nested():`` releases the
    savepoint and commits the root (SQLAlchemy refuses any other use of the
    session inside that ended block): the pre-commit step runs there, once, and
    the transaction commits with its log."""
    _savepoints(world, backend)
    Stock = world.model.Stock

    def scenario(factory: sessionmaker[Session]) -> list[tuple[str, float]]:
        with factory() as s:
            s.execute(sa.delete(Stock))
            s.commit()
            s.add(Stock(id=1, name="IBM"))
            with s.begin_nested():
                s.add(Stock(id=2, name="DEC"))
                s.commit()
        return _committed(world)

    assert _same_for_both(world, scenario) == [("IBM", 0.0), ("DEC", 0.0)]
    assert world.ran.count("txn:pre_commit") == 2  # the delete's transaction, then this one
    assert world.ran.count("deferred") == 1  # recent context: once, for the latest insert
    with LogReader(world.engine) as log:
        last = [r for r in log.occurrences() if r.outcome == "committed"][-4:]
    assert [r.occurrence.event for r in last] == [
        "txn:begin", "Stock:insert", "Stock:insert", "txn:pre_commit",
    ]  # fmt: skip


def test_a_before_commit_listener_using_a_savepoint_block_commits_as_without_sentinel(
    world: World, backend: str
) -> None:
    """An application's ``before_commit`` listener that changes objects inside
    ``with session.begin_nested():`` while the session has unflushed changes
    (the pre-commit step then runs at that savepoint's release, inside its block)."""
    _savepoints(world, backend)
    Stock = world.model.Stock

    def scenario(factory: sessionmaker[Session]) -> list[tuple[str, float]]:
        with factory() as s:
            s.execute(sa.delete(Stock))
            s.add(Stock(id=1, name="IBM"))
            s.commit()

            def audit(session: Session) -> None:
                if not session.info.pop("audit", False):
                    return
                with session.begin_nested():
                    session.get(Stock, 1).price += 100.0

            sa_event.listen(s, "before_commit", audit)
            s.info["audit"] = True
            s.get(Stock, 1).price = 1.0  # pending at commit
            s.commit()
        return _committed(world)

    assert _same_for_both(world, scenario) == [("IBM", 101.0)]


def test_a_deferred_rule_using_a_savepoint_block_runs_the_step_once(
    world: World, backend: str
) -> None:
    """A deferred rule whose action works inside ``with session.begin_nested():``
    (its savepoint released while the step runs): the commit succeeds,
    ``txn:pre_commit`` is signalled once, and the log holds what committed."""
    _savepoints(world, backend)
    Stock = world.model.Stock

    def reprice(occ: Any) -> None:
        session = sentinel.session_of(occ)
        with session.begin_nested():
            session.get(Stock, 1).price = 9.0

    world.det.rule("reprice", "Stock.e1", action=reprice, coupling="deferred")
    with world.attached() as s:
        s.execute(sa.delete(Stock))
        s.add(Stock(id=1, name="IBM", qty=10))
        s.commit()
        before = world.ran.count("txn:pre_commit")
        s.get(Stock, 1).sell_stock(2)
        s.commit()
    assert world.ran.count("txn:pre_commit") == before + 1
    assert _committed(world) == [("IBM", 9.0)]
    with LogReader(world.engine) as log:
        events = [r.occurrence.event for r in log.occurrences() if r.outcome == "committed"]
    # the rule's change is flushed after txn:pre_commit, in the transaction
    assert events[-4:] == ["Stock.sell_stock:end", "Stock:update", "txn:pre_commit", "Stock:update"]


# -- sessions dropped without close() ------------------------------------------------
def test_a_dropped_session_gives_its_connection_back_to_the_pool(world: World, db_url: str) -> None:
    """With one pooled connection: flush, drop the session without closing it,
    collect garbage; the next connection must come (it times out if anything
    still holds the session). Sentinel's state of the transaction goes with it:
    the session, its state and its detection scope are collected, and what the
    transaction signalled is logged as aborted."""
    engine = sa.create_engine(db_url, pool_size=1, max_overflow=0, pool_timeout=5)
    world.det.explicit("E")
    Stock = world.model.Stock
    try:
        for name, factory in world.both():
            factory.configure(bind=engine)
            s = factory()
            s.add(Stock(name=name))
            s.flush()
            s.get(Stock, 1)
            session_ref = weakref.ref(s)
            scope = sentinel.scope_of(s)
            scope_ref = weakref.ref(scope) if scope is not None else None
            if scope is not None:
                with world.det.use_scope(scope):
                    world.det.signal("E")
            del s, scope
            gc.collect()
            assert session_ref() is None, name
            if scope_ref is not None:
                assert scope_ref() is None
            with engine.connect() as conn:  # a timeout here: the connection leaked
                assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
        assert orm_state.LIVE == {}
        world.attachment.flush_log()
        with LogReader(world.engine) as r:
            logged = [(o.occurrence.event, o.outcome) for o in r.occurrences()]
        assert ("E", "aborted") in logged
        assert ("Stock:insert", "aborted") in logged
        assert "txn:abort" not in world.ran  # no rule runs from a garbage collection
    finally:
        engine.dispose()
