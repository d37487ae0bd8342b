"""Ode text and masks: round trips, precedence, and errors that say where."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import ExpressionError, Primitive, SnoopSyntaxError, ode, param, parse
from sentinel.algebra.masks import parse_predicate
from sentinel.ode import terms as tm
from tests.ode.test_properties import _extend, letters

a, b, c = (tm.Letter(Primitive(n)) for n in "abc")


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.recursive(letters, _extend, max_leaves=6))
def test_text_reads_back_to_an_equal_term(term: tm.Term) -> None:
    assert ode.parse_term(str(term)) == term


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("a ^ b || c", tm.Disj(tm.Conj(a, b), c)),  # ∧ binds tighter than ∨
        ("a || b | c", tm.Pipe(tm.Disj(a, b), c)),  # the pipe is loosest
        ("a | b | c", tm.Pipe(tm.Pipe(a, b), c)),
        ("!a ^ b", tm.Conj(tm.Neg(a), b)),
        ("!wall | a /+ b", tm.Pipe(tm.Neg(tm.Letter(Primitive("wall"))), tm.AfterEach(a, b))),
        ("a / b ^ c", tm.Conj(tm.After(a, b), c)),
        ("<2> a ^ b", tm.Conj(tm.Nth(2, a), b)),
        ("every <3> a", tm.Every(3, a)),
        ("a * b * c", tm.Star(tm.Star(a, b), c)),
        ("a ∧ ¬b ∨ c", tm.Disj(tm.Conj(a, tm.Neg(b)), c)),
        ("rel+(a)", tm.RelPlus(a)),
        ("seq(a, b)", tm.Sequence(a, b)),
        ("X := a ^ b; X || X", tm.Disj(tm.Conj(a, b), tm.Conj(a, b))),
        ("∃x: a = x", tm.Exists("x", tm.Mark(a, "x"))),
        ("exists x: relative(x, a)", tm.Exists("x", tm.Rel(tm.Var("x"), a))),
        ("'any' ^ any", tm.Conj(tm.Letter(Primitive("any")), tm.ANY)),
        ("a[x > 1 and y in (1, 'z')]", tm.Letter(Primitive("a").where("x > 1 and y in (1, 'z')"))),
    ],
)
def test_precedence_and_spellings(text: str, term: tm.Term) -> None:
    assert ode.parse_term(text) == term


def test_python_operators_build_the_same_terms() -> None:
    A, B, C = (Primitive(n) for n in "abc")
    assert ode.term(A) & ~ode.term(B) == ode.parse_term("a ^ !b")
    assert ode.term(A) | B == ode.parse_term("a || b")
    assert ode.term(A | B) & C == ode.parse_term("(a || b) ^ c")  # Snoop OR is ∨
    assert ode.term(A) / B == ode.parse_term("a / b")
    assert ode.term(A) // B == ode.parse_term("a /+ b")
    assert ode.term(A) * B == ode.parse_term("a * b")
    assert ode.pipe(A, ode.nth(2, B)) == ode.parse_term("a | <2> b")
    assert ode.exists("x", ode.term(A).mark("x")) == ode.parse_term("exists x: a = x")


def test_an_ode_event_prints_its_universe_when_declared() -> None:
    e = ode.event("prior(a, b) over (a, b, c)")
    assert str(e) == "ode{prior(a, b) over (a, b, c)}"
    assert [u.name for u in e.universe] == ["a", "b", "c"]
    assert ode.parse(str(e)[4:-1]) == e
    assert [u.name for u in ode.event("prior(a, b)").universe] == ["a", "b"]


def test_masks_read_back() -> None:
    for text in ["x > 1", "not (a == 'q' or b != 2.5)", "k in (1, 2) and z == null", "a >= b"]:
        p = parse_predicate(text)
        assert parse_predicate(str(p)) == p
    assert parse_predicate("amount > 1000") == (param("amount") > 1000)


def test_a_mask_treats_missing_and_incomparable_values_as_false() -> None:
    p = parse_predicate("amount > 5")
    assert p({"amount": 6}) and not p({"amount": 5})
    assert not p({}) and not p({"amount": "many"}) and not p({"amount": None})
    assert parse_predicate("not amount > 5")({})


@pytest.mark.parametrize(
    ("text", "line", "column", "part"),
    [
        ("prior(a, b", 1, 11, "end of text"),
        ("a ^^ b", 1, 4, "unexpected"),
        ("a[x >> 1]", 1, 6, "in mask"),
        ("<0> a", 1, 1, "n >= 1"),
        ("foo(a, b)", 1, 1, "unknown operator foo"),
        ("relative+(a, b)", 1, 1, "one expression"),
        ("prior(a)", 1, 1, "at least two"),
        ("firstAfter(a)", 1, 1, "firstAfter takes three expressions, got 1"),
        ("relative(a)", 1, 1, "relative takes two expressions, got 1"),
        ("b ^ rel(a, b, c)", 1, 5, "rel takes two expressions, got 3"),
        ("before(a, b)", 1, 1, "before takes one expression, got 2"),
        ("X := a;\n  Y := happened(X, a); Y", 2, 8, "happened takes one expression"),
        ("any[x > 1]", 1, 1, "only events take masks"),
        ("a ^\n  b[x ==]", 2, 9, "end of mask"),
    ],
)
def test_malformed_text_says_where(text: str, line: int, column: int, part: str) -> None:
    with pytest.raises(SnoopSyntaxError) as info:
        ode.parse_term(text)
    e = info.value
    assert (e.line, e.column) == (line, column), str(e)
    assert part in str(e)


@pytest.mark.parametrize(
    ("name", "takes"),
    [
        ("relative", [2]),
        ("rel", [2]),
        ("prior", [2, 3, 4, 5]),
        ("seq", [2, 3, 4, 5]),
        ("sequence", [2, 3, 4, 5]),
        ("firstAfter", [3]),
        ("before", [1]),
        ("happened", [1]),
        ("prefix", [1]),
        ("relative+", [1]),
        ("rel+", [1]),
    ],
)
def test_a_wrong_number_of_operands_is_a_syntax_error_naming_the_operator(
    name: str, takes: list[int]
) -> None:
    # Issue 29 item 8: firstAfter(a) and relative(a) raised lark's VisitError
    # around a TypeError.
    for n in range(1, 6):
        text = f"a || {name}({', '.join(['b'] * n)})"
        if n in takes:
            ode.parse_term(text)
            continue
        with pytest.raises(SnoopSyntaxError) as info:
            ode.parse_term(text)
        assert (info.value.line, info.value.column) == (1, 6), str(info.value)
        assert name.rstrip("+") in str(info.value) and f"got {n}" in str(info.value)


def test_errors_inside_ode_blocks_point_into_the_snoop_text() -> None:
    with pytest.raises(SnoopSyntaxError) as info:
        parse("E1 ; ode{prior(E1, E2) ^ foo(E1)}")
    assert (info.value.line, info.value.column) == (1, 26)
    with pytest.raises(SnoopSyntaxError, match="firstAfter takes three") as info:
        parse("E1 ; ode{firstAfter(E1)}")
    assert (info.value.line, info.value.column) == (1, 10)
    with pytest.raises(SnoopSyntaxError) as info:
        parse("E1[v >] ; E2")
    assert (info.value.line, info.value.column) == (1, 7)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ode.event(ode.ANY), "empty universe"),
        (lambda: ode.event("first || NULL"), "empty universe"),
        (lambda: ode.event("relative(x, a)"), None),  # x is just an event here
        (lambda: ode.event(ode.term("a").mark("x")), "not bound"),
        (lambda: ode.event("exists x: relative+(a = x)"), "relative\\+ cannot"),
        (lambda: ode.event("exists x: prefix(a = x)"), "prefix cannot"),
        (lambda: ode.exists("x", ode.term("a").mark("x").mark("x")), "already free"),
        (lambda: ode.event(ode.term(Primitive("a") >> Primitive("b"))), "Snoop composite"),
        (lambda: ode.nth(0, Primitive("a")), "n >= 1"),
    ],
)
def test_invalid_expressions_are_refused(make: object, message: str | None) -> None:
    if message is None:
        make()  # type: ignore[operator]
        return
    with pytest.raises(ExpressionError, match=message):
        make()  # type: ignore[operator]


def test_a_too_large_automaton_is_refused_naming_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sentinel.ode import automata

    monkeypatch.setattr(automata, "MAX_STATES", 6)
    with pytest.raises(ode.AutomatonTooLarge, match="sequence"):
        ode.event("sequence(a, b, c, a, b, c, a)")
