"""An outbox row without a due time (issue 28, item 10): ``next_attempt_at``
NULL (a row written by hand, an ``OutboxEntry`` enqueued without one, a retry
asked for with ``UPDATE ... SET next_attempt_at = NULL``) was never claimed, run
or reported: ``NULL <= now`` is not true. A pending row without a due time is
due now; a running row without a claim end has no live claim."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.log import LogWriter, OutboxEntry
from sentinel.log.outbox import Exhausted
from sentinel.occurrence import Occurrence

from . import actions
from .conftest import ORM


def _trigger(orm: ORM, price: float) -> None:
    (stock,) = orm.add_stocks(f"S{price}")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, stock).set_price(price)


def _rows(orm: ORM) -> list[tuple[Any, ...]]:
    with orm.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text(
                    "SELECT rule, status, attempts, last_error FROM sentinel_outbox ORDER BY id"
                )
            )
        ]


@pytest.mark.parametrize("status", ["pending", "running"])
def test_an_entry_without_a_due_time_runs(orm: ORM, status: str) -> None:
    att = orm.attach(workers=0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm, 1.0)
    _trigger(orm, 2.0)
    first = orm.outbox()[0].id
    with orm.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE sentinel_outbox SET status = :s, next_attempt_at = NULL, "
                "claimed_by = :w WHERE id = :id"
            ),
            {"s": status, "w": None if status == "pending" else "gone", "id": first},
        )
    report = att.drain()
    assert (report.done, report.failed) == (2, 0)
    assert [r[:3] for r in _rows(orm)] == [("R", "done", 1), ("R", "done", 1)]
    assert sorted(e[2] for e in orm.effects()) == [1.0, 2.0]


def test_an_entry_enqueued_without_a_due_time_runs(orm: ORM) -> None:
    """``OutboxEntry`` built directly (not with ``of``) has no due time."""
    att = orm.attach(workers=0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    occ = Occurrence("Stock.e2", 1, 1.0, scope="by hand", params={"price": 3.0})
    entry = OutboxEntry("R", "k" * 64, "by hand", 1, (occ,))
    assert entry.next_attempt_at is None
    with orm.engine.begin() as conn:
        LogWriter().enqueue(conn, [entry])
    assert att.drain().done == 1
    assert [e[2] for e in orm.effects()] == [3.0]


def test_an_entry_without_a_due_time_and_no_attempts_left_is_failed(orm: ORM) -> None:
    att = orm.attach(workers=0, max_attempts=2)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm, 1.0)
    with orm.engine.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_outbox SET attempts = 2, next_attempt_at = NULL"))
    key = orm.outbox()[0].idempotency_key
    with orm.engine.begin() as conn:
        got = att.runner.store.claim(conn, key, "w", 60, 2)
    assert isinstance(got, Exhausted)
    assert _rows(orm)[0][:3] == ("R", "failed", 2)
    assert orm.effects() == []
