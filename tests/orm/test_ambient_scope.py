"""An explicit signal inside an attached session's transaction belongs to it
(issue 28 item 5).

Per backend: the README's pieces (a rule on ``NOT(payment)[order,
txn:pre_commit]``, ``sentinel.attach``, ``det.signal`` inside ``with
Session.begin():``) fire; the signal is logged in the transaction's scope, as
committed or, after a rollback, aborted; outside any transaction it goes to the
process scope as before; with two sessions' transactions open in one thread it
fails with an error naming ``use_scope``, and ``use_scope`` chooses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

import sentinel
from sentinel import LocalEventDetector
from sentinel.errors import AmbiguousScopeError, ScopeError
from sentinel.log import LogReader, migrate
from sentinel.orm import Attachment, attach

from .conftest import sqlite_savepoints


class World:
    def __init__(self, engine: sa.Engine, backend: str) -> None:
        self.engine = engine
        self.det = det = LocalEventDetector()
        det.explicit("order")
        det.explicit("payment")
        self.unpaid: list[Any] = []
        # the README's rule
        det.rule(
            "no_payment",
            "NOT(payment)[order, txn:pre_commit]",
            action=lambda occ: self.unpaid.append(occ.values("order_id")),
        )
        if backend == "sqlite":
            sqlite_savepoints(engine, {"sql": "BEGIN IMMEDIATE"})
        migrate.upgrade(engine)
        self.Session = sessionmaker(engine)
        self.att: Attachment = attach(self.Session, detector=det, workers=0)

    def logged(self) -> list[tuple[str, str, str | None, dict[str, Any]]]:
        self.att.flush_log()
        with LogReader(self.engine) as r:
            return [
                (o.event, o.scope, outcome, dict(o.params)) for o, outcome, _ in r.occurrences()
            ]

    def scope_of_event(self, event: str, **params: Any) -> tuple[str, str | None]:
        (row,) = [(s, oc) for e, s, oc, p in self.logged() if e == event and p == params]
        return row


@pytest.fixture
def world(engine: sa.Engine, backend: str) -> Iterator[World]:
    w = World(engine, backend)
    try:
        yield w
    finally:
        w.att.detach()


def test_the_readme_combination_fires(world: World) -> None:
    with world.Session.begin():
        world.det.signal("order", order_id=8)
    assert world.unpaid == [(8,)]
    with world.Session.begin():
        world.det.signal("order", order_id=9)
        world.det.signal("payment", order_id=9)
    assert world.unpaid == [(8,)]  # paid: no detection


def test_the_signal_is_logged_in_the_transactions_scope(world: World) -> None:
    with world.Session.begin() as session:
        scope = sentinel.scope_of(session)
        assert scope is not None
        occ = world.det.signal("order", order_id=8)
        assert occ is not None and occ.scope == scope.id
    assert world.scope_of_event("order", order_id=8) == (scope.id, "committed")
    # the transaction's own events are in the same scope
    events = {e for e, s, _, _ in world.logged() if s == scope.id}
    assert events == {"txn:begin", "order", "txn:pre_commit", "txn:commit"}


def test_a_rolled_back_transactions_signal_is_logged_as_aborted(world: World) -> None:
    with world.Session() as session:
        session.begin()
        scope = sentinel.scope_of(session)
        assert scope is not None
        world.det.signal("order", order_id=8)
        session.rollback()
    assert world.unpaid == []  # no pre-commit: the rule never fires
    assert world.scope_of_event("order", order_id=8) == (scope.id, "aborted")


def test_without_a_transaction_the_process_scope_as_before(world: World) -> None:
    world.det.signal("order", order_id=1)
    with world.Session.begin():
        world.det.signal("order", order_id=2)
    world.det.signal("order", order_id=3)  # after the transaction ended
    with world.Session() as session:  # a session without a transaction yet
        world.det.signal("order", order_id=4)
        session.commit()
    for n in (1, 3, 4):
        scope, outcome = world.scope_of_event("order", order_id=n)
        assert scope == world.det.process_scope.id and outcome is None, n
    scope, outcome = world.scope_of_event("order", order_id=2)
    assert scope != world.det.process_scope.id and outcome == "committed"
    assert world.unpaid == [(2,)]


def test_two_sessions_open_at_once_need_use_scope(world: World) -> None:
    with world.Session() as a, world.Session() as b:
        a.begin()
        b.begin()
        with pytest.raises(AmbiguousScopeError) as info:
            world.det.signal("order", order_id=8)
        assert isinstance(info.value, ScopeError)
        assert "use_scope" in str(info.value)
        scope_a, scope_b = sentinel.scope_of(a), sentinel.scope_of(b)
        assert scope_a is not None and scope_b is not None
        assert set(info.value.scopes) == {scope_a.id, scope_b.id}
        with world.det.use_scope(scope_b):
            world.det.signal("order", order_id=9)
        b.commit()
        # one left: it is the current one again
        world.det.signal("order", order_id=10)
        a.commit()
    assert world.scope_of_event("order", order_id=9) == (scope_b.id, "committed")
    assert world.scope_of_event("order", order_id=10) == (scope_a.id, "committed")
    assert not [p for e, _, _, p in world.logged() if p == {"order_id": 8}]
    assert sorted(world.unpaid) == [(9,), (10,)]


def test_a_rules_action_signals_into_its_transaction_even_with_another_open(
    world: World,
) -> None:
    """What an action signals belongs to the triggering transaction, also when
    the action opens a session of its own (as before: a rule's run takes
    precedence over the thread's transactions)."""

    def audit(occ: Any) -> None:
        if occ.params["order_id"] == 8:
            with world.Session.begin():
                world.det.signal("payment", order_id=8)

    world.det.rule("audit", "order", action=audit)
    with world.Session.begin() as session:
        scope = sentinel.scope_of(session)
        assert scope is not None
        world.det.signal("order", order_id=8)
        world.det.signal("order", order_id=1)  # the thread's transaction again
    assert world.scope_of_event("payment", order_id=8) == (scope.id, "committed")
    assert world.scope_of_event("order", order_id=1) == (scope.id, "committed")
    assert world.unpaid == [(1,)]  # order 8 was paid in its transaction


def test_a_rules_action_outside_transactions_signals_into_the_process_scope(
    world: World,
) -> None:
    """A rule triggered outside any transaction runs in the process scope: what
    its action signals belongs there, also when the action opens a session's
    transaction (the thread's view of the process scope, with its cascade
    depth, is what counts, not the context variable)."""

    def audit(occ: Any) -> None:
        if occ.params["order_id"] == 8:
            with world.Session.begin():
                world.det.signal("payment", order_id=8)
                world.det.signal("order", order_id=5)

    world.det.rule("audit", "order", action=audit)
    world.det.signal("order", order_id=8)
    process = world.det.process_scope.id
    assert world.scope_of_event("payment", order_id=8) == (process, None)
    assert world.scope_of_event("order", order_id=5) == (process, None)
    with world.Session.begin() as session:  # the thread's transactions work again
        scope = sentinel.scope_of(session)
        assert scope is not None
        world.det.signal("order", order_id=1)
    assert world.scope_of_event("order", order_id=1) == (scope.id, "committed")
    assert world.unpaid == [(1,)]


def test_each_thread_has_its_own_current_transaction(world: World) -> None:
    import threading

    scopes: dict[str, str] = {}

    def work(name: str, n: int) -> None:
        with world.Session.begin() as session:
            scope = sentinel.scope_of(session)
            assert scope is not None
            scopes[name] = scope.id
            world.det.signal("order", order_id=n)

    with world.Session.begin() as session:  # open in this thread meanwhile
        threads = [threading.Thread(target=work, args=(f"t{i}", i)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        main = sentinel.scope_of(session)
        assert main is not None
        world.det.signal("order", order_id=99)
    for i in range(2):
        assert world.scope_of_event("order", order_id=i) == (scopes[f"t{i}"], "committed")
    assert world.scope_of_event("order", order_id=99) == (main.id, "committed")


def test_a_transaction_in_progress_at_detach_is_no_longer_current(world: World) -> None:
    """A transaction that another thread has open when the attachment is
    detached is no longer followed: that thread's signals go to the process
    scope again, not to a scope nobody ends."""
    import threading

    begun, detached = threading.Event(), threading.Event()
    got: list[Any] = []

    def work() -> None:
        with world.Session() as session:
            session.begin()
            begun.set()
            detached.wait(10)
            got.append(world.det.signal("order", order_id=1))
            session.rollback()

    t = threading.Thread(target=work)
    t.start()
    begun.wait(10)
    world.att.detach()
    detached.set()
    t.join(10)
    (occ,) = got
    assert occ.scope == world.det.process_scope.id


@pytest.mark.parametrize("backend", ["sqlite"])
def test_each_asyncio_task_has_its_own_current_transaction(tmp_path: Any, backend: str) -> None:
    pytest.importorskip("aiosqlite")
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    path = tmp_path / "app.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    engine.dispose()
    det = LocalEventDetector()
    det.explicit("order")
    seen: dict[int, str] = {}

    async def task(Session: Any, n: int) -> str:
        async with Session.begin() as session:
            scope = sentinel.scope_of(session.sync_session)
            assert scope is not None
            await asyncio.sleep(0)  # the other task's transaction is open now too
            occ = det.signal("order", order_id=n)
            assert occ is not None
            seen[n] = occ.scope
            return str(scope.id)

    async def main() -> list[str]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        Session = async_sessionmaker(engine)
        att = sentinel.attach(Session, detector=det, workers=0, log=False)
        try:
            return list(await asyncio.gather(task(Session, 1), task(Session, 2)))
        finally:
            att.detach()
            await engine.dispose()

    scopes = asyncio.run(main())
    assert [seen[1], seen[2]] == scopes
