"""The strategies on their own, outside a graph: what the graph relies on them for."""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import A, Astar, Context, Not, Primitive
from sentinel import Any as AnyOf
from sentinel.algebra import expressions as ex
from sentinel.detector.operators import handler_class
from sentinel.detector.scopes import Store
from sentinel.occurrence import Occurrence

E1, E2, E3 = (Primitive(n) for n in ("E1", "E2", "E3"))
EXPRESSIONS = [
    E1 >> E2,
    E1 & E2,
    E1 | E2,
    AnyOf(2, E1, E2, E3),
    A(E1, E2, E3),
    Astar(E1, E2, E3),
    Not(E2, E1, E3),
]
#: The slots occurrences arrive on, one an instant: every strategy detects on them.
ARRIVALS = {2: [0, 1, 1, 0, 0, 1], 3: [0, 1, 2, 0, 1, 1, 2, 0, 2]}


@pytest.mark.parametrize("how", ["one", "batch", "instant"])
@pytest.mark.parametrize("context", list(Context))
@pytest.mark.parametrize("expr", EXPRESSIONS, ids=lambda e: type(e).__name__)
def test_a_detection_reaches_every_output_as_one_object(
    expr: ex.Expression, context: Context, how: str
) -> None:
    # The graph tells an instant's arrivals apart by identity (drain, OR's merge,
    # AND never pairing an occurrence with itself), so what a handler emits once
    # must be one object in each of its outputs: a copy per output would make
    # ``(E1 ^ S) | (E1 ^ S)`` detect twice (see base.Detection).
    h = handler_class(expr, context)(1, expr)
    got: tuple[list[Any], list[Any]] = ([], [])
    h.outb = (lambda _s, occs: got[0].extend(occs), lambda _s, occs: got[1].extend(occs))
    h.out = (lambda _s, occ: got[0].append(occ), lambda _s, occ: got[1].append(occ))
    store = Store({1: h.new_state})
    for t, slot in enumerate(ARRIVALS[len(expr.children)], start=1):
        occ = Occurrence(f"E{slot + 1}", t, float(t))
        if how == "one":
            h.entry(slot)(store, occ)
        elif how == "batch":
            h.entry_batch(slot)(store, [occ])
        else:
            batches: list[list[Any]] = [[] for _ in expr.children]
            batches[slot].append(occ)
            h.process_instant(store, batches)
    first, second = got
    assert first, "no detection: the arrivals do not exercise the strategy"
    assert len(first) == len(second)
    assert all(a is b for a, b in zip(first, second, strict=True))
