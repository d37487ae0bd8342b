"""asyncio applications: ``attach(async_sessionmaker(...))`` (and ``AsyncSession``
subclasses) follow the sessions' transactions like synchronous ones, on aiosqlite
and on PostgreSQL through psycopg's async driver."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

import sentinel
from sentinel import LocalEventDetector
from sentinel.log import LogReader, migrate

from .models import make_model

pytest.importorskip("greenlet")
aio = pytest.importorskip("sqlalchemy.ext.asyncio")

#: What the detached rule of these tests saw (it runs in a worker).
DETACHED: list[tuple[str, Any]] = []


def record_detached(occ: Any) -> None:
    DETACHED.append((occ.event, dict(occ.params["new"])))


def _async_url(engine: sa.Engine) -> sa.URL:
    url = engine.url
    if url.get_backend_name() == "sqlite":
        pytest.importorskip("aiosqlite")
        return url.set(drivername="sqlite+aiosqlite")
    return url.set(drivername="postgresql+psycopg_async")


class AsyncWorld:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.det = LocalEventDetector()
        self.model = make_model(self.det)
        self.model.Base.metadata.create_all(engine)
        migrate.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(self.model.Stock.__table__.insert(), [{"id": 1, "name": "IBM"}])
        self.url = _async_url(engine)
        self.attachments: list[Any] = []

    def attach(self, target: Any, **options: Any) -> Any:
        options.setdefault("detector", self.det)
        options.setdefault("workers", 0)
        att = sentinel.attach(target, **options)
        self.attachments.append(att)
        return att

    def log(self) -> list[tuple[str, str | None]]:
        with LogReader(self.engine) as r:
            return [(o.occurrence.event, o.outcome) for o in r.occurrences()]

    def price(self) -> float:
        with self.engine.connect() as conn:
            return float(conn.scalar(sa.text("SELECT price FROM stock WHERE id = 1")))


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def world(engine: sa.Engine) -> Iterator[AsyncWorld]:
    w = AsyncWorld(engine)
    try:
        yield w
    finally:
        for att in w.attachments:
            att.detach()


def test_an_async_application_runs_its_rules_and_logs_in_its_transactions(
    world: AsyncWorld,
) -> None:
    Stock = world.model.Stock
    seen: list[str] = []
    world.det.rule("now", "Stock.e2", action=lambda occ: seen.append("immediate"))
    world.det.rule(
        "later",
        "Stock:update",
        action=lambda occ: seen.append(f"deferred {dict(occ.params['new'])}"),
        coupling="deferred",
    )

    async def main() -> None:
        engine = aio.create_async_engine(world.url)
        factory = aio.async_sessionmaker(engine)
        world.attach(factory)
        try:
            async with factory.begin() as s:
                stock = await s.get(Stock, 1)
                stock.set_price(75.95)
                assert seen == ["immediate"]
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert seen == ["immediate", "deferred {'price': 75.95}"]
    assert world.price() == 75.95
    logged = world.log()
    assert ("Stock.set_price:begin", "committed") in logged
    assert ("Stock:update", "committed") in logged


def test_a_failing_deferred_rule_fails_the_async_commit(world: AsyncWorld) -> None:
    Stock = world.model.Stock

    def refuse(occ: Any) -> None:
        raise ValueError("not today")

    world.det.rule("refuse", "Stock:update", action=refuse, coupling="deferred")

    async def main() -> None:
        engine = aio.create_async_engine(world.url)
        factory = aio.async_sessionmaker(engine)
        world.attach(factory)
        try:
            s = factory()
            stock = await s.get(Stock, 1)
            stock.set_price(5.0)
            with pytest.raises(sentinel.RuleError, match="not today"):
                await s.commit()
            await s.rollback()
            await s.close()
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert world.price() == 0.0
    logged = world.log()
    assert ("Stock:update", "aborted") in logged
    assert not [e for e, o in logged if o == "committed"]


def test_detached_rules_of_an_async_application_run_with_a_synchronous_session(
    world: AsyncWorld,
) -> None:
    Stock = world.model.Stock
    world.det.rule("tell", "Stock:update", action=record_detached, coupling="detached")
    DETACHED.clear()

    async def main() -> Any:
        engine = aio.create_async_engine(world.url)
        factory = aio.async_sessionmaker(engine)
        att = world.attach(factory, session_factory=sessionmaker(world.engine))
        try:
            async with factory.begin() as s:
                (await s.get(Stock, 1)).price = 3.0
        finally:
            await engine.dispose()
        return att

    att = asyncio.run(main())
    with LogReader(world.engine) as r:  # written in the async transaction
        assert [e.rule for e in r.outbox()] == ["tell"]
    assert att.drain().done == 1
    assert DETACHED == [("Stock:update", {"price": 3.0})]


def test_without_a_synchronous_factory_detached_sessions_are_refused_clearly(
    world: AsyncWorld,
) -> None:
    factory = aio.async_sessionmaker(aio.create_async_engine(world.url))
    att = world.attach(factory)
    with pytest.raises(sentinel.AttachError, match="session_factory=sessionmaker"):
        att.session_factory()


def test_attaching_an_async_sessionmaker_follows_only_its_sessions(world: AsyncWorld) -> None:
    """The factory's sessions get a synchronous class of their own while
    attached (as ``sessionmaker`` gives its sessions); other sessions, and the
    factory after ``detach()``, are as they were."""
    factory = aio.async_sessionmaker(aio.create_async_engine(world.url))
    other = aio.async_sessionmaker(aio.create_async_engine(world.url))
    att = world.attach(factory)
    sync_cls = factory().sync_session.__class__
    assert sync_cls is not Session and issubclass(sync_cls, Session)
    assert type(other().sync_session) is Session
    with pytest.raises(sentinel.AttachError, match="already attached"):
        world.attach(factory)
    att.detach()
    assert "sync_session_class" not in factory.kw
    assert type(factory().sync_session) is Session


def test_an_async_session_class_is_followed_through_its_sync_session_class(
    world: AsyncWorld,
) -> None:
    class AppSync(Session):
        pass

    class AppAsync(aio.AsyncSession):
        sync_session_class = AppSync

    att = world.attach(AppAsync)
    assert att.session_class is AppSync
    seen: list[str] = []
    world.det.rule("begin", "txn:begin", action=lambda occ: seen.append("begin"))

    async def main() -> None:
        engine = aio.create_async_engine(world.url)
        try:
            async with AppAsync(engine) as s, s.begin():
                await s.execute(sa.text("SELECT 1"))
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert seen == ["begin"]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_condition_awaiting_the_database_does_not_mute_the_other_tasks(
    world: AsyncWorld,
) -> None:
    """A rule's condition runs with signals muted (what it signals is not
    detected). Muting was per thread: in an asyncio application, while one
    task's condition waited on the database, every other task's events were
    dropped, neither detected nor logged, though their changes committed."""
    Stock = world.model.Stock
    with world.engine.begin() as conn:
        conn.execute(Stock.__table__.insert(), [{"id": 2, "name": "MS"}])

    def slow_check(occ: Any) -> bool:  # reads the database: the task waits there
        session = sentinel.session_of(occ)
        assert session is not None
        return bool(session.execute(sa.text("SELECT pg_sleep(0.3), 1")).one()[1] == 1)

    fired: list[Any] = []
    world.det.rule("watch", "Stock:update", condition=slow_check, action=fired.append)

    async def main() -> None:
        engine = aio.create_async_engine(world.url)
        factory = aio.async_sessionmaker(engine)
        world.attach(factory, session_factory=sessionmaker(world.engine))

        async def update(i: int, delay: float) -> None:
            await asyncio.sleep(delay)
            async with factory.begin() as s:
                (await s.get(Stock, i)).price = 10.0 * i

        try:
            await asyncio.gather(update(1, 0.0), update(2, 0.1))
        finally:
            await engine.dispose()

    asyncio.run(main())
    assert sorted(o.source.key for o in fired) == [(1,), (2,)]
    assert [e for e, _ in world.log()].count("Stock:update") == 2
