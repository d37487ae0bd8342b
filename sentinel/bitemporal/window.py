"""WITHIN(E1, E2, [t]): A's algorithms with each E1's window as its lifespan.

Slot 0 receives E1s, slot 1 E2s. An E2 pairs as A's E2 does in each context
(``sentinel.detector.operators.aperiodic``), with the E1s whose window is still
open at the E2's occurrence time: ``t(E1) + t > t(E2)``. E1s whose window has
closed are dropped when an E2 looks at them, and purged at the clock ticks by
the lifespan mechanism (:mod:`sentinel.bitemporal.lifespan`), so a WITHIN whose
E1s never meet an E2 holds memory for at most its window (plus a chronon).
There is no closing event and no timer: nothing happens at a window's end.

So each strategy is A's strategy of its context (its second base) after
dropping the E1s whose window has closed (:meth:`_Within.expire`); only
continuous (and unrestricted), whose E2s of one instant each see the E1s open at
their own time, pairs them itself.

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
    the bases), its E1s dropped when their window has closed."""

    __slots__ = ("window",)
    arity: ClassVar[int | None] = 2
    #: An E2 at the instant of an E1 is not inside its window (A's (t(E1), t(E3)]).
    role_order: ClassVar[tuple[int, ...]] = (1, 0)

    def __init__(self, hid: int, expr: Any) -> None:
        super().__init__(hid, expr)
        assert isinstance(expr, Within)
        self.window: float = expr.window.seconds

    def expire(self, st: list[Any], occ: Any) -> None:
        """Drop from the state ``st`` the E1s whose window has closed at the
        time of ``occ``."""
        raise NotImplementedError

    def on1(self, store: Store, occ: Any) -> None:
        self.expire(store[self.hid], occ)
        super().on1(store, occ)  # type: ignore[misc]  # A's E2


class _WithinOne(_Within):
    """One E1 kept (recent, cumulative)."""

    __slots__ = ()

    def expire(self, st: list[Any], occ: Any) -> None:
        e1 = st[0]
        if e1 is not None and _ts(e1) + self.window <= _ts(occ):
            st[0] = None


@strategy(Within, Context.RECENT)
class WithinRecent(_WithinOne, ARecent):
    __slots__ = ()

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        if slot == 1:
            st, e1, ts = g.state(self, store), g.var("e"), g.const(_ts)
            g.line(f"{e1} = {st}[0]")
            g.line(f"if {e1} is not None and {ts}({e1}) + {self.window!r} <= {ts}({occ}):")
            with g.block():
                g.line(f"{st}[0] = None")
        super().gen(slot, g, store, occ)


@strategy(Within, Context.CHRONICLE)
class WithinChronicle(_Within, AChronicle):
    __slots__ = ()

    def expire(self, st: list[Any], occ: Any) -> None:
        q = st[0]
        if q:
            t = _ts(occ) - self.window
            while q and _ts(q[0]) <= t:
                q.popleft()

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        if slot == 1:
            st, q, t = g.state(self, store), g.var("q"), g.var("t")
            ts = g.const(_ts)
            g.line(f"{q} = {st}[0]")
            g.line(f"if {q}:")
            with g.block():
                g.line(f"{t} = ({occ}[2] if len({occ}) == 8 else {ts}({occ})) - {self.window!r}")
                g.line(f"while {q} and ({q}[0][2] if len({q}[0]) == 8 else {ts}({q}[0])) <= {t}:")
                with g.block():
                    g.line(f"{q}.popleft()")
        super().gen(slot, g, store, occ)


@strategy(Within, Context.CONTINUOUS, Context.UNRESTRICTED)
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


@strategy(Within, Context.CUMULATIVE)
class WithinCumulative(_WithinOne, ACumulative):
    """The first E1 whose window is open: an E1 replaces a kept one whose window
    has closed."""

    __slots__ = ()

    def on0(self, store: Store, occ: Any) -> None:
        self.expire(store[self.hid], occ)
        super().on0(store, occ)
