"""Very deep Ode expressions: they work, or fail at definition with sentinel's
own error naming the limit, and the detector stays usable."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import ExpressionError, LocalEventDetector
from sentinel.ode import parse
from sentinel.ode.syntax import MAX_DEPTH


def detector() -> LocalEventDetector:
    det = LocalEventDetector()
    det.explicit("a")
    det.explicit("b")
    return det


def prior(n: int) -> str:
    return "prior(a, " * n + "b" + ")" * n


@pytest.mark.parametrize(
    "text",
    [prior(2 * MAX_DEPTH), "sequence(a, " * 2 * MAX_DEPTH + "b" + ")" * 2 * MAX_DEPTH],
    ids=["prior", "sequence"],
)
def test_text_nested_too_deeply_is_refused_naming_the_limit(text: str) -> None:
    # Was lark's VisitError around a RecursionError.
    with pytest.raises(ExpressionError, match=f"more than {MAX_DEPTH} levels") as info:
        parse(text)
    assert len(str(info.value)) < 500


def test_an_expression_whose_record_nests_too_deeply_is_refused_at_definition() -> None:
    # prior(a, prior(a, ... b)) 100 deep parses, but its record's code nested
    # Python's parentheses 200 deep: a bare SyntaxError from rule().
    det = detector()
    with pytest.raises(ExpressionError, match="nests too deeply"):
        det.rule("bad", "ode{" + prior(100) + "}", action=print)
    assert "bad" not in det.rules
    seen: list[Any] = []
    det.rule("good", "ode{" + prior(3) + "}", action=seen.append)
    for e in "aaab":
        det.signal(e)
    assert len(seen) == 1


def test_a_deep_expression_below_the_limits_detects_like_a_shallow_one() -> None:
    # prior(a, prior(a, ... prior(a, b))): a b with an a before it, at any depth
    # (the one a serves every level), as prior(a, b).
    history = "bbabab"
    fired = []
    for n in (1, 40):
        det = detector()
        seen: list[Any] = []
        det.rule("r", "ode{" + prior(n) + "}", action=seen.append)
        for e in history:
            det.signal(e)
        fired.append([o.t_occ for o in seen])
    assert fired[0] == fired[1] == [4, 6]
