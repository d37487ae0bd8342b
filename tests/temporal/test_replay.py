"""Replay of logs holding temporal occurrences: the online run's occurrences
(ticks and absolute events included, recorded by an occurrence listener the way
the event log records them, and round-tripped through the log's JSON) are
injected into a replica, which detects exactly what the online run detected,
without waiting and without a timer of its own ever firing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import TICK, Context, LocalEventDetector, Occurrence, ReplayClock, timers
from sentinel.detector.events import listen
from sentinel.occurrence import finished
from sentinel.params import dumps, loads
from tests.temporal.test_contexts import CASES
from tests.temporal.timeline import Timeline, replay, signature

CONTEXTS = list(Context)


def logged(log: list[Occurrence]) -> list[Occurrence]:
    """The occurrences as the event log gives them back (parameters through JSON)."""
    return [
        Occurrence(
            o.event,
            o.t_occ,
            o.timestamp,
            o.detected_timestamp,
            o.source,
            loads(dumps(o.params)),
            o.scope,
        )
        for o in log
    ]


def assert_same(tl: Timeline) -> dict[str, list[Any]]:
    rep = replay(tl.det, logged(tl.log))
    for name, online in tl.detections.items():
        assert [signature(o) for o in rep[name]] == [signature(o) for o in online], name
    return rep


@pytest.mark.parametrize("context", CONTEXTS, ids=str)
@pytest.mark.parametrize(
    ("expression", "steps"), [pytest.param(e, s, id=d[:50]) for d, e, s, _ in CASES]
)
def test_each_case_replays(expression: str, steps: list[Any], context: Context) -> None:
    tl = Timeline()
    tl.watch("r", expression, context)
    tl.run(*steps)
    assert_same(tl)


def test_transactions_process_wide_rules_absolute_events_and_samples() -> None:
    from datetime import UTC, datetime

    from sentinel import VirtualClock

    clock = VirtualClock(datetime(2024, 3, 1, 8, 59, 58, tzinfo=UTC))
    tl = Timeline(("placed", "shipped", "open", "close"), clock=clock)
    prices = iter(range(100, 10_000))
    tl.det.sampler("price", lambda: next(prices))
    tl.watch("late", "NOT(shipped)[placed, placed + [00:02:00]] by order", "chronicle", flush=False)
    tl.watch("session", "P*(open, [00:00:30] price, close)", "recent")
    tl.watch("bell", "<(09:00:00)*/*/*>")
    tl.watch("reminder", "placed + [00:00:45]", "continuous")  # per transaction
    for order in range(4):
        with tl.det.transaction():
            tl.det.signal("placed", order=order)
            tl.clock.advance(50)  # the reminder fires inside the transaction
        if order % 2:
            with tl.det.transaction():
                tl.det.signal("shipped", order=order)
        tl.clock.advance(20)
    with pytest.raises(RuntimeError), tl.det.transaction():
        tl.det.signal("placed", order=99)
        # Aborting drops the reminder (per transaction); the process-wide
        # deadline stays, as process-wide detection state does.
        raise RuntimeError("rolled back")
    tl.run("open", 95, "close", 300)
    assert [len(tl.detections[n]) for n in ("late", "session", "bell", "reminder")] == [3, 1, 1, 4]
    assert any(o.event == TICK for o in tl.log)
    assert tl.detections["session"][0].values("price") == (100, 101, 102)
    assert_same(tl)


def test_the_replica_runs_on_a_clock_that_never_fires() -> None:
    tl = Timeline()
    tl.watch("r", "E1 + [00:00:10]", "chronicle")
    tl.watch("p", "P(E1, [00:00:01], E3)", "continuous")
    tl.run("E1", 5)  # pending timers at the end of the log
    rep = tl.det.replica()
    assert rep.replaying and isinstance(timers(rep).clock, ReplayClock)
    extra: list[Occurrence] = []
    listen(rep, "occurrence", lambda o: extra.append(finished(o)))
    for occ in logged(tl.log):
        rep.inject(occ, rep.process_scope)
    assert timers(rep).pending() == 2  # still waiting, and never firing on its own
    assert extra == []


def test_a_tick_for_no_pending_timer_is_ignored() -> None:
    tl = Timeline()
    tl.watch("r", "E1 + [00:00:10]", "chronicle")
    tl.run("E1", 10)
    log = logged(tl.log)
    rep = tl.det.replica()
    seen: list[Any] = []
    rep.get_rule("r").delete()
    rep.rule("r", "E1 + [00:00:10]", action=seen.append, context="recent")  # another context
    for occ in log:
        rep.inject(occ, rep.process_scope)
    assert seen == [] and rep.clock == log[-1].t_occ


def test_lazily_decoded_parameters_are_filled_before_matching() -> None:
    class Lazy(dict[str, Any]):
        def __init__(self, real: dict[str, Any]) -> None:
            super().__init__()
            self.real = real

        def fill(self) -> None:
            self.update(self.real)

    tl = Timeline()
    tl.watch("r", "E1 + [00:00:10]")
    tl.run("E1", 10)
    rep = tl.det.replica()
    seen: list[Any] = []
    rep.get_rule("r").delete()
    rep.rule("r", "E1 + [00:00:10]", action=seen.append)
    for o in logged(tl.log):
        lazy = Lazy(dict(o.params))
        rep.inject(tuple.__new__(Occurrence, (*o[:5], lazy, o[6], None)), rep.process_scope)
    assert len(seen) == 1


# -- any history ----------------------------------------------------------------------

RULES = [
    ("rel", "E1 + [00:00:05]"),
    ("rel_seq", "(E1 ; E2) + [00:00:03]"),
    ("p", "P(E1, [00:00:02], E3)"),
    ("pstar", "P*(E2, [00:00:04], E3)"),
    ("within", "A(E1, E2, E1 + [00:00:06])"),
    ("not_within", "NOT(E2)[E1, E1 + [00:00:06]] by k"),
    ("abs", "E3 ; <(*:*:00)*/*/*>"),
]

steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["E1", "E2", "E3"]), st.sampled_from(["a", "b"])),
        st.integers(0, 9),
        st.sampled_from(["begin", "commit", "abort"]),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.sampled_from(CONTEXTS), st.booleans())
def test_any_history_replays(program: list[Any], context: Context, flush: bool) -> None:
    tl = Timeline()
    for name, text in RULES:
        tl.watch(name, text, context, flush=flush)
    scope = None
    for step in program:
        if isinstance(step, int):
            tl.clock.advance(step)
        elif step == "begin":
            if scope is None:
                scope = tl.det.begin()
        elif step in ("commit", "abort"):
            if scope is not None:
                (tl.det.commit if step == "commit" else tl.det.abort)(scope)
                scope = None
        else:
            with tl.det.use_scope(scope or tl.det.process_scope):
                tl.det.signal(step[0], k=step[1])
    if scope is not None:
        tl.det.commit(scope)
    tl.clock.advance(30)
    assert_same(tl)


def test_replica_of_a_detector_without_a_clock() -> None:
    det = LocalEventDetector()
    det.explicit("E1")
    det.rule("r", "E1 + [00:00:01]", action=print)
    rep = det.replica()
    assert isinstance(timers(rep).clock, ReplayClock)


def test_replay_events_name_what_replay_must_read_besides_primitives() -> None:
    from sentinel import parse
    from sentinel.temporal import replay_events

    assert replay_events(parse("E1 ; E2")) == frozenset()
    assert replay_events(parse("<(17:00:00)*/*/*> ; E2")) == frozenset()
    assert replay_events(parse("A(E1, E2, E1 + [00:00:01])")) == {TICK}
    assert replay_events(parse("P*(E1, [00:00:01], E3) by k")) == {TICK}
