"""Ode events and masks are ordinary events: online detections == local replay,
in every coupling mode and context, keyed, across transactions (the Spark engine:
tests/replay/test_ode.py, beside the test session's SparkSession).

Rules are Snoop text (tests/replay/workload.py rebuilds them on each side), with
Ode expressions embedded as ``ode{...}`` and masks in brackets; the workload's
events carry parameters k (0-3) and v (0-9).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import Context, Coupling, Primitive
from sentinel.ode import terms as tm
from sentinel.replay import log_table, replay
from tests.replay.test_equivalence import steps
from tests.replay.workload import EVENTS, Online, RuleSpec, build, replayed, run_steps

UNIVERSE = "over (E1, E2, E3, E4, N1)"
letters = st.one_of(
    st.sampled_from(EVENTS).map(lambda n: tm.Letter(Primitive(n))),
    st.tuples(st.sampled_from(EVENTS), st.sampled_from(["v > 4", "k == 1"])).map(
        lambda p: tm.Letter(Primitive(p[0]).where(p[1]))
    ),
    st.just(tm.ANY),
)


def _extend(kids: st.SearchStrategy[tm.Term]) -> st.SearchStrategy[tm.Term]:
    two = st.tuples(kids, kids)
    return st.one_of(
        two.map(lambda p: tm.Conj(*p)),
        kids.map(tm.Neg),
        two.map(lambda p: tm.Rel(*p)),
        two.map(lambda p: tm.Disj(*p)),
        two.map(lambda p: tm.Prior(*p)),
        two.map(lambda p: tm.Sequence(*p)),
        two.map(lambda p: tm.Pipe(*p)),
        two.map(lambda p: tm.AfterEach(*p)),
        st.tuples(st.integers(1, 3), kids).map(lambda p: tm.Every(*p)),
    )


def _ode_text(term: tm.Term, universe: bool) -> str:
    return "ode{" + str(term) + (f" {UNIVERSE}" if universe else "") + "}"


@st.composite
def events(draw: st.DrawFn) -> str:
    term = draw(st.recursive(letters, _extend, max_leaves=4))
    if not list(term.letters()):
        term = tm.Conj(term, tm.Letter(Primitive(draw(st.sampled_from(EVENTS)))))
    text = _ode_text(term, draw(st.booleans()))
    shape = draw(st.integers(0, 5))
    if shape == 1:
        return f"({text}) by k"
    if shape == 2:
        return f"E1[v > 2] ; {text}"
    if shape == 3:
        return f"A*(E1, {text}, E3)"
    if shape == 4:
        return draw(st.sampled_from(FIXED))
    return text


FIXED = [
    "ode{prior(E1(k = I), E2(k = I))}",
    "ode{relative(E1(k = I), !before(E3(k = I))) ^ E2(k = I) over (E1, E2, E3, E4)}",
    "ode{exists x: prior(E1 = x, E2) ^ !relative(x, prior(E3, E2))}",
    "E2[v > 5] ^ E3[k == 1 or v < 2]",
    "ode{(E1 || E2) | sequence(E2, E2, E2)} by @source",
]


@st.composite
def rule_specs(draw: st.DrawFn) -> list[RuleSpec]:
    specs = []
    for i in range(draw(st.integers(1, 3))):
        coupling = draw(st.sampled_from(list(Coupling)))
        flush = coupling is Coupling.DEFERRED or draw(st.booleans())
        specs.append(
            RuleSpec(
                f"r{i}",
                draw(events()),
                draw(st.sampled_from(list(Context))).value,
                coupling.value,
                draw(st.sampled_from(["none", "even", "many"])),
                flush=flush,
            )
        )
    return specs


def _online(specs: list[RuleSpec], workload: list[Any]) -> Online:
    online = Online(build(specs))
    run_steps(online, workload)
    return online


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(rule_specs(), steps)
def test_local_replay_finds_what_ran_online(specs: list[RuleSpec], workload: list[Any]) -> None:
    online = _online(specs, workload)
    result = replay(log_table(online.rows), build(specs))
    assert replayed(result.rows()) == sorted(online.detections)


def test_every_coupling_and_flush_detects_and_replays() -> None:
    specs = [
        RuleSpec(f"{shape}_{c.value}_{f}", text, "recent", c.value, flush=f)
        for shape, text in enumerate(FIXED)
        for c in Coupling
        for f in (True, False)
        if not (c is Coupling.DEFERRED and not f)
    ]
    import random

    from tests.replay.workload import random_steps

    online = _online(specs, list(random_steps(random.Random(3), 40, size=12)))
    fired = {d[0] for d in online.detections}
    assert len(fired) >= len(specs) * 3 // 4  # most rules fired at least once
    result = replay(log_table(online.rows), build(specs))
    assert replayed(result.rows()) == sorted(online.detections)
