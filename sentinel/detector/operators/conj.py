"""AND (E1 ^ E2) and ANY(m, E1, ..., En): conjunctions in any order.

Both are unordered: an occurrence pairs with stored occurrences of the other
operands whatever their order, equal times included, but never with itself (one
occurrence can reach both operands, for example a class-level and an
instance-level event of one call). ``ANY(2, E1, E2)`` detects exactly what
``E1 ^ E2`` detects in every context.

Terminator retention follows the prose of 2.3.2 where the pseudocode disagrees
(``docs/semantics.md``, "Readings we chose"): in the recent and continuous
contexts the terminator is kept, because it can initiate a later detection (e4¹
at node C); in the chronicle and cumulative contexts an occurrence that completed
a detection is consumed.

The entry points below take arrivals on one operand at a time. When one signal
can reach several operands (the graph buffers the handler), an instant is
processed by :mod:`sentinel.detector.operators.instants`, occurrence by
occurrence, which does the same for one operand at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from functools import partial
from itertools import combinations, product
from typing import Any

from sentinel.algebra import expressions as ex
from sentinel.detector.contexts import Context
from sentinel.detector.operators import instants
from sentinel.detector.operators.base import Detection, Entry, Handler, strategy
from sentinel.detector.scopes import Store


@strategy(ex.And, Context.RECENT)
class AndRecent(Handler):
    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [None, None]

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        other = st[1]
        if other is not None:
            c: Detection = (self.expr, occ[1], (other, occ))
            for f in self.out:
                f(store, c)
        st[0] = occ

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        other = st[0]
        if other is not None:
            c: Detection = (self.expr, occ[1], (other, occ))
            for f in self.out:
                f(store, c)
        st[1] = occ

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        o = g.var("o")
        g.line(f"{o} = {st}[{1 - slot}]")
        g.line(f"if {o} is not None:")
        with g.block():
            self.gen_detect(g, store, occ, f"{o}, {occ}")
        g.line(f"{st}[{slot}] = {occ}")

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.recent(self, store, batches, 2)


@strategy(ex.And, Context.CHRONICLE)
class AndChronicle(Handler):
    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [deque(), deque()]

    def _on(self, mine: int, store: Store, occ: Any) -> None:
        st = store[self.hid]
        q = st[1 - mine]
        if q:
            c: Detection = (self.expr, occ[1], (q.popleft(), occ))
            for f in self.out:
                f(store, c)
        else:
            st[mine].append(occ)

    def on0(self, store: Store, occ: Any) -> None:
        self._on(0, store, occ)

    def on1(self, store: Store, occ: Any) -> None:
        self._on(1, store, occ)

    def entry(self, slot: int) -> Entry:
        return partial(self._on, slot)  # one Python frame per arrival, not two

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        q = g.var("q")
        g.line(f"{q} = {st}[{1 - slot}]")
        g.line(f"if {q}:")
        with g.block():
            self.gen_detect(g, store, occ, f"{q}.popleft(), {occ}")
        g.line("else:")
        with g.block():
            g.line(f"{st}[{slot}].append({occ})")

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.chronicle(self, store, batches, 2)


@strategy(ex.And, Context.CONTINUOUS)
class AndContinuous(Handler):
    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[], []]

    def _on(self, store: Store, occs: list[Any], mine: int) -> None:
        st = store[self.hid]
        other = st[1 - mine]
        st[mine].extend(occs)
        if other:
            st[1 - mine] = []
            expr = self.expr
            self.emit_batch(store, [(expr, occ[1], (i, occ)) for occ in occs for i in other])

    def on0(self, store: Store, occ: Any) -> None:
        self._on(store, [occ], 0)

    def on1(self, store: Store, occ: Any) -> None:
        self._on(store, [occ], 1)

    def on0_batch(self, store: Store, occs: list[Any]) -> None:
        self._on(store, occs, 0)

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        self._on(store, occs, 1)

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.continuous(self, store, batches, 2)


@strategy(ex.And, Context.CUMULATIVE)
class AndCumulative(Handler):
    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[], []]

    def _on(self, mine: int, store: Store, occ: Any) -> None:
        st = store[self.hid]
        partners = st[1 - mine]
        if partners:
            st[1 - mine] = []
            c: Detection = (self.expr, occ[1], (*partners, occ))
            for f in self.out:
                f(store, c)
        else:
            st[mine].append(occ)

    def on0(self, store: Store, occ: Any) -> None:
        self._on(0, store, occ)

    def on1(self, store: Store, occ: Any) -> None:
        self._on(1, store, occ)

    def entry(self, slot: int) -> Entry:
        return partial(self._on, slot)

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.cumulative(self, store, batches, 2)


@strategy(ex.And, Context.UNRESTRICTED)
class AndUnrestricted(Handler):
    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[], []]

    def _on(self, store: Store, occs: list[Any], mine: int) -> None:
        st = store[self.hid]
        other = st[1 - mine]
        expr = self.expr
        out = [(expr, occ[1], (i, occ)) for occ in occs for i in other]
        st[mine].extend(occs)
        if out:
            self.emit_batch(store, out)

    def on0(self, store: Store, occ: Any) -> None:
        self._on(store, [occ], 0)

    def on1(self, store: Store, occ: Any) -> None:
        self._on(store, [occ], 1)

    def on0_batch(self, store: Store, occs: list[Any]) -> None:
        self._on(store, occs, 0)

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        self._on(store, occs, 1)

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.unrestricted(self, store, batches, 2)


# -- ANY(m, E1, ..., En) -------------------------------------------------------------


class _AnyBase(Handler):
    """Slot ``k`` receives occurrences of the k-th operand; the detection happens
    when occurrences of ``m`` distinct operands are available, the arriving one
    being the terminator."""

    __slots__ = ("m", "n")
    arity = None

    def __init__(self, hid: int, expr: Any) -> None:
        super().__init__(hid, expr)
        self.m: int = expr.m
        self.n: int = len(expr.children)

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        self.together(store, batches)

    def together(self, store: Store, batches: Sequence[list[Any]]) -> None:
        """An instant reaching several operands: the context's strategy of
        :mod:`instants`."""
        raise NotImplementedError

    def entry(self, slot: int) -> Entry:
        def on(store: Store, occ: Any, _k: int = slot) -> None:
            self.arrive(store, [occ], _k)

        return on

    def entry_batch(self, slot: int) -> Entry:
        def on_batch(store: Store, occs: list[Any], _k: int = slot) -> None:
            self.arrive(store, occs, _k)

        return on_batch

    def arrive(self, store: Store, occs: list[Any], k: int) -> None:
        raise NotImplementedError


@strategy(ex.Any, Context.RECENT)
class AnyRecent(_AnyBase):
    """Each operand keeps its most recent occurrence; a terminator combines with
    the most recent occurrences of the m-1 most recently active other operands."""

    __slots__ = ()

    def together(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.recent(self, store, batches, self.m)

    def new_state(self) -> list[Any]:
        return [None] * self.n

    def arrive(self, store: Store, occs: list[Any], k: int) -> None:
        st = store[self.hid]
        need = self.m - 1
        for occ in occs:
            others = [o for j, o in enumerate(st) if j != k and o is not None]
            st[k] = occ
            if len(others) >= need:
                chosen = sorted(others, key=self.seq)[len(others) - need :] if need else []
                self.emit(store, (self.expr, occ[1], (*chosen, occ)))


@strategy(ex.Any, Context.CHRONICLE)
class AnyChronicle(_AnyBase):
    """Oldest occurrences first; every occurrence used is consumed."""

    __slots__ = ()

    def together(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.chronicle(self, store, batches, self.m)

    def new_state(self) -> list[Any]:
        return [deque() for _ in range(self.n)]

    def arrive(self, store: Store, occs: list[Any], k: int) -> None:
        st = store[self.hid]
        need = self.m - 1
        for occ in occs:
            seq = self.seq
            heads = [(seq(q[0]), j) for j, q in enumerate(st) if j != k and q]
            if len(heads) >= need:
                heads.sort()
                chosen = [st[j].popleft() for _, j in heads[:need]]
                self.emit(store, (self.expr, occ[1], (*chosen, occ)))
            else:
                st[k].append(occ)


@strategy(ex.Any, Context.CONTINUOUS)
class AnyContinuous(_AnyBase):
    """Every combination of stored occurrences of m-1 distinct other operands
    completes with the terminator; the combined occurrences are consumed and the
    terminator is kept (as for continuous AND)."""

    __slots__ = ()

    def together(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.continuous(self, store, batches, self.m)

    def new_state(self) -> list[Any]:
        return [[] for _ in range(self.n)]

    def arrive(self, store: Store, occs: list[Any], k: int) -> None:
        st = store[self.hid]
        need = self.m - 1
        out: list[Any] = []
        avail = [j for j, lst in enumerate(st) if j != k and lst]
        if need:
            st[k].extend(occs)  # a terminator can initiate (kept, as for AND)
        if len(avail) < need:
            return
        expr = self.expr
        for occ in occs:
            for js in combinations(avail, need):
                for combo in product(*(st[j] for j in js)):
                    parts = tuple(sorted(combo, key=self.seq))
                    out.append((expr, occ[1], (*parts, occ)))
        for j in avail:
            st[j] = []
        self.emit_batch(store, out)


@strategy(ex.Any, Context.CUMULATIVE)
class AnyCumulative(_AnyBase):
    """Everything stored combines with the terminator once occurrences of m
    distinct operands are available; then all is consumed."""

    __slots__ = ()

    def together(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.cumulative(self, store, batches, self.m)

    def new_state(self) -> list[Any]:
        return [[] for _ in range(self.n)]

    def arrive(self, store: Store, occs: list[Any], k: int) -> None:
        st = store[self.hid]
        need = self.m - 1
        for occ in occs:
            avail = [j for j, lst in enumerate(st) if j != k and lst]
            if len(avail) >= need:
                parts = sorted((i for lst in st for i in lst), key=self.seq)
                for j in range(self.n):
                    st[j] = []
                self.emit(store, (self.expr, occ[1], (*parts, occ)))
            else:
                st[k].append(occ)


@strategy(ex.Any, Context.UNRESTRICTED)
class AnyUnrestricted(_AnyBase):
    """Every set of occurrences of m distinct operands ending with the terminator."""

    __slots__ = ()

    def together(self, store: Store, batches: Sequence[list[Any]]) -> None:
        instants.unrestricted(self, store, batches, self.m)

    def new_state(self) -> list[Any]:
        return [[] for _ in range(self.n)]

    def arrive(self, store: Store, occs: list[Any], k: int) -> None:
        st = store[self.hid]
        need = self.m - 1
        out: list[Any] = []
        avail = [j for j, lst in enumerate(st) if j != k and lst]
        for occ in occs:
            for js in combinations(avail, need):
                for combo in product(*(st[j] for j in js)):
                    parts = tuple(sorted(combo, key=self.seq))
                    out.append((self.expr, occ[1], (*parts, occ)))
        st[k].extend(occs)
        if out:
            self.emit_batch(store, out)
