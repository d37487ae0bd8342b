"""Rules on a primitive event (or a mask of one) are reached without the graph.

When everything a channel's leaf reaches is a subscription on the primitive
event itself, or on a mask of it, the wiring lists those subscriptions on the
channel (``Channel.direct``, higher priority first) and ``emit`` hands the
occurrence to the scheduler's ``deliver_direct`` instead of walking the
compiled leaf. These tests pin that the shortcut is taken where it should be
and that everything a rule can observe is as through the graph: order by
priority and triggering, enabling, disabling and deleting during an instant,
coupling modes, the cascade limit, masks, muting, scopes and ``rule_run``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from sentinel import LocalEventDetector
from sentinel.detector import EventDetector
from sentinel.detector.events import listen
from sentinel.detector.graph import EventGraph
from sentinel.errors import CascadeLimitError, RuleError, UnknownEventError
from sentinel.rules.scheduler import Scheduler


@pytest.fixture
def det() -> LocalEventDetector:
    d = LocalEventDetector()
    for name in ("E1", "E2", "E3"):
        d.explicit(name)
    return d


def _direct(det: EventDetector, name: str) -> tuple[Any, ...] | None:
    det.graph.ensure()
    return det._channels[name].direct


def _recorder(log: list[str], name: str) -> Callable[[Any], None]:
    return lambda occ: log.append(name)


class TestWhenTheShortcutIsTaken:
    def test_rules_on_a_primitive_event_are_listed_on_its_channel(
        self, det: LocalEventDetector
    ) -> None:
        r1 = det.rule("r1", "E1", action=print)
        r2 = det.rule("r2", "E1", action=print, priority=3)
        assert _direct(det, "E1") == (r2._subscription, r1._subscription)

    def test_a_channel_that_also_feeds_a_composite_event_walks_the_graph(
        self, det: LocalEventDetector
    ) -> None:
        det.rule("r1", "E1", action=print)
        det.rule("seq", "E1 ; E2", action=print)
        assert _direct(det, "E1") is None
        assert _direct(det, "E2") is None

    def test_rules_on_a_mask_are_listed_with_its_test(self, det: LocalEventDetector) -> None:
        big = det.rule("big", "E1[amount > 10]", action=print, priority=1)
        plain = det.rule("plain", "E1", action=print)
        assert _direct(det, "E1") == (big._subscription, plain._subscription)
        masks = det._channels["E1"].masks
        assert masks is not None and masks[1] is None
        assert masks[0] is not None and masks[0]({"amount": 11}) and not masks[0]({"amount": 9})

    def test_a_mask_that_also_feeds_a_composite_event_walks_the_graph(
        self, det: LocalEventDetector
    ) -> None:
        det.rule("big", "E1[amount > 10]", action=print)
        det.rule("seq", "E1[amount > 10] ; E2", action=print)
        assert _direct(det, "E1") is None

    def test_deleting_the_composite_rule_gives_the_channel_its_list(
        self, det: LocalEventDetector
    ) -> None:
        r1 = det.rule("r1", "E1", action=print)
        seq = det.rule("seq", "E1 ; E2", action=print)
        assert _direct(det, "E1") is None
        seq.delete()
        assert _direct(det, "E1") == (r1._subscription,)
        r1.disable()
        assert _direct(det, "E1") is None


class TestOrder:
    def test_priority_first_then_order_of_definition(self, det: LocalEventDetector) -> None:
        log: list[str] = []
        for name, prio in (("a", 0), ("b", 5), ("c", -1), ("d", 5), ("e", 0)):
            det.rule(name, "E1", action=_recorder(log, name), priority=prio)
        det.signal("E1")
        assert log == ["b", "d", "a", "e", "c"]

    def test_mixed_with_composite_rules_on_the_same_signal(self, det: LocalEventDetector) -> None:
        log: list[str] = []
        det.rule("low", "E1", action=_recorder(log, "low"), priority=-1)
        det.rule("seq", "E2 ; E1", action=_recorder(log, "seq"), priority=3)
        det.rule("or", "E1 | E3", action=_recorder(log, "or"), priority=3)
        det.rule("high", "E1", action=_recorder(log, "high"), priority=9)
        det.rule("mid", "E1", action=_recorder(log, "mid"), priority=3)
        det.signal("E2")
        det.signal("E1")
        assert log == ["high", "seq", "or", "mid", "low"]

    def test_priorities_across_the_direct_channel_and_nested_signals(
        self, det: LocalEventDetector
    ) -> None:
        # The action of the first rule signals E2: its rules run depth-first,
        # before the second rule on E1.
        log: list[str] = []
        det.rule("first", "E1", action=lambda o: (log.append("first"), det.signal("E2")))
        det.rule("second", "E1", action=_recorder(log, "second"), priority=-5)
        det.rule("nested", "E2", action=_recorder(log, "nested"))
        det.signal("E1")
        assert log == ["first", "nested", "second"]


class TestChangesDuringAnInstant:
    def test_a_rule_disabled_by_an_earlier_one_does_not_run(self, det: LocalEventDetector) -> None:
        log: list[str] = []
        later = det.rule("later", "E1", action=_recorder(log, "later"))
        first = det.rule("first", "E1", action=lambda o: later.disable(), priority=1)
        det.signal("E1")
        assert log == []
        first.delete()
        later.enable()
        det.signal("E1")
        assert log == ["later"]

    def test_a_rule_deleted_by_an_earlier_one_does_not_run(self, det: LocalEventDetector) -> None:
        log: list[str] = []
        later = det.rule("later", "E1", action=_recorder(log, "later"))
        det.rule("first", "E1", action=lambda o: later.delete(), priority=1)
        det.signal("E1")
        det.signal("E1")
        assert log == []
        assert "later" not in det.rules

    def test_a_rule_enabled_during_the_instant_runs_from_the_next_signal(
        self, det: LocalEventDetector
    ) -> None:
        log: list[str] = []
        new = det.rule("new", "E1", action=_recorder(log, "new"), enabled=False)
        det.rule("first", "E1", action=lambda o: (log.append("first"), new.enable()), priority=1)
        det.signal("E1")
        assert log == ["first"]
        det.signal("E1")
        assert log == ["first", "first", "new"]

    def test_a_composite_rule_added_during_the_instant(self, det: LocalEventDetector) -> None:
        log: list[str] = []

        def add(occ: Any) -> None:
            log.append("first")
            if "seq" not in det.rules:
                det.rule("seq", "E1 ; E2", action=_recorder(log, "seq"))

        det.rule("first", "E1", action=add)
        det.signal("E1")  # the channel's list, then the graph for the next signals
        det.signal("E1")
        det.signal("E2")
        assert log == ["first", "first", "seq"]


class TestCouplingModes:
    def test_detached_rules_wait_for_the_commit(self, det: LocalEventDetector) -> None:
        log: list[str] = []
        det.rule("later", "E1", action=_recorder(log, "detached"), coupling="detached")
        det.rule("now", "E1", action=_recorder(log, "immediate"))
        assert _direct(det, "E1") is not None
        with det.transaction():
            det.signal("E1")
            assert log == ["immediate"]
        assert log == ["immediate", "detached"]

    def test_a_dependent_detached_rule_does_not_run_after_an_abort(
        self, det: LocalEventDetector
    ) -> None:
        log: list[str] = []
        det.rule("dep", "E1", action=_recorder(log, "dep"), coupling="detached")
        det.rule("indep", "E1", action=_recorder(log, "indep"), coupling="detached_independent")
        with pytest.raises(RuntimeError), det.transaction():
            det.signal("E1")
            raise RuntimeError("abort")
        assert log == ["indep"]

    def test_a_deferred_rule_runs_once_at_pre_commit(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("net", "E1", action=seen.append, coupling="deferred")
        det.rule("now", "E1", action=lambda o: seen.append("immediate"))
        with det.transaction():
            det.signal("E1", n=1)
            det.signal("E1", n=2)
            assert seen == ["immediate", "immediate"]
        assert len(seen) == 3
        assert [p.params["n"] for p in seen[2].parts] == [1, 2]


class TestCascadesScopesAndObservers:
    def test_the_cascade_limit_holds_through_the_direct_path(self) -> None:
        det = LocalEventDetector(cascade_limit=4)
        det.explicit("ping")
        runs: list[int] = []
        det.rule("loop", "ping", action=lambda o: (runs.append(1), det.signal("ping")))
        assert _direct(det, "ping") is not None
        with pytest.raises(CascadeLimitError, match="'loop'") as info:
            det.signal("ping")
        assert info.value.limit == 4 and len(runs) == 4
        assert det.scheduler.depth == 0
        det.get_rule("loop").disable()
        det.signal("ping")  # the depth was restored: no error

    def test_the_cascade_error_names_the_highest_priority_rule(self) -> None:
        det = LocalEventDetector(cascade_limit=1)
        det.explicit("ping")
        det.rule("low", "ping", action=lambda o: det.signal("ping"))
        det.rule("high", "ping", action=print, priority=2)
        with pytest.raises(CascadeLimitError, match="'high'"):
            det.signal("ping")

    def test_signals_in_a_condition_are_muted(self, det: LocalEventDetector) -> None:
        log: list[str] = []
        det.rule("nested", "E2", action=_recorder(log, "nested"))

        def cond(occ: Any) -> bool:
            assert det.signal("E2") is None
            return True

        det.rule("r", "E1", cond, action=_recorder(log, "r"))
        det.signal("E1")
        assert log == ["r"]

    def test_actions_signal_in_the_triggering_transaction(self, det: LocalEventDetector) -> None:
        scopes: list[Any] = []
        det.rule("r", "E1", action=lambda o: scopes.append(det.signal("E2").scope))
        with det.transaction() as scope:
            det.signal("E1")
        assert scopes == [scope.id]

    def test_rule_run_observers_see_every_run(self, det: LocalEventDetector) -> None:
        seen: list[tuple[str, str]] = []
        listen(det, "rule_run", lambda rule, occ, status, err: seen.append((rule.name, status)))
        det.rule("no", "E1", lambda o: False, action=print)
        det.rule("yes", "E1", action=lambda o: None, priority=1)
        det.signal("E1")
        assert seen == [("yes", "fired"), ("no", "condition_false")]

    def test_rule_run_observers_see_failures_with_the_error_raised(
        self, det: LocalEventDetector
    ) -> None:
        """The runners report to ``rule_run`` themselves (no call of
        ``Scheduler.run``): a failing condition or action is reported as
        ``failed`` with the very error that reaches the signaller, a
        sentinel error unwrapped."""
        seen: list[tuple[str, str, Any]] = []
        listen(
            det, "rule_run", lambda rule, occ, status, err: seen.append((rule.name, status, err))
        )

        def boom(_: Any) -> bool:
            raise ValueError("cond")

        det.rule("cond", "E1", boom, action=print)
        with pytest.raises(RuleError) as cond_err:
            det.signal("E1")
        det.get_rule("cond").delete()
        det.rule("act", "E1", action=lambda o: 1 / 0)
        with pytest.raises(RuleError) as act_err:
            det.signal("E1")
        det.get_rule("act").delete()
        det.rule("mine", "E1", action=lambda o: det.signal("nobody"))
        with pytest.raises(UnknownEventError) as own_err:
            det.signal("E1")
        assert [(n, s) for n, s, _ in seen] == [
            ("cond", "failed"), ("act", "failed"), ("mine", "failed")
        ]  # fmt: skip
        assert seen[0][2] is cond_err.value and cond_err.value.phase == "condition"
        assert seen[1][2] is act_err.value and act_err.value.phase == "action"
        assert seen[2][2] is own_err.value

    def test_rule_run_observers_see_deferred_runs(self, det: LocalEventDetector) -> None:
        """A deferred rule runs through ``Scheduler.run`` (the same function
        as an immediate rule's runner): reported alike."""
        seen: list[tuple[str, str]] = []
        listen(det, "rule_run", lambda rule, occ, status, err: seen.append((rule.name, status)))
        det.rule("later", "E1", lambda o: len(o.parts) == 2, action=print, coupling="deferred",
                 context="cumulative")  # fmt: skip
        det.rule("never", "E1", lambda o: False, action=print, coupling="deferred")
        with det.transaction():
            det.signal("E1")
            det.signal("E1")
            assert seen == []
        assert sorted(seen) == [("later", "fired"), ("never", "condition_false")]

    def test_masked_rules_run_only_for_what_the_mask_passes(self, det: LocalEventDetector) -> None:
        log: list[tuple[str, int]] = []
        det.rule("big", "E1[amount > 10]", action=lambda o: log.append(("big", o.params["amount"])))
        det.rule(
            "any", "E1", action=lambda o: log.append(("any", o.params.get("amount"))), priority=-1
        )
        det.rule(
            "small",
            "E1[amount <= 10]",
            action=lambda o: log.append(("small", o.params["amount"])),
            priority=1,
        )
        det.signal("E1", amount=5)
        det.signal("E1", amount=50)
        det.signal("E1")  # no amount: both masks are false
        assert log == [("small", 5), ("any", 5), ("big", 50), ("any", 50), ("any", None)]
        log.clear()
        det.get_rule("any").disable()
        det.signal("E1")  # nothing passes: nobody runs
        assert log == []

    def test_a_plain_detector_delivers_to_subscriptions(self) -> None:
        det = EventDetector()
        det.explicit("E1")
        seen: list[int] = []
        det.subscribe("E1", lambda occ: seen.append(occ.t_occ))
        assert _direct(det, "E1") is not None
        det.signal("E1")
        det.signal("E1")
        assert seen == [1, 2]

    def test_a_scheduler_that_delivers_its_own_way_still_gets_the_detections(self) -> None:
        delivered: list[int] = []

        class Counting(Scheduler):
            def deliver(self, items: list[Any], scope: Any) -> None:
                delivered.append(len(items))
                super().deliver(items, scope)

        class Det(LocalEventDetector):
            scheduler_class = Counting

        det = Det()
        det.explicit("E1")
        log: list[str] = []
        det.rule("a", "E1", action=_recorder(log, "a"))
        det.rule("b", "E1", action=_recorder(log, "b"), priority=1)
        det.signal("E1")
        assert delivered == [2] and log == ["b", "a"]


def _random_run(seed: int) -> list[Any]:
    """Rules on primitives, masks and composites with random priorities, enabled
    and disabled by each other's actions, fed random signals; returns what ran."""
    rng = random.Random(seed)
    det = LocalEventDetector()
    names = ("E1", "E2", "E3")
    for n in names:
        det.explicit(n)
    log: list[Any] = []
    texts = ["E1", "E1", "E2", "E1[x > 2]", "E2[x <= 1]", "E3", "E1 ; E2", "E1 | E3", "E2 ^ E3"]
    rules = []
    for i in range(rng.randrange(3, 9)):
        text = rng.choice(texts)
        name = f"r{i}"
        flip = rng.random() < 0.3

        def act(occ: Any, name: str = name, flip: bool = flip) -> None:
            log.append((name, occ.t_occ))
            if flip:
                other = rules[rng.randrange(len(rules))]
                (other.disable if other.enabled else other.enable)()

        cond = None if rng.random() < 0.7 else (lambda occ: occ.t_occ % 2 == 0)
        rules.append(det.rule(name, text, cond, action=act, priority=rng.randrange(-2, 3)))
    for _ in range(40):
        det.signal(rng.choice(names), x=rng.randrange(5))
    return log


@pytest.mark.parametrize("seed", range(25))
def test_random_rule_sets_run_as_through_the_graph(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = _random_run(seed)
    monkeypatch.setattr(EventGraph, "compile", False)
    assert _random_run(seed) == direct


def test_a_condition_whose_result_has_no_truth_value_fails_as_the_condition() -> None:
    """A condition returning an object whose bool() raises (a numpy array, a
    pandas Series): RuleError naming the rule and the condition (the bare
    ValueError escaped, naming no rule)."""

    class Ambiguous:
        def __bool__(self) -> bool:
            raise ValueError("truth value is ambiguous")

    det = LocalEventDetector()
    det.explicit("e")
    det.rule("check", "e", lambda occ: Ambiguous(), action=print)
    with pytest.raises(RuleError, match="'check' failed in its condition: ValueError"):
        det.signal("e")
