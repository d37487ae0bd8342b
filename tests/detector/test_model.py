"""The detector against independent models, on random expressions and histories.

``model.py`` transcribes Appendix A (recent, chronicle, continuous, cumulative);
``oracle.py`` computes the unrestricted context from the definitions of 2.2.1.
Neither shares code with the event graph. Expressions use every operator (OR, AND,
SEQ, ANY, A, A*, NOT, ``by k``); histories include instants that reach several
leaves at once (one signal on channel S is an occurrence of the class-level-like
leaf S and, when it carries selector x, of the instance-level-like leaf Sx), and
parameters for partitions. Each example runs the four contexts on one detector.

P and P* are not modelled here (their ticks come from the detector's timers; see
tests/temporal/test_contexts.py for them in every context).
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import A, Astar, Context, LocalEventDetector, Not, Primitive
from sentinel import Any as AnyOf
from sentinel.algebra import expressions as ex
from tests.detector import model
from tests.detector.model import Signal
from tests.detector.oracle import unrestricted

S_ANY = Primitive("S", label="S")
S_X = Primitive("S", selector="x", label="Sx")
LEAVES = [Primitive("E1"), Primitive("E2"), Primitive("E3"), S_ANY, S_X]
leaves = st.sampled_from(LEAVES)


OPERATORS = ["|", "^", ";", "ANY", "A", "A*", "NOT", "by"]


@st.composite
def expressions(draw: st.DrawFn, depth: int = 3, top: bool = True) -> ex.Expression:
    """An expression of at most ``depth`` levels of operators (operands are
    operators more often than leaves, so nesting is common)."""
    if depth == 0 or (not top and draw(st.integers(0, 3)) == 0):
        return draw(leaves)
    op = draw(st.sampled_from(OPERATORS))
    sub = expressions(depth - 1, False)
    if op == "by":
        return draw(sub).by("k")
    if op == "ANY":
        operands = draw(st.lists(sub, min_size=2, max_size=3, unique=True))
        return AnyOf(draw(st.integers(1, len(operands))), *operands)
    if op in ("|", "^", ";"):
        a, b = draw(sub), draw(sub)
        return a | b if op == "|" else a & b if op == "^" else a >> b
    a, b, c = draw(sub), draw(sub), draw(sub)
    return A(a, b, c) if op == "A" else Astar(a, b, c) if op == "A*" else Not(b, a, c)


#: (channel, selectors, k): k None means the signal has no parameter k.
steps = st.tuples(
    st.sampled_from(["E1", "E2", "E3", "S"]),
    st.sampled_from([(), ("x",), ("y",)]),
    st.sampled_from([None, 0, 1]),
)
histories = st.lists(steps, min_size=4, max_size=14)
variants = st.tuples(st.booleans(), st.booleans())


@cache
def _text(e: ex.Expression) -> str:
    return str(e)


def tree(occ: Any) -> Any:
    """A detection as the models write it (``tests.helpers.tree``, with the
    expressions' texts cached: thousands of examples print the same few)."""
    if len(occ) == 8:
        return occ.t_occ
    return (_text(occ.expression), tuple(tree(p) for p in occ.parts))


CONTEXTS = [Context.RECENT, Context.CHRONICLE, Context.CONTINUOUS, Context.CUMULATIVE]


def run_detector(
    rules: dict[str, tuple[ex.Expression, Context]],
    history: list[Any],
    variant: tuple[bool, bool] = (True, True),
) -> tuple[dict[str, list[Any]], list[Signal]]:
    """Signal ``history`` on a detector with one rule per entry; return each rule's
    detections (as trees) and the history as the models read it. ``variant``:
    whether leaves are compiled (codegen.py) and whether rules flush (per-scope
    or process-wide state); neither may change a detection."""
    compiled, flush = variant
    det = LocalEventDetector()
    det.graph.compile = compiled
    for name in ("E1", "E2", "E3"):
        det.explicit(name)
    det.define_primitive(S_ANY)
    det.define_primitive(S_X)
    found: dict[str, list[Any]] = {name: [] for name in rules}
    for name, (expr, context) in rules.items():
        det.rule(
            name,
            expr,
            action=lambda o, out=found[name]: out.append(tree(o)),
            context=context,
            flush=flush,
        )
    signals = []
    for channel, selectors, k in history:
        params = {} if k is None else {"k": k}
        sel = selectors if channel == "S" else ()
        occ = det.notify(det.channel(channel), dict(params), selectors=sel)
        assert occ is not None
        signals.append(Signal(occ.t_occ, channel, sel, params))
    return found, signals


def same(found: list[Any], expected: list[Any]) -> bool:
    """Equal as multisets (the order within one instant is not specified)."""
    return Counter(found) == Counter(expected)


SETTINGS = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(expressions(), histories, variants)
def test_every_context_detects_what_appendix_a_detects(
    expr: ex.Expression, history: list[Any], variant: tuple[bool, bool]
) -> None:
    """Fragment: every expression, every history (recent, chronicle, continuous,
    cumulative at once: 2,000 cases each)."""
    found, signals = run_detector({c.value: (expr, c) for c in CONTEXTS}, history, variant)
    for c in CONTEXTS:
        expected = model.detect(expr, signals, c.value)
        assert same(found[c.value], expected), c


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(), histories, variants)
def test_unrestricted_detection_equals_the_definitions(
    expr: ex.Expression, history: list[Any], variant: tuple[bool, bool]
) -> None:
    """Fragment: every expression. The unrestricted context is the definitions."""
    found, signals = run_detector({"u": (expr, Context.UNRESTRICTED)}, history, variant)
    assert same(found["u"], unrestricted(expr, signals))


@pytest.mark.explore
@settings(max_examples=6_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(4), st.lists(steps, min_size=4, max_size=24), variants)
def test_every_context_detects_what_appendix_a_detects_at_length(
    expr: ex.Expression, history: list[Any], variant: tuple[bool, bool]
) -> None:
    found, signals = run_detector({c.value: (expr, c) for c in CONTEXTS}, history, variant)
    for c in CONTEXTS:
        assert same(found[c.value], model.detect(expr, signals, c.value)), c


@pytest.mark.explore
@settings(max_examples=2_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(), st.lists(steps, min_size=4, max_size=16), variants)
def test_unrestricted_detection_equals_the_definitions_at_length(
    expr: ex.Expression, history: list[Any], variant: tuple[bool, bool]
) -> None:
    found, signals = run_detector({"u": (expr, Context.UNRESTRICTED)}, history, variant)
    assert same(found["u"], unrestricted(expr, signals))


E1, E2 = Primitive("E1"), Primitive("E2")
SHARED = [E1 & S_ANY, E1 & E2, E1 >> E2]

_E3 = Primitive("E3")
KEYED = [
    (E1 | E2).by("k"),
    (E1 & E2).by("k"),
    (E1 >> E2).by("k"),
    AnyOf(2, E1, E2, _E3).by("k"),
    A(E1, E2, _E3).by("k"),
    Astar(E1, E2, _E3).by("k"),
    Not(E2, E1, _E3).by("k"),
]


@pytest.mark.parametrize("variant", [(True, True), (False, True)], ids=["compiled", "wired"])
@pytest.mark.parametrize("expr", KEYED, ids=str)
def test_each_operand_may_open_a_partition(expr: ex.Expression, variant: tuple[bool, bool]) -> None:
    """Every operator inside ``by k``, with each of its operands' events the first
    to reach a new key (every order of E1, E2, E3 on key 1, then again on key 0
    after key 1's partition may have been released): a partition is made, or
    rightly not made, whichever operand opens it (the random histories above
    reach a new key through a given operand too rarely to be sure of it)."""
    from itertools import permutations

    for order in permutations(["E1", "E2", "E3"]):
        history = [(name, (), 1) for name in order] + [(name, (), 0) for name in order]
        history += [(name, (), 1) for name in reversed(order)]
        found, signals = run_detector({c.value: (expr, c) for c in CONTEXTS}, history, variant)
        for c in CONTEXTS:
            assert same(found[c.value], model.detect(expr, signals, c.value)), (order, c)
        found, signals = run_detector({"u": (expr, Context.UNRESTRICTED)}, history, variant)
        assert same(found["u"], unrestricted(expr, signals)), (order, "unrestricted")


@pytest.mark.parametrize("variant", [(True, True), (False, True), (False, False)])
@pytest.mark.parametrize("expr", [x | x for x in SHARED] + [x & x for x in SHARED], ids=str)
def test_one_sub_expression_on_both_operands(
    expr: ex.Expression, variant: tuple[bool, bool]
) -> None:
    """One node feeds both operands: each of its detections is one occurrence of
    the OR, and the AND never pairs it with itself (a handler that gave each
    output a copy of its detection would make the OR detect twice and the AND
    pair a detection with its copy)."""
    history = [
        ("E1", (), None),
        ("S", ("x",), None),
        ("E2", (), None),
        ("E1", (), None),
        ("S", ("y",), None),
        ("E2", (), None),
    ]
    found, signals = run_detector({c.value: (expr, c) for c in CONTEXTS}, history, variant)
    for c in CONTEXTS:
        expected = model.detect(expr, signals, c.value)
        assert expected, c
        assert same(found[c.value], expected), c
