"""WITHIN(E1, E2, [t]): A's algorithms with each E1's window as its lifespan.

Slot 0 receives E1s, slot 1 E2s. An E2 pairs as A's E2 does in each context
(``sentinel.detector.operators.aperiodic``), with the E1s whose window holds its
occurrence time: ``t(E1) <= t(E2) < t(E1) + t``. In arrival order occurrence
times need not grow (``signal_at``: a late report, an announcement), so an E2
neither drops the E1s whose window has closed at its time (a later E2 may
carry an earlier time, inside their windows) nor pairs with an E1 that occurred
after it. E1s are purged at the clock ticks by the lifespan mechanism
(:mod:`sentinel.bitemporal.lifespan`), each at the first tick after its window,
so a WITHIN whose E1s never meet an E2 holds memory for at most its window (plus
a chronon). There is no closing event and no timer: nothing happens at a
window's end.

recent
    the latest E1 pairs with each E2 inside its window (a newer E1 replaces it).
chronicle
    each E2 pairs with the oldest E1 whose window holds it, consuming it.
continuous, unrestricted
    each E2 pairs with every E1 whose window holds it (nothing is consumed).
cumulative
    the first E1 pairs with the first E2 inside its window; both are discarded.
    An E1 replaces the kept one when the kept one's window does not hold the
    new E1's time.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sentinel.algebra.bitemporal import Within
from sentinel.detector import Context
from sentinel.detector.operators import Handler, strategy
from sentinel.detector.operators.aperiodic import AChronicle, ACumulative, ARecent
from sentinel.detector.operators.base import timestamp as _ts
from sentinel.detector.operators.initiators import KeepsAll
from sentinel.detector.scopes import Store

__all__ = ["WithinChronicle", "WithinContinuous", "WithinCumulative", "WithinRecent"]


class _Within(Handler):
    """WITHIN: A's strategy of the same context (named after this class among
    the bases), pairing an E2 only with E1s whose window holds its time."""

    __slots__ = ("window",)
    arity: ClassVar[int | None] = 2
    #: An E2 at the instant of an E1 is not inside its window (A's (t(E1), t(E3)]).
    role_order: ClassVar[tuple[int, ...]] = (1, 0)

    def __init__(self, hid: int, expr: Any) -> None:
        super().__init__(hid, expr)
        assert isinstance(expr, Within)
        self.window: float = expr.window.seconds

    def holds(self, e1: Any, occ: Any) -> bool:
        """Whether ``e1``'s window holds the occurrence time of ``occ``."""
        t = _ts(e1)
        return t <= _ts(occ) < t + self.window

    def gen_holds(self, g: Any, e1: str, occ: str) -> str:
        """An expression for :meth:`holds` in generated code (``e1`` is a
        variable; an 8-tuple is a primitive, whose occurrence time is field 2)."""
        ts, t1, t2 = g.const(_ts), g.var("t"), g.var("t")
        g.line(f"{t1} = {e1}[2] if len({e1}) == 8 else {ts}({e1})")
        g.line(f"{t2} = {occ}[2] if len({occ}) == 8 else {ts}({occ})")
        return f"{t1} <= {t2} < {t1} + {self.window!r}"


@strategy(Within, Context.RECENT)
class WithinRecent(_Within, ARecent):
    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        e1 = store[self.hid][0]
        if e1 is not None and self.holds(e1, occ):
            self.emit(store, (self.expr, occ[1], (e1, occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        if slot != 1:
            super().gen(slot, g, store, occ)
            return
        st, e1 = g.state(self, store), g.var("e")
        g.line(f"{e1} = {st}[0]")
        g.line(f"if {e1} is not None:")
        with g.block():
            test = self.gen_holds(g, e1, occ)
            g.line(f"if {test}:")
            with g.block():
                self.gen_detect(g, store, occ, f"{e1}, {occ}")


@strategy(Within, Context.CHRONICLE)
class WithinChronicle(_Within, AChronicle):
    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        q = store[self.hid][0]
        for i, e1 in enumerate(q):
            if self.holds(e1, occ):
                del q[i]
                self.emit(store, (self.expr, occ[1], (e1, occ)))
                return

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        if slot != 1:
            super().gen(slot, g, store, occ)
            return
        st, q, i, e1 = g.state(self, store), g.var("q"), g.var("i"), g.var("e")
        g.line(f"{q} = {st}[0]")
        g.line(f"for {i}, {e1} in enumerate({q}):")
        with g.block():
            test = self.gen_holds(g, e1, occ)
            g.line(f"if {test}:")
            with g.block():
                g.line(f"del {q}[{i}]")
                self.gen_detect(g, store, occ, f"{e1}, {occ}")
                g.line("break")


@strategy(Within, Context.CONTINUOUS, Context.UNRESTRICTED)
class WithinContinuous(KeepsAll, _Within):
    """Each E2 with every E1 whose window holds it (continuous and
    unrestricted: A never consumes its E1s at E2)."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        self.on1_batch(store, [occ])

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        e1s = store[self.hid][0]
        if not e1s:
            return
        expr, holds = self.expr, self.holds
        out = [(expr, x[1], (i, x)) for x in occs for i in e1s if holds(i, x)]
        if out:
            self.emit_batch(store, out)


@strategy(Within, Context.CUMULATIVE)
class WithinCumulative(_Within, ACumulative):
    """The first E1 pairs with the first E2 its window holds; an E1 replaces
    the kept one whose window does not hold the new E1's time."""

    __slots__ = ()

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is None or not self.holds(e1, occ):
            st[0] = occ

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is not None and self.holds(e1, occ):
            st[0] = None
            self.emit(store, (self.expr, occ[1], (e1, occ)))
