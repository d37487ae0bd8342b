"""An independent model of the unrestricted context (Snoop 2.2.1), for property
tests.

It computes every occurrence of an expression over a finite history straight from
the definitions, with the readings docs/semantics.md states (strict order for SEQ,
A, A*, NOT; equal times allowed for AND and ANY but never an occurrence with
itself; A's interval (t1, t3]; NOT's interval closed). Composite histories are
sets (2.2): an AND or ANY occurrence is a *set* of distinct occurrences, counted
once however its members reach the operands. It shares no code with the detector.
Occurrences are *trees*: a primitive is its t_occ; a composite is ``(text of the
expression, tuple of part trees)``, as ``tests.helpers.tree`` builds from
detections; a composite's parts are in operator order, AND's and ANY's in the
canonical order of occurrences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from itertools import combinations, product
from typing import Any

from sentinel.algebra import expressions as ex
from tests.detector.model import Signal, key

Event = tuple[int, str, Mapping[str, Any]]  # (t_occ, name, params)
Occ = tuple[int, Any]  # (time, tree)


def unrestricted(expr: ex.Expression, history: Sequence[Event | Signal]) -> list[Any]:
    """Every occurrence of ``expr`` over ``history`` (a list of trees)."""
    signals = tuple(
        h if isinstance(h, Signal) else Signal(h[0], h[1], (), dict(h[2])) for h in history
    )
    hist = tuple(
        (s.t, s.channel, s.selectors, tuple(sorted(s.params.items())), s.source) for s in signals
    )
    return [tree for _, tree in _occ(expr, hist)]


@cache
def _occ(e: ex.Expression, hist: tuple[Any, ...]) -> tuple[Occ, ...]:
    kind = type(e)
    if kind is ex.Primitive:
        assert isinstance(e, ex.Primitive)
        return tuple(
            (t, t)
            for t, n, sel, _, _ in hist
            if n == e.name and (e.selector is None or e.selector in sel)
        )
    if kind is ex.Keyed:
        assert isinstance(e, ex.Keyed)

        def value(h: Any) -> Any:
            if e.key is ex.SOURCE:
                return h[4] if h[4] is not None else _NO
            return dict(h[3]).get(e.key, _NO)

        out: list[Occ] = []
        for v in {value(h) for h in hist} - {_NO}:
            out.extend(_occ(e.expression, tuple(h for h in hist if value(h) == v)))
        return tuple(sorted(out, key=_order))
    text = str(e)
    kids = [_occ(c, hist) for c in e.children]
    out = []
    if kind is ex.Or:
        # A union: an occurrence reaching OR through both operands is one occurrence.
        out = [*kids[0], *(o for o in kids[1] if o not in kids[0])]
    elif kind is ex.Seq:
        for (tx, x), (ty, y) in product(kids[0], kids[1]):
            if tx < ty:
                out.append((ty, (text, (x, y))))
    elif kind in (ex.And, ex.Any):
        m = e.m if isinstance(e, ex.Any) else 2
        # Sets of m distinct occurrences that are occurrences of m distinct operands.
        operands: dict[Any, set[int]] = {}
        for j, occs in enumerate(kids):
            for _, x in occs:
                operands.setdefault(x, set()).add(j)
        for group in combinations(sorted(operands, key=_tree_key), m):
            if any(len(set(c)) == m for c in product(*(operands[x] for x in group))):
                parts = tuple(sorted(group, key=_tree_key))
                out.append((_time(parts[-1]), (text, parts)))
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


def _time(tree: Any) -> int:
    return tree if isinstance(tree, int) else max(_time(p) for p in tree[1])


def _tree_key(tree: Any) -> tuple[Any, ...]:
    return key(tree)


def _order(o: Occ) -> tuple[Any, ...]:
    return key(o[1])
