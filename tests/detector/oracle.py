"""An independent model of the unrestricted context (Snoop 2.2.1), for property
tests.

It computes every occurrence of an expression over a finite history straight from
the definitions, with the readings docs/semantics.md states (strict order for SEQ,
A, A*, NOT; equal times allowed for AND and ANY but never an occurrence with
itself; A's interval (t1, t3]; NOT's interval closed). It shares no code with the
detector. Occurrences are *trees*: a primitive is its t_occ; a composite is
``(text of the expression, tuple of part trees)``, as ``tests.helpers.tree`` builds
from detections.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from itertools import combinations, product
from typing import Any

from sentinel.algebra import expressions as ex

Event = tuple[int, str, Mapping[str, Any]]  # (t_occ, name, params)
Occ = tuple[int, Any]  # (time, tree)


def unrestricted(expr: ex.Expression, history: Sequence[Event]) -> list[Any]:
    """Every occurrence of ``expr`` over ``history`` (a list of trees; an
    occurrence reachable in two ways appears twice, as the definitions count it)."""
    hist = tuple((t, n, tuple(sorted(p.items()))) for t, n, p in history)
    return [tree for _, tree in _occ(expr, hist)]


@cache
def _occ(e: ex.Expression, hist: tuple[Any, ...]) -> tuple[Occ, ...]:
    kind = type(e)
    if kind is ex.Primitive:
        assert isinstance(e, ex.Primitive)
        return tuple((t, t) for t, n, _ in hist if n == e.name)
    if kind is ex.Keyed:
        assert isinstance(e, ex.Keyed)
        key = e.key
        values = {dict(p)[key] for _, _, p in hist if key in dict(p)}
        out: list[Occ] = []
        for v in values:
            part = tuple(h for h in hist if dict(h[2]).get(key, _NO) == v)
            out.extend(_occ(e.expression, part))
        return tuple(sorted(out, key=_order))
    text = str(e)
    kids = [_occ(c, hist) for c in e.children]
    out = []
    if kind is ex.Or:
        # An occurrence reaching OR through both operands is one occurrence.
        out = [*kids[0], *(o for o in kids[1] if o not in kids[0])]
    elif kind is ex.Seq or (kind is ex.And and e.children[0] == e.children[1]):
        for (tx, x), (ty, y) in product(kids[0], kids[1]):
            if tx < ty:
                out.append((ty, (text, (x, y))))
    elif kind is ex.And:
        for (tx, x), (ty, y) in product(kids[0], kids[1]):
            if x == y and not isinstance(x, tuple):
                continue
            parts = (x, y) if tx <= ty else (y, x)
            out.append((max(tx, ty), (text, parts)))
    elif kind is ex.Any:
        assert isinstance(e, ex.Any)
        m = e.m
        for k, occs in enumerate(kids):
            others = [j for j in range(len(kids)) if j != k]
            for ty, y in occs:
                for js in combinations(others, m - 1):
                    pools = [
                        [
                            (tx, j, x)
                            for tx, x in kids[j]
                            if (tx < ty or (tx == ty and j < k)) and x != y
                        ]
                        for j in js
                    ]
                    for combo in product(*pools):
                        parts = tuple(x for _, _, x in sorted(combo, key=lambda c: (c[0], c[1])))
                        out.append((ty, (text, (*parts, y))))
    elif kind is ex.A:
        starts, middles, ends = kids
        for (tx, x), (ty, y) in product(starts, middles):
            if tx < ty and not any(tx < tz < ty for tz, _ in ends):
                out.append((ty, (text, (x, y))))
    elif kind is ex.Astar:
        starts, middles, ends = kids
        for (tx, x), (tz, z) in product(starts, ends):
            if tx < tz:
                inside = tuple(y for ty, y in sorted(middles, key=_order) if tx < ty <= tz)
                out.append((tz, (text, (x, *inside, z))))
    elif kind is ex.Not:
        starts, middles, ends = kids
        for (tx, x), (tz, z) in product(starts, ends):
            if tx < tz and not any(tx <= ty <= tz for ty, _ in middles):
                out.append((tz, (text, (x, z))))
    else:  # pragma: no cover
        raise TypeError(kind)
    return tuple(sorted(out, key=_order))


_NO = object()


def _order(o: Occ) -> tuple[int, tuple[int, ...]]:
    # The detector orders one instant's occurrences by their constituents' t_occ
    # in tree order (graph._canonical).
    return (o[0], tuple(_ts(o[1])))


def _ts(tree: Any) -> Any:
    if isinstance(tree, int):
        yield tree
    else:
        for part in tree[1]:
            yield from _ts(part)
