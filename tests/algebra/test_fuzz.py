"""Fuzzing the Snoop parser: any text gives an expression or one of sentinel's
documented errors (ExpressionError, SnoopSyntaxError), never anything else; what
parses prints back to text that parses to an equal expression."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import ExpressionError, SnoopSyntaxError, parse
from sentinel.algebra import Expression
from tests.algebra.test_syntax import _ops, names

#: Pieces of Snoop text, valid and not, that random text is made of.
PIECES = [
    *"()[]<>,;^|*+@'\\:. \n\t",
    *"0123456789",
    "E1",
    "E2",
    "Stock.set_price:begin",
    " by ",
    "k",
    "@source",
    "ANY",
    "A",
    "A*",
    "NOT",
    "P",
    "P*",
    "[00:00:01]",
    "[2d 00:10:00]",
    "[99:99]",
    "<(12:00:00)*/*/*>",
    "<(25:00:00)1/1/24>",
    "'odd name'",
    "''",
    "&",
    ">>",
    "∇",
    "△",
    "\u2028",
    "\r",
    "9" * 30,
]
snoopish = st.lists(st.sampled_from(PIECES), max_size=25).map("".join)
anything = st.text(max_size=40)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """The text of a valid expression with a few pieces inserted, deleted or
    replaced."""
    text = str(draw(st.recursive(names, _ops, max_leaves=6)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        text = text[:at] + draw(st.sampled_from(["", *PIECES])) + text[at + cut :]
    return text


def check(text: str) -> None:
    try:
        expr = parse(text)
    except SnoopSyntaxError as e:
        lines = text.split("\n")
        assert 1 <= e.line <= len(lines)
        assert 1 <= e.column <= len(lines[e.line - 1]) + 1
        assert str(e).splitlines()[-1].strip() == "^"  # the caret line
        return
    except ExpressionError:
        return
    assert isinstance(expr, Expression)
    assert parse(str(expr)) == expr


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(snoopish, anything, mutated()))
def test_any_text_parses_or_raises_a_documented_error(text: str) -> None:
    check(text)


@pytest.mark.explore
@settings(max_examples=6_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(snoopish, anything, mutated()))
def test_any_text_parses_or_raises_a_documented_error_at_length(text: str) -> None:
    check(text)


#: Long and deep texts (issue 11 items 3 and 7): chains of any operator and
#: nestings of any bracket, hundreds to thousands of terms long, with a random
#: defect or none.
@st.composite
def long_text(draw: st.DrawFn) -> str:
    n = draw(st.integers(100, 3000))
    shape = draw(st.sampled_from(["chain", "nest", "call", "mixed"]))
    if shape == "chain":
        op = draw(st.sampled_from([" | ", " ; ", " ^ ", " & ", " >> ", ", ", " "]))
        term = draw(st.sampled_from(["a", "E1", "b.c:begin", "'x y'"]))
        text = op.join([term] * n)
    elif shape == "nest":
        opening = draw(st.sampled_from(["(", "[", "<", "NOT(", "ANY(2, ", "A*(a, "]))
        closing = draw(st.sampled_from([")", "]", ">", ")[a, b]", ", b)", ", b, c)"]))
        text = opening * n + "a" + closing * n
    elif shape == "call":
        text = "ANY(" + str(n) + ", " + ", ".join(f"e{i}" for i in range(n)) + ")"
    else:
        ops = st.sampled_from([" | ", " ; ", " ^ ", " AND ", " OR "])
        parts = ["a"]
        for _ in range(n):
            parts += [draw(ops), draw(st.sampled_from(["a", "(a", "a)", "b"]))]
        text = "".join(parts)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(PIECES)) + text[at:]
    return text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_text())
def test_long_and_deep_text_parses_or_raises_a_documented_error(text: str) -> None:
    check(text)
