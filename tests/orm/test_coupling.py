"""Coupling modes in real transactions (issue 4, "Coupling modes"; HiPAC and
Sentinel 3.2, 4.3): immediate, deferred and detached rules x commit, rollback and
a rolled-back savepoint, on every backend."""

from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import PendingRollbackError

import sentinel
import sentinel.temporal
from sentinel.errors import RollbackOnlyError, RuleError, ScopeError

from . import actions
from .conftest import ORM

ENDINGS = ("commit", "rollback", "savepoint_rollback")


def _writes_effect(name: str, runs: list[Any]) -> Any:
    """An action that writes one ``effects`` row per constituent, in the
    triggering transaction (immediate and deferred rules)."""

    def action(occ: Any) -> None:
        runs.append(occ)
        session = sentinel.session_of(occ)
        assert session is not None
        for c in occ.constituents:
            session.execute(
                sa.text("INSERT INTO effects (rule, ikey, value) VALUES (:r, :k, :v)"),
                {"r": name, "k": str(c.scope), "v": c.params["price"]},
            )

    return action


def _run(orm: ORM, ending: str) -> None:
    (ibm,) = orm.add_stocks("IBM")
    s = orm.Session()
    try:
        stock = s.get(orm.model.Stock, ibm)
        stock.set_price(1.0)
        if ending == "savepoint_rollback":
            nested = s.begin_nested()
            stock.set_price(2.0)
            s.flush()
            nested.rollback()
        else:
            stock.set_price(2.0)
        if ending == "rollback":
            s.rollback()
        else:
            s.commit()
    finally:
        s.close()


EXPECTED = {  # values written by the rule's action, as committed
    "commit": [1.0, 2.0],
    "rollback": [],
    "savepoint_rollback": [1.0],
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_immediate(orm: ORM, ending: str) -> None:
    att = orm.attach()
    runs: list[Any] = []
    orm.det.rule("R", "Stock.e2", action=_writes_effect("R", runs))
    _run(orm, ending)
    # it ran at each detection, inside the transaction, whatever came after...
    assert [o.params["price"] for o in runs] == [1.0, 2.0]
    # ...and its effects share the transaction's (and the savepoint's) fate
    assert [e[2] for e in orm.effects()] == EXPECTED[ending]
    fired = [f for f in orm.firings() if f.rule == "R"]
    assert [f.status for f in fired] == ["fired", "fired"]
    att.detach()


@pytest.mark.parametrize("ending", ENDINGS)
def test_deferred(orm: ORM, ending: str) -> None:
    orm.attach()
    runs: list[Any] = []
    orm.det.rule("R", "Stock.e2", action=_writes_effect("R", runs), coupling="deferred",
                 context="cumulative")  # fmt: skip
    _run(orm, ending)
    if ending == "rollback":
        assert runs == []
    else:
        # once, at commit, with every detection that survived (the net effect)
        assert len(runs) == 1
        assert runs[0].values("price") == tuple(EXPECTED[ending])
    assert [e[2] for e in orm.effects()] == EXPECTED[ending]


@pytest.mark.parametrize("ending", ENDINGS)
def test_detached(orm: ORM, ending: str) -> None:
    att = orm.attach()
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _run(orm, ending)
    assert att.wait_detached(60)
    effects = orm.effects()
    assert sorted(e[2] for e in effects) == EXPECTED[ending]
    # one outbox row per detection that committed, done, each with its own key
    outbox = orm.outbox()
    assert sorted(e.status for e in outbox) == ["done"] * len(EXPECTED[ending])
    assert sorted(e[1] for e in effects) == sorted(e.idempotency_key for e in outbox)
    if ending == "rollback":
        assert actions.ATTEMPTS == []


def test_detached_runs_after_the_commit_in_a_new_transaction(orm: ORM) -> None:
    att = orm.attach(workers=0)  # nothing runs until drained
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(3.0)
        trigger_scope = sentinel.scope_of(s)
        assert trigger_scope is not None
    assert orm.effects() == []
    (entry,) = orm.outbox()
    assert (entry.status, entry.rule, entry.scope) == ("pending", "R", trigger_scope.id)
    report = att.drain()
    assert (report.done, report.failed, report.retried) == (1, 0, 0)
    assert [e[:3] for e in orm.effects()] == [("R", entry.idempotency_key, 3.0)]
    # the effect was written in a transaction of its own, logged as such
    log = orm.log()
    effect_scopes = {o.occurrence.scope for o in log if o.occurrence.event == "txn:begin"}
    assert len(effect_scopes) == 3  # add_stocks, the trigger, the detached rule
    statuses = [(f.rule, f.status, f.scope) for f in orm.firings() if f.rule == "R"]
    assert statuses == [("R", "pending", trigger_scope.id), ("R", "done", trigger_scope.id)]
    assert att.drain().total == 0  # done is done


def test_detached_independent_runs_after_a_rollback(orm: ORM) -> None:
    att = orm.attach()
    orm.det.rule("dep", "Stock.e2", action=actions.record_if_committed, coupling="detached")
    orm.det.rule("ind", "Stock.e2", action=actions.record_if_committed,
                 coupling="detached_independent")  # fmt: skip
    (ibm,) = orm.add_stocks("IBM")
    s = orm.Session()
    s.get(orm.model.Stock, ibm).set_price(4.0)
    s.rollback()
    s.close()
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(5.0)
    assert att.wait_detached(60)
    assert sorted((e[0], e[2], e[3]) for e in orm.effects()) == [
        ("dep", 5.0, "committed"),
        ("ind", 4.0, "aborted"),
        ("ind", 5.0, "committed"),
    ]
    # every outbox entry has its pending firing, the aborted transaction's too
    pending = sorted((f.rule, f.scope) for f in orm.firings() if f.status == "pending")
    assert pending == sorted((e.rule, e.scope) for e in orm.outbox())
    assert [r for r, _ in pending].count("ind") == 2


def test_detached_independent_replays_as_it_ran_for_an_abort_and_an_abandoned_session(
    orm: ORM,
) -> None:
    """Online, an independent detached rule runs for a rolled-back transaction
    (it signalled ``txn:abort``) but not for one whose session was
    garbage-collected before it ended (no ``txn:abort``, no rule runs). The log
    holds both as aborted; replay tells them apart by the ``txn:abort`` row and
    detects what ran online."""
    import gc

    from sentinel.replay import replay

    att = orm.attach()
    orm.det.rule("ind", "Stock.e2", action=actions.record_if_committed,
                 coupling="detached_independent")  # fmt: skip
    (ibm,) = orm.add_stocks("IBM")
    s = orm.Session()
    s.get(orm.model.Stock, ibm).set_price(4.0)
    s.rollback()
    s.close()

    def dropped() -> None:
        orm.Session().get(orm.model.Stock, ibm).set_price(6.0)  # never closed

    dropped()
    gc.collect()
    assert att.wait_detached(60)
    assert [(e[0], e[2], e[3]) for e in orm.effects()] == [("ind", 4.0, "aborted")]
    logged = {(o.occurrence.event, o.outcome) for o in orm.log()}
    assert ("Stock.set_price:end", "aborted") in logged
    replayed = replay(orm.engine, orm.det).table.to_pylist()
    assert [(d["rule"], d["coupling"]) for d in replayed] == [("ind", "detached_independent")]
    assert '"price":4.0' in replayed[0]["params"]


def test_deferred_fires_once_with_all_detections_and_not_when_nothing_happened(
    orm: ORM,
) -> None:
    orm.attach()
    runs: list[Any] = []
    orm.det.rule("R1", "Stock.e1 ^ Stock.e2", action=runs.append, coupling="deferred",
                 context="cumulative")  # fmt: skip
    ids = orm.add_stocks("IBM", "DEC", "MS")
    assert runs == []  # inserting rows signals no e1/e2
    with orm.Session.begin() as s:
        ibm, dec, ms = (s.get(orm.model.Stock, i) for i in ids)
        ibm.set_price(115.0)
        dec.set_price(100.0)
        ms.sell_stock(200)
        assert runs == []  # not before the commit
    assert len(runs) == 1
    assert runs[0].values("price") == (115.0, 100.0)
    assert runs[0].values("qty") == (200,)
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ids[0]).name = "I.B.M."  # no e1, no e2
    assert len(runs) == 1


def test_deferred_rules_may_change_and_flush_objects(orm: ORM) -> None:
    orm.attach()
    Stock = orm.model.Stock

    def restock(occ: Any) -> None:
        session = sentinel.session_of(occ)
        assert session is not None
        for c in occ.constituents:
            stock = session.get(Stock, c.source.key[0])
            stock.qty += 1000
        session.flush()

    updates: list[Any] = []
    orm.det.rule("restock", "Stock.e1", action=restock, coupling="deferred")
    orm.det.rule("seen", "Stock:update", action=updates.append)
    (ms,) = orm.add_stocks("MS")
    with orm.Session.begin() as s:
        s.get(Stock, ms).sell_stock(200)
    with orm.Session() as s:
        assert s.get(Stock, ms).qty == 800
    # the rule's change was flushed in the transaction: its update event too
    assert [dict(u.params["new"]) for u in updates] == [{"qty": -200}, {"qty": 800}]


def test_a_failing_immediate_rule_rolls_the_transaction_back(orm: ORM) -> None:
    orm.attach()

    def reject(occ: Any) -> None:
        raise ValueError("prices are positive")

    orm.det.rule("positive", "Stock.e2", lambda occ: occ.params["price"] <= 0, action=reject)
    (ibm,) = orm.add_stocks("IBM")
    s = orm.Session()
    stock = s.get(orm.model.Stock, ibm)
    stock.name = "changed"
    with pytest.raises(RuleError, match="rule 'positive' failed in its action") as info:
        stock.set_price(-1.0)
    assert isinstance(info.value.__cause__, ValueError)
    # the application goes on and commits anyway: refused, rolled back
    with pytest.raises(RollbackOnlyError, match="'positive'") as refused:
        s.commit()
    assert refused.value.rule == "positive"
    with pytest.raises(PendingRollbackError):
        s.execute(sa.text("SELECT 1"))
    s.rollback()
    s.close()
    with orm.Session() as s:
        assert s.get(orm.model.Stock, ibm).name == "IBM"
    failed = [f for f in orm.firings() if f.rule == "positive"]
    assert [(f.status, f.error is not None) for f in failed] == [("failed", True)]


def test_a_rule_failure_inside_a_savepoint_rolls_back_the_savepoint_only(orm: ORM) -> None:
    orm.attach()

    def reject(occ: Any) -> None:
        raise ValueError("prices are positive")

    orm.det.rule("positive", "Stock.e2", lambda occ: occ.params["price"] <= 0, action=reject)
    ibm, dec = orm.add_stocks("IBM", "DEC")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(10.0)
        with pytest.raises(RuleError), s.begin_nested():
            s.get(orm.model.Stock, dec).set_price(-1.0)
    with orm.Session() as s:
        assert [s.get(orm.model.Stock, i).price for i in (ibm, dec)] == [10.0, 0.0]


def test_a_failing_deferred_rule_rolls_the_commit_back(orm: ORM) -> None:
    orm.attach()

    def fail(occ: Any) -> None:
        raise RuntimeError("the books do not balance")

    orm.det.rule("audit", "Stock.e1", action=fail, coupling="deferred")
    (ms,) = orm.add_stocks("MS")
    s = orm.Session()
    s.get(orm.model.Stock, ms).sell_stock(5)
    with pytest.raises(RuleError, match="rule 'audit' failed") as info:
        s.commit()
    assert isinstance(info.value.__cause__, RuntimeError)
    # rolled back already: the session says so until it is rolled back
    with pytest.raises(PendingRollbackError, match="the books do not balance"):
        s.execute(sa.text("SELECT 1"))
    s.rollback()
    s.close()
    with orm.Session() as s:
        assert s.get(orm.model.Stock, ms).qty == 0
    log = orm.log()
    sold = [o for o in log if o.occurrence.event == "Stock.sell_stock:end"]
    assert [o.outcome for o in sold] == ["aborted"]


def test_a_failing_deferred_rule_in_a_begin_block(orm: ORM) -> None:
    orm.attach()

    def fail(occ: Any) -> None:
        raise RuntimeError("no")

    orm.det.rule("audit", "Stock.e1", action=fail, coupling="deferred")
    (ms,) = orm.add_stocks("MS")
    with pytest.raises(RuleError, match="'audit'"), orm.Session.begin() as s:
        s.get(orm.model.Stock, ms).sell_stock(5)
    with orm.Session() as s:
        assert s.get(orm.model.Stock, ms).qty == 0


class _Veto:
    """A ``before_commit`` listener on a session (so after sentinel's) that
    vetoes the first commit attempt, as an application's validation does."""

    def __init__(self) -> None:
        self.vetoed = 0

    def __call__(self, session: Any) -> None:
        if not self.vetoed:
            self.vetoed += 1
            raise ValueError("not now")


@pytest.mark.parametrize("change", ["attribute", "flushed", "method"])
def test_a_transaction_changed_after_its_deferred_rules_ran_cannot_commit(
    orm: ORM, change: str
) -> None:
    """A ``before_commit`` listener after sentinel's raises once its deferred
    rules ran (the session was clean: they ran in sentinel's listener), and
    SQLAlchemy leaves the transaction open. Whatever changes after that, the
    deferred rules can no longer see: the next commit refuses, and rolls
    everything back, rather than commit changes the rules never saw."""
    orm.attach()
    runs: list[Any] = []
    orm.det.rule("audit", "Stock.e2", action=_writes_effect("audit", runs), coupling="deferred")
    orm.det.rule("audit_rows", "Stock:update", action=runs.append, coupling="deferred")
    (ms,) = orm.add_stocks("MS")
    s = orm.Session()
    veto = _Veto()
    sa.event.listen(s, "before_commit", veto)
    stock = s.get(orm.model.Stock, ms)
    stock.set_price(5.0)
    s.flush()
    with pytest.raises(ValueError, match="not now"):
        s.commit()
    assert len(runs) == 2  # the deferred rules ran, then the listener vetoed
    assert s.in_transaction()  # SQLAlchemy left the transaction open
    if change == "attribute":
        stock.qty = 99
    elif change == "flushed":
        stock.qty = 99
        s.flush()
    else:
        stock.set_price(6.0)
    with pytest.raises(RollbackOnlyError, match="deferred rules"):
        s.commit()
    s.rollback()
    s.close()
    with orm.Session() as s2:
        stock = s2.get(orm.model.Stock, ms)
        assert (stock.qty, stock.price) == (0, 0.0)
    assert orm.effects() == []
    log = orm.log()
    setup = log[0].occurrence.scope  # add_stocks's transaction
    assert {o.outcome for o in log if o.occurrence.scope != setup} == {"aborted"}


def test_a_commit_retried_unchanged_after_a_veto_commits(orm: ORM) -> None:
    """The same veto, and the commit retried with nothing changed: the
    deferred rules saw everything, so it commits (their work included, once)."""
    orm.attach()
    runs: list[Any] = []
    orm.det.rule("audit", "Stock.e2", action=_writes_effect("audit", runs), coupling="deferred")
    (ms,) = orm.add_stocks("MS")
    s = orm.Session()
    sa.event.listen(s, "before_commit", _Veto())
    s.get(orm.model.Stock, ms).set_price(5.0)
    s.flush()
    with pytest.raises(ValueError, match="not now"):
        s.commit()
    s.commit()
    s.close()
    assert len(runs) == 1
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 5.0
    assert [r[0] for r in orm.effects()] == ["audit"]


@pytest.mark.parametrize("ends", ["rollback", "commit", "close"])
def test_an_immediate_action_that_ends_its_own_transaction_fails_the_call(
    orm: ORM, ends: str
) -> None:
    """An action that rolls back (or commits, or closes) the session of the
    transaction it runs in: the call that triggered it would go on in the
    session's next transaction, and its change commit with that one. The call
    fails instead, naming the rule, before the method runs."""
    (ms,) = orm.add_stocks("MS")
    orm.attach()

    def end_it(occ: Any) -> None:
        session = sentinel.session_of(occ)
        assert session is not None
        getattr(session, ends)()

    orm.det.rule("veto", "Stock.e2", action=end_it)
    s = orm.Session()
    stock = s.get(orm.model.Stock, ms)
    with pytest.raises(RuleError, match=r"'veto'.*was ended while it ran"):
        stock.set_price(9.0)
    s.commit()
    s.close()
    with orm.Session() as s2:
        assert s2.get(orm.model.Stock, ms).price == 0.0
    log = orm.log()
    assert [o.outcome for o in log if o.occurrence.event == "Stock.set_price:begin"] == [
        "committed" if ends == "commit" else "aborted"
    ]
    assert not [o for o in log if o.occurrence.event == "Stock.set_price:end"]


def test_a_transaction_a_subscriber_ended_leaves_nothing_behind(orm: ORM) -> None:
    """A plain subscriber (not a rule) that rolls back the session: no rule run
    takes the end, and the integration keeps no record of it once the
    transaction's scope is gone (it kept one per such transaction for ever,
    and then sent every later rule run through the slow check)."""
    import gc

    from sentinel.orm.attach import _INTEGRATIONS

    (ms,) = orm.add_stocks("MS")
    orm.attach()

    def end_it(occ: Any) -> None:
        session = sentinel.session_of(occ)
        assert session is not None
        session.rollback()

    orm.det.subscribe("Stock.e2", end_it)
    for _ in range(3):
        s = orm.Session()
        with pytest.raises(ScopeError, match="end_it"):  # the call fails
            s.get(orm.model.Stock, ms).set_price(9.0)
        s.close()
    gc.collect()
    integ = _INTEGRATIONS.get(orm.det)
    assert integ is not None and dict(integ.ended_in_rule) == {}


def test_a_rule_on_txn_abort_does_not_take_the_failure_of_the_rule_that_rolled_back(
    orm: ORM,
) -> None:
    """The rollback an action makes runs the rules on ``txn:abort`` inside it;
    they run as usual, and the failure belongs to the action's rule."""
    (ms,) = orm.add_stocks("MS")
    orm.attach()
    aborted: list[Any] = []
    orm.det.rule("on_abort", "txn:abort", action=aborted.append)

    def end_it(occ: Any) -> None:
        session = sentinel.session_of(occ)
        assert session is not None
        session.rollback()

    orm.det.rule("veto", "Stock.e2", action=end_it)
    s = orm.Session()
    with pytest.raises(RuleError, match=r"'veto'.*was ended while it ran"):
        s.get(orm.model.Stock, ms).set_price(9.0)
    s.close()
    assert len(aborted) == 1
    statuses = {(f.rule, f.status) for f in orm.firings()}
    assert ("veto", "failed") in statuses
    assert ("on_abort", "fired") in statuses


def test_detached_rules_triggering_each_other_through_the_outbox_stop_at_the_limit(
    orm: ORM,
) -> None:
    """A detached rule on ``txn:commit``: its own run's transaction commits and
    triggers it again. Each outbox entry carries how many detached runs deep its
    trigger was; past the detector's cascade_limit the entry fails for good
    with CascadeLimitError (the worker ran it for ever, one new entry per run)."""
    att = orm.attach(workers=0)
    orm.det.scheduler.cascade_limit = 3
    orm.det.rule("again", "txn:commit", action=actions.record, coupling="detached")
    with orm.Session.begin() as s:
        s.execute(sa.text("SELECT 1"))
    first = att.drain()
    assert (first.done, first.failed) == (3, 1)
    assert att.drain().total == 0  # nothing left: the chain ended
    assert len(orm.effects()) == 3
    failed = [f for f in orm.firings() if f.status == "failed"]
    assert len(failed) == 1 and "CascadeLimitError" in (failed[0].error or "")


def test_a_rule_in_the_clock_thread_that_ends_its_transaction_fails(orm: ORM) -> None:
    """A transaction's timer fires in the clock's thread, on a handle of the
    scope with its own cascade depth; the ORM's check for a rule that ended its
    own transaction read only the scope's depth (0 there), so a rule of the
    clock's thread that committed the session ran on as if nothing happened."""
    import threading
    from datetime import timedelta

    (ms,) = orm.add_stocks("MS")
    errors: list[BaseException] = []
    orm.attach()
    ended = threading.Event()
    sessions: list[Any] = []

    def end_it(occ: Any) -> None:
        sessions[0].commit()
        ended.set()

    clock: Any = None
    try:
        orm.det.rule("late", orm.det.event("Stock.e2") + timedelta(milliseconds=5), action=end_it)
        clock = sentinel.temporal.timers(orm.det).clock
        was, clock.on_error = clock.on_error, errors.append  # type: ignore[attr-defined]
        s = orm.Session()
        sessions.append(s)
        s.get(orm.model.Stock, ms).set_price(9.0)
        assert ended.wait(10)
        deadline = time.monotonic() + 5
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [type(e) for e in errors] == [RuleError]
        assert "'late'" in str(errors[0]) and "was ended while it ran" in str(errors[0])
        s.close()
    finally:
        if clock is not None:
            clock.on_error = was


def test_the_applications_commit_while_a_clock_rule_runs_is_not_blamed_on_it(orm: ORM) -> None:
    """The check above must not take the application's own commit, made while
    a rule of the same transaction runs in the clock's thread, for that rule
    ending its transaction: only the thread that is running the rule can."""
    import threading
    from datetime import timedelta

    (ms,) = orm.add_stocks("MS")
    errors: list[BaseException] = []
    orm.attach()
    started, release, done = threading.Event(), threading.Event(), threading.Event()
    fired: list[Any] = []

    def wait(occ: Any) -> None:
        started.set()
        release.wait(10)
        fired.append(occ)
        done.set()

    clock: Any = None
    try:
        orm.det.rule("late", orm.det.event("Stock.e2") + timedelta(milliseconds=5), action=wait)
        clock = sentinel.temporal.timers(orm.det).clock
        was, clock.on_error = clock.on_error, errors.append
        s = orm.Session()
        s.get(orm.model.Stock, ms).set_price(9.0)
        assert started.wait(10)
        s.commit()  # the application's commit, while the clock's rule runs
        release.set()
        assert done.wait(10)
        time.sleep(0.2)
        assert errors == [] and len(fired) == 1
        s.close()
    finally:
        release.set()
        if clock is not None:
            clock.on_error = was
