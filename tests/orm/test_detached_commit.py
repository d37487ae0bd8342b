"""A detached rule's transaction is the worker's (issue 28, item 2): it commits
with the outbox entry's ``done`` mark, so that the rule's database effects
happen exactly once. An action that committed it itself committed its effects,
then its attempt was recorded as failed ("Can't operate on closed transaction
...") and run again: three effects for one detection with three attempts."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.errors import RuleError
from sentinel.orm import detached_context

from . import actions
from .conftest import ORM

INSERT = sa.text("INSERT INTO effects (rule, ikey, value, note) VALUES (:r, :k, 1, :n)")


def _effect(note: str) -> None:
    ctx = detached_context()
    actions.ATTEMPTS.append((ctx.rule, ctx.idempotency_key, ctx.attempt, ctx.committed))
    ctx.session.execute(INSERT, {"r": ctx.rule, "k": ctx.idempotency_key, "n": note})


def commits(occ: Any) -> None:
    _effect("before the commit")
    detached_context().session.commit()
    _effect("after the commit")


def commits_and_swallows(occ: Any) -> None:
    """Catches the refusal and carries on: the attempt still fails."""
    _effect("before the commit")
    with contextlib.suppress(RuleError):
        detached_context().session.commit()
    _effect("after the commit")


def rolls_back(occ: Any) -> None:
    _effect("rolled back")
    detached_context().session.rollback()
    _effect("after the rollback")


def closes(occ: Any) -> None:
    _effect("closed")
    detached_context().session.close()


def commits_in_condition(occ: Any) -> bool:
    _effect("in the condition")
    detached_context().session.commit()
    return True


def uses_a_savepoint(occ: Any) -> None:
    """A savepoint's release is the action's own business (not the transaction's)."""
    session = detached_context().session
    with session.begin_nested():
        _effect("in a savepoint")
    nested = session.begin_nested()
    _effect("in a savepoint rolled back")
    nested.rollback()


def _outbox(orm: ORM) -> list[tuple[Any, ...]]:
    with orm.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text("SELECT rule, status, attempts, last_error FROM sentinel_outbox")
            )
        ]


def _run(orm: ORM, name: str, action: Any, condition: Any = None) -> None:
    att = orm.attach(workers=1, max_attempts=3, backoff=0.01, max_backoff=0.02)
    orm.det.rule(name, "Stock.e2", condition, action=action, coupling="detached")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(1.0)
    assert att.wait_detached(60)


@pytest.mark.parametrize(
    ("action", "what"),
    [
        (commits, "commit()"),
        (commits_and_swallows, "commit()"),
        (rolls_back, "rollback()"),
        (closes, "close()"),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_an_action_ending_its_detached_transaction_fails_once_without_effects(
    orm: ORM, action: Any, what: str
) -> None:
    """The commit is refused before anything is committed (the transaction
    rolled back) with a :class:`~sentinel.errors.RuleError` naming the rule;
    a rollback or a close of the worker's transaction is an error too. The
    entry fails at once (each attempt would fail the same way): no effect, one
    attempt."""
    _run(orm, "SelfCommit", action)
    assert orm.effects() == []
    [(rule, status, attempts, error)] = _outbox(orm)
    assert (rule, status, attempts) == ("SelfCommit", "failed", 1)
    assert "rule 'SelfCommit' failed in its action" in error
    assert what in error
    assert [a[2] for a in actions.ATTEMPTS if a[0] == "SelfCommit"][:1] == [1]
    assert {a[2] for a in actions.ATTEMPTS} == {1}


def test_a_condition_committing_is_refused_too(orm: ORM) -> None:
    _run(orm, "SelfCommit", actions.record, commits_in_condition)
    assert orm.effects() == []
    [(_, status, attempts, error)] = _outbox(orm)
    assert (status, attempts) == ("failed", 1)
    assert "rule 'SelfCommit' failed in its condition" in error


def test_savepoints_in_an_action_are_its_own(orm: ORM) -> None:
    _run(orm, "Savepoints", uses_a_savepoint)
    assert [e[3] for e in orm.effects()] == ["in a savepoint"]
    assert [r[1:3] for r in _outbox(orm)] == [("done", 1)]
