"""Fixtures for the ORM layer: a toy reactive model on each backend, attached.

``orm`` gives, per test and per backend (``[sqlite]``, ``[postgresql]``,
``[mysql]``): a fresh detector, reactive mapped classes bound to it (``Stock``
with a ``TechStock`` subclass, ``Holder``), an ``effects`` table that detached
actions write to (``tests/orm/actions.py``), the log tables migrated, a
``sessionmaker`` and a way to attach sentinel to it that is undone after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sentinel import LocalEventDetector
from sentinel.log import LogReader, migrate
from sentinel.orm import Attachment, attach

from . import actions
from .models import make_model

__all__ = ["ORM", "make_model"]


@dataclass
class ORM:
    """One test's world: detector, model, engine, sessionmaker, attachments."""

    det: LocalEventDetector
    model: Any
    engine: sa.Engine
    Session: sessionmaker[Any]
    backend: str
    attached: list[Attachment] = field(default_factory=list)
    #: How transactions begin on SQLite: IMMEDIATE, because detached rules write
    #: from worker threads (two deferred transactions that both read, then both
    #: write, deadlock: "database is locked").
    sqlite_begin: dict[str, str] = field(default_factory=lambda: {"sql": "BEGIN IMMEDIATE"})

    def attach(self, **options: Any) -> Attachment:
        options.setdefault("detector", self.det)
        options.setdefault("workers", 1)
        options.setdefault("backoff", 0.01)
        options.setdefault("max_backoff", 0.05)
        att = attach(self.Session, **options)
        self.attached.append(att)
        return att

    def add_stocks(self, *names: str, cls: Any = None) -> list[int]:
        """Insert stocks (before attaching, or in a transaction of their own);
        returns their ids."""
        cls = cls or self.model.Stock
        with self.Session.begin() as s:
            objs = [cls(name=n) for n in names]
            s.add_all(objs)
            s.flush()
            return [o.id for o in objs]

    def effects(self) -> list[tuple[Any, ...]]:
        with self.engine.connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    sa.text("SELECT rule, ikey, value, note FROM effects ORDER BY id")
                )
            ]

    def log(self, *, flush: bool = True) -> list[Any]:
        """Every logged occurrence (flushing late rows first, unless ``flush`` is
        false)."""
        for att in self.attached if flush else ():
            att.flush_log()
        with LogReader(self.engine) as r:
            return list(r.occurrences())

    def firings(self) -> list[Any]:
        for att in self.attached:
            att.flush_log()
        with LogReader(self.engine) as r:
            return list(r.firings())

    def outbox(self) -> list[Any]:
        with LogReader(self.engine) as r:
            return list(r.outbox())


def sqlite_savepoints(engine: sa.Engine, begin: dict[str, str]) -> None:
    """SQLAlchemy's recipe for SAVEPOINT on pysqlite (whose own transaction
    handling begins transactions late, so a ``begin_nested()`` before any write
    would be committed by its RELEASE): the driver in autocommit mode, and
    SQLAlchemy emitting ``begin["sql"]`` (``BEGIN``) itself."""

    @sa.event.listens_for(engine, "connect")
    def _autocommit(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql(begin["sql"])


@pytest.fixture
def orm(engine: sa.Engine, backend: str) -> Iterator[ORM]:
    world = ORM(LocalEventDetector(), None, engine, sessionmaker(engine), backend)
    if backend == "sqlite":
        sqlite_savepoints(engine, world.sqlite_begin)
    world.model = model = make_model(world.det)
    model.Base.metadata.create_all(engine)
    migrate.upgrade(engine)
    actions.ATTEMPTS.clear()
    try:
        yield world
    finally:
        for att in world.attached:
            att.detach()
