"""The paper's general claims about contexts, and properties of the graph itself
(hypothesis).

Each property says the fragment of expressions on which it is claimed; where
seeds/ERRATA.md shows the paper's general claim fails, the fragment excludes
exactly those cases (and a test pins a counterexample). Exact detection in every
context is compared with independent models in test_model.py; equivalent
spellings in test_spelling.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import A, Astar, Context, LocalEventDetector, Not, Primitive
from sentinel import Any as AnyOf
from sentinel.algebra import expressions as ex
from sentinel.detector import Channel, EventGraph
from tests.detector.oracle import unrestricted
from tests.helpers import tree

NAMES = ["E1", "E2", "E3", "E4"]
leaves = st.sampled_from(NAMES).map(Primitive)


def _extend(children: st.SearchStrategy[ex.Expression]) -> st.SearchStrategy[ex.Expression]:
    pair = st.tuples(children, children)
    triple = st.tuples(children, children, children)
    anys = st.lists(children, min_size=2, max_size=3, unique=True).flatmap(
        lambda cs: st.integers(1, len(cs)).map(lambda m: AnyOf(m, *cs))
    )
    return st.one_of(
        pair.map(lambda p: p[0] | p[1]),
        pair.map(lambda p: p[0] & p[1]),
        pair.map(lambda p: p[0] >> p[1]),
        triple.map(lambda t: A(*t)),
        triple.map(lambda t: Astar(*t)),
        triple.map(lambda t: Not(t[1], t[0], t[2])),
        anys,
    )


expressions = st.recursive(leaves, _extend, max_leaves=5).filter(
    lambda e: not isinstance(e, Primitive)
)
histories = st.lists(st.sampled_from(NAMES), min_size=2, max_size=14)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def detect(expr: ex.Expression, history: list[str], context: Context) -> list[Any]:
    det = LocalEventDetector()
    for n in NAMES:
        det.explicit(n)
    out: list[Any] = []
    det.rule("r", expr, action=out.append, context=context)
    for n in history:
        det.signal(n)
    return out


def oracle(expr: ex.Expression, history: list[str]) -> list[Any]:
    return unrestricted(expr, [(i + 1, n, {}) for i, n in enumerate(history)])


def composite_in_errata_position(e: ex.Expression) -> bool:
    """A's E3, NOT's E2 or A*'s E2 composite: where contexts leave the unrestricted
    set (ERRATA, 'general claims')."""
    for node in e.walk():
        if isinstance(node, ex.A) and not isinstance(node.end, Primitive):
            return True
        if isinstance(node, (ex.Not, ex.Astar)) and not isinstance(node.middle, Primitive):
            return True
    return False


def repeats_an_event(e: ex.Expression) -> bool:
    names = [p.name for p in e.primitives()]
    return len(names) != len(set(names))


def test_the_subset_claim_fails_for_a_composite_middle_of_not() -> None:
    # ERRATA: chronicle (B ; C) detects only (B, C1), so NOT(B ; C)[A, D] over
    # B C A C D fires although the unrestricted (B, C2) lies inside [A, D].
    expr = Not(Primitive("E2") >> Primitive("E3"), Primitive("E1"), Primitive("E4"))
    history = ["E2", "E3", "E1", "E3", "E4"]
    (occ,) = detect(expr, history, Context.CHRONICLE)
    assert tree(occ) not in set(oracle(expr, history))


def _no_reuse(detections: list[Any]) -> bool:
    used: set[int] = set()
    for occ in detections:
        mine = {c.t_occ for c in occ.constituents}
        if used & mine:
            return False
        used |= mine
    return True


@SETTINGS
@given(
    expressions.filter(
        lambda e: not repeats_an_event(e) and not any(isinstance(n, ex.Astar) for n in e.walk())
    ),
    histories,
)
def test_chronicle_uses_each_occurrence_in_one_detection(
    expr: ex.Expression, history: list[str]
) -> None:
    """Fragment: no event used twice in the expression, no A* (ERRATA: chronicle
    A* reuses an E2 shared by two open intervals)."""
    assert _no_reuse(detect(expr, history, Context.CHRONICLE))


def test_chronicle_astar_reuses_an_e2() -> None:
    expr = Astar(Primitive("E1"), Primitive("E2"), Primitive("E3"))
    found = detect(expr, ["E1", "E1", "E2", "E3", "E3"], Context.CHRONICLE)
    assert not _no_reuse(found)


@SETTINGS
@given(expressions.filter(lambda e: not repeats_an_event(e)), histories)
def test_cumulative_uses_each_occurrence_in_one_detection(
    expr: ex.Expression, history: list[str]
) -> None:
    """Fragment: no event used twice in the expression. (Cumulative detections
    can still overlap in time: ERRATA's (E1 ^ E2) ; E3 on E1 E2 E1 E3 E2 E3.)"""
    assert _no_reuse(detect(expr, history, Context.CUMULATIVE))


def test_cumulative_detections_overlap_for_nested_expressions() -> None:
    expr = (Primitive("E1") & Primitive("E2")) >> Primitive("E3")
    first, second = detect(expr, ["E1", "E2", "E1", "E3", "E2", "E3"], Context.CUMULATIVE)
    # the second detection's initiator (t=3) precedes the first's terminator (t=4)
    assert min(c.t_occ for c in second.constituents) < first.t_occ


def _shift(t: Any, by: int) -> Any:
    if isinstance(t, int):
        return t - by
    return (t[0], tuple(_shift(p, by) for p in t[1]))


@SETTINGS
@given(expressions, histories, histories, st.sampled_from(list(Context)))
def test_flushing_leaves_no_trace_in_later_detections(
    expr: ex.Expression, before: list[str], after: list[str], context: Context
) -> None:
    """Fragment: every expression, every context."""
    det = LocalEventDetector()
    for n in NAMES:
        det.explicit(n)
    out: list[Any] = []
    det.rule("r", expr, action=out.append, context=context)
    for n in before:
        det.signal(n)
    det.flush()
    assert det.stored() == 0
    del out[:]
    for n in after:
        det.signal(n)
    assert [_shift(tree(o), len(before)) for o in out] == [
        tree(o) for o in detect(expr, after, context)
    ]


# -- one occurrence, several leaves --------------------------------------------------

S_ANY = Primitive("S", label="S")
S_X = Primitive("S", selector="x", label="Sx")
CHANNEL_LEAVES = st.sampled_from([S_ANY, S_X, Primitive("E1"), Primitive("E2")])
channel_expressions = st.recursive(CHANNEL_LEAVES, _extend, max_leaves=5).filter(
    lambda e: not isinstance(e, Primitive)
)
channel_histories = st.lists(st.sampled_from(["Sx", "Sy", "E1", "E2"]), max_size=10)


def detect_on_channel(expr: ex.Expression, history: list[str], ctx: Context) -> list[Any]:
    det = LocalEventDetector()
    det.explicit("E1")
    det.explicit("E2")
    det.define_primitive(S_ANY)
    det.define_primitive(S_X)
    out: list[Any] = []
    det.rule("r", expr, action=out.append, context=ctx)
    s = det.channel("S")
    for h in history:
        if h.startswith("S"):
            det.notify(s, {}, selectors=(h[1],))
        else:
            det.signal(h)
    return [tree(o) for o in out]


@SETTINGS
@given(channel_expressions, channel_histories, st.sampled_from(list(Context)))
def test_results_do_not_depend_on_which_leaf_is_served_first(
    expr: ex.Expression, history: list[str], ctx: Context
) -> None:
    """Fragment: every expression over a class-level-like leaf S and an
    instance-level-like leaf Sx of one channel (one signal matches both)."""
    forward = detect_on_channel(expr, history, ctx)
    original = Channel.targets
    try:
        Channel.targets = lambda self, sel=(): original(self, sel)[::-1]  # type: ignore
        backward = detect_on_channel(expr, history, ctx)
    finally:
        Channel.targets = original  # type: ignore[method-assign]
    assert backward == forward


@pytest.mark.parametrize("context", list(Context))
def test_one_occurrence_matching_two_leaves_is_one_occurrence_of_or(context: Context) -> None:
    assert len(detect_on_channel(S_ANY | S_X, ["Sx", "Sy"], context)) == 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(channel_expressions, min_size=2, max_size=4),
    st.lists(st.sampled_from(["Sx", "Sy", "E1", "E2"]), min_size=4, max_size=16),
    st.sampled_from(list(Context)),
)
def test_compiled_leaves_detect_what_the_wired_graph_detects(
    exprs: list[ex.Expression], history: list[str], ctx: Context
) -> None:
    """Fragment: every expression (several rules sharing nodes), every context.
    The leaf compiler (codegen.py) inlines handlers; it must change nothing."""

    def run() -> list[Any]:
        det = LocalEventDetector()
        det.explicit("E1")
        det.explicit("E2")
        det.define_primitive(S_ANY)
        det.define_primitive(S_X)
        out: list[Any] = []
        for i, e in enumerate(exprs):
            det.rule(f"r{i}", e, action=lambda o, i=i: out.append((i, tree(o))), context=ctx)
        s = det.channel("S")
        for h in history:
            if h.startswith("S"):
                det.notify(s, {}, selectors=(h[1],))
            else:
                det.signal(h)
        return out

    compiled = run()
    EventGraph.compile = False
    try:
        wired = run()
    finally:
        EventGraph.compile = True
    assert compiled == wired
