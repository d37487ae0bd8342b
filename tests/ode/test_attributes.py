"""Events with attributes (6.2, appendix 3): one row of automaton state per value.

E(I) is the family {E(i)}: E with the bound parameters equal to i. The property:
the detections for each value equal the definitions applied to E(i) (the
bindings replaced by constant masks) over the whole history.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sentinel import ExpressionError, LocalEventDetector, Primitive, ode, param
from sentinel.algebra.masks import Compare, Variable
from sentinel.ode import terms as tm
from tests.ode.brute import evaluate, history
from tests.ode.helpers import History

I = Variable("I")  # noqa: E741
A, B, C = Primitive("a"), Primitive("b"), Primitive("c")

letters = st.one_of(
    st.sampled_from([A, B]).map(lambda e: tm.Letter(e, None, [("k", I)])),
    st.sampled_from([A, B, C]).map(tm.Letter),
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
        two.map(lambda p: tm.AfterEach(*p)),
        two.map(lambda p: tm.Pipe(*p)),
        st.tuples(st.integers(1, 2), kids).map(lambda p: tm.Every(*p)),
    )


def constant(term: tm.Term, value: int) -> tm.Term:
    """E(i): the bindings as masks k == i."""
    if isinstance(term, tm.Letter):
        if term.bindings:
            return tm.Letter(term.event, Compare("k", "==", value))
        return term
    kids = term.children
    return term.with_children([constant(k, value) for k in kids]) if kids else term


def bound_event(term: tm.Term) -> ode.OdeEvent | None:
    try:
        return ode.event(term, over=[A, B, C])
    except ExpressionError:
        return None  # no binding, or satisfiable without the value


points = st.tuples(st.sampled_from("abc"), st.integers(0, 2))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.recursive(letters, _extend, max_leaves=4), st.lists(points, min_size=1, max_size=9))
def test_each_value_detects_its_own_expression(term: tm.Term, hist: list[tuple[str, int]]) -> None:
    event = bound_event(term)
    assume(event is not None and event.attribute is not None)
    h = History("abc")
    found = h.watch("r", event)
    h.run([(n, {"k": k}) for n, k in hist])
    got = sorted((ode.binding(d)["I"], d.t_occ) for d in found)
    hh = history([n for n, _ in hist], [{"k": k} for _, k in hist])
    seen = {k for n, k in hist if n in "ab"}
    expected = sorted((v, p + 1) for v in seen for p in evaluate(constant(term, v), hh))
    assert got == expected


def test_rows_of_values_that_behave_like_unseen_ones_are_released() -> None:
    det = LocalEventDetector()
    order, perform = det.explicit("order"), det.explicit("perform")
    found: list[Any] = []
    # The order must be immediately followed by its perform; after any other
    # point a value's row is back where unseen values are.
    e = ode.event(
        ode.sequence(
            order.where(account=ode.attribute("I")), perform.where(account=ode.attribute("I"))
        )
    )
    det.rule("r", e, action=found.append)
    for n in range(1000):
        det.signal("order", account=n)
        det.signal("perform", account=n)
    assert len(found) == 1000
    (table,) = det.process_scope.store[next(iter(det.graph.handlers.values())).hid]
    assert len(table) <= 1  # not one row per account ever seen


def test_a_value_carried_by_two_parameters_of_one_event() -> None:
    det = LocalEventDetector()
    transfer = det.explicit("transfer")
    I_ = ode.attribute("I")
    # Money out of I, later money into I.
    e = ode.event(ode.prior(transfer.where(src=I_), transfer.where(dst=I_)))
    found: list[Any] = []
    det.rule("r", e, action=found.append)
    det.signal("transfer", src=1, dst=2)
    det.signal("transfer", src=2, dst=1)
    assert [(ode.binding(d)["I"], d.t_occ) for d in found] == [(1, 2)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("!order(account = I)", "every value never seen"),
        ("prior(order(account = I), perform(account = J))", "one attribute variable"),
    ],
)
def test_unsupported_attribute_forms_are_refused(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        ode.event(text)


def test_a_variable_inside_or_is_refused() -> None:
    order = Primitive("order")
    mask = (param("account") == ode.attribute("I")) | (param("qty") > 1)
    with pytest.raises(ExpressionError, match="top level of the mask"):
        ode.event(ode.prior(order.where(mask), Primitive("perform")))


def test_an_attribute_value_must_be_hashable() -> None:
    h = History(["order", "perform"])
    h.watch("r", ode.event("prior(order(account = I), perform(account = I))"))
    with pytest.raises(Exception, match="not hashable"):
        h.run([("order", {"account": [1, 2]})])


def test_several_values_at_one_instant_reach_a_parent_as_one_batch() -> None:
    from sentinel import Context

    det = LocalEventDetector()
    transfer, swap = det.explicit("transfer"), det.explicit("swap")
    I_ = ode.attribute("I")
    # A swap between accounts a and b completes moved(a) and moved(b) at once.
    swapped = ode.term(swap.where(a=I_)) | swap.where(b=I_)
    moved = ode.event(ode.prior(transfer.where(src=I_), swapped), over=[transfer, swap])
    found: list[Any] = []
    det.rule("r", det.explicit("start") >> moved, action=found.append, context=Context.CONTINUOUS)
    det.signal("start")
    det.signal("transfer", src=1)
    det.signal("transfer", src=2)
    det.signal("swap", a=1, b=2)
    # Continuous SEQ pairs the one pending start with each detection of the
    # batch, as it was before the batch: two detections, not one.
    assert sorted(ode.binding(d.parts[1])["I"] for d in found) == [1, 2]
