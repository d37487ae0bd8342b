"""A(E1, E2, E3) and A*(E1, E2, E3): E2 inside the interval opened by E1 and
closed by E3 (Appendix A, A and A* in each context).

Slot 0 opens intervals (E1), slot 1 is the event of interest (E2), slot 2 closes
(E3). The interval is (t(E1), t(E3)]: an E2 at the instant of the closing E3 still
belongs to the interval, an E2 at the instant of the opening E1 does not. Buffered,
an instant is processed E2, then E3, then E1.

A* needs an open interval to fire at E3 (the pseudocode's E3 branch omits the
check; ``docs/semantics.md``, "Readings we chose"), and the cumulative variant
stores E1 only while none is stored (the pseudocode's "is not empty" is a typo).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from sentinel.algebra import expressions as ex
from sentinel.detector.contexts import Context
from sentinel.detector.operators.base import Handler, instant_order, strategy
from sentinel.detector.operators.initiators import (
    KeepsAll,
    KeepsFirst,
    KeepsLatest,
    KeepsOldestFirst,
)
from sentinel.detector.scopes import Store


class _Interval(Handler):
    __slots__ = ()
    arity: ClassVar[int | None] = 3
    role_order: ClassVar[tuple[int, ...]] = (1, 2, 0)
    # With no interval open, an E2 is neither paired nor kept and an E3 closes nothing.
    idle_slots: ClassVar[frozenset[int]] = frozenset({1, 2})


def _kept(items: Any, dead: Callable[[Any], bool], removed: list[Any]) -> list[Any]:
    out = []
    for o in items:
        if dead(o):
            removed.append(o)
        else:
            out.append(o)
    return out


class _OneInterval(_Interval):
    """A* with one interval at a time, state ``[e1, e2s]``: the E2s belong to the
    stored E1 and go with it."""

    __slots__ = ()

    def purge(self, state: list[Any], dead: Callable[[Any], bool], removed: list[Any]) -> None:
        e1 = state[0]
        if e1 is not None and dead(e1):
            removed.append(e1)
            state[0] = None
            state[1] = []  # collected for that interval only
        elif state[1]:
            state[1] = _kept(state[1], dead, removed)


class _ManyIntervals(_Interval):
    """A* with several open intervals, state ``[e1s, e2s]`` (E2s in ``t_occ``
    order, each interval using those after its own E1)."""

    __slots__ = ()

    def purge(self, state: list[Any], dead: Callable[[Any], bool], removed: list[Any]) -> None:
        e1s = _kept(state[0], dead, removed)
        state[0] = deque(e1s) if type(state[0]) is deque else e1s
        e2s = _kept(state[1], dead, removed)
        if e1s:
            # E2s older than every open interval belong to none of them any more.
            first = min(map(self.seq, e1s))
            e2s = e2s[bisect_right(e2s, first, key=self.seq) :]
        else:
            e2s = []
        state[1] = e2s


# -- A ----------------------------------------------------------------------------------


@strategy(ex.A, Context.RECENT)
class ARecent(KeepsLatest, _Interval):
    """The most recent E1 pairs with each E2 until E3 closes it."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        e1 = store[self.hid][0]
        if e1 is not None:
            self.emit(store, (self.expr, occ[1], (e1, occ)))

    def on2(self, store: Store, occ: Any) -> None:
        store[self.hid][0] = None

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0] = {occ}")
            g.kept(store)
        elif slot == 1:
            e1 = g.var("e")
            g.line(f"{e1} = {st}[0]")
            g.line(f"if {e1} is not None:")
            with g.block():
                self.gen_detect(g, store, occ, f"{e1}, {occ}")
        else:
            g.line(f"{st}[0] = None")


@strategy(ex.A, Context.CHRONICLE)
class AChronicle(KeepsOldestFirst, _Interval):
    """Each E2 pairs with the oldest open E1, consuming it."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        q = store[self.hid][0]
        if q:
            self.emit(store, (self.expr, occ[1], (q.popleft(), occ)))

    def on2(self, store: Store, occ: Any) -> None:
        store[self.hid][0].clear()

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0].append({occ})")
            g.kept(store)
        elif slot == 1:
            q = g.var("q")
            g.line(f"{q} = {st}[0]")
            g.line(f"if {q}:")
            with g.block():
                self.gen_detect(g, store, occ, f"{q}.popleft(), {occ}")
        else:
            g.line(f"{st}[0].clear()")


@strategy(ex.A, Context.CONTINUOUS)
class AContinuous(KeepsAll, _Interval):
    """Each E2 pairs with every open E1; E3 closes them all."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        self.on1_batch(store, [occ])

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        e1s = store[self.hid][0]
        if e1s:
            expr = self.expr
            self.emit_batch(store, [(expr, x[1], (i, x)) for x in occs for i in e1s])

    def on2(self, store: Store, occ: Any) -> None:
        store[self.hid][0] = []


@strategy(ex.A, Context.CUMULATIVE)
class ACumulative(KeepsFirst, _Interval):
    """The first E1 of an interval pairs with the first E2; both are discarded."""

    __slots__ = ()

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is not None:
            st[0] = None
            self.emit(store, (self.expr, occ[1], (e1, occ)))

    def on2(self, store: Store, occ: Any) -> None:
        store[self.hid][0] = None


@strategy(ex.A, Context.UNRESTRICTED)
class AUnrestricted(AContinuous):
    """Every open E1 with every E2 (intervals stay open until E3)."""

    __slots__ = ()


# -- A* ---------------------------------------------------------------------------------


@strategy(ex.Astar, Context.RECENT)
class AstarRecent(_OneInterval):
    """The most recent E1 collects E2s; E3 emits them together (E1 replaced: the
    collection starts again)."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [None, []]

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        st[0] = occ
        st[1] = []

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is not None:
            st[1].append(occ)

    def on2(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is not None:
            e2s = st[1]
            st[0] = None
            st[1] = []
            self.emit(store, (self.expr, occ[1], (e1, *e2s, occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0] = {occ}")
            g.kept(store)
            g.line(f"{st}[1] = []")
        elif slot == 1:
            g.line(f"if {st}[0] is not None:")
            with g.block():
                g.line(f"{st}[1].append({occ})")
        else:
            e1, e2s = g.var("e"), g.var("m")
            g.line(f"{e1} = {st}[0]")
            g.line(f"if {e1} is not None:")
            with g.block():
                g.line(f"{e2s} = {st}[1]")
                g.line(f"{st}[0] = None")
                g.line(f"{st}[1] = []")
                self.gen_detect(g, store, occ, f"{e1}, *{e2s}, {occ}")


@strategy(ex.Astar, Context.CHRONICLE)
class AstarChronicle(_ManyIntervals):
    """E3 closes the oldest E1's interval with every E2 collected; E2s older than
    the next E1 are dropped."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [deque(), []]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(occ)

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0]:
            st[1].append(occ)

    def on2(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        q = st[0]
        if not q:
            return
        head = q.popleft()
        e2s = st[1]
        if q:
            # E2s are kept in t_occ order: cut the prefix at the next interval's start.
            st[1] = e2s[bisect_right(e2s, self.seq(q[0]), key=self.seq) :]
        else:
            st[1] = []
        self.emit(store, (self.expr, occ[1], (head, *e2s, occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        if slot == 2:
            g.line(f"{g.const(self.on2)}({store}, {occ})")
            return
        st = g.state(self, store)
        if slot == 0:
            g.line(f"{st}[0].append({occ})")
            g.kept(store)
        else:
            g.line(f"if {st}[0]:")
            with g.block():
                g.line(f"{st}[1].append({occ})")


@strategy(ex.Astar, Context.CONTINUOUS)
class AstarContinuous(_ManyIntervals):
    """E3 closes every open interval, each with the E2s after its own E1."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[], []]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(occ)

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0]:
            st[1].append(occ)

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        st = store[self.hid]
        if st[0]:
            batch = list(occs)  # E2s of one instant in canonical order, like the others
            instant_order(batch)
            st[1].extend(batch)

    def on2(self, store: Store, occ: Any) -> None:
        self.on2_batch(store, [occ])

    def on2_batch(self, store: Store, occs: list[Any]) -> None:
        # Every E3 of the instant closes every interval open before it (Batches).
        st = store[self.hid]
        e1s, e2s = st[0], st[1]
        if not e1s:
            return
        st[0], st[1] = [], []
        expr, seq = self.expr, self.seq
        self.emit_batch(
            store,
            [
                (expr, x[1], (e1, *e2s[bisect_right(e2s, seq(e1), key=seq) :], x))
                for e1 in e1s
                for x in occs
            ],
        )


@strategy(ex.Astar, Context.CUMULATIVE)
class AstarCumulative(_OneInterval):
    """One interval at a time (the first E1); E3 emits it with every E2."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [None, []]

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is None:
            st[0] = occ

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is not None:
            st[1].append(occ)

    def on2(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1 = st[0]
        if e1 is not None:
            e2s = st[1]
            st[0] = None
            st[1] = []
            self.emit(store, (self.expr, occ[1], (e1, *e2s, occ)))

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        st = g.state(self, store)
        if slot == 0:
            g.line(f"if {st}[0] is None:")
            with g.block():
                g.line(f"{st}[0] = {occ}")
        elif slot == 1:
            g.line(f"if {st}[0] is not None:")
            with g.block():
                g.line(f"{st}[1].append({occ})")
        else:
            e1, e2s = g.var("e"), g.var("m")
            g.line(f"{e1} = {st}[0]")
            g.line(f"if {e1} is not None:")
            with g.block():
                g.line(f"{e2s} = {st}[1]")
                g.line(f"{st}[0] = None")
                g.line(f"{st}[1] = []")
                self.gen_detect(g, store, occ, f"{e1}, *{e2s}, {occ}")


@strategy(ex.Astar, Context.UNRESTRICTED)
class AstarUnrestricted(_ManyIntervals):
    """Every E1 with every later E3, each with the E2s between them (2.2.1 item 8)."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[], []]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(occ)

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0]:
            st[1].append(occ)

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        st = store[self.hid]
        if st[0]:
            batch = list(occs)
            instant_order(batch)
            st[1].extend(batch)

    def on2(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        e1s, e2s = st[0], st[1]
        if e1s:
            expr, t, seq = self.expr, occ[1], self.seq
            self.emit_batch(
                store,
                [(expr, t, (e1, *e2s[bisect_right(e2s, seq(e1), key=seq) :], occ)) for e1 in e1s],
            )
