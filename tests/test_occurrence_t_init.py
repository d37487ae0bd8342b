"""``CompositeOccurrence.t_init`` (the NOW trigger mode's test of every
detection) against the earliest ``t_occ`` of the constituents computed
independently, on random trees of composites, plain composite tuples (as the
graph passes them on) and shared occurrences."""

from __future__ import annotations

import random

import pytest

from sentinel import LocalEventDetector
from sentinel.occurrence import CompositeOccurrence, Occurrence


def _tree(rng: random.Random, depth: int, leaves: list[int]) -> object:
    if depth == 0 or rng.random() < 0.3:
        t = rng.randrange(1, 1_000)
        leaves.append(t)
        return Occurrence("E", t, 0.0)
    parts = tuple(_tree(rng, depth - 1, leaves) for _ in range(rng.randint(1, 4)))
    t = rng.randrange(1, 1_000)
    raw = ("expr", t, parts)
    return raw if rng.random() < 0.3 else tuple.__new__(CompositeOccurrence, raw)


@pytest.mark.parametrize("seed", range(200))
def test_t_init_is_the_earliest_constituent(seed: int) -> None:
    rng = random.Random(seed)
    leaves: list[int] = []
    parts = tuple(_tree(rng, 4, leaves) for _ in range(rng.randint(1, 3)))
    occ = tuple.__new__(CompositeOccurrence, ("expr", max(leaves), parts))
    assert occ.t_init == min(leaves)
    assert occ.t_init == min(o.t_occ for o in occ.constituents)


def test_a_composite_without_constituents_has_no_t_init() -> None:
    with pytest.raises(ValueError, match="no constituents"):
        _ = CompositeOccurrence("expr", 3, ()).t_init  # type: ignore[arg-type]


def test_a_rule_sharing_older_nodes_drops_detections_that_began_before_it() -> None:
    """The NOW trigger mode through the scheduler: the second rule shares the
    first one's node, so its ``since`` is set, and ``t_init`` decides."""
    det = LocalEventDetector()
    det.explicit("A")
    det.explicit("B")
    first: list[object] = []
    second: list[object] = []
    det.rule("first", "A ; B", action=first.append, context="chronicle")
    det.signal("A", n=1)  # before the second rule
    det.rule("second", "A ; B", action=second.append, context="chronicle")
    det.signal("A", n=2)
    det.signal("B", n=3)  # pairs with A1 (chronicle): older than the second rule
    det.signal("B", n=4)  # pairs with A2
    assert [o.of("A")[0].params["n"] for o in first] == [1, 2]  # type: ignore[attr-defined]
    assert [o.of("A")[0].params["n"] for o in second] == [2]  # type: ignore[attr-defined]
