"""Expressions tens of thousands of levels deep, as Python builds them (the
detector accepts them): they pickle, copy, print and parse at any depth, in space
linear in their size."""

from __future__ import annotations

import copy
import functools
import operator
import pickle
from collections.abc import Callable
from datetime import timedelta

import pytest

from sentinel import parse
from sentinel.algebra import expressions as ex
from sentinel.algebra.masks import param

DEPTH = 10_000


def events(n: int) -> list[ex.Primitive]:
    return [ex.Primitive(f"e{i}") for i in range(n)]


def left_nested(n: int) -> ex.Expression:
    """((e0 | e1) | e2) | ...: each level's left operand is the level below."""
    return functools.reduce(operator.or_, events(n))


def right_nested(n: int) -> ex.Expression:
    """e0 ; (e1 ; (e2 ; ...)): each level's right operand is the level below."""
    es = events(n)
    expr: ex.Expression = es[-1]
    for e in reversed(es[:-1]):
        expr = ex.Seq(e, expr)
    return expr


def every_operator(n: int) -> ex.Expression:
    """Each level another operator around the level below, with keys, masks,
    temporal events and labels that differ from the names."""
    a, b, c = ex.Primitive("a"), ex.Primitive("b", label="odd b!"), ex.Primitive("c", 7)
    masked = a.where(param("amount") > 1)
    wraps: list[Callable[[ex.Expression], ex.Expression]] = [
        lambda e: e & b,
        lambda e: c >> e,
        lambda e: ex.Any(2, e, a, b),
        lambda e: ex.A(a, e, c),
        lambda e: ex.Astar(e, b, c),
        lambda e: ex.Not(e, a, c),
        lambda e: e.by("k"),
        lambda e: e.by(ex.SOURCE) | masked,
        lambda e: e + timedelta(seconds=5),
    ]
    expr: ex.Expression = a
    for i in range(n):
        expr = wraps[i % len(wraps)](expr)
    return expr


SHAPES = {"left": left_nested, "right": right_nested, "every operator": every_operator}


def depth(expr: ex.Expression) -> int:
    best, todo = 0, [(expr, 0)]
    while todo:
        e, d = todo.pop()
        best = max(best, d)
        todo.extend((c, d + 1) for c in e.children)
    return best


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("protocol", [0, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL])
def test_a_deep_expression_pickles_and_unpickles(
    shape: Callable[[int], ex.Expression], protocol: int
) -> None:
    # Was a RecursionError from about 1,000 levels on (one nested reduction per
    # level).
    expr = shape(DEPTH)
    assert depth(expr) >= DEPTH - 1
    data = pickle.dumps(expr, protocol=protocol)
    back = pickle.loads(data)
    assert back == expr and hash(back) == hash(expr) and type(back) is type(expr)
    assert str(back) == str(expr)  # labels, which equality ignores, survive too
    # Linear: a few dozen bytes per level, however deep.
    assert len(data) < 200 * DEPTH


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_a_deep_expression_deep_copies(shape: Callable[[int], ex.Expression]) -> None:
    expr = shape(DEPTH)
    dup = copy.deepcopy(expr)
    assert dup == expr and hash(dup) == hash(expr) and str(dup) == str(expr)
    assert copy.copy(expr) is expr  # immutable


def test_a_shared_sub_expression_pickles_once() -> None:
    # x(i+1) = x(i) | (x(i) ; e): written out, 2**18 terms; 37 objects, each
    # pickled once, and unpickled to one object again.
    e = ex.Primitive("e")
    x: ex.Expression = e
    for _ in range(18):
        x = x | (x >> e)
    data = pickle.dumps(x)
    assert len(data) < 200 * 40
    back = pickle.loads(data)
    assert back == x
    assert isinstance(back, ex.Or) and back.left is back.right.children[0]


def test_an_instance_level_event_keeps_its_selector_and_label() -> None:
    e = ex.Primitive("Stock.sell:begin", ("Stock", 1), label="stock_1.sell.begin")
    back = pickle.loads(pickle.dumps(right_nested(DEPTH) | e))
    assert isinstance(back, ex.Or) and isinstance(back.right, ex.Primitive)
    assert back.right.selector == ("Stock", 1) and back.right.label == "stock_1.sell.begin"


@pytest.mark.parametrize("shape", [left_nested, right_nested], ids=["left", "right"])
def test_a_deep_expression_prints_in_linear_space(shape: Callable[[int], ex.Expression]) -> None:
    expr = shape(DEPTH)
    text = str(expr)
    # The independent model: the names joined by the operator, with the
    # parentheses right nesting needs.
    names = [f"e{i}" for i in range(DEPTH)]
    if shape is left_nested:
        assert text == " | ".join(names)
    else:
        inner = f"{names[-2]} ; {names[-1]}"
        assert text == "".join(f"{n} ; (" for n in names[:-2]) + inner + ")" * (DEPTH - 2)
    assert repr(expr) == f"<{type(expr).__name__} {text}>"
    assert parse(text) == expr


def test_a_hundred_thousand_terms_print_and_parse_back() -> None:
    expr = left_nested(100_000)
    text = str(expr)
    assert text == " | ".join(f"e{i}" for i in range(100_000))
    assert repr(expr) == f"<Or {text}>"
    assert parse(text) == expr


class Counted:
    """A selector that counts how often it is compared."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Counted.compared += 1
        return isinstance(other, Counted)

    def __hash__(self) -> int:
        return 1


def test_equal_expressions_sharing_sub_expressions_compare_once_per_pair() -> None:
    # Two separately built x(i+1) = x(i) | (x(i) ; e), each with 2**18 paths to its
    # leaf: equality compares each pair of objects once (it compared each path).
    def build() -> ex.Expression:
        e = ex.Primitive("e", Counted())
        x: ex.Expression = e
        for _ in range(18):
            x = x | (x >> e)
        return x

    one, two = build(), build()
    Counted.compared = 0
    assert one == two
    assert Counted.compared <= 2
