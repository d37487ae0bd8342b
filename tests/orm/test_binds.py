"""Sessions bound to several databases: each transaction's log is written on
every database it used, in the transaction (so each database's log commits
exactly when its part of the data does); the outbox and the late rows go to the
home database; configurations that could not be atomic are refused at attach."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

import sentinel
import sentinel.orm
from sentinel import LocalEventDetector
from sentinel.log import LogReader, migrate
from tests.conftest import Namespaces

from .models import make_model


class TwoDatabases:
    """``Stock`` rows live in database ``a``, ``Holder`` rows in ``b``; both
    carry sentinel's log tables."""

    def __init__(self, a: sa.Engine, b: sa.Engine) -> None:
        self.a, self.b = a, b
        self.det = LocalEventDetector()
        self.model = make_model(self.det)
        for e in (a, b):
            self.model.Base.metadata.create_all(e)
            migrate.upgrade(e)
        self.binds = {self.model.Stock: a, self.model.Holder: b}
        self.attached: list[Any] = []

    def attach(self, factory: Any, **options: Any) -> Any:
        options.setdefault("detector", self.det)
        options.setdefault("workers", 0)
        att = sentinel.attach(factory, **options)
        self.attached.append(att)
        return att

    def log(self, engine: sa.Engine) -> list[tuple[str, str, str | None]]:
        """(scope, event, outcome) of every row of ``engine``'s log."""
        for att in self.attached:
            att.flush_log()
        with LogReader(engine) as r:
            return [(o.occurrence.scope, o.occurrence.event, o.outcome) for o in r.occurrences()]

    def outbox(self, engine: sa.Engine) -> list[Any]:
        with LogReader(engine) as r:
            return list(r.outbox())


@pytest.fixture
def two(backend: str, namespaces: Namespaces | None, tmp_path: Path) -> Iterator[TwoDatabases]:
    if backend == "sqlite":
        urls: list[Any] = [f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"]
    else:
        assert namespaces is not None
        urls = [namespaces.url(namespaces.new()), namespaces.url(namespaces.new())]
    a, b = (sa.create_engine(u) for u in urls)
    world = TwoDatabases(a, b)
    try:
        yield world
    finally:
        for att in world.attached:
            att.detach()
        a.dispose()
        b.dispose()


def _scopes(rows: list[tuple[str, str, str | None]], event: str) -> set[str]:
    return {scope for scope, ev, _ in rows if ev == event}


def test_sessions_bound_to_several_databases_need_a_home(two: TwoDatabases) -> None:
    with pytest.raises(sentinel.AttachError, match=r"log_bind="):
        two.attach(sessionmaker(binds=two.binds))


def test_the_log_is_written_on_every_database_the_transaction_used(two: TwoDatabases) -> None:
    Stock, Holder = two.model.Stock, two.model.Holder
    Session = sessionmaker(binds=two.binds)
    two.attach(Session, log_bind=two.a)
    with Session.begin() as s:  # only b
        s.add(Holder(name="h1"))
    with Session.begin() as s:  # a and b
        s.add(Stock(name="IBM"))
        s.add(Holder(name="h2"))
    log_a, log_b = two.log(two.a), two.log(two.b)
    only_b = _scopes(log_b, "Holder:insert") - _scopes(log_b, "Stock:insert")
    both = _scopes(log_b, "Stock:insert")
    assert len(only_b) == 1 and len(both) == 1
    # each database's log holds every transaction that used it, committed with it
    assert _scopes(log_a, "txn:begin") & (only_b | both) == both
    # the same rows, in the transaction, on both; txn:commit (signalled after
    # the commit: a late row) on the home database only
    rows_of = {
        name: sorted((e, o) for s, e, o in log if s in both and e != "txn:commit")
        for name, log in (("a", log_a), ("b", log_b))
    }
    assert rows_of["a"] == rows_of["b"]
    assert ("Stock:insert", "committed") in rows_of["a"]
    assert ("Holder:insert", "committed") in rows_of["a"]
    assert both <= _scopes(log_a, "txn:commit")
    assert not _scopes(log_b, "txn:commit")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_database_used_after_a_flush_wrote_rows_gets_the_whole_transaction(
    two: TwoDatabases,
) -> None:
    """``flush_every``: rows written at a flush went to the databases used by
    then, and a database the transaction used only later got what followed
    (its log lacked ``txn:begin`` and the first database's events)."""
    Stock, Holder = two.model.Stock, two.model.Holder
    Session = sessionmaker(binds=two.binds)
    two.attach(Session, log_bind=two.a, flush_every=1)
    with Session.begin() as s:
        s.add(Stock(name="IBM"))
        s.flush()  # written at this flush, on a only
        s.add(Holder(name="h1"))
        s.flush()  # b joins now
        s.add(Stock(name="SAP"))
        s.flush()
    log_a, log_b = two.log(two.a), two.log(two.b)
    (scope,) = _scopes(log_b, "Holder:insert")
    rows_of = {
        name: [(e, o) for s, e, o in log if s == scope and e != "txn:commit"]
        for name, log in (("a", log_a), ("b", log_b))
    }
    assert rows_of["a"] == rows_of["b"]
    assert [e for e, _ in rows_of["b"]] == [
        "txn:begin",
        "Stock:insert",
        "Holder:insert",
        "Stock:insert",
        "txn:pre_commit",
    ]


def test_a_default_bind_is_the_home(two: TwoDatabases) -> None:
    Holder = two.model.Holder
    Session = sessionmaker(two.a, binds={Holder: two.b})
    att = two.attach(Session)
    assert att.engine() is two.a
    with Session.begin() as s:
        s.add(Holder(name="h1"))
    assert _scopes(two.log(two.b), "Holder:insert")


def test_a_commit_that_fails_leaves_no_committed_rows_anywhere(two: TwoDatabases) -> None:
    Stock, Holder = two.model.Stock, two.model.Holder

    def refuse(occ: Any) -> None:
        raise ValueError("no holders today")

    two.det.rule("refuse", "Holder:insert", action=refuse, coupling="deferred")
    Session = sessionmaker(binds=two.binds)
    two.attach(Session, log_bind=two.a)
    with pytest.raises(sentinel.RuleError), Session.begin() as s:
        s.add(Stock(name="IBM"))
        s.add(Holder(name="h1"))
    for engine in (two.a, two.b):
        rows = two.log(engine)
        assert ("Holder:insert", "aborted") in {(e, o) for _, e, o in rows}
        assert not [r for r in rows if r[2] == "committed"]
    with two.a.connect() as conn:
        assert conn.scalar(sa.text("SELECT count(*) FROM stock")) == 0


#: What the detached rule of the outbox test saw (its action runs in a worker).
NOTED: list[str] = []


def noted(occ: Any) -> None:
    NOTED.append(occ.event)


def test_the_outbox_goes_to_the_home_database_in_the_transaction(two: TwoDatabases) -> None:
    Holder = two.model.Holder
    two.det.rule("note", "Holder:insert", action=noted, coupling="detached")
    Session = sessionmaker(binds=two.binds)
    att = two.attach(Session, log_bind=two.a)
    with Session.begin() as s:  # writes only b: a joins for the outbox entry
        s.add(Holder(name="h1"))
    (entry,) = two.outbox(two.a)
    assert entry.rule == "note"
    assert two.outbox(two.b) == []
    scope = entry.scope
    assert (scope, "Holder:insert", "committed") in two.log(two.a)
    assert (scope, "Holder:insert", "committed") in two.log(two.b)
    NOTED.clear()
    report = att.drain()  # the worker marks it done on the home database
    assert (report.done, NOTED) == (1, ["Holder:insert"])
    assert [e.status for e in two.outbox(two.a)] == ["done"]


def test_a_home_that_is_not_one_of_the_databases_is_refused(
    two: TwoDatabases, tmp_path: Path
) -> None:
    other = sa.create_engine(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    with pytest.raises(sentinel.AttachError, match="could not commit in the same transaction"):
        two.attach(sessionmaker(binds=two.binds), log_bind=other)
    other.dispose()


def test_an_autocommit_engine_is_refused(two: TwoDatabases) -> None:
    auto = two.b.execution_options(isolation_level="AUTOCOMMIT")
    with pytest.raises(sentinel.AttachError, match="AUTOCOMMIT"):
        two.attach(sessionmaker(two.a, binds={two.model.Holder: auto}))
    assert sentinel.orm.attachments() == []


def test_unbound_sessions_write_their_late_rows_where_they_logged(two: TwoDatabases) -> None:
    """Attached to ``Session`` itself (sessions bound one by one), the late rows
    (``txn:commit``) go to the default bind of the last transaction logged."""
    from sqlalchemy.orm import Session

    att = two.attach(Session)
    with Session(two.b) as s, s.begin():
        s.add(two.model.Holder(name="h1"))
    att.flush_log()
    assert {e for _, e, _ in two.log(two.b)} >= {"Holder:insert", "txn:commit"}
