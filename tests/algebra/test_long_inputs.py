"""Very long and very deep masks: they work, or fail at once with
sentinel's own error naming the limit, and the detector stays usable."""

from __future__ import annotations

import functools
import operator
from typing import Any

import pytest

from sentinel import ExpressionError, LocalEventDetector, parse
from sentinel.algebra.masks import MAX_MASK_DEPTH, param, parse_predicate
from sentinel.errors import SnoopSyntaxError

DEEP = 2 * MAX_MASK_DEPTH

MASKS = {
    "and": " and ".join(["a > 1"] * DEEP),
    "or": " or ".join(["a > 1"] * DEEP),
    "not": "not " * DEEP + "a > 1",
    "parentheses and not": "not (" * DEEP + "a > 1" + ")" * DEEP,
}


@pytest.mark.parametrize("mask", MASKS.values(), ids=MASKS.keys())
def test_a_mask_nested_too_deeply_is_refused_naming_the_limit(mask: str) -> None:
    # Was a lark VisitError around a RecursionError (and, built in Python, a
    # SyntaxError from compiling the mask's nested parentheses at signal time).
    with pytest.raises(ExpressionError, match=f"more than {MAX_MASK_DEPTH} levels"):
        parse_predicate(mask)
    with pytest.raises(ExpressionError, match=f"more than {MAX_MASK_DEPTH} levels"):
        parse(f"e0[{mask}]")


@pytest.mark.parametrize("build", ["and", "or", "not"])
def test_a_mask_built_in_python_too_deeply_is_refused_when_built(build: str) -> None:
    p = param("a") > 1
    with pytest.raises(ExpressionError, match=f"more than {MAX_MASK_DEPTH} levels"):
        if build == "not":
            for _ in range(DEEP):
                p = ~p
        else:
            op = operator.and_ if build == "and" else operator.or_
            functools.reduce(op, [p] * DEEP)


def test_a_mask_at_the_limit_detects_like_its_model() -> None:
    # (((a > 0 and a > 1) and a > 2) ...): true exactly when a exceeds every bound.
    n = MAX_MASK_DEPTH
    mask = " and ".join(f"a > {i}" for i in range(n))
    pred = parse_predicate(mask)
    assert parse_predicate(str(pred)) == pred
    det = LocalEventDetector()
    det.explicit("e0")
    seen: list[Any] = []
    det.rule("r", f"e0[{mask}]", action=seen.append)
    values = [0, n - 1, n, n + 5, -3]
    for v in values:
        det.signal("e0", a=v)
    assert [o.params["a"] for o in seen] == [v for v in values if all(v > i for i in range(n))]


def test_a_refused_mask_leaves_the_detector_usable() -> None:
    det = LocalEventDetector()
    det.explicit("e0")
    det.explicit("e1")
    with pytest.raises(ExpressionError):
        det.rule("bad", f"e0[{MASKS['and']}] ; e1", action=print)
    assert "bad" not in det.rules
    seen: list[Any] = []
    det.rule("good", "e0[a > 1] ; e1", action=seen.append)
    det.signal("e0", a=2)
    det.signal("e1")
    assert len(seen) == 1


@pytest.mark.parametrize("number", ["9" * 5_000, "-" + "1" * 4_301])
def test_a_mask_number_past_pythons_digit_limit_is_a_syntax_error(number: str) -> None:
    # int() refuses more than 4,300 digits; that surfaced as lark's VisitError.
    with pytest.raises(SnoopSyntaxError, match=r"digits is too long for a mask") as caught:
        parse(f"E1[amount > {number}]")
    assert caught.value.column == len("E1[amount > ") + 1
