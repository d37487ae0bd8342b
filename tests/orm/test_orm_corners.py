"""ORM corners (issue 29, item 12): values SQLAlchemy generates at a flush in
``:update``'s ``new``; a session that joined a transaction begun outside it;
deferred actions and plain subscribers that end their transaction. On every
backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

import sentinel
from sentinel.errors import RuleError, ScopeError

from .conftest import ORM

# -- a session inside a transaction begun outside it ----------------------------------


@contextmanager
def _outer(orm: ORM, mode: str, *, nested: bool = False) -> Iterator[tuple[sa.Connection, Any]]:
    """A connection in a transaction of its own (and a savepoint, with
    ``nested``), and a session of the attached factory joined to it."""
    with orm.engine.connect() as conn:
        conn.begin()
        if nested:
            conn.begin_nested()
        s = orm.Session(bind=conn, join_transaction_mode=mode)
        try:
            yield conn, s
        finally:
            s.close()


JOINS = [
    ("create_savepoint", False),
    ("rollback_only", False),
    ("conditional_savepoint", False),  # rollback_only, as no savepoint is open
    ("conditional_savepoint", True),  # create_savepoint inside the open one
    ("control_fully", True),  # the open savepoint is the session's
]


def _events(orm: ORM, scope: Any) -> list[tuple[str, str]]:
    return [(o.occurrence.event, o.outcome) for o in orm.log() if o.occurrence.scope == scope]


@pytest.mark.parametrize(("mode", "nested"), JOINS)
def test_a_session_committed_into_an_outer_transaction_that_rolls_back_logs_no_commit(
    orm: ORM, mode: str, nested: bool
) -> None:
    """The session's commit only released its savepoint (or did nothing):
    the outer transaction's rollback undoes its work, so the log holds no
    ``txn:commit`` and no committed row of it, only the aborted transaction,
    and the rules on ``txn:commit`` never run (those on ``txn:abort`` do)."""
    (ms,) = orm.add_stocks("MS")
    orm.attach()
    commits: list[Any] = []
    aborts: list[Any] = []
    orm.det.rule("on_commit", "txn:commit", action=commits.append)
    orm.det.rule("on_abort", "txn:abort", action=aborts.append)
    with _outer(orm, mode, nested=nested) as (conn, s):
        s.get(orm.model.Stock, ms).set_price(5.0)
        scope = sentinel.scope_of(s).id
        s.commit()
        assert commits == [] and aborts == []
        conn.rollback()
    assert commits == [] and len(aborts) == 1
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 0.0
    events = _events(orm, scope)
    assert ("txn:commit", "committed") not in events
    assert {outcome for _, outcome in events} == {"aborted"}
    assert [e for e, _ in events] == [
        "txn:begin",
        "Stock.set_price:begin",
        "Stock.set_price:end",
        "Stock:update",
        "txn:pre_commit",
        "txn:abort",
    ]
    assert {f.rule for f in orm.firings()} == {"on_abort"}


@pytest.mark.parametrize(("mode", "nested"), JOINS)
def test_a_session_committed_into_an_outer_transaction_commits_with_it(
    orm: ORM, mode: str, nested: bool
) -> None:
    """``txn:commit`` is signalled when the outer transaction commits, not
    when the session's commit releases its savepoint; its row is written in
    that transaction."""
    (ms,) = orm.add_stocks("MS")
    att = orm.attach()
    commits: list[Any] = []
    orm.det.rule("on_commit", "txn:commit", action=commits.append)
    with _outer(orm, mode, nested=nested) as (conn, s):
        s.get(orm.model.Stock, ms).set_price(5.0)
        scope = sentinel.scope_of(s).id
        s.commit()
        s.close()
        assert commits == []
        assert att.sink is not None
        assert [i for i in att.sink.late if i[1][0] == "txn:commit"] == []  # not yet
        conn.commit()
    assert len(commits) == 1
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 5.0
    events = _events(orm, scope)
    assert events[-1] == ("txn:commit", "committed")
    assert {outcome for _, outcome in events} == {"committed"}
    assert [f.rule for f in orm.firings()] == ["on_commit"]
