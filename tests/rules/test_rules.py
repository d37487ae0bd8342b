"""Rules: definition, scheduling by priority, nesting, cascades, conditions,
trigger modes, enabling and the per-context counters."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import (
    Context,
    Coupling,
    LocalEventDetector,
    RuleDefinitionError,
    RuleError,
    SnoopSyntaxError,
    TriggerMode,
)
from sentinel.errors import CascadeLimitError, UnknownEventError


@pytest.fixture
def det() -> LocalEventDetector:
    d = LocalEventDetector()
    for name in ("E1", "E2", "E3", "E4"):
        d.explicit(name)
    return d


class TestDefinition:
    def test_python_expression_and_text_are_the_same_node(self, det: LocalEventDetector) -> None:
        e1, e2, e3 = (det.event(n) for n in ("E1", "E2", "E3"))
        r1 = det.rule("r1", (e1 & e2) >> e3, action=print)
        r2 = det.rule("r2", "(E1 ^ E2) ; E3", action=print)
        assert r1.event == r2.event
        # one handler per distinct sub-expression in the recent context
        assert len(det.graph.handlers) == 2

    def test_context_given_as_string(self, det: LocalEventDetector) -> None:
        r = det.rule("r", "E1 ; E2", action=print, context="chronicle")
        assert r.context is Context.CHRONICLE

    def test_decorator_form_returns_the_rule(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []

        @det.rule("r", "E1 ; E2", context=Context.CONTINUOUS)
        def r(occ: Any) -> None:
            seen.append(occ)

        det.signal("E1")
        det.signal("E2")
        assert r.name == "r" and r.action is not None
        assert len(seen) == 1

    def test_action_receives_constituents_with_their_parameters(
        self, det: LocalEventDetector
    ) -> None:
        seen: list[Any] = []
        det.rule("r", "E1 ; E2", action=seen.append)
        det.signal("E1", qty=3)
        det.signal("E2", qty=4, who="x")
        (occ,) = seen
        assert occ.t_occ == 2
        assert [c.event for c in occ.constituents] == ["E1", "E2"]
        assert [dict(c.params) for c in occ.constituents] == [{"qty": 3}, {"qty": 4, "who": "x"}]
        assert occ.values("qty") == (3, 4)
        assert occ.of("E2")[0].params["who"] == "x"

    def test_named_composite_usable_in_text(self, det: LocalEventDetector) -> None:
        det.define("pair", "E1 ^ E2")
        seen: list[Any] = []
        det.rule("r", "pair ; E3", action=seen.append)
        det.signal("E2")
        det.signal("E1")
        det.signal("E3")
        assert len(seen) == 1

    def test_rule_on_a_primitive_event(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule("r", "E1", action=seen.append)
        det.signal("E1", a=1)
        assert seen[0].params["a"] == 1


class TestBadDefinitions:
    def test_unknown_event_names_the_event(self, det: LocalEventDetector) -> None:
        with pytest.raises(UnknownEventError, match="'E9'") as info:
            det.rule("r", "E1 ; E9", action=print)
        assert info.value.name == "E9"

    def test_unknown_event_suggests_close_names(self, det: LocalEventDetector) -> None:
        with pytest.raises(UnknownEventError, match="did you mean 'E1'"):
            det.rule("r", "E11", action=print)

    def test_malformed_text_has_position(self, det: LocalEventDetector) -> None:
        with pytest.raises(SnoopSyntaxError) as info:
            det.rule("r", "E1 ; ; E2", action=print)
        assert (info.value.line, info.value.column) == (1, 6)

    def test_signal_of_undefined_event(self, det: LocalEventDetector) -> None:
        with pytest.raises(UnknownEventError, match="signal"):
            det.signal("nope")

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"context": "sometimes"}, "unknown parameter context"),
            ({"coupling": "eventually"}, "unknown coupling mode"),
            ({"trigger_mode": "later"}, "unknown trigger mode"),
            ({"priority": "vip"}, "unknown priority class"),
            ({"priority": 1.5}, "priority must be"),
            ({"coupling": "deferred", "flush": False}, "cannot opt out of flushing"),
            ({"action": 42}, "action must be callable"),
            ({"condition": "yes"}, "condition must be callable"),
        ],
    )
    def test_bad_options_are_rejected_and_nothing_is_applied(
        self, det: LocalEventDetector, kwargs: dict[str, Any], message: str
    ) -> None:
        before = det.graph.describe()
        opts: dict[str, Any] = {"action": print, **kwargs}
        with pytest.raises(RuleDefinitionError, match=message):
            det.rule("r", "E1 ; E2", **opts)
        assert det.graph.describe() == before
        assert "r" not in det.rules

    def test_duplicate_rule_name(self, det: LocalEventDetector) -> None:
        det.rule("r", "E1", action=print)
        with pytest.raises(RuleDefinitionError, match="already exists"):
            det.rule("r", "E2", action=print)


class TestScheduling:
    def test_higher_priority_runs_first_ties_in_order_of_triggering(
        self, det: LocalEventDetector
    ) -> None:
        order: list[str] = []
        for name, prio in [("low", 1), ("a", 5), ("high", 9), ("b", 5)]:
            det.rule(name, "E1", action=lambda o, n=name: order.append(n), priority=prio)
        det.signal("E1")
        assert order == ["high", "a", "b", "low"]

    def test_named_priority_classes(self) -> None:
        det = LocalEventDetector(priority_classes={"integrity": 100, "audit": 1})
        det.explicit("E")
        order: list[str] = []
        det.rule("audit", "E", action=lambda o: order.append("audit"), priority="audit")
        det.rule("check", "E", action=lambda o: order.append("check"), priority="integrity")
        det.signal("E")
        assert order == ["check", "audit"]

    def test_nested_rules_run_depth_first(self, det: LocalEventDetector) -> None:
        order: list[str] = []

        def outer(occ: Any) -> None:
            order.append("outer:start")
            det.signal("E2")
            order.append("outer:end")

        det.rule("outer", "E1", action=outer, priority=10)
        det.rule("sibling", "E1", action=lambda o: order.append("sibling"), priority=1)
        det.rule("nested", "E2", action=lambda o: order.append("nested"))
        det.signal("E1")
        assert order == ["outer:start", "nested", "outer:end", "sibling"]

    def test_cascade_deeper_than_the_limit_raises_naming_the_rule(self) -> None:
        det = LocalEventDetector(cascade_limit=5)
        det.explicit("ping")
        det.rule("loop", "ping", action=lambda o: det.signal("ping"))
        with pytest.raises(CascadeLimitError, match="'loop'") as info:
            det.signal("ping")
        assert info.value.limit == 5

    def test_cascade_error_aborts_the_transaction(self) -> None:
        det = LocalEventDetector(cascade_limit=3)
        det.explicit("ping")
        aborted: list[Any] = []
        det.rule("loop", "ping", action=lambda o: det.signal("ping"))
        det.rule("on_abort", "txn:abort", action=aborted.append)
        with pytest.raises(CascadeLimitError), det.transaction():
            det.signal("ping")
        assert len(aborted) == 1

    def test_a_cascade_within_the_limit_completes(self) -> None:
        det = LocalEventDetector(cascade_limit=10)
        det.explicit("tick")
        seen: list[int] = []

        def again(occ: Any) -> None:
            seen.append(occ.params["n"])
            if occ.params["n"] < 9:
                det.signal("tick", n=occ.params["n"] + 1)

        det.rule("again", "tick", action=again)
        det.signal("tick", n=0)
        assert seen == list(range(10))

    def test_action_error_names_rule_keeps_cause_and_stops_the_instant(
        self, det: LocalEventDetector
    ) -> None:
        ran: list[str] = []

        def boom(occ: Any) -> None:
            raise ValueError("bad data")

        det.rule("first", "E1", action=boom, priority=2)
        det.rule("second", "E1", action=lambda o: ran.append("second"), priority=1)
        with pytest.raises(RuleError, match=r"'first'.*action.*bad data") as info:
            det.signal("E1")
        assert isinstance(info.value.__cause__, ValueError)
        assert info.value.rule == "first" and info.value.phase == "action"
        assert ran == []

    def test_condition_error_is_wrapped_too(self, det: LocalEventDetector) -> None:
        det.rule("r", "E1", condition=lambda o: 1 / 0, action=print)
        with pytest.raises(RuleError, match="condition") as info:
            det.signal("E1")
        assert isinstance(info.value.__cause__, ZeroDivisionError)

    def test_action_error_aborts_the_transaction_and_leaves_nothing(
        self, det: LocalEventDetector
    ) -> None:
        seen: list[Any] = []
        det.rule("keep", "E1 ; E3", action=seen.append, context="chronicle")
        det.rule("fail", "E2", action=lambda o: 1 / 0)
        with pytest.raises(RuleError), det.transaction() as scope:
            det.signal("E1")
            det.signal("E2")
        assert scope.status == "aborted"
        assert det.stored() == 0
        with det.transaction():
            det.signal("E3")
        assert seen == []


class TestConditions:
    def test_false_condition_skips_the_action(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        det.rule(
            "r", "E1", condition=lambda o: o.params["qty"] > 10, action=lambda o: seen.append(o)
        )
        det.signal("E1", qty=5)
        det.signal("E1", qty=50)
        assert [o.params["qty"] for o in seen] == [50]

    def test_events_signalled_by_a_condition_are_not_detected(
        self, det: LocalEventDetector
    ) -> None:
        seen: list[Any] = []

        def nosy(occ: Any) -> bool:
            assert det.signal("E2") is None  # muted
            return True

        det.rule("cond", "E1", condition=nosy, action=lambda o: None)
        det.rule("watch", "E2", action=seen.append)
        det.signal("E1")
        assert seen == []
        det.signal("E2")  # muting ended with the condition
        assert len(seen) == 1


class TestTriggerModes:
    def _shared(self, det: LocalEventDetector) -> None:
        # An earlier rule keeps the node E1 ; E2 detecting in the recent context.
        det.rule("early", "E1 ; E2", action=lambda o: None)
        det.signal("E1")

    def test_now_ignores_constituents_from_before_the_rule(self, det: LocalEventDetector) -> None:
        self._shared(det)
        seen: list[Any] = []
        det.rule("late", "E1 ; E2", action=seen.append, trigger_mode=TriggerMode.NOW)
        det.signal("E2")
        assert seen == []
        det.signal("E1")
        det.signal("E2")
        assert len(seen) == 1

    def test_previous_accepts_constituents_from_before_the_rule(
        self, det: LocalEventDetector
    ) -> None:
        self._shared(det)
        seen: list[Any] = []
        det.rule("late", "E1 ; E2", action=seen.append, trigger_mode="previous")
        det.signal("E2")
        assert len(seen) == 1

    def test_previous_on_a_fresh_node_has_nothing_older(self, det: LocalEventDetector) -> None:
        det.signal("E1")  # before any rule: no node detects, nothing is kept
        seen: list[Any] = []
        det.rule("r", "E1 ; E2", action=seen.append, trigger_mode="previous")
        det.signal("E2")
        assert seen == []


class TestEnableDisableDelete:
    def test_disabled_rule_does_not_fire_and_reenabled_sees_only_new_events(
        self, det: LocalEventDetector
    ) -> None:
        seen: list[Any] = []
        r = det.rule("r", "E1 ; E2", action=seen.append, context="chronicle")
        det.signal("E1")
        r.disable()
        assert not r.enabled
        det.signal("E2")
        assert seen == []
        r.enable()
        det.signal("E2")
        assert seen == []  # the E1 from before went with the handler's state
        det.signal("E1")
        det.signal("E2")
        assert len(seen) == 1

    def test_context_counters_follow_rules(self, det: LocalEventDetector) -> None:
        r1 = det.rule("r1", "E1 ; E2", action=print, context="chronicle")
        r2 = det.rule("r2", "(E1 ; E2) ^ E3", action=print, context="chronicle")
        r3 = det.rule("r3", "E1 ; E2", action=print, context="recent")
        refs = {k[1].context: n for k, n in det.graph.refs.items() if str(k[0]) == "E1 ; E2"}
        assert refs == {Context.CHRONICLE: 2, Context.RECENT: 1}
        r1.disable()
        r3.delete()
        left = [k for k in det.graph.handlers if str(k[0]) == "E1 ; E2"]
        assert [k[1].context for k in left] == [Context.CHRONICLE]  # still needed by r2
        r2.disable()
        assert det.graph.handlers == {}

    def test_nodes_nobody_listens_to_keep_no_state(self, det: LocalEventDetector) -> None:
        r = det.rule("r", "E1 ; E2", action=print, context="chronicle")
        det.signal("E1")
        assert det.stored() == 1
        r.disable()
        assert det.stored() == 0
        det.signal("E1")
        assert det.stored() == 0

    def test_delete_frees_the_name(self, det: LocalEventDetector) -> None:
        r = det.rule("r", "E1", action=print)
        r.delete()
        assert "r" not in det.rules
        with pytest.raises(RuleDefinitionError, match="deleted"):
            r.enable()
        det.rule("r", "E2", action=print)

    def test_rule_disabled_by_an_earlier_rule_of_the_same_instant_does_not_run(
        self, det: LocalEventDetector
    ) -> None:
        ran: list[str] = []
        victim = det.rule("victim", "E1", action=lambda o: ran.append("victim"), priority=1)
        det.rule("killer", "E1", action=lambda o: victim.disable(), priority=9)
        det.signal("E1")
        assert ran == []

    def test_rule_created_disabled(self, det: LocalEventDetector) -> None:
        seen: list[Any] = []
        r = det.rule("r", "E1", action=seen.append, enabled=False)
        det.signal("E1")
        assert seen == [] and not r.enabled and r.coupling is Coupling.IMMEDIATE


def test_plain_subscription_receives_detections(det: LocalEventDetector) -> None:
    seen: list[Any] = []
    sub = det.subscribe("E1 ^ E2", seen.append, context="cumulative")
    det.signal("E1")
    det.signal("E1")
    det.signal("E2")
    assert [len(o.constituents) for o in seen] == [3]
    det.unsubscribe(sub)
    det.signal("E1")
    det.signal("E2")
    assert len(seen) == 1


def test_replica_has_the_rules_and_no_state(det: LocalEventDetector) -> None:
    seen: list[Any] = []
    det.define("pair", "E1 ^ E2")
    det.rule("r", "pair ; E3", action=seen.append, context="chronicle", priority=3)
    det.rule("off", "E1", action=seen.append, enabled=False)
    det.signal("E1")
    copy = det.replica()
    assert set(copy.rules) == {"r", "off"} and not copy.rules["off"].enabled
    assert copy.rules["r"].priority == 3 and copy.stored() == 0
    copy.signal("E2")
    copy.signal("E1")
    copy.signal("E3")
    assert len(seen) == 1 and det.stored() == 1


def test_inject_replays_a_logged_occurrence_with_its_clock(det: LocalEventDetector) -> None:
    from sentinel import Occurrence

    seen: list[Any] = []
    det.rule("r", "E1 ; E2", action=seen.append)
    scope = det.begin()
    det.inject(Occurrence("E1", 40, 1.0, scope=scope.id), scope)
    det.inject(Occurrence("E9", 41, 1.5, scope=scope.id), scope)  # unknown here: ignored
    det.inject(Occurrence("E2", 42, 2.0, params={"x": 1}, scope=scope.id), scope)
    (occ,) = seen
    assert [c.t_occ for c in occ.constituents] == [40, 42] and det.clock == 42


def test_a_coroutine_function_as_condition_action_or_callback_is_refused() -> None:
    """An ``async def`` condition or action was accepted and called without
    being awaited: a condition "returning False" counted as true (a coroutine
    object is truthy), an action never ran, and the firing was logged as fired.
    Rules and subscribers run inside the signal: refused when defined."""
    import functools

    det = LocalEventDetector()
    det.explicit("E")

    async def never(occ: Any) -> bool:
        return False

    async def act(occ: Any) -> None:
        pass

    class Handler:
        async def __call__(self, occ: Any) -> None:
            pass

    for kwargs in (
        {"condition": never, "action": print},
        {"action": act},
        {"action": functools.partial(act)},
        {"action": Handler()},
    ):
        with pytest.raises(RuleDefinitionError, match="coroutine function"):
            det.rule("r", "E", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="coroutine function"):
        det.subscribe("E", act)
    assert det.rules == {}
    det.rule("r", "E", condition=lambda o: False, action=print)  # plain ones are fine
