"""AND and ANY at an instant that one signal reaches by several routes.

The conjunctions are unordered, so the arrivals of one instant are not processed
operand by operand (that would make ``a ^ b`` and ``b ^ a`` differ) but
occurrence by occurrence, in the canonical order of occurrences
(:func:`~sentinel.detector.operators.base.instant_order`). An occurrence that reached
several operands (``E ^ E``, ``(E1 | E2) ^ E1``, an expression and its partition
``(E by k) ^ E``) is *one* arrival that may stand for any of them; equal
occurrences are one occurrence, wherever they came from. A detection combines
``m`` distinct occurrences that can be given ``m`` distinct operands (AND: ``m = 2``
of two), the arriving one last.

Each context then picks among the stored occurrences as Appendix A does:

recent
    the ``m - 1`` most recent that fit; nothing is consumed.
chronicle
    the ``m - 1`` oldest among the heads of the operands' queues that fit; they
    and the arrival are consumed; an arrival that completes nothing is queued.
continuous
    every combination that fits; the stored occurrences used are consumed at the
    end of the instant (a batch pairs against the state before it), the arrivals
    are kept (a terminator can initiate, 2.3.2).
cumulative
    everything stored, once a combination fits; all is consumed, the arrival too.
unrestricted
    every combination that fits; nothing is consumed.

Handlers use this only when the graph buffers them; arrivals on one operand at a
time (the usual case) take the handlers' own entry points, which do the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

from sentinel.detector.operators.base import ARRIVAL, Handler, instant_order
from sentinel.detector.scopes import Store

__all__ = ["arrivals", "chronicle", "continuous", "cumulative", "recent", "unrestricted"]

Arrival = tuple[Any, tuple[int, ...]]  # (occurrence, the operands it reached)


def arrivals(batches: Sequence[list[Any]], twins: bool = True) -> list[Arrival]:
    """The distinct occurrences of an instant, each with the operands it reached,
    in canonical order (``twins``: equal occurrences may be distinct objects)."""
    found: list[Any] = []
    slots: list[list[int]] = []
    for slot, batch in enumerate(batches):
        for occ in batch:
            for i, seen in enumerate(found):
                if seen is occ or (twins and seen == occ):
                    slots[i].append(slot)
                    break
            else:
                found.append(occ)
                slots.append([slot])
    where = {id(o): tuple(s) for o, s in zip(found, slots, strict=True)}
    instant_order(found)
    return [(o, where[id(o)]) for o in found]


def _fits(sets: list[Sequence[int]]) -> bool:
    """Whether each of ``sets`` can take a distinct operand of its own (a matching
    of occurrences to the operands they reached)."""
    owner: dict[int, int] = {}

    def place(i: int, tried: set[int]) -> bool:
        for s in sets[i]:
            if s not in tried:
                tried.add(s)
                if s not in owner or place(owner[s], tried):
                    owner[s] = i
                    return True
        return False

    return all(place(i, set()) for i in range(len(sets)))


def _stored(lists: Sequence[Sequence[Any]], occ: Any) -> list[Arrival]:
    """The distinct occurrences held in ``lists`` (one per operand) other than
    ``occ``, each with the operands it is held for."""
    index: dict[int, int] = {}
    out: list[tuple[Any, list[int]]] = []
    for j, lst in enumerate(lists):
        for o in lst:
            if o is occ:
                continue
            i = index.get(id(o))
            if i is None:
                index[id(o)] = len(out)
                out.append((o, [j]))
            elif out[i][1][-1] != j:
                out[i][1].append(j)
    return [(o, tuple(s)) for o, s in out]


def _detection(h: Handler, parts: list[Any], occ: Any) -> tuple[Any, ...]:
    if len(parts) > 1:
        instant_order(parts)
    return (h.expr, occ[1], (*parts, occ))


def _pick(candidates: list[Arrival], mine: tuple[int, ...], need: int) -> list[Any]:
    """The first ``need`` candidates, in the order given, that fit together with the
    arrival (fewer if they do not exist)."""
    chosen: list[Any] = []
    sets: list[Sequence[int]] = [mine]
    for o, s in candidates:
        if len(chosen) == need:
            break
        if _fits([*sets, s]):
            chosen.append(o)
            sets.append(s)
    return chosen


def _combinations(candidates: list[Arrival], mine: tuple[int, ...], need: int) -> list[list[Any]]:
    return [
        [o for o, _ in combo]
        for combo in combinations(candidates, need)
        if _fits([mine, *(s for _, s in combo)])
    ]


def _by_recency(h: Handler, candidates: list[Arrival]) -> list[Arrival]:
    order = [o for o, _ in candidates]
    instant_order(order)
    rank = {id(o): i for i, o in enumerate(order)}
    if h.seq is not ARRIVAL:  # a node in occurrence-time order: its own processing order
        seq = h.seq
        return sorted(candidates, key=lambda c: (seq(c[0]), rank[id(c[0])]))
    return sorted(candidates, key=lambda c: rank[id(c[0])])


def recent(h: Handler, store: Store, batches: Sequence[list[Any]], m: int) -> None:
    st = store[h.hid]  # the most recent occurrence of each operand
    out: list[Any] = []
    for occ, mine in arrivals(batches, h.twins):
        held = _stored([[o] if o is not None else [] for o in st], occ)
        chosen = _pick(_by_recency(h, held)[::-1], mine, m - 1)
        if len(chosen) == m - 1:
            out.append(_detection(h, chosen, occ))
        for j in mine:
            st[j] = occ
    h.emit_batch(store, out)


def chronicle(h: Handler, store: Store, batches: Sequence[list[Any]], m: int) -> None:
    st = store[h.hid]  # a queue per operand
    out: list[Any] = []
    for occ, mine in arrivals(batches, h.twins):
        heads = _stored([[q[0]] if q else [] for q in st], occ)
        chosen = _pick(_by_recency(h, heads), mine, m - 1)
        if len(chosen) == m - 1:
            for q in st:
                for o in chosen:
                    if any(x is o for x in q):
                        _remove(q, o)
            out.append(_detection(h, chosen, occ))
        else:
            for j in mine:
                st[j].append(occ)
    h.emit_batch(store, out)


def _remove(q: Any, occ: Any) -> None:
    for i, o in enumerate(q):
        if o is occ:
            del q[i]
            return


def continuous(h: Handler, store: Store, batches: Sequence[list[Any]], m: int) -> None:
    st = store[h.hid]  # a list per operand
    before = {id(o) for lst in st for o in lst}
    used: set[int] = set()
    out: list[Any] = []
    for occ, mine in arrivals(batches, h.twins):
        for combo in _combinations(_stored(st, occ), mine, m - 1):
            out.append(_detection(h, combo, occ))
            used.update(id(o) for o in combo if id(o) in before)
        if m > 1:
            for j in mine:
                st[j].append(occ)
    if used:
        for j, lst in enumerate(st):
            st[j] = [o for o in lst if id(o) not in used]
    h.emit_batch(store, out)


def cumulative(h: Handler, store: Store, batches: Sequence[list[Any]], m: int) -> None:
    st = store[h.hid]  # a list per operand
    out: list[Any] = []
    for occ, mine in arrivals(batches, h.twins):
        held = _stored(st, occ)
        if len(_pick(held, mine, m - 1)) == m - 1:
            for j in range(len(st)):
                st[j] = []
            out.append(_detection(h, [o for o, _ in held], occ))
        else:
            for j in mine:
                st[j].append(occ)
    h.emit_batch(store, out)


def unrestricted(h: Handler, store: Store, batches: Sequence[list[Any]], m: int) -> None:
    st = store[h.hid]  # a list per operand: everything so far
    out: list[Any] = []
    for occ, mine in arrivals(batches, h.twins):
        for combo in _combinations(_stored(st, occ), mine, m - 1):
            out.append(_detection(h, combo, occ))
        for j in mine:
            st[j].append(occ)
    h.emit_batch(store, out)
