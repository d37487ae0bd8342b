"""Each operator's class says where its strategies are (``strategies``), and
each strategy class registers itself there (``@strategy``): nothing else lists
them. The mask strategy lives in the detector, beside the others."""

from __future__ import annotations

from importlib import import_module

import pytest

from sentinel import Context
from sentinel.algebra import expressions as ex
from sentinel.algebra.masks import Masked, predicate
from sentinel.detector.operators import handler_class

E1, E2, E3 = ex.Primitive("E1"), ex.Primitive("E2"), ex.Primitive("E3")
OPERATORS = [
    ex.Or(E1, E2),
    ex.And(E1, E2),
    ex.Seq(E1, E2),
    ex.Any(2, E1, E2, E3),
    ex.A(E1, E2, E3),
    ex.Astar(E1, E2, E3),
    ex.Not(E2, E1, E3),
    Masked(E1, predicate("v > 1")),
]


@pytest.mark.parametrize("expr", OPERATORS, ids=lambda e: type(e).__name__)
def test_an_operator_names_the_module_of_its_strategies(expr: ex.Expression) -> None:
    module = import_module(type(expr).strategies or "")
    for context in Context:
        strategy = handler_class(expr, context)
        assert strategy.__module__ == module.__name__


def test_the_mask_strategy_is_the_detectors() -> None:
    masked = Masked(E1, predicate("v > 1"))
    assert handler_class(masked, Context.RECENT).__module__ == "sentinel.detector.operators.mask"


@pytest.mark.parametrize(
    ("expr", "read"),
    [
        (ex.Seq(E1, E2), ()),
        (ex.Not(E2, E1, E3), ()),
        (ex.Keyed(E1, "k"), ("k",)),
        (ex.Keyed(E1, ex.SOURCE), ()),
        (Masked(E1, predicate("v > 1")), None),
    ],
    ids=str,
)
def test_an_operator_says_which_parameters_it_reads(
    expr: ex.Expression, read: tuple[str, ...] | None
) -> None:
    assert expr.parameters_read() == read
