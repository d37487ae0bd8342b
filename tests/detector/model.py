r"""An executable model of Appendix A: the four parameter contexts, operator by
operator, written as the pseudocode reads, for property tests.

It is a second implementation of detection, independent of the event graph: it
shares nothing with ``sentinel.detector`` but the expression classes it reads. An
expression becomes a tree of model nodes (no shared nodes, no compiled leaves, no
partitions released); a history is a list of :class:`Signal`, one per instant, and
each node, bottom up, receives the occurrences its operands produced at that
instant and answers with its own.

Occurrences are values (as ``tests.helpers.tree`` builds them from detections): a
primitive occurrence is its ``t_occ``; a composite one is ``(text of the
operator's expression, parts)``. Equal values are one occurrence, wherever they
came from.

The readings are those of ``seeds/ERRATA.md`` and ``docs/semantics.md``:

- *Instants.* Operands are served in role order (SEQ: E2, then E1; A, A*, NOT:
  E2, then E3, then E1; NOT drops an E1 that arrives with an E2). Several
  occurrences on one operand at one instant (a batch) are taken in canonical
  order (time, then constituents' ``t_occ`` in tree order, then the tree's text);
  in the continuous context a batch of terminators pairs with the state as it was
  before the batch, elsewhere they are taken one after the other.
- *AND and ANY* take the instant's distinct occurrences in canonical order, each
  on every operand it reached, and combine ``m`` distinct occurrences that can be
  given ``m`` distinct operands (AND: two). Recent picks the most recent
  combination, chronicle the oldest among the queues' heads (both consumed),
  continuous every one (the stored ones consumed after the instant, the arrivals
  kept: 2.3.2's "retain the terminator"), cumulative everything stored once one
  fits (all consumed, the arrival too).
- *A\** needs an open interval at E3; cumulative A\* and NOT store E1 only while
  none is stored; continuous A\* passes ``<e1, e2s after e1, e3>`` for each e1.
- *Intervals*: A's and A\*'s are (t1, t3], NOT's is closed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations, product
from typing import Any

from sentinel.algebra import expressions as ex

CONTEXTS = ("recent", "chronicle", "continuous", "cumulative")


@dataclass(frozen=True)
class Signal:
    """One instant of a history: a signal on ``channel`` at ``t``. It is an
    occurrence of every primitive event named ``channel`` whose selector is None
    or among ``selectors``."""

    t: int
    channel: str
    selectors: tuple[Hashable, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    source: Hashable | None = None


Value = Any  # int | tuple[str, tuple[Value, ...]]


def detect(expr: ex.Expression, history: Iterable[Signal], context: str) -> list[Value]:
    """The detections of ``expr`` over ``history`` in ``context``, in order."""
    root = _build(expr, context)
    out: list[Value] = []
    for signal in history:
        out.extend(root.step(signal))
    return out


# -- values ------------------------------------------------------------------------------


def _leaves(v: Value) -> list[int]:
    if isinstance(v, int):
        return [v]
    return [t for p in v[1] for t in _leaves(p)]


def _shape(v: Value) -> list[str]:
    if isinstance(v, int):
        return [""]
    return [f"{v[0]}/{len(v[1])}", *(s for p in v[1] for s in _shape(p))]


def when(v: Value) -> int:
    """The instant of an occurrence: that of its last constituent."""
    return max(_leaves(v))


def key(v: Value) -> tuple[Any, ...]:
    """The canonical order of occurrences."""
    return (when(v), tuple(_leaves(v)), tuple(_shape(v)))


def canonical(values: Iterable[Value]) -> list[Value]:
    """Distinct values in canonical order."""
    out: list[Value] = []
    for v in values:
        if v not in out:
            out.append(v)
    return sorted(out, key=key)


# -- nodes -------------------------------------------------------------------------------


class Node:
    def step(self, s: Signal) -> list[Value]:
        raise NotImplementedError


class Leaf(Node):
    def __init__(self, e: ex.Primitive) -> None:
        self.e = e

    def step(self, s: Signal) -> list[Value]:
        if s.channel == self.e.name and (self.e.selector is None or self.e.selector in s.selectors):
            return [s.t]
        return []


class Partitioned(Node):
    """``E by k``: one model of E per value of k; a signal without k takes no part."""

    def __init__(self, e: ex.Keyed, context: str) -> None:
        self.e, self.context = e, context
        self.parts: dict[Hashable, Node] = {}

    def step(self, s: Signal) -> list[Value]:
        if self.e.key is ex.SOURCE:
            if s.source is None:
                return []
            k = s.source
        elif self.e.key in s.params:
            k = s.params[self.e.key]
        else:
            return []
        if k not in self.parts:
            self.parts[k] = _build(self.e.expression, self.context)
        return self.parts[k].step(s)


class Operator(Node):
    """An operator node: its operands' occurrences of the instant, deduplicated and
    in canonical order, go to ``instant``; what it passes to its parent is
    returned."""

    def __init__(self, e: ex.Expression, context: str) -> None:
        self.e, self.text = e, str(e)
        self.kids = [_build(c, context) for c in e.children]
        self.init()

    def init(self) -> None:
        pass

    def step(self, s: Signal) -> list[Value]:
        batches = [canonical(k.step(s)) for k in self.kids]
        if not any(batches):
            return []
        self.out: list[Value] = []
        self.instant(batches)
        return canonical(self.out)

    def instant(self, batches: list[list[Value]]) -> None:
        raise NotImplementedError

    def passes(self, *parts: Value) -> None:
        """ "Pass <parts> to the parent"."""
        self.out.append((self.text, tuple(parts)))


class Or(Operator):
    def instant(self, batches: list[list[Value]]) -> None:
        # For any event <e> signalled: pass <e> to the parent (once, 2.2.1 item 1).
        self.out.extend(v for b in batches for v in b)


# -- SEQ ---------------------------------------------------------------------------------


class Seq(Operator):
    def instant(self, batches: list[list[Value]]) -> None:
        e1s, e2s = batches
        if e2s:
            self.right(e2s)  # terminators first: strict order
        for e1 in e1s:
            self.left(e1)

    def init(self) -> None:
        self.E1: list[Value] = []

    def left(self, e1: Value) -> None:
        self.E1.append(e1)  # Append e1 to E1's list (recent: replace, below)

    def right(self, e2s: list[Value]) -> None:
        raise NotImplementedError


class SeqRecent(Seq):
    def left(self, e1: Value) -> None:
        self.E1 = [e1]  # Replace e1 in E1's list

    def right(self, e2s: list[Value]) -> None:
        for e2 in e2s:
            if self.E1:  # if E1 list is not empty: Pass <e1, e2> to parent
                self.passes(self.E1[0], e2)


class SeqChronicle(Seq):
    def right(self, e2s: list[Value]) -> None:
        for e2 in e2s:
            if self.E1:  # Pass <E1's head, e2>; Delete head of E1's list
                self.passes(self.E1.pop(0), e2)


class SeqContinuous(Seq):
    def right(self, e2s: list[Value]) -> None:
        if self.E1:  # For every event e1 in E1's list: Pass <e1, e2>; FLUSH E1's list
            for e2 in e2s:
                for e1 in self.E1:
                    self.passes(e1, e2)
            self.E1 = []


class SeqCumulative(Seq):
    def right(self, e2s: list[Value]) -> None:
        for e2 in e2s:
            if self.E1:  # Pass <all e1's, e2>; FLUSH E1's buffer
                self.passes(*self.E1, e2)
                self.E1 = []


# -- A and A* -----------------------------------------------------------------------------


class Interval(Operator):
    def init(self) -> None:
        self.E1: list[Value] = []
        self.E2: list[Value] = []

    def instant(self, batches: list[list[Value]]) -> None:
        e1s, e2s, e3s = batches
        if e2s:
            self.middle(e2s)
        if e3s:
            self.right(e3s)
        for e1 in e1s:
            self.left(e1)

    def left(self, e1: Value) -> None:
        self.E1.append(e1)

    def middle(self, e2s: list[Value]) -> None:
        raise NotImplementedError

    def right(self, e3s: list[Value]) -> None:
        raise NotImplementedError


class ARecent(Interval):
    def left(self, e1: Value) -> None:
        self.E1 = [e1]  # Replace e1 in E1's list

    def middle(self, e2s: list[Value]) -> None:
        for e2 in e2s:
            if self.E1:
                self.passes(self.E1[0], e2)

    def right(self, e3s: list[Value]) -> None:
        self.E1 = []  # FLUSH E1's buffer


class AChronicle(Interval):
    def middle(self, e2s: list[Value]) -> None:
        for e2 in e2s:
            if self.E1:  # Pass <E1's head, e2>; Delete head of E1's list
                self.passes(self.E1.pop(0), e2)

    def right(self, e3s: list[Value]) -> None:
        self.E1 = []


class AContinuous(Interval):
    def middle(self, e2s: list[Value]) -> None:
        for e2 in e2s:
            for e1 in self.E1:  # For every event e1 in E1's list: Pass <e1, e2>
                self.passes(e1, e2)

    def right(self, e3s: list[Value]) -> None:
        self.E1 = []


class ACumulative(Interval):
    def left(self, e1: Value) -> None:
        if not self.E1:  # if E1's list is empty: Store e1
            self.E1 = [e1]

    def middle(self, e2s: list[Value]) -> None:
        for e2 in e2s:
            if self.E1:  # Pass <e1, e2>; FLUSH E1's buffer
                self.passes(self.E1[0], e2)
                self.E1 = []

    def right(self, e3s: list[Value]) -> None:
        self.E1 = []


class AstarRecent(Interval):
    def left(self, e1: Value) -> None:
        self.E1 = [e1]  # Replace e1 in E1's list; FLUSH E2's buffer
        self.E2 = []

    def middle(self, e2s: list[Value]) -> None:
        if self.E1:  # if E1's list is not empty: Append e2 to E2's list
            self.E2.extend(e2s)

    def right(self, e3s: list[Value]) -> None:
        for e3 in e3s:
            if self.E1:  # (ERRATA: an open interval is needed) Pass <e1, e2s, e3>
                self.passes(self.E1[0], *self.E2, e3)
                self.E1, self.E2 = [], []


class AstarChronicle(Interval):
    def middle(self, e2s: list[Value]) -> None:
        if self.E1:
            self.E2.extend(e2s)

    def right(self, e3s: list[Value]) -> None:
        for e3 in e3s:
            if not self.E1:
                continue
            # Pass <E1's head, all e2's in E2's list, e3>; delete the head; delete
            # the e2's that do not follow the next head (its interval is (t1, t3]).
            head = self.E1.pop(0)
            self.passes(head, *self.E2, e3)
            if self.E1:
                start = when(self.E1[0])
                self.E2 = [e2 for e2 in self.E2 if when(e2) > start]
            else:
                self.E2 = []  # If E1's list is empty then FLUSH E2's buffer


class AstarContinuous(Interval):
    def middle(self, e2s: list[Value]) -> None:
        if self.E1:
            self.E2.extend(e2s)

    def right(self, e3s: list[Value]) -> None:
        if not self.E1:
            return
        # For each e1: Pass <e1, all e2's whose t_occ is greater than t_occ(e1), e3>
        for e3 in e3s:
            for e1 in self.E1:
                self.passes(e1, *(e2 for e2 in self.E2 if when(e2) > when(e1)), e3)
        self.E1, self.E2 = [], []  # FLUSH E1's and E2's buffers


class AstarCumulative(Interval):
    def left(self, e1: Value) -> None:
        if not self.E1:  # (ERRATA: "is empty") Store e1 in E1's list
            self.E1 = [e1]

    def middle(self, e2s: list[Value]) -> None:
        if self.E1:
            self.E2.extend(e2s)

    def right(self, e3s: list[Value]) -> None:
        for e3 in e3s:
            if self.E1:
                self.passes(self.E1[0], *self.E2, e3)
                self.E1, self.E2 = [], []


# -- NOT ----------------------------------------------------------------------------------


class Not(Interval):
    def instant(self, batches: list[list[Value]]) -> None:
        e1s, e2s, e3s = batches
        if e2s:
            self.E1 = []  # if middle event e2 is signalled: FLUSH E1's buffer
            e1s = []  # [t1, t3] is closed: an E1 with an E2 at its instant is void
        if e3s:
            self.right(e3s)
        for e1 in e1s:
            self.left(e1)


class NotRecent(Not):
    def left(self, e1: Value) -> None:
        self.E1 = [e1]

    def right(self, e3s: list[Value]) -> None:
        for e3 in e3s:
            if self.E1:  # Pass <e1, e3>; FLUSH E1's buffer
                self.passes(self.E1[0], e3)
                self.E1 = []


class NotChronicle(Not):
    def right(self, e3s: list[Value]) -> None:
        for e3 in e3s:
            if self.E1:  # pass <E1's head, e3>; Delete head of E1's list
                self.passes(self.E1.pop(0), e3)


class NotContinuous(Not):
    def right(self, e3s: list[Value]) -> None:
        if self.E1:  # For each e1 in E1's list: Pass <e1, e3>; FLUSH E1's buffer
            for e3 in e3s:
                for e1 in self.E1:
                    self.passes(e1, e3)
            self.E1 = []


class NotCumulative(Not):
    def left(self, e1: Value) -> None:
        if not self.E1:  # (ERRATA: "is empty") Store e1
            self.E1 = [e1]

    def right(self, e3s: list[Value]) -> None:
        for e3 in e3s:
            if self.E1:
                self.passes(self.E1[0], e3)
                self.E1 = []


# -- AND and ANY -----------------------------------------------------------------------------


class Conjunction(Operator):
    """``ANY(m, E1, ..., En)``; AND is ``ANY(2, E1, E2)``. ``self.lists[j]`` holds
    the stored occurrences of operand j (an occurrence that reached several
    operands is held for each)."""

    def init(self) -> None:
        self.m = self.e.m if isinstance(self.e, ex.Any) else 2
        self.lists: list[list[Value]] = [[] for _ in self.kids]

    def instant(self, batches: list[list[Value]]) -> None:
        reached: dict[Value, list[int]] = {}
        for j, batch in enumerate(batches):
            for v in batch:
                reached.setdefault(v, []).append(j)
        self.before = [list(lst) for lst in self.lists]
        self.consumed: list[Value] = []
        for v in canonical(reached):
            self.arrive(v, reached[v])
        self.end_of_instant()

    def held(self, lists: list[list[Value]]) -> dict[Value, list[int]]:
        out: dict[Value, list[int]] = {}
        for j, lst in enumerate(lists):
            for v in lst:
                out.setdefault(v, []).append(j)
        return out

    def fits(self, groups: list[list[int]]) -> bool:
        """Some choice of one operand per occurrence, all distinct."""
        return any(len(set(c)) == len(c) for c in product(*groups))

    def combos(self, candidates: dict[Value, list[int]], e: Value, mine: list[int]) -> list[Any]:
        """Every set of m-1 candidates that, with e, occurs as m distinct operands."""
        others = [v for v in candidates if v != e]
        return [
            c
            for c in combinations(others, self.m - 1)
            if self.fits([mine, *(candidates[v] for v in c)])
        ]

    def pass_combo(self, combo: Sequence[Value], e: Value) -> None:
        self.passes(*sorted(combo, key=key), e)

    def arrive(self, e: Value, mine: list[int]) -> None:
        raise NotImplementedError

    def end_of_instant(self) -> None:
        pass


class ConjRecent(Conjunction):
    def arrive(self, e: Value, mine: list[int]) -> None:
        # Replace ek in its list; find the most recent m distinct occurrences.
        combos = self.combos(self.held(self.lists), e, mine)
        if combos:
            best = max(combos, key=lambda c: sorted((key(v) for v in c), reverse=True))
            self.pass_combo(best, e)
        for j in mine:
            self.lists[j] = [e]


class ConjChronicle(Conjunction):
    def arrive(self, e: Value, mine: list[int]) -> None:
        # The oldest (head) m distinct occurrences; delete them from their lists.
        heads = self.held([lst[:1] for lst in self.lists])
        combos = self.combos(heads, e, mine)
        if combos:
            best = min(combos, key=lambda c: sorted(key(v) for v in c))
            self.pass_combo(best, e)
            self.lists = [[v for v in lst if v not in best] for lst in self.lists]
        else:
            for j in mine:
                self.lists[j].append(e)


class ConjContinuous(Conjunction):
    def arrive(self, e: Value, mine: list[int]) -> None:
        # Every combination; the stored ones are consumed after the instant (a
        # batch pairs with the state before it), the terminator is retained.
        for combo in self.combos(self.held(self.lists), e, mine):
            self.pass_combo(combo, e)
            self.consumed.extend(v for v in combo if any(v in lst for lst in self.before))
        if self.m > 1:
            for j in mine:
                self.lists[j].append(e)

    def end_of_instant(self) -> None:
        self.lists = [[v for v in lst if v not in self.consumed] for lst in self.lists]


class ConjCumulative(Conjunction):
    def arrive(self, e: Value, mine: list[int]) -> None:
        # Once m distinct are there: pass <all ei, all ej, ..., ek>; FLUSH all.
        held = self.held(self.lists)
        if self.combos(held, e, mine):
            self.pass_combo([v for v in held if v != e], e)
            self.lists = [[] for _ in self.lists]
        else:
            for j in mine:
                self.lists[j].append(e)


# -- building ----------------------------------------------------------------------------


def _contexts(*classes: type[Operator]) -> dict[str, type[Operator]]:
    return dict(zip(CONTEXTS, classes, strict=True))


_NODES: dict[type[ex.Expression], dict[str, type[Operator]]] = {
    ex.Seq: _contexts(SeqRecent, SeqChronicle, SeqContinuous, SeqCumulative),
    ex.A: _contexts(ARecent, AChronicle, AContinuous, ACumulative),
    ex.Astar: _contexts(AstarRecent, AstarChronicle, AstarContinuous, AstarCumulative),
    ex.Not: _contexts(NotRecent, NotChronicle, NotContinuous, NotCumulative),
    ex.And: _contexts(ConjRecent, ConjChronicle, ConjContinuous, ConjCumulative),
    ex.Any: _contexts(ConjRecent, ConjChronicle, ConjContinuous, ConjCumulative),
    ex.Or: _contexts(Or, Or, Or, Or),
}


def _build(e: ex.Expression, context: str) -> Node:
    if isinstance(e, ex.Primitive):
        return Leaf(e)
    if isinstance(e, ex.Keyed):
        return Partitioned(e, context)
    return _NODES[type(e)][context](e, context)
