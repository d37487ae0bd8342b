"""Masks and the values they compare: what a mask refuses when it is built, and
what it treats as not comparable when it runs."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sentinel import LocalEventDetector, param
from sentinel.algebra import parse
from sentinel.errors import ExpressionError, SnoopSyntaxError


@pytest.mark.parametrize("bound", [float("inf"), float("-inf")])
def test_a_mask_refuses_an_infinity_when_it_is_built(bound: float) -> None:
    """The generated mask code wrote ``inf``, an undefined name: every signal of
    the event raised NameError; and the text form read it back as a parameter."""
    det = LocalEventDetector()
    det.explicit("reading")
    with pytest.raises(ExpressionError, match=r"cannot compare with -?inf"):
        det.expression("reading").where(param("value") < bound)
    with pytest.raises(ExpressionError, match=r"cannot compare with -?inf"):
        det.expression("reading").where(value=bound)
    with pytest.raises(SnoopSyntaxError, match="reads as infinity"):
        parse("reading[value > 1e999]")
    assert det.signal("reading", value=5) is not None  # nothing was left behind


def test_python_and_or_and_chained_comparisons_on_predicates_are_refused() -> None:
    """``(p > 1) and (p < 9)`` and ``1 < p < 9`` kept one side silently (a rule
    fired for values outside the range); ``&`` and ``|`` are the connectives."""
    amount = param("amount")
    for build in (
        lambda: (amount > 100) and (amount < 1000),
        lambda: 100 < amount < 1000,
        lambda: (amount > 1000) or (param("vip") == True),  # noqa: E712
        lambda: not (amount > 1),
    ):
        with pytest.raises(ExpressionError, match="has no truth value: combine predicates"):
            build()
    both = (amount > 100) & (amount < 1000)
    assert both({"amount": 500}) and not both({"amount": 5})


def test_a_decimal_nan_is_not_comparable_so_the_mask_is_false() -> None:
    """As for other values that cannot be compared (it raised
    decimal.InvalidOperation out of the signal)."""
    det = LocalEventDetector()
    det.explicit("payment")
    fired: list[object] = []
    det.rule("big", "payment[amount > 1000]", action=fired.append)
    det.signal("payment", amount=Decimal("NaN"))
    det.signal("payment", amount=Decimal("sNaN"))
    det.signal("payment", amount=Decimal("2000"))
    assert len(fired) == 1


def test_in_a_list_holding_only_null_is_not_the_empty_list() -> None:
    """``x in (null)`` was read as ``x in ()`` (the parser's placeholder for
    an empty list and a lone null are alike): it never matched, and ``x not in
    (null)`` always did; ``In("x", [None])`` printed text that read back empty."""
    from sentinel import LocalEventDetector
    from sentinel.algebra.masks import In, parse_predicate

    assert parse_predicate("x in (null)") == In("x", [None])
    assert parse_predicate("x in (null)").compiled()({"x": None})
    assert not parse_predicate("x not in (null)").compiled()({"x": None})
    assert parse_predicate("x in ()") == In("x", [])
    assert parse_predicate(In("x", [None]).text()) == In("x", [None])
    det = LocalEventDetector()
    det.explicit("E")
    seen: list[object] = []
    det.rule("r", "E[x in (null)]", action=seen.append)
    det.signal("E", x=None)
    det.signal("E", x=1)
    assert len(seen) == 1


def test_a_mask_on_an_absolute_event_is_refused() -> None:
    """An absolute event has no parameters; its masked text,
    ``<(17:*:*)*/*/*>[x > 1]``, did not even parse back."""
    from sentinel.errors import ExpressionError
    from sentinel.temporal import Absolute

    with pytest.raises(ExpressionError, match="is a point in time and has no parameters"):
        Absolute(hour=17).where("x > 1")
