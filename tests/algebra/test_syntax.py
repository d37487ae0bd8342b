"""Snoop text: parsing, printing, round trips and error positions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import SOURCE, A, Any, Astar, ExpressionError, Not, Primitive, SnoopSyntaxError, parse
from sentinel.algebra import Expression, Keyed

E1, E2, E3, E4 = (Primitive(f"E{i}") for i in range(1, 5))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(E1 ^ E2) ; E3 ; (E2 ^ E4)", ((E1 & E2) >> E3) >> (E2 & E4)),
        ("E1 ^ E2 ; E3", (E1 & E2) >> E3),  # AND binds tighter than SEQ
        ("E1 | E2 ; E3", E1 | (E2 >> E3)),  # SEQ binds tighter than OR
        ("E1 ; E2 ; E3", (E1 >> E2) >> E3),  # left associative
        ("E1 ; (E2 ; E3)", E1 >> (E2 >> E3)),
        ("ANY(2, E1, E2, E3)", Any(2, E1, E2, E3)),
        ("A(E1, E2, E3)", A(E1, E2, E3)),
        ("A*(E1, E2 | E4, E3)", Astar(E1, E2 | E4, E3)),
        ("NOT(E2)[E1, E3]", Not(E2, E1, E3)),
        ("E1 ∇ E2 △ E3", E1 | (E2 & E3)),  # the paper's symbols
        ("(E1 ; E2) by order_id", Keyed(E1 >> E2, "order_id")),
        ("E1 ; E2 by @source", E1 >> Keyed(E2, SOURCE)),
        (
            "Stock.set_price:begin ; txn:pre_commit",
            Primitive("Stock.set_price:begin") >> Primitive("txn:pre_commit"),
        ),
        ("'odd name!' | E1", Primitive("odd name!") | E1),
        ("A ; NOT", Primitive("A") >> Primitive("NOT")),  # operator names are events too
        ("  E1\n;\tE2 ", E1 >> E2),
    ],
)
def test_parse(text: str, expected: Expression) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (((E1 & E2) >> E3) >> (E2 & E4), "E1 ^ E2 ; E3 ; E2 ^ E4"),
        (E1 >> (E2 >> E3), "E1 ; (E2 ; E3)"),
        ((E1 | E2) & E3, "(E1 | E2) ^ E3"),
        (Keyed(E1 | E2, "k"), "(E1 | E2) by k"),
        (Primitive("it's"), "'it\\'s'"),
        (Primitive("by"), "'by'"),
    ],
)
def test_print_uses_only_needed_parentheses(expr: Expression, text: str) -> None:
    assert str(expr) == text
    assert parse(text) == expr


@pytest.mark.parametrize(
    ("text", "line", "column", "expected_part"),
    [
        ("E1 ^", 1, 5, "an event name"),
        ("E1 ; ; E2", 1, 6, "an event name"),
        ("(E1 ; E2", 1, 9, '")"'),
        ("E1 # E2", 1, 4, '";"'),
        ("E1 ;\nE2 E3", 2, 4, '";"'),
    ],
)
def test_malformed_text_reports_position_and_expectation(
    text: str, line: int, column: int, expected_part: str
) -> None:
    with pytest.raises(SnoopSyntaxError) as info:
        parse(text)
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert any(expected_part in e for e in err.expected) or expected_part in str(err)
    # the message shows the offending line with a caret under the position
    src_line, caret = str(err).splitlines()[-2:]
    assert caret.index("^") - 4 == column - 1
    assert src_line.strip() == text.splitlines()[line - 1].strip()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ANY(4, E1, E2)", "m must be between 1 and 2"),
        ("ANY(E1, E2)", "count first"),
        ("A(E1, E2)", "takes 3 event expression"),
        ("NOT(E2)", "needs its interval"),
        ("A(E1, E2, E3)[E1, E2]", "only NOT takes an interval"),
        ("FOO(E1)", "unknown operator FOO"),
        ("''", "empty event name"),
    ],
)
def test_invalid_operators_report_position(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message) as info:
        parse(text)
    assert isinstance(info.value, SnoopSyntaxError) and info.value.column >= 1


@pytest.mark.parametrize("name", ["a\x00b", "line\nbreak", "tab\t", "del\x7f"])
def test_an_event_name_with_a_control_character_is_refused(name: str) -> None:
    """A NUL cannot be stored in PostgreSQL's text (the log's write failed at
    commit); SQLite's view cut the name at it. Refused where the event is made."""
    from sentinel import LocalEventDetector

    with pytest.raises(ExpressionError, match="cannot hold a control character"):
        LocalEventDetector().explicit(name)
    with pytest.raises(ExpressionError, match="cannot hold a control character"):
        parse("'" + name + "' ; E1")


def test_parse_needs_text() -> None:
    with pytest.raises(TypeError):
        parse(42)  # type: ignore[arg-type]


names = st.one_of(
    st.sampled_from(["E1", "E2", "Stock.e1", "txn:begin", "A", "ANY", "by"]),
    # any name an event may have: no control characters (refused, see below)
    st.text(st.characters(blacklist_categories=("Cc",)), min_size=1, max_size=6),
).map(Primitive)


def _ops(children: st.SearchStrategy[Expression]) -> st.SearchStrategy[Expression]:
    pair = st.tuples(children, children)
    triple = st.tuples(children, children, children)
    keys = st.one_of(st.sampled_from(["k", "order_id"]), st.just(SOURCE))
    return st.one_of(
        pair.map(lambda p: p[0] | p[1]),
        pair.map(lambda p: p[0] & p[1]),
        pair.map(lambda p: p[0] >> p[1]),
        triple.map(lambda t: A(*t)),
        triple.map(lambda t: Astar(*t)),
        triple.map(lambda t: Not(*t)),
        st.tuples(children, keys).map(lambda t: t[0].by(t[1])),
        st.lists(children, min_size=2, max_size=4, unique=True).flatmap(
            lambda cs: st.integers(1, len(cs)).map(lambda m: Any(m, *cs))
        ),
    )


@settings(max_examples=400, deadline=None)
@given(st.recursive(names, _ops, max_leaves=8))
def test_parse_of_str_round_trips(expr: Expression) -> None:
    """Fragment: every expression of the algebra over any event names."""
    assert parse(str(expr)) == expr


@settings(max_examples=300, deadline=None)
@given(st.text(), st.sampled_from(["==", "!=", "<"]))
def test_a_mask_with_any_string_round_trips(value: str, op: str) -> None:
    """A string holding brackets, quotes or a line break (the interval token
    stopped at the first ']' or line end: ``E1[s == '[x]']`` did not parse)."""
    from sentinel import param

    p = param("s")
    pred = p == value if op == "==" else p != value if op == "!=" else p < value
    expr = E1.where(pred) >> E2
    assert parse(str(expr)) == expr


# -- errors that teach ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # After an operand: every operator, and the closing parenthesis.
        ("(E1 ^ E2", ['"+"', '")"', '";"', '"^"', '"by"', '"|"', "a mask like [amount > 1000]"]),
        ("(E1", ['"+"', '")"', '";"', '"^"', '"by"', '"|"', "a mask like [amount > 1000]"]),
        (
            "A*(E1, E2",
            ['"+"', '")"', '","', '";"', '"^"', '"by"', '"|"', "a mask like [amount > 1000]"],
        ),
        # At the top level the text may also end there; no ")" or "," is expected.
        (
            "E1 E2",
            ['"+"', '";"', '"^"', '"by"', '"|"', "end of text", "a mask like [amount > 1000]"],
        ),
        # An operator name may be followed by its arguments.
        (
            "ANY E1",
            [
                '"("',
                '"+"',
                '";"',
                '"^"',
                '"by"',
                '"|"',
                "end of text",
                "a mask like [amount > 1000]",
            ],
        ),
        ("E1 by", ['"@source"', "an event name"]),
    ],
)
def test_the_expected_list_is_complete(text: str, expected: list[str]) -> None:
    with pytest.raises(SnoopSyntaxError) as info:
        parse(text)
    assert info.value.expected == sorted(expected)


@pytest.mark.parametrize(
    ("text", "column", "hint"),
    [
        ("E1 & E2", 4, "'&' is the Python spelling of AND; Snoop text writes '^'"),
        ("E1 >> E2", 4, "'>>' is the Python spelling of SEQ; Snoop text writes ';'"),
        ("(E1 ^ E2) >> E3", 11, "Snoop text writes ';'"),
    ],
)
def test_python_spellings_get_a_hint(text: str, column: int, hint: str) -> None:
    with pytest.raises(SnoopSyntaxError, match="unexpected character") as info:
        parse(text)
    assert hint in str(info.value)
    assert info.value.column == column


@pytest.mark.parametrize(
    ("text", "column", "what"),
    [
        ("'odd name", 1, "unterminated quoted event name (no closing ')"),
        ("E1 ; 'it\\'s", 6, "unterminated quoted event name"),
        ("<(17:00:00)*/*/*", 1, "unterminated absolute time (no closing >"),
        ("E1 + [00:10:00", 6, "unterminated time interval or mask (no closing ]"),
        ("E1[x == 'a]", 3, "unterminated time interval or mask (no closing ]"),
    ],
)
def test_an_unterminated_token_says_so(text: str, column: int, what: str) -> None:
    with pytest.raises(SnoopSyntaxError) as info:
        parse(text)
    assert what in str(info.value)
    assert (info.value.line, info.value.column) == (1, column)


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("ANY(" + "9" * 5000 + ", E1, E2)", "is too large", 5),
        ("E1 by a.b", "a partition key is a parameter name", 7),
    ],
)
def test_invalid_pieces_are_reported_where_they_are(text: str, message: str, column: int) -> None:
    with pytest.raises(SnoopSyntaxError, match=message) as info:
        parse(text)
    assert info.value.column == column


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ("E1 ;\n  (E2 ; E3) by a.b", "a partition key is a parameter name", 2, 16),
        ("E1 |\n  E2 ; ''", "empty event name", 2, 8),
        ("(E1 ; E2)\n by k by\n  x.y", "a partition key is a parameter name", 3, 3),
    ],
)
def test_invalid_pieces_on_later_lines_are_reported_where_they_are(
    text: str, message: str, line: int, column: int
) -> None:
    # Positions come from the tokens themselves (the parser keeps none on its
    # tree nodes, which cost a third of the parsing time).
    with pytest.raises(SnoopSyntaxError, match=message) as info:
        parse(text)
    assert (info.value.line, info.value.column) == (line, column)


# -- long expressions -------------------------------------------------------------------


def _long(n: int) -> list[tuple[str, str]]:
    names = [f"e{i % 7}" for i in range(n)]
    return [
        ("or", " | ".join(names)),
        ("seq", " ; ".join(names)),
        ("and", " ^ ".join(names)),
        ("right-nested", "".join(f"{x} ; (" for x in names[:-1]) + names[-1] + ")" * (n - 1)),
        ("calls", "A(e1, " * n + "e2" + ", e3)" * n),
        ("not", "NOT(" * n + "e1" + ")[e2, e3]" * n),
        ("by", "e1" + " by k" * n),
        ("relative", "e1" + " + [00:00:01]" * n),
    ]


@pytest.mark.parametrize(("kind", "text"), _long(2000), ids=[k for k, _ in _long(1)])
def test_expressions_of_thousands_of_terms_parse_print_and_compare(kind: str, text: str) -> None:
    expr = parse(text)
    printed = str(expr)
    again = parse(printed)
    assert again == expr and hash(again) == hash(expr)
    assert str(again) == printed
    assert len(list(expr.walk())) >= 2000
    assert again != parse(text.replace("e1", "e9", 1))


@pytest.mark.parametrize("lean", ["left", "right"])
def test_a_prefix_of_the_text_costs_what_it_prints(lean: str) -> None:
    from sentinel.algebra.syntax import text_prefix

    es = [Primitive(f"E{i}") for i in range(2000)]
    expr: Expression = es[0]
    for e in es[1:]:
        expr = expr >> e if lean == "left" else e >> expr
    text = str(expr)
    prefix, whole = text_prefix(expr, 40)
    assert not whole and text.startswith(prefix) and 40 <= len(prefix) < 50
    assert text_prefix(expr, len(text) + 1) == (text, True)
    # Each operand used twice, 40 levels deep: 2**40 names, none printed past
    # the prefix.
    doubled: Expression = E1
    for _ in range(40):
        doubled = doubled >> doubled
    prefix, whole = text_prefix(doubled, 60)
    assert not whole and prefix.startswith("E1 ; E1 ; (E1 ; E1)") and len(prefix) < 70
