"""Minimal cases of defects found by comparing the detector with the model of
Appendix A (tests/detector/model.py), kept as plain tests."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import A, Astar, Context, LocalEventDetector, Not, Primitive
from sentinel import Any as AnyOf
from sentinel.algebra import expressions as ex

E1, E2, E3, E4 = (Primitive(n) for n in ("E1", "E2", "E3", "E4"))


def detect(
    expr: ex.Expression | str,
    history: list[str],
    context: Context | str,
    params: dict[int, dict[str, Any]] | None = None,
    **rule: Any,
) -> list[tuple[int, ...]]:
    """Each detection's constituents' t_occ (history positions from 1)."""
    det = LocalEventDetector()
    for n in ("E1", "E2", "E3", "E4"):
        det.explicit(n)
    out: list[Any] = []
    det.rule("r", expr, action=out.append, context=context, **rule)
    for i, name in enumerate(history):
        det.signal(name, **(params or {}).get(i + 1, {}))
    return [tuple(c.t_occ for c in o.constituents) for o in out]


# -- 1. continuous A* and NOT: several terminators at one instant ---------------------


def test_continuous_astar_closes_its_interval_with_every_terminator_of_an_instant() -> None:
    # At E2 the AND detects (1, 4) and (2, 4) at once; each closes the interval
    # opened by E3 (docs/semantics.md, Batches).
    found = detect(Astar(E3, E4, E1 & E2), ["E1", "E1", "E3", "E2"], "continuous")
    assert found == [(1, 3, 4), (2, 3, 4)]


def test_continuous_not_closes_its_interval_with_every_terminator_of_an_instant() -> None:
    found = detect(Not(E4, E3, E1 & E2), ["E1", "E1", "E3", "E2"], "continuous")
    assert found == [(1, 3, 4), (2, 3, 4)]


def test_continuous_a_pairs_every_e2_of_an_instant() -> None:
    # The sibling that was already right: A's E2 batch. A composite occurs at its
    # terminator's instant, so both ANDs (at t=4) lie inside the interval E3 opened.
    found = detect(A(E3, E1 & E2, E4), ["E1", "E1", "E3", "E2"], "continuous")
    assert found == [(1, 3, 4), (2, 3, 4)]


# -- 2. a partitioned primitive event reached through ORs only -------------------------


@pytest.mark.parametrize("context", list(Context))
@pytest.mark.parametrize(
    "expr",
    [
        E1.by("k"),
        (E4 | (E1 | (E2 & E3))).by("k"),
        "E1 by k",
        "(E4 | E1) by k",
        "(E1 by k) ; E2",
    ],
    ids=str,
)
def test_an_occurrence_without_the_key_does_not_take_part(
    expr: ex.Expression | str, context: Context
) -> None:
    assert detect(expr, ["E1", "E2"], context) == []
    assert detect(expr, ["E1", "E2"], context, {1: {"k": 1}}) != []


@pytest.mark.parametrize("context", list(Context))
def test_by_source_needs_a_source(context: Context) -> None:
    det = LocalEventDetector()
    det.explicit("E1")
    out: list[Any] = []
    det.rule("r", "(E1 | E1) by @source", action=out.append, context=context)
    det.signal("E1")
    assert out == []
    det.notify(det.channel("E1"), {}, source=("Obj", (1,)))
    assert len(out) == 1


def test_rule_key_option_on_a_primitive_event() -> None:
    assert detect("E1", ["E1"], "recent", key="k") == []
    assert detect("E1", ["E1"], "recent", {1: {"k": 0}}, key="k") == [(1,)]


# -- 3. an event used twice under AND: one answer whatever the spelling -----------------


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ("recent", [(1, 2), (2, 3), (3, 4)]),
        ("chronicle", [(1, 2), (3, 4)]),
        ("continuous", [(1, 2), (2, 3), (3, 4)]),
        ("cumulative", [(1, 2), (3, 4)]),
        ("unrestricted", [(1, 2), (1, 3), (2, 3), (1, 4), (2, 4), (3, 4)]),
    ],
)
@pytest.mark.parametrize("spelling", ["E1 ^ E1", "(E1 | E1) ^ E1", "E1 ^ (E1 | E1)"])
def test_an_event_anded_with_itself(
    spelling: str, context: str, expected: list[tuple[int, ...]]
) -> None:
    # Pairs of distinct occurrences; chronicle and cumulative consume both.
    assert detect(spelling, ["E1"] * 4, context) == expected


@pytest.mark.parametrize("context", list(Context))
def test_an_occurrence_never_combines_with_itself_through_a_partition(context: Context) -> None:
    # (E1 ; E2) by k and E1 ; E2 detect the same occurrence {e1, e2}: one occurrence.
    params = {1: {"k": 1}, 2: {"k": 1}}
    expr = "((E1 ; E2) by k) ^ (E1 ; E2)"
    assert detect(expr, ["E1", "E2"], context, params) == []
    # A later, distinct occurrence of E1 ; E2 (unkeyed only) combines with it.
    found = detect(expr, ["E1", "E2", "E1", "E2"], context, {**params, 3: {"k": 2}})
    if context is Context.UNRESTRICTED:  # there E1 ; E2 is also {e1^1, e2^2}
        assert found == [(1, 1, 2, 4), (1, 2, 3, 4)]
    else:
        assert found == [(1, 2, 3, 4)]


@pytest.mark.parametrize("context", list(Context))
def test_or_of_an_expression_and_its_partition_is_one_occurrence(context: Context) -> None:
    params = {1: {"k": 1}, 2: {"k": 1}}
    assert detect("((E1 ; E2) by k) | (E1 ; E2)", ["E1", "E2"], context, params) == [(1, 2)]


# -- 4. continuous ANY keeps its terminator, as continuous AND -------------------------


def test_continuous_any_is_and_like() -> None:
    # Appendix A's continuous ANY flushes every list at a detection; sentinel keeps
    # the terminator as 2.3.2 does for AND, so ANY(2, E1, E3) is E1 ^ E3.
    found = detect(AnyOf(2, E1, E3), ["E1", "E3", "E1"], "continuous")
    assert found == [(1, 2), (2, 3)]
    assert found == detect(E1 & E3, ["E1", "E3", "E1"], "continuous")
