"""NOT(E2)[E1, E3]: E3 with no E2 in the closed interval since E1 (Appendix A).

Slot 0 opens (E1), slot 1 is the event that must not occur (E2), slot 2 closes
(E3). The interval is closed: an E2 at the instant of E1 or of E3 cancels it.
Buffered, an instant is processed E2, then E3, then E1, and an E1 arriving at the
instant of an E2 is not stored. The cumulative variant stores E1 only while none is
stored (the pseudocode's "is not empty" is a typo; ``docs/semantics.md``, "Readings we chose").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sentinel.algebra import expressions as ex
from sentinel.detector.contexts import Context
from sentinel.detector.operators.base import Handler, strategy
from sentinel.detector.operators.initiators import (
    KeepsAll,
    KeepsFirst,
    KeepsLatest,
    KeepsOldestFirst,
)
from sentinel.detector.scopes import Store


class _Not(Handler):
    __slots__ = ()
    arity = 3
    role_order = (1, 2, 0)
    # With no E1 pending, an E2 has no interval to spoil and an E3 none to close.
    idle_slots = frozenset({1, 2})

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        if batches[1]:
            # E1 at the instant of an E2: its closed interval already holds an E2.
            batches = ([], batches[1], batches[2])
        super().process_instant(store, batches)


@strategy(ex.Not, Context.RECENT)
class NotRecent(KeepsLatest, _Not):
    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        store[self.hid][0] = None

    def on2(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is not None:
            st[0] = None
            self.emit(store, (self.expr, occ[1], (e1, occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0] = {occ}")
            g.kept(store)
        elif slot == 1:
            g.line(f"{st}[0] = None")
        else:
            e1 = g.var("e")
            g.line(f"{e1} = {st}[0]")
            g.line(f"if {e1} is not None:")
            with g.block():
                g.line(f"{st}[0] = None")
                self.gen_detect(g, store, occ, f"{e1}, {occ}")


@strategy(ex.Not, Context.CHRONICLE)
class NotChronicle(KeepsOldestFirst, _Not):
    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        store[self.hid][0].clear()

    def on2(self, store: Store, occ: Any) -> None:
        q = store[self.hid][0]
        if q:
            self.emit(store, (self.expr, occ[1], (q.popleft(), occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0].append({occ})")
            g.kept(store)
        elif slot == 1:
            g.line(f"{st}[0].clear()")
        else:
            q = g.var("q")
            g.line(f"{q} = {st}[0]")
            g.line(f"if {q}:")
            with g.block():
                self.gen_detect(g, store, occ, f"{q}.popleft(), {occ}")


@strategy(ex.Not, Context.CONTINUOUS)
class NotContinuous(KeepsAll, _Not):
    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        store[self.hid][0] = []

    def on2(self, store: Store, occ: Any) -> None:
        self.on2_batch(store, [occ])

    def on2_batch(self, store: Store, occs: list[Any]) -> None:
        # Every E3 of the instant closes every interval open before it (Batches).
        st = store[self.hid]
        e1s = st[0]
        if e1s:
            st[0] = []
            expr = self.expr
            self.emit_batch(store, [(expr, x[1], (e1, x)) for e1 in e1s for x in occs])


@strategy(ex.Not, Context.CUMULATIVE)
class NotCumulative(KeepsFirst, _Not):
    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        store[self.hid][0] = None

    def on2(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is not None:
            st[0] = None
            self.emit(store, (self.expr, occ[1], (e1, occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"if {st}[0] is None:")
            with g.block():
                g.line(f"{st}[0] = {occ}")
        elif slot == 1:
            g.line(f"{st}[0] = None")
        else:
            e1 = g.var("e")
            g.line(f"{e1} = {st}[0]")
            g.line(f"if {e1} is not None:")
            with g.block():
                g.line(f"{st}[0] = None")
                self.gen_detect(g, store, occ, f"{e1}, {occ}")


@strategy(ex.Not, Context.UNRESTRICTED)
class NotUnrestricted(KeepsAll, _Not):
    """Every E1 with every later E3, unless an E2 lies between them."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        store[self.hid][0] = []

    def on2(self, store: Store, occ: Any) -> None:
        e1s = store[self.hid][0]
        if e1s:
            expr, t = self.expr, occ[1]
            self.emit_batch(store, [(expr, t, (e1, occ)) for e1 in e1s])
