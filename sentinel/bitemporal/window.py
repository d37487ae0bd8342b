"""WITHIN(E1, E2, [t]): A's algorithms with each E1's window as its lifespan.

Slot 0 receives E1s, slot 1 E2s. An E2 pairs as A's E2 does in each context
(``sentinel.detector.operators.aperiodic``), with the E1s whose window is still
open at the E2's occurrence time: ``t(E1) + t > t(E2)``. E1s whose window has
closed are dropped when an E2 looks at them, and purged at the clock ticks by
the lifespan mechanism (:mod:`sentinel.bitemporal.lifespan`), so a WITHIN whose
E1s never meet an E2 holds memory for at most its window (plus a chronon).
There is no closing event and no timer: nothing happens at a window's end.

recent
    the latest E1 pairs with each E2 inside its window (a newer E1 replaces it).
chronicle
    each E2 pairs with the oldest E1 whose window is open, consuming it.
continuous, unrestricted
    each E2 pairs with every E1 whose window is open (nothing is consumed).
cumulative
    the first E1 (of those whose window is open) pairs with the first E2; both
    are discarded.
"""

from __future__ import annotations

from typing import Any

from sentinel.algebra.bitemporal import Within
from sentinel.detector import Context
from sentinel.detector.operators import Handler
from sentinel.detector.operators import register as register_strategies
from sentinel.detector.operators.base import timestamp as _ts
from sentinel.detector.operators.initiators import (
    KeepsAll,
    KeepsFirst,
    KeepsLatest,
    KeepsOldestFirst,
)
from sentinel.detector.scopes import Store
from sentinel.occurrence import Occurrence

__all__ = ["WithinChronicle", "WithinContinuous", "WithinCumulative", "WithinRecent"]


class _Within(Handler):
    __slots__ = ("window",)
    arity = 2
    #: An E2 at the instant of an E1 is not inside its window (A's (t(E1), t(E3)]).
    role_order = (1, 0)

    def __init__(self, hid: int, expr: Any) -> None:
        super().__init__(hid, expr)
        assert isinstance(expr, Within)
        self.window: float = expr.window.seconds


class WithinRecent(KeepsLatest, _Within):
    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is not None:
            if _ts(e1) + self.window <= _ts(occ):
                st[0] = None
            else:
                self.emit(store, (self.expr, occ[1], (e1, occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0] = {occ}")
            return
        e1 = g.var("e")
        ts = g.const(_ts)
        g.line(f"{e1} = {st}[0]")
        g.line(f"if {e1} is not None:")
        with g.block():
            g.line(f"if {ts}({e1}) + {self.window!r} <= {ts}({occ}):")
            with g.block():
                g.line(f"{st}[0] = None")
            g.line("else:")
            with g.block():
                self.gen_detect(g, store, occ, f"{e1}, {occ}")


class WithinChronicle(KeepsOldestFirst, _Within):
    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        q = store[self.hid][0]
        if q:
            t = _ts(occ) - self.window
            while q and _ts(q[0]) <= t:
                q.popleft()
            if q:
                self.emit(store, (self.expr, occ[1], (q.popleft(), occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0].append({occ})")
            return
        q, t = g.var("q"), g.var("t")
        ts, cls = g.const(_ts), g.const(Occurrence)
        g.line(f"{q} = {st}[0]")
        g.line(f"if {q}:")
        with g.block():
            g.line(f"{t} = ({occ}[2] if type({occ}) is {cls} else {ts}({occ})) - {self.window!r}")
            g.line(f"while {q} and ({q}[0][2] if type({q}[0]) is {cls} else {ts}({q}[0])) <= {t}:")
            with g.block():
                g.line(f"{q}.popleft()")
            g.line(f"if {q}:")
            with g.block():
                self.gen_detect(g, store, occ, f"{q}.popleft(), {occ}")


class WithinContinuous(KeepsAll, _Within):
    """Each E2 with every open E1 (continuous and unrestricted: A never consumes
    its E1s at E2)."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        self.on1_batch(store, [occ])

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        st = store[self.hid]
        e1s = st[0]
        if not e1s:
            return
        w = self.window
        t0 = min(_ts(x) for x in occs)
        st[0] = e1s = [i for i in e1s if _ts(i) + w > t0]
        expr = self.expr
        out = [(expr, x[1], (i, x)) for x in occs for i in e1s if _ts(i) + w > _ts(x)]
        if out:
            self.emit_batch(store, out)


class WithinCumulative(KeepsFirst, _Within):
    """The first E1 whose window is open: an E1 replaces a kept one whose window
    has closed."""

    __slots__ = ()

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is None or _ts(e1) + self.window <= _ts(occ):
            st[0] = occ

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is not None:
            st[0] = None
            if _ts(e1) + self.window > _ts(occ):
                self.emit(store, (self.expr, occ[1], (e1, occ)))


R, CH, CO, CU, U = (
    Context.RECENT,
    Context.CHRONICLE,
    Context.CONTINUOUS,
    Context.CUMULATIVE,
    Context.UNRESTRICTED,
)
register_strategies(
    Within,
    {
        R: WithinRecent,
        CH: WithinChronicle,
        CO: WithinContinuous,
        CU: WithinCumulative,
        U: WithinContinuous,
    },
)
