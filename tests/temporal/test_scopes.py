"""Timers and detection scopes: a timer belongs to the scope whose store holds the
state that started it. Flushing the scope (commit, abort, flush) cancels it;
rules that do not flush keep theirs across transactions; a savepoint rollback
cancels the timers started since and re-arms those that were pending."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import Context, timers
from tests.temporal.timeline import Timeline

CONTEXTS = list(Context)


@pytest.mark.parametrize("end", ["commit", "abort", "flush"])
@pytest.mark.parametrize("context", CONTEXTS, ids=str)
def test_ending_the_transaction_cancels_its_timers(context: Context, end: str) -> None:
    tl = Timeline()
    seen = tl.watch("rel", "E1 + [00:00:10]", context)
    per = tl.watch("per", "P*(E1, [00:00:02], E3)", context)
    scope = tl.det.begin()
    with tl.det.use_scope(scope):
        tl.run("E1", 3)  # inside the transaction the timers run
    assert timers(tl.det).pending(scope) == 2
    (tick,) = [o for o in tl.log if o.event == "temporal:tick"]
    assert tick.scope == scope.id  # the tick is in the transaction's scope
    if end == "commit":
        tl.det.commit(scope)
    elif end == "abort":
        tl.det.abort(scope)
    else:
        tl.det.flush(scope)
    assert timers(tl.det).pending() == 0 and tl.clock.pending == 0
    tl.clock.advance(60)
    with tl.det.use_scope(tl.det.begin()):
        tl.run("E3")
    assert seen == [] and per == []


def test_other_scopes_keep_their_timers() -> None:
    tl = Timeline()
    seen = tl.watch("rel", "E1 + [00:00:10]", "chronicle")
    a, b = tl.det.begin(), tl.det.begin()
    with tl.det.use_scope(a):
        tl.run("E1")
    with tl.det.use_scope(b):
        tl.run("E1")
    tl.det.flush(a)
    tl.clock.advance(10)
    (occ,) = seen
    assert occ.scope == b.id


@pytest.mark.parametrize("context", CONTEXTS, ids=str)
def test_rules_that_do_not_flush_keep_timers_across_transactions(context: Context) -> None:
    # "order not shipped within 2 days": the order and the deadline are in
    # different transactions (the deadline in none: the process scope).
    tl = Timeline(("placed", "shipped"))
    seen = tl.watch("late", "NOT(shipped)[placed, placed + [2d]] by order", context, flush=False)
    with tl.det.transaction():
        tl.det.signal("placed", order=1)
    with tl.det.transaction():
        tl.det.signal("placed", order=2)
    tl.clock.advance(86_400)
    with tl.det.transaction():
        tl.det.signal("shipped", order=1)
    assert timers(tl.det).pending() == 2  # both deadlines survived their commits
    tl.clock.advance(86_400)
    (occ,) = seen
    # {placed, (placed, tick)}: the deadline's own detection holds the order again
    assert occ.values("order") == (2, 2) and len(set(occ.of("placed"))) == 1
    assert occ.terminator.scope == tl.det.process_scope.id
    assert timers(tl.det).pending() == 0
    # the partitions a deadline emptied are released, like the router's (the
    # unrestricted context never consumes an initiator: order 2's stays)
    kept = 1 if context is Context.UNRESTRICTED else 0
    assert tl.det.stored() == kept and _partitions(tl) == kept


def _partitions(tl: Timeline) -> int:
    n = 0
    for store in (tl.det.graph.global_store, tl.det.process_scope.store):
        for state in store.values():
            for item in state:
                if isinstance(item, dict):
                    n += len(item)
    return n


def test_flush_of_everything_cancels_process_wide_timers() -> None:
    tl = Timeline()
    seen = tl.watch("r", "E1 + [00:00:10]", flush=False)
    with tl.det.transaction():
        tl.run("E1")
    tl.det.flush()
    tl.clock.advance(20)
    assert seen == [] and timers(tl.det).pending() == 0


class TestSavepoints:
    def test_rollback_cancels_timers_started_since(self) -> None:
        tl = Timeline()
        seen = tl.watch("r", "E1 + [00:00:10]", "chronicle")
        with tl.det.transaction() as scope:
            tl.det.signal("E1", n=1)
            sp = scope.savepoint()
            tl.det.signal("E1", n=2)
            assert timers(tl.det).pending(scope) == 2
            scope.rollback_to(sp)
            assert timers(tl.det).pending(scope) == 1
            tl.clock.advance(10)
        assert [o.values("n") for o in seen] == [(1,)]
        assert tl.clock.pending == 0

    def test_rollback_rearms_a_timer_cancelled_since(self) -> None:
        tl = Timeline()
        seen = tl.watch("r", "P(E1, [00:00:02], E3)", "recent")
        with tl.det.transaction() as scope:
            tl.run("E1")
            sp = scope.savepoint()
            tl.run("E3")  # closes the interval: its timer is cancelled
            scope.rollback_to(sp)  # ... and back: the interval is open again
            tl.clock.advance(4)
            assert tl.labelled("r") == ["{e1^1, t2}", "{e1^1, t4}"]
        assert len(seen) == 2

    def test_a_tick_rolled_back_is_due_again(self) -> None:
        # Rolling back undoes the tick's detection like any occurrence since the
        # savepoint; its timer is pending again, overdue: it fires at the clock's
        # next move.
        tl = Timeline()
        seen = tl.watch("r", "E1 + [00:00:05]", "chronicle")
        with tl.det.transaction() as scope:
            tl.run("E1")
            sp = scope.savepoint()
            tl.clock.advance(6)
            assert len(seen) == 1
            scope.rollback_to(sp)
            assert timers(tl.det).pending(scope) == 1
            assert tl.clock.advance(0) == 1
        assert [o.terminator.timestamp - tl.start for o in seen] == [5, 5]

    def test_release_keeps_the_timers(self) -> None:
        tl = Timeline()
        seen = tl.watch("r", "E1 + [00:00:10]", "chronicle")
        with tl.det.transaction() as scope:
            sp = scope.savepoint()
            tl.det.signal("E1")
            scope.release(sp)
            tl.clock.advance(10)
        assert len(seen) == 1

    def test_rollback_inside_partitions(self) -> None:
        tl = Timeline()
        seen: list[Any] = tl.watch("r", "(E1 + [00:00:10]) by k", "chronicle")
        with tl.det.transaction() as scope:
            tl.det.signal("E1", k="a")
            sp = scope.savepoint()
            tl.det.signal("E1", k="b")
            tl.det.signal("E1", k="a")
            scope.rollback_to(sp)
            tl.clock.advance(10)
            assert [o.values("k") for o in seen] == [("a",)]
            assert tl.det.stored(scope) == 0


def test_unsubscribing_cancels_the_timers_of_removed_nodes() -> None:
    tl = Timeline()
    tl.watch("r", "E1 + [00:00:10]", "chronicle")
    tl.watch("keep", "E2 + [00:00:10]", "chronicle")
    tl.run("E1", "E2")
    assert timers(tl.det).pending() == 2
    tl.det.get_rule("r").delete()
    assert timers(tl.det).pending() == 1 and tl.clock.pending == 1
    tl.clock.advance(10)
    assert [o.event for o in tl.log if o.event == "temporal:tick"] == ["temporal:tick"]
