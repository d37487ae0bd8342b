"""Each operator in each parameter context, derived from Appendix A's algorithms.

Every case is (expression, history, {context: detections}); detections are in the
paper's notation, in the order they are made. The expectations were worked out by
hand from the pseudocode (with the readings of seeds/ERRATA.md), not recorded from
the implementation.
"""

from __future__ import annotations

import pytest

from sentinel import Context
from tests.helpers import Run

R, CH, CO, CU, U = (
    Context.RECENT,
    Context.CHRONICLE,
    Context.CONTINUOUS,
    Context.CUMULATIVE,
    Context.UNRESTRICTED,
)

CASES: list[tuple[str, str, list[str], dict[Context, list[str]]]] = [
    (
        "seq: the initiator is kept (recent), paired in order (chronicle), all pending "
        "ones complete (continuous), all combine (cumulative)",
        "E1 ; E2",
        ["E1", "E1", "E2", "E2"],
        {
            R: ["{e1^2, e2^1}", "{e1^2, e2^2}"],
            CH: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
            CO: ["{e1^1, e2^1}", "{e1^2, e2^1}"],
            CU: ["{e1^1, e1^2, e2^1}"],
            U: ["{e1^1, e2^1}", "{e1^2, e2^1}", "{e1^1, e2^2}", "{e1^2, e2^2}"],
        },
    ),
    (
        "seq: a terminator before any initiator detects nothing",
        "E1 ; E2",
        ["E2", "E1", "E2"],
        {c: ["{e1^1, e2^2}"] for c in (R, CH, CO, CU, U)},
    ),
    (
        "and: either order; recent keeps both, chronicle consumes, continuous keeps "
        "the terminator, cumulative combines",
        "E1 ^ E2",
        ["E1", "E1", "E2", "E2", "E1"],
        {
            R: ["{e1^2, e2^1}", "{e1^2, e2^2}", "{e2^2, e1^3}"],
            CH: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
            CO: ["{e1^1, e2^1}", "{e1^2, e2^1}", "{e2^1, e1^3}", "{e2^2, e1^3}"],
            CU: ["{e1^1, e1^2, e2^1}", "{e2^2, e1^3}"],
            U: [
                "{e1^1, e2^1}",
                "{e1^2, e2^1}",
                "{e1^1, e2^2}",
                "{e1^2, e2^2}",
                "{e2^1, e1^3}",
                "{e2^2, e1^3}",
            ],
        },
    ),
    (
        "and: terminator retention: a chronicle or cumulative terminator is consumed, a "
        "recent one stays",
        "E1 ^ E2",
        ["E1", "E2", "E2", "E1"],
        {
            R: ["{e1^1, e2^1}", "{e1^1, e2^2}", "{e2^2, e1^2}"],
            CH: ["{e1^1, e2^1}", "{e2^2, e1^2}"],
            CO: ["{e1^1, e2^1}", "{e2^1, e1^2}", "{e2^2, e1^2}"],
            CU: ["{e1^1, e2^1}", "{e2^2, e1^2}"],
        },
    ),
    (
        "or: every occurrence of either, in every context",
        "E1 | E2",
        ["E1", "E2", "E3", "E1"],
        {c: ["{e1^1}", "{e2^1}", "{e1^2}"] for c in (R, CH, CO, CU, U)},
    ),
    (
        "any(2) of three",
        "ANY(2, E1, E2, E3)",
        ["E1", "E2", "E3"],
        {
            R: ["{e1^1, e2^1}", "{e2^1, e3^1}"],
            CH: ["{e1^1, e2^1}"],
            CO: ["{e1^1, e2^1}", "{e2^1, e3^1}"],
            CU: ["{e1^1, e2^1}"],
            U: ["{e1^1, e2^1}", "{e1^1, e3^1}", "{e2^1, e3^1}"],
        },
    ),
    (
        "any(3) of three with a repeated operand",
        "ANY(3, E1, E2, E3)",
        ["E1", "E1", "E2", "E3"],
        {
            R: ["{e1^2, e2^1, e3^1}"],
            CH: ["{e1^1, e2^1, e3^1}"],
            CO: ["{e1^1, e2^1, e3^1}", "{e1^2, e2^1, e3^1}"],
            CU: ["{e1^1, e1^2, e2^1, e3^1}"],
            U: ["{e1^1, e2^1, e3^1}", "{e1^2, e2^1, e3^1}"],
        },
    ),
    (
        "a: each E2 inside an open interval; E3 closes",
        "A(E1, E2, E3)",
        ["E1", "E2", "E1", "E2", "E3", "E2"],
        {
            R: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
            CH: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
            CO: ["{e1^1, e2^1}", "{e1^1, e2^2}", "{e1^2, e2^2}"],
            CU: ["{e1^1, e2^1}", "{e1^2, e2^2}"],
            U: ["{e1^1, e2^1}", "{e1^1, e2^2}", "{e1^2, e2^2}"],
        },
    ),
    (
        "a*: E3 emits the interval's E2s once and needs an open interval",
        "A*(E1, E2, E3)",
        ["E1", "E2", "E2", "E3", "E3"],
        {
            R: ["{e1^1, e2^1, e2^2, e3^1}"],
            CH: ["{e1^1, e2^1, e2^2, e3^1}"],
            CO: ["{e1^1, e2^1, e2^2, e3^1}"],
            CU: ["{e1^1, e2^1, e2^2, e3^1}"],
            U: ["{e1^1, e2^1, e2^2, e3^1}", "{e1^1, e2^1, e2^2, e3^2}"],
        },
    ),
    (
        "a*: fires without any E2",
        "A*(E1, E2, E3)",
        ["E1", "E3"],
        {c: ["{e1^1, e3^1}"] for c in (R, CH, CO, CU, U)},
    ),
    (
        "a*: two open intervals (chronicle reuses the E2: ERRATA 'general claims')",
        "A*(E1, E2, E3)",
        ["E1", "E1", "E2", "E3", "E3"],
        {
            R: ["{e1^2, e2^1, e3^1}"],
            CH: ["{e1^1, e2^1, e3^1}", "{e1^2, e2^1, e3^2}"],
            CO: ["{e1^1, e2^1, e3^1}", "{e1^2, e2^1, e3^1}"],
            CU: ["{e1^1, e2^1, e3^1}"],
        },
    ),
    (
        "a*: chronicle drops E2s that precede the next interval",
        "A*(E1, E2, E3)",
        ["E1", "E2", "E1", "E2", "E3", "E3"],
        {
            CH: ["{e1^1, e2^1, e2^2, e3^1}", "{e1^2, e2^2, e3^2}"],
        },
    ),
    (
        "not: E3 without E2 since E1",
        "NOT(E2)[E1, E3]",
        ["E1", "E3", "E1", "E2", "E3", "E1", "E1", "E3"],
        {
            R: ["{e1^1, e3^1}", "{e1^4, e3^3}"],
            CH: ["{e1^1, e3^1}", "{e1^3, e3^3}"],
            CO: ["{e1^1, e3^1}", "{e1^3, e3^3}", "{e1^4, e3^3}"],
            CU: ["{e1^1, e3^1}", "{e1^3, e3^3}"],
            U: ["{e1^1, e3^1}", "{e1^3, e3^3}", "{e1^4, e3^3}"],
        },
    ),
]


@pytest.mark.parametrize(
    ("expr", "history", "context", "expected"),
    [
        pytest.param(expr, hist, ctx, exp, id=f"{expr} {ctx.value}")
        for _doc, expr, hist, by_ctx in CASES
        for ctx, exp in by_ctx.items()
    ],
)
def test_operator_in_context(
    expr: str, history: list[str], context: Context, expected: list[str]
) -> None:
    r = Run()
    r.watch("x", expr, context)
    r.signal(*history)
    assert r.labelled("x") == expected


class TestStrictOrder:
    """Ordered operators never pair an occurrence with one at the same instant."""

    @pytest.mark.parametrize("context", list(Context))
    def test_e_seq_e_pairs_consecutive_occurrences_not_one_with_itself(
        self, context: Context
    ) -> None:
        r = Run()
        r.watch("x", "E1 ; E1", context)
        r.signal("E1")
        assert r.labelled("x") == []
        r.signal("E1")
        assert r.labelled("x") == ["{e1^1, e1^2}"]

    @pytest.mark.parametrize("context", list(Context))
    def test_e_and_e_needs_two_distinct_occurrences(self, context: Context) -> None:
        r = Run()
        r.watch("x", "E1 ^ E1", context)
        r.signal("E1")
        assert r.labelled("x") == []
        r.signal("E1")
        assert r.labelled("x") == ["{e1^1, e1^2}"]

    @pytest.mark.parametrize("context", [R, CH, CO, CU])
    def test_not_between_consecutive_occurrences_of_one_event(self, context: Context) -> None:
        # NOT(E2)[E1, E1]: "no E2 between two E1s"; an E1 closes the previous
        # interval and opens the next one.
        r = Run()
        r.watch("x", "NOT(E2)[E1, E1]", context)
        r.signal("E1", "E1", "E2", "E1", "E1")
        assert r.labelled("x") == ["{e1^1, e1^2}", "{e1^3, e1^4}"]

    @pytest.mark.parametrize("context", [R, CH, CO, CU])
    def test_a_whose_opening_and_middle_are_one_event(self, context: Context) -> None:
        # A(E1, E1, E2): each E1 opens an interval and falls into the previous one.
        r = Run()
        r.watch("x", "A(E1, E1, E2)", context)
        r.signal("E1", "E2", "E1", "E1")
        assert r.labelled("x")[:1] == ["{e1^2, e1^3}"]

    @pytest.mark.parametrize("context", list(Context))
    def test_or_of_an_event_with_itself_emits_once(self, context: Context) -> None:
        r = Run()
        r.watch("x", "(E1 ; E2) | (E1 ; E2)", context)
        r.signal("E1", "E2")
        assert r.labelled("x") == ["{e1^1, e2^1}"]

    @pytest.mark.parametrize("context", list(Context))
    def test_shared_terminator_reaches_and_through_both_operands(self, context: Context) -> None:
        # (E1 ; E3) ^ (E2 ; E3): one e3 completes both operands; AND accepts the
        # equal times of two distinct occurrences.
        r = Run()
        r.watch("x", "(E1 ; E3) ^ (E2 ; E3)", context)
        r.signal("E1", "E2", "E3")
        assert r.labelled("x") == ["{e1^1, e2^1, e3^1, e3^1}"]
