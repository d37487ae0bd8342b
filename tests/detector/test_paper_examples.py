"""The worked examples of Snoop section 2 (seeds/000, 2.2.1, 2.3.1, 2.3.2).

History H (Figure 1): e1^1 e1^2 e2^1 e3^1 e2^2 e4^1 e3^2 e4^2. Where the printed
result contradicts the paper's own definitions, the test pins the definition's
result and says which printed statement it does not reproduce (seeds/ERRATA.md,
docs/semantics.md).
"""

from __future__ import annotations

import pytest

from sentinel import Context
from tests.helpers import Run

H = ["E1", "E1", "E2", "E3", "E2", "E4", "E3", "E4"]
X = "(E1 ^ E2) ; E3 ; (E2 ^ E4)"
A = "(E1 ^ E2) ; E3"


def run(expr: str, context: Context, history: list[str] = H) -> Run:
    r = Run()
    r.watch("x", expr, context)
    r.signal(*history)
    return r


class TestUnrestrictedX:
    """2.2.1: X[H] by the definitions of the unrestricted context."""

    def test_sixteen_occurrences_with_five_constituents_each(self) -> None:
        r = run(X, Context.UNRESTRICTED)
        found = r.labelled("x")
        assert len(found) == 16
        assert all(len(o.constituents) == 5 for o in r.detections["x"])

    def test_fourteen_distinct_constituent_sets(self) -> None:
        # The printed list (18 entries, six repeated, three impossible) is not
        # reproduced: e4^1 cannot follow e3^2 (ERRATA 2.2.1).
        r = run(X, Context.UNRESTRICTED)
        sets = {frozenset(r.label(o)[1:-1].split(", ")) for o in r.detections["x"]}
        assert len(sets) == 14

    def test_exactly_the_sequences_the_definitions_allow(self) -> None:
        r = run(X, Context.UNRESTRICTED)
        got = sorted(r.labelled("x"))
        # (E1^E2);E3 initiators at e3^1: {e1^i, e2^1}; at e3^2: {e1^i, e2^j}.
        expected = []
        for i in (1, 2):
            for j, k in [(1, 1), (1, 2), (2, 1), (2, 2)]:
                # initiator {e1^i, e2^1, e3^1} with terminator {e2^j, e4^k}
                expected.append((f"e1^{i}", "e2^1", "e3^1", f"e2^{j}", f"e4^{k}"))
        for i in (1, 2):
            for j in (1, 2):
                for m in (1, 2):
                    # initiator {e1^i, e2^j, e3^2} with terminator {e2^m, e4^2}
                    expected.append((f"e1^{i}", f"e2^{j}", "e3^2", f"e2^{m}", "e4^2"))
        order = {
            lab: n
            for n, lab in enumerate(
                ["e1^1", "e1^2", "e2^1", "e3^1", "e2^2", "e4^1", "e3^2", "e4^2"]
            )
        }
        want = sorted("{" + ", ".join(sorted(e, key=order.__getitem__)) + "}" for e in expected)
        assert got == want


class TestContextsOfA:
    """2.3.1: A = (E1 ^ E2) ; E3 over H in each context."""

    def test_recent(self) -> None:
        assert run(A, Context.RECENT).labelled("x") == [
            "{e1^2, e2^1, e3^1}",
            "{e1^2, e2^2, e3^2}",
        ]

    def test_chronicle(self) -> None:
        assert run(A, Context.CHRONICLE).labelled("x") == [
            "{e1^1, e2^1, e3^1}",
            "{e1^2, e2^2, e3^2}",
        ]

    def test_continuous_follows_the_algorithm(self) -> None:
        # Printed: {e1^1,e2^1,e3^1} and {e1^2,e2^2,e3^2}. The algorithm (and the
        # 2.3.2 walk-through) detects both initiators at e3^1 and nothing at e3^2
        # (ERRATA 2.3.1).
        assert run(A, Context.CONTINUOUS).labelled("x") == [
            "{e1^1, e2^1, e3^1}",
            "{e1^2, e2^1, e3^1}",
        ]

    def test_cumulative_accumulates_the_first_four(self) -> None:
        assert run(A, Context.CUMULATIVE).labelled("x") == ["{e1^1, e1^2, e2^1, e3^1}"]


class TestNodeLevelAtE4:
    """2.3.2: X's graph at the instant e4^1 is detected."""

    H_TO_E41 = H[:6]

    def test_recent_detects_with_the_most_recent_pair(self) -> None:
        # Printed {e1^2, e2^1, e3^1, e4^1} omits e2^2, which the same paragraph
        # sends to node A as part of {e2^2, e4^1} (ERRATA 2.3.2).
        r = run(X, Context.RECENT, self.H_TO_E41)
        assert r.labelled("x") == ["{e1^2, e2^1, e3^1, e2^2, e4^1}"]

    def test_recent_retains_terminator_of_and_and_initiator_of_seq(self) -> None:
        r = run(X, Context.RECENT, [*self.H_TO_E41, "E4"])
        # e4^2 pairs with the retained e2^2 at C; A's initiator is still there.
        assert r.labelled("x")[1] == "{e1^2, e2^1, e3^1, e2^2, e4^2}"

    def test_chronicle_pairs_oldest_with_oldest(self) -> None:
        # Printed with e1^2; chronicle pairs e1^1 (2.3.1 itself; ERRATA 2.3.2).
        r = run(X, Context.CHRONICLE, self.H_TO_E41)
        assert r.labelled("x") == ["{e1^1, e2^1, e2^1, e3^1, e4^1}"]

    def test_chronicle_consumes_the_paired_occurrences(self) -> None:
        r = run(X, Context.CHRONICLE, self.H_TO_E41)
        # Node C keeps only e2^2; nothing else is stored for X.
        assert r.det.stored() == 2  # e2^2 at C, e1^2 at (E1 ^ E2)

    def test_continuous_detects_four_at_once(self) -> None:
        r = run(X, Context.CONTINUOUS, self.H_TO_E41)
        assert sorted(r.labelled("x")) == sorted(
            [
                "{e1^1, e2^1, e2^1, e3^1, e4^1}",
                "{e1^2, e2^1, e2^1, e3^1, e4^1}",
                "{e1^1, e2^1, e3^1, e2^2, e4^1}",
                "{e1^2, e2^1, e3^1, e2^2, e4^1}",
            ]
        )
        assert {o.t_occ for o in r.detections["x"]} == {6}

    def test_continuous_retains_the_and_terminator(self) -> None:
        # "we retain [e4^1] ... and both the initiators e2^1, e2^2 ... are deleted":
        # a later E2 pairs with the retained e4^1 at node C.
        r = Run()
        r.watch("c", "E2 ^ E4", Context.CONTINUOUS)
        r.signal("E2", "E2", "E4", "E2")
        assert r.labelled("c") == ["{e2^1, e4^1}", "{e2^2, e4^1}", "{e4^1, e2^3}"]

    def test_cumulative_combines_everything_once(self) -> None:
        # Printed {e1^1, e1^2, e2^1, e3^1, e2^1, e1^2, e4^1}: e1^2 stands where
        # node C's e2^2 belongs (ERRATA 2.3.2).
        r = run(X, Context.CUMULATIVE, self.H_TO_E41)
        assert r.labelled("x") == ["{e1^1, e1^2, e2^1, e2^1, e3^1, e2^2, e4^1}"]
        # Everything combined is discarded; only e2^2 waits at (E1 ^ E2).
        assert r.det.stored() == 1


@pytest.mark.parametrize("context", list(Context))
def test_x_over_h_in_every_context_is_deterministic(context: Context) -> None:
    first = run(X, context).labelled("x")
    assert run(X, context).labelled("x") == first
