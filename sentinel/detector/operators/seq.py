"""SEQ (E1 ; E2): E2 occurs strictly after E1 (Appendix A, SEQ in each context).

Slot 0 receives initiators (E1), slot 1 terminators (E2). A terminator pairs only
with initiators stored at earlier instants: buffered, terminators are processed
before the instant's initiators.
"""

from __future__ import annotations

from typing import Any

from sentinel.algebra import expressions as ex
from sentinel.detector.contexts import Context
from sentinel.detector.operators.base import Detection, Handler, strategy
from sentinel.detector.operators.initiators import KeepsAll, KeepsLatest, KeepsOldestFirst
from sentinel.detector.scopes import Store


class _Seq(Handler):
    __slots__ = ()
    role_order = (1, 0)
    # In every context a terminator only reads and consumes initiators.
    idle_slots = frozenset({1})


@strategy(ex.Seq, Context.RECENT)
class SeqRecent(KeepsLatest, _Seq):
    """The most recent initiator pairs with every terminator until replaced."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        init = store[self.hid][0]
        if init is not None:
            c: Detection = (self.expr, occ[1], (init, occ))
            for f in self.out:
                f(store, c)

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0] = {occ}")
            g.kept(store)
            return
        i = g.var("i")
        g.line(f"{i} = {st}[0]")
        g.line(f"if {i} is not None:")
        with g.block():
            self.gen_detect(g, store, occ, f"{i}, {occ}")


@strategy(ex.Seq, Context.CHRONICLE)
class SeqChronicle(KeepsOldestFirst, _Seq):
    """Oldest initiator with oldest terminator; both consumed."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        q = store[self.hid][0]
        if q:
            c: Detection = (self.expr, occ[1], (q.popleft(), occ))
            for f in self.out:
                f(store, c)

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0].append({occ})")
            g.kept(store)
            return
        q = g.var("q")
        g.line(f"{q} = {st}[0]")
        g.line(f"if {q}:")
        with g.block():
            self.gen_detect(g, store, occ, f"{q}.popleft(), {occ}")


@strategy(ex.Seq, Context.CONTINUOUS)
class SeqContinuous(KeepsAll, _Seq):
    """A terminator pairs with every stored initiator; the initiators are consumed."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        inits = st[0]
        if inits:
            st[0] = []
            expr, t = self.expr, occ[1]
            self.emit_batch(store, [(expr, t, (i, occ)) for i in inits])

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        st = store[self.hid]
        inits = st[0]
        if inits:
            st[0] = []
            expr = self.expr
            self.emit_batch(store, [(expr, x[1], (i, x)) for x in occs for i in inits])


@strategy(ex.Seq, Context.CUMULATIVE)
class SeqCumulative(KeepsAll, _Seq):
    """All initiators so far combine with the terminator into one detection."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        inits = st[0]
        if inits:
            st[0] = []
            c: Detection = (self.expr, occ[1], (*inits, occ))
            for f in self.out:
                f(store, c)

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0].append({occ})")
            g.kept(store)
            return
        i = g.var("i")
        g.line(f"{i} = {st}[0]")
        g.line(f"if {i}:")
        with g.block():
            g.line(f"{st}[0] = []")
            self.gen_detect(g, store, occ, f"*{i}, {occ}")


@strategy(ex.Seq, Context.UNRESTRICTED)
class SeqUnrestricted(KeepsAll, _Seq):
    """Every earlier initiator with every terminator; nothing is consumed."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        inits = store[self.hid][0]
        if inits:
            expr, t = self.expr, occ[1]
            self.emit_batch(store, [(expr, t, (i, occ)) for i in inits])

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        inits = store[self.hid][0]
        if inits:
            expr = self.expr
            self.emit_batch(store, [(expr, x[1], (i, x)) for x in occs for i in inits])
