"""One answer whatever the spelling: equivalent expressions detect the same
occurrences, in every context.

- ``E by k`` (``.by``, a rule's ``key=``, text ``by k``) is one detector of E per
  value of k over the occurrences carrying that value; ``E by @source`` the same per
  source object;
- AND and ANY do not depend on the order of their operands;
- ``E | E`` is E, wherever it stands (so ``(E1 | E1) ^ E1`` is ``E1 ^ E1``);
- ``ANY(2, a, b)`` is ``a ^ b``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import SOURCE, Context, LocalEventDetector, ObjectRef
from sentinel import Any as AnyOf
from sentinel.algebra import expressions as ex
from tests.detector.test_model import S_ANY, S_X, expressions, tree

OBJECTS = [None, ObjectRef("Obj", (1,)), ObjectRef("Obj", (2,))]

#: (channel, selectors, k, source index): k None means no parameter k.
steps = st.tuples(
    st.sampled_from(["E1", "E2", "E3", "S"]),
    st.sampled_from([(), ("x",), ("y",)]),
    st.sampled_from([None, 0, 1]),
    st.sampled_from([0, 1, 2]),
)
histories = st.lists(steps, min_size=2, max_size=12)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(
    rules: dict[str, tuple[Any, Context, dict[str, Any]]], history: list[Any]
) -> dict[str, list[Any]]:
    """Each rule's detections (as trees), positions in ``history`` as t_occ (from 1)."""
    det = LocalEventDetector()
    for name in ("E1", "E2", "E3"):
        det.explicit(name)
    det.define_primitive(S_ANY)
    det.define_primitive(S_X)
    found: dict[str, list[Any]] = {name: [] for name in rules}
    for name, (expr, context, kw) in rules.items():
        det.rule(
            name, expr, action=lambda o, out=found[name]: out.append(tree(o)), context=context, **kw
        )
    for channel, selectors, k, source in history:
        det.notify(
            det.channel(channel),
            {} if k is None else {"k": k},
            selectors=selectors if channel == "S" else (),
            source=OBJECTS[source],
        )
    return found


def renumber(t: Any, positions: list[int]) -> Any:
    """A tree over a sub-history, with t_occ mapped back to the full history's."""
    if isinstance(t, int):
        return positions[t - 1]
    return (t[0], tuple(renumber(p, positions) for p in t[1]))


def per_value(
    expr: ex.Expression, history: list[Any], value: Callable[[Any], Any]
) -> dict[Context, Counter[Any]]:
    """One unkeyed detector per value, on the occurrences carrying it, in every
    context."""
    out: dict[Context, Counter[Any]] = {c: Counter() for c in Context}
    for v in {value(s) for s in history} - {None}:
        positions = [i + 1 for i, s in enumerate(history) if value(s) == v]
        rules = {c.value: (expr, c, {}) for c in Context}
        found = run(rules, [history[p - 1] for p in positions])
        for c in Context:
            out[c].update(renumber(t, positions) for t in found[c.value])
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(), histories)
def test_partitioned_detection_is_one_detector_per_key_value(
    expr: ex.Expression, history: list[Any]
) -> None:
    """Fragment: every expression, every context, every spelling of ``by``."""
    spellings: dict[str, tuple[Any, dict[str, Any]]] = {
        "by": (expr.by("k"), {}),
        "key": (expr, {"key": "k"}),
        "text": (f"({expr}) by k", {}),
        "source": (f"({expr}) by @source", {}),
        "SOURCE": (expr, {"key": SOURCE}),
    }
    found = run(
        {f"{c.value} {s}": (e, c, kw) for c in Context for s, (e, kw) in spellings.items()},
        history,
    )
    by_k = per_value(expr, history, lambda s: None if s[2] is None else ("k", s[2]))
    by_source = per_value(expr, history, lambda s: OBJECTS[s[3]])
    for c in Context:
        for spelling in ("by", "key", "text"):
            assert Counter(found[f"{c.value} {spelling}"]) == by_k[c], (c, spelling)
        for spelling in ("source", "SOURCE"):
            assert Counter(found[f"{c.value} {spelling}"]) == by_source[c], (c, spelling)


def parts(found: list[Any]) -> Counter[Any]:
    """Detections without the root's text (two spellings print differently)."""
    return Counter(t[1] if isinstance(t, tuple) else t for t in found)


def strip(t: Any) -> Any:
    """A tree without any text: its shape and times only."""
    return t if isinstance(t, int) else tuple(strip(p) for p in t[1])


@SETTINGS
@given(expressions(2), expressions(2), histories, st.sampled_from(list(Context)))
def test_and_does_not_depend_on_the_order_of_its_operands(
    a: ex.Expression, b: ex.Expression, history: list[Any], ctx: Context
) -> None:
    found = run({"ab": (a & b, ctx, {}), "ba": (b & a, ctx, {})}, history)
    assert parts(found["ab"]) == parts(found["ba"])


@SETTINGS
@given(
    st.lists(expressions(2), min_size=2, max_size=3, unique=True),
    st.randoms(use_true_random=False),
    histories,
    st.sampled_from(list(Context)),
)
def test_any_does_not_depend_on_the_order_of_its_operands(
    operands: list[ex.Expression], rnd: Any, history: list[Any], ctx: Context
) -> None:
    m = rnd.randint(1, len(operands))
    shuffled = list(operands)
    rnd.shuffle(shuffled)
    found = run(
        {"one": (AnyOf(m, *operands), ctx, {}), "other": (AnyOf(m, *shuffled), ctx, {})}, history
    )
    assert parts(found["one"]) == parts(found["other"])


@SETTINGS
@given(expressions(2), expressions(2), histories, st.sampled_from(list(Context)))
def test_any_2_of_two_is_and(
    a: ex.Expression, b: ex.Expression, history: list[Any], ctx: Context
) -> None:
    """Fragment: every pair of distinct operands, every context (2.1.2: with m = n
    = 2, ANY's formula is AND's)."""
    if a == b:
        return
    found = run({"any": (AnyOf(2, a, b), ctx, {}), "and": (a & b, ctx, {})}, history)
    assert parts(found["any"]) == parts(found["and"])


def doubled(e: ex.Expression, at: int) -> ex.Expression:
    """``e`` with its ``at``-th sub-expression (in walk order) X replaced by X | X."""
    nodes = list(e.walk())
    target = nodes[at % len(nodes)]

    def rebuild(x: ex.Expression) -> ex.Expression:
        if x is target:
            return ex.Or(x, x)
        kids = [rebuild(c) for c in x.children]
        return x.with_children(kids) if kids else x

    return rebuild(e)


@SETTINGS
@given(expressions(), st.integers(0, 30), histories, st.sampled_from(list(Context)))
def test_e_or_e_is_e_wherever_it_stands(
    expr: ex.Expression, at: int, history: list[Any], ctx: Context
) -> None:
    """``(E1 | E1) ^ E1`` detects what ``E1 ^ E1`` detects (times and shape; the
    texts differ)."""
    found = run({"plain": (expr, ctx, {}), "doubled": (doubled(expr, at), ctx, {})}, history)
    assert Counter(map(strip, found["plain"])) == Counter(map(strip, found["doubled"]))
