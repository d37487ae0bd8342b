"""Expressions of thousands of terms: building the graph, wiring it, and a signal
that completes a detection through every level, all within Python's default
recursion limit (a detection waits for the instant's agenda every few dozen
levels instead of calling further up)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from sentinel import Context, LocalEventDetector, parse

N = 1200


def detector(n: int) -> LocalEventDetector:
    det = LocalEventDetector()
    for i in range(n):
        det.explicit(f"e{i}")
    return det


@pytest.mark.parametrize("context", list(Context))
def test_a_detection_through_thousands_of_ands(context: Context) -> None:
    # ((e0 ^ e1) ^ e2) ^ ...: with e1..e(N-1) stored, e0 completes every level at
    # once, each level's detection initiating the next.
    assert sys.getrecursionlimit() <= 1000 * 10  # the test means something
    det = detector(N)
    seen: list[Any] = []
    det.rule("r", " ^ ".join(f"e{i}" for i in range(N)), action=seen.append, context=context)
    for i in range(1, N):
        det.signal(f"e{i}")
    det.signal("e0")
    (occ,) = seen
    assert [c.event for c in occ.constituents] == [f"e{i}" for i in range(1, N)] + ["e0"]


@pytest.mark.parametrize("context", [Context.RECENT, Context.CONTINUOUS])
def test_a_detection_through_thousands_of_right_nested_sequences(context: Context) -> None:
    # e0 ; (e1 ; (e2 ; ...)): the last event completes the innermost sequence, whose
    # detection terminates the one around it, and so on outwards.
    text = "".join(f"e{i} ; (" for i in range(N - 1)) + f"e{N - 1}" + ")" * (N - 1)
    det = detector(N)
    seen: list[Any] = []
    det.rule("r", text, action=seen.append, context=context)
    for i in range(N):
        det.signal(f"e{i}")
    (occ,) = seen
    assert [c.t_occ for c in occ.constituents] == list(range(1, N + 1))


@pytest.mark.parametrize("op", ["|", ";", "^"])
def test_thousands_of_terms_of_one_event(op: str) -> None:
    det = detector(1)
    seen: list[Any] = []
    det.rule("r", f" {op} ".join(["e0"] * N), action=seen.append, context="chronicle")
    assert det.expression(str(det.rules["r"].event)) == det.rules["r"].event
    for _ in range(3):
        det.signal("e0")
    # OR: each occurrence. SEQ: N occurrences in a row are needed. AND: at the
    # second occurrence every level combines the one below with an E0 (one
    # occurrence may serve in several levels, as e2 in the paper's X); chronicle
    # has then consumed what the third could pair with.
    assert len(seen) == {"|": 3, ";": 0, "^": 1}[op]


def test_a_deep_expression_prints_and_parses_back() -> None:
    det = detector(3)
    text = " | ".join(f"e{i % 3} ; e{(i + 1) % 3}" for i in range(N))
    expr = det.expression(text)
    assert parse(str(expr)) == parse(text)


@pytest.mark.parametrize("keys", ["same", "distinct"])
def test_thousands_of_nested_partitions(keys: str) -> None:
    names = ["k"] * N if keys == "same" else [f"k{i}" for i in range(N)]
    det = detector(2)
    seen: list[Any] = []
    text = "(e0 ; e1)" + "".join(f" by {k}" for k in names)
    det.rule("r", text, action=seen.append, context="chronicle")
    params = dict.fromkeys(names, 1)
    with det.transaction() as scope:
        det.signal("e0", **params)
        assert det.stored(scope) == 1
        token = scope.savepoint()
        det.signal("e0", **params)
        scope.rollback_to(token)  # the partitions' state, copied and restored
        det.signal("e1", **params)
        det.signal("e1")  # no keys: takes no part
        assert det.stored(scope) == 0  # every partition released
    (occ,) = seen
    assert [c.t_occ for c in occ.constituents] == [2, 4]


def nested_partitions(depth: int) -> tuple[str, list[str]]:
    """``((... (e0 ; e1) by k0 ; e2) by k1 ...) ; e(depth)) by k(depth-1)``: each
    level a partition with a sequence inside, around the level below; and the
    events that complete a detection after e0."""
    text = "e0"
    for i in range(depth):
        text = f"(({text}) ; e{i + 1}) by k{i}"
    return text, [f"e{i}" for i in range(1, depth + 1)]


def nested_sequences(depth: int) -> tuple[str, list[str]]:
    """As :func:`nested_partitions`, without the partitions."""
    text = "e0"
    for i in range(depth):
        text = f"({text}) ; e{i + 1}"
    return text, [f"e{i}" for i in range(1, depth + 1)]


def chained_partitions(depth: int) -> tuple[str, list[str]]:
    """``(e0 ; e1) by k0 by k1 ...``: partitions straight inside each other."""
    return "(e0 ; e1)" + "".join(f" by k{i}" for i in range(depth)), ["e1"]


def calls(fn: Any) -> int:
    """How many Python and builtin functions ``fn()`` calls (all nesting levels)."""
    n = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def work(depth: int, shape: Any) -> dict[str, int]:
    """Calls made by each phase of a rule on ``shape(depth)``: defining it, wiring
    it, one event through every partition, a detection, disabling it."""
    det = detector(depth + 1)
    text, then = shape(depth)
    expr = det.expression(text)
    seen: list[Any] = []
    params = {f"k{i}": 1 for i in range(depth)}
    out = {
        "define": calls(lambda: det.rule("r", expr, action=seen.append, context="chronicle")),
        "wire": calls(det.graph.ensure),
        "event": calls(lambda: det.signal("e0", **params)),
    }
    for name in then[:-1]:
        det.signal(name, **params)
    out["detect"] = calls(lambda: det.signal(then[-1], **params))
    assert len(seen) == 1
    assert det.stored(det.process_scope) == 0  # every partition released
    out["disable"] = calls(lambda: (det.rules["r"].disable(), det.graph.ensure()))
    return out


@pytest.mark.parametrize("shape", [nested_partitions, chained_partitions, nested_sequences])
def test_nested_expressions_cost_linear_work_in_their_depth(shape: Any) -> None:
    # Twice as deep, about twice the work in every phase, not four times: a
    # region (the partitions a node sits in) is one interned object, so keys hash
    # and compare in constant time; each region's partitions are wired once; and
    # routes are counted only for channels that can have several to a node.
    # (Give or take a hundred calls: some phases cost a few dozen at any depth.)
    small, large = work(100, shape), work(200, shape)
    worse = [phase for phase in small if large[phase] > 2.25 * small[phase] + 100]
    assert not worse, (worse, small, large)
