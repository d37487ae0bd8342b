"""Coupling modes and detector-level transactions."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sentinel import Context, LocalEventDetector, RuleError
from sentinel.detector.events import listen
from sentinel.errors import ScopeError


@pytest.fixture
def det() -> LocalEventDetector:
    d = LocalEventDetector()
    for name in ("E1", "E2", "E3"):
        d.explicit(name)
    return d


class TestTransactions:
    def test_begin_pre_commit_commit_in_order(self, det: LocalEventDetector) -> None:
        seen: list[str] = []
        for ev in ("txn:begin", "txn:pre_commit", "txn:commit", "txn:abort"):
            det.rule(ev, ev, action=lambda o: seen.append(o.event))
        with det.transaction():
            det.signal("E1")
        assert seen == ["txn:begin", "txn:pre_commit", "txn:commit"]

    def test_exception_aborts_and_propagates(self, det: LocalEventDetector) -> None:
        seen: list[str] = []
        det.rule("abort", "txn:abort", action=lambda o: seen.append(o.event))
        with pytest.raises(KeyError), det.transaction() as scope:
            raise KeyError("x")
        assert seen == ["txn:abort"] and scope.status == "aborted"

    def test_transaction_events_are_usable_in_expressions(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("quiet", "NOT(E1)[txn:begin, txn:pre_commit]", action=seen.append)
        with det.transaction():
            det.signal("E2")
        with det.transaction():
            det.signal("E1")
        assert len(seen) == 1

    def test_commit_and_abort_flush_the_scope(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("r", "E1 ; E2", action=seen.append, context="chronicle")
        with det.transaction() as t1:
            det.signal("E1")
            assert det.stored(t1) == 1
        assert det.stored() == 0
        with det.transaction():
            det.signal("E2")
        assert seen == []

    def test_events_outside_transactions_use_the_process_scope(
        self, det: LocalEventDetector
    ) -> None:
        seen: list[Any] = []
        det.rule("r", "E1 ; E2", action=seen.append)
        det.signal("E1")
        with det.transaction():
            det.signal("E2")  # a different scope: no E1 there
        det.signal("E2")
        assert len(seen) == 1
        assert seen[0].constituents[0].scope == det.process_scope.id

    def test_hooks_refuse_a_finished_scope(self, det: LocalEventDetector) -> None:
        scope = det.begin()
        det.commit(scope)
        with pytest.raises(ScopeError, match="already committed"):
            det.commit(scope)
        with pytest.raises(ScopeError):
            det.pre_commit(scope)


class TestDeferred:
    def test_runs_once_at_pre_commit_with_every_detection(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("d", "E1 ; E2", action=seen.append, coupling="deferred", context="chronicle")
        with det.transaction():
            det.signal("E1", n=1)
            det.signal("E2", n=2)
            det.signal("E1", n=3)
            det.signal("E2", n=4)
            assert seen == []
        (net,) = seen
        assert len(net.parts) == 2  # the two detections of E1 ; E2
        assert net.values("n") == (1, 2, 3, 4)
        assert net.expression == det.expression("E1 ; E2")

    def test_does_not_run_when_the_event_never_occurred(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("d", "E1", action=seen.append, coupling="deferred")
        with det.transaction():
            det.signal("E2")
        assert seen == []

    def test_runs_per_transaction(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("d", "E1", action=seen.append, coupling="deferred", context="cumulative")
        for n in range(3):
            with det.transaction():
                for _ in range(n + 1):
                    det.signal("E1")
        assert [len(o.parts) for o in seen] == [1, 2, 3]

    def test_failure_aborts_the_commit(self, det: LocalEventDetector) -> None:
        ends: list[str] = []
        det.rule("d", "E1", action=lambda o: 1 / 0, coupling="deferred")
        det.rule("end", "txn:commit | txn:abort", action=lambda o: ends.append(o.event))
        with pytest.raises(RuleError, match="'d'"), det.transaction():
            det.signal("E1")
        assert ends == ["txn:abort"]

    def test_outside_a_transaction_it_never_runs(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("d", "E1", action=seen.append, coupling="deferred")
        det.signal("E1")
        assert seen == []

    def test_is_the_papers_rewrite(self, det: LocalEventDetector) -> None:
        r = det.rule("d", "E1 ^ E2", action=print, coupling="deferred", context="cumulative")
        assert str(r.detected_expression) == "A*(txn:begin, E1 ^ E2, txn:pre_commit)"


class TestDetached:
    def test_runs_after_commit_in_its_own_transaction(self, det: LocalEventDetector) -> None:
        seen: list[tuple[str, Any]] = []
        det.rule(
            "later",
            "E1",
            action=lambda o: seen.append(("later", det.current_scope())),
            coupling="detached",
        )
        with det.transaction() as scope:
            det.signal("E1")
            assert seen == []
            seen.append(("in-txn", scope))
        assert [s[0] for s in seen] == ["in-txn", "later"]
        assert seen[1][1] is not scope and seen[1][1].id != det.process_scope.id

    def test_dependent_never_runs_after_abort(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("later", "E1", action=seen.append, coupling="detached")
        with pytest.raises(RuntimeError), det.transaction():
            det.signal("E1")
            raise RuntimeError
        assert seen == []

    def test_independent_runs_after_abort_too(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("later", "E1", action=seen.append, coupling="detached_independent")
        with pytest.raises(RuntimeError), det.transaction():
            det.signal("E1")
            raise RuntimeError
        assert len(seen) == 1

    def test_failure_is_logged_not_raised_into_the_committed_caller(
        self, det: LocalEventDetector, caplog: pytest.LogCaptureFixture
    ) -> None:
        det.rule("later", "E1", action=lambda o: 1 / 0, coupling="detached")
        with caplog.at_level(logging.ERROR, "sentinel.rules"), det.transaction():
            det.signal("E1")
        assert "detached rule 'later' failed" in caplog.text

    def test_executor_is_pluggable(self, det: LocalEventDetector) -> None:
        calls: list[tuple[str, bool]] = []
        listen(
            det, "run_detached", lambda rule, occ, committed: calls.append((rule.name, committed))
        )
        det.rule("dep", "E1", action=print, coupling="detached")
        det.rule("ind", "E1", action=print, coupling="detached_independent")
        with pytest.raises(RuntimeError), det.transaction():
            det.signal("E1")
            raise RuntimeError
        with det.transaction():
            det.signal("E1")
        assert calls == [("ind", False), ("dep", True), ("ind", True)]


def test_immediate_error_rolls_back_detection_state(det: LocalEventDetector) -> None:
    det.rule("boom", "E2", action=lambda o: 1 / 0, context=Context.RECENT)
    det.rule("seq", "E1 ; E3", action=print, context=Context.CHRONICLE)
    with pytest.raises(RuleError), det.transaction():
        det.signal("E1")
        det.signal("E2")
    assert det.stored() == 0


def test_rules_signal_into_the_scope_that_triggered_them(det: LocalEventDetector) -> None:
    # A scope driven from outside (as the ORM layer does, without making it the
    # thread's current scope): what an action signals belongs to that scope.
    seen: list[Any] = []
    det.rule("chain", "E1", action=lambda o: det.signal("E2"))
    det.rule("pair", "E1 ; E2", action=seen.append, context="chronicle")
    scope = det.begin()
    det.notify(det.channel("E1"), {}, scope=scope)
    assert [c.scope for c in seen[0].constituents] == [scope.id, scope.id]
    assert det.current_scope() is not scope


def test_detached_rules_triggering_each_other_stop_at_the_cascade_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without an outbox a detached rule runs at once in a transaction of its
    own, whose end runs what it triggered: a detached rule on ``txn:commit``
    triggers itself. The chain stops at ``cascade_limit`` with one error logged
    (it ran until Python's recursion limit, about 165 runs, each failure logged
    with a traceback), and the detector goes on."""
    det = LocalEventDetector(cascade_limit=5)
    runs: list[int] = []
    det.rule(
        "after_commit", "txn:commit", action=lambda o: runs.append(o.t_occ), coupling="detached"
    )
    with caplog.at_level(logging.ERROR, logger="sentinel.rules"), det.transaction():
        pass
    assert len(runs) == 5
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "cascade depth 6" in errors[0].getMessage()
    assert errors[0].exc_info is None
    with det.transaction():
        pass
    assert len(runs) == 10  # a later commit runs the chain again, from depth 0


def test_a_failing_rule_on_txn_commit_leaves_the_detached_rules_to_run() -> None:
    """The transaction committed: its detached rules run although a rule on
    ``txn:commit`` raised (they stayed queued on the scope, never run)."""
    det = LocalEventDetector()
    det.explicit("order")
    ran: list[str] = []

    def audit(occ: Any) -> None:
        raise RuntimeError("audit failed")

    det.rule("notify", "order", action=lambda o: ran.append("notify"), coupling="detached")
    det.rule("audit", "txn:commit", action=audit)
    with pytest.raises(RuleError, match="audit failed"), det.transaction() as scope:
        det.signal("order")
    assert scope.status == "committed" and ran == ["notify"]


def test_the_blocks_own_exception_survives_a_failing_rule_on_txn_abort() -> None:
    """``with det.transaction():`` that raises: the caller gets that exception
    (``except KeyError`` still catches it), with the abort rule's failure in a
    note; it got the rule's RuleError instead."""
    det = LocalEventDetector()

    def cleanup(occ: Any) -> None:
        raise RuntimeError("cleanup failed")

    det.rule("cleanup", "txn:abort", action=cleanup)
    with pytest.raises(KeyError, match="the block's own") as info, det.transaction():
        raise KeyError("the block's own")
    assert any("cleanup failed" in note for note in info.value.__notes__)
