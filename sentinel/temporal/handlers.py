"""Detection strategies for the temporal operators, one class per context.

``E + [t]`` (:class:`~sentinel.algebra.temporal.Relative`), ``P(E1, [t], E3)``
and ``P*(E1, [t] arg, E3)`` are operator nodes like the others: they receive
occurrences on their slots and keep their state in the scope's store. What is
new is the *pending timer*: a :class:`Pending` record in the state stands for a
timer armed on the detector's clock. When it is due the clock signals a tick (a
primitive occurrence of ``temporal:tick``) that reaches this node, and only
this node, through :meth:`TemporalHandler.on_tick`. The invariant kept with the
timer service (:mod:`sentinel.temporal.service`): a record is in its handler's
state exactly while its timer is armed.

Readings (see ``docs/temporal.md``):

``E + [t]``
    recent: a newer occurrence of E replaces the pending one (its timer is
    cancelled; a debounce). chronicle, continuous, unrestricted: each occurrence
    has its own timer and one detection ``{e, tick}``. cumulative: the first
    occurrence starts the timer, later ones accumulate until it is due: one
    detection ``{e1, e2, ..., tick}``, t after the first.
``P(E1, [t], E3)``
    A's algorithm with the ticks of an interval as its E2: the interval that e1
    opens ticks at e1 + t, e1 + 2t, ..., each tick pairing with that e1 only.
    recent: the latest E1's interval (a new E1 restarts the period). continuous
    and unrestricted: every interval ticks. chronicle: a tick consumes its
    interval (A's chronicle consumes the initiator), so each interval ticks once,
    oldest first. cumulative: the first E1 of an interval, consumed by its first
    tick. E3 closes every open interval.
``P*(E1, [t] arg, E3)``
    A*'s algorithm: ticks are collected, E3 emits ``{e1, tick, ..., e3}`` (no
    tick at all is fine; an open interval is needed). recent: the latest E1
    (restarting the collection). chronicle: E3 closes the oldest interval with
    its own ticks, the others keep ticking. continuous and unrestricted: E3
    closes every interval, each with its own ticks. cumulative: the first E1.

An interval is (t(E1), t(E3)] in ``t_occ``: a tick and an E3 are distinct
occurrences, ordered by the detector like all others.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sentinel.algebra import temporal as tm
from sentinel.algebra.expressions import Expression
from sentinel.detector import Context, Mode
from sentinel.detector.operators import Handler, strategy
from sentinel.detector.operators.base import timestamp
from sentinel.detector.operators.initiators import KeepsFirst, KeepsLatest
from sentinel.detector.regions import ROOT, Region
from sentinel.detector.scopes import Store
from sentinel.errors import TemporalError
from sentinel.occurrence import Occurrence
from sentinel.temporal.clocks import Timer

if TYPE_CHECKING:
    from sentinel.temporal.service import TemporalService

__all__ = ["Pending", "TemporalHandler"]

_MICROS = 1_000_000


@dataclass(eq=False, slots=True)
class Pending(Timer):
    """A pending timer of a temporal node: the reference occurrence ``ref`` of a
    relative event, or the opening E1 of a P / P* interval, with the number ``n``
    of the tick it waits for, the store holding it (``store``, under ``root``)
    and the scope its tick is signalled in."""

    handler: TemporalHandler
    store: Store
    root: Store
    scope: Any
    ref: Any
    n: int

    def fire(self, seq: int) -> None:
        self.handler.svc.fire(self, seq)  # type: ignore[union-attr]


class TemporalHandler(Handler):
    """Base of the temporal strategies: a node whose detections are completed by
    ticks of its own timers."""

    __slots__ = ("mode", "region", "svc", "tick_id")

    def __init__(self, hid: int, expr: Expression) -> None:
        super().__init__(hid, expr)
        self.svc: TemporalService | None = None
        self.mode = Mode(Context.RECENT)
        self.region: Region = ROOT
        self.tick_id: tuple[Any, ...] = ()

    def bind(self, svc: TemporalService, mode: Mode, region: Region) -> None:
        """Attach the detector's timer service (done by the service when the
        handler is wired)."""
        self.svc = svc
        self.mode = mode
        self.region = region
        self.tick_id = (
            str(self.expr),
            mode.context.value,
            mode.flush,
            " / ".join(str(r) for r in region),
        )

    def start(self, store: Store, ref: Any, due: float, n: int = 1) -> Pending:
        svc = self.svc
        if svc is None:
            raise TemporalError(
                f"{self.expr} is detected on a detector whose timers were never set up; "
                "pass temporal expressions through detector.expression(), rule() or "
                "subscribe()"
            )
        return svc.start(self, store, ref, due, n)

    def cancel(self, rec: Pending) -> None:
        self.svc.cancel(rec)  # type: ignore[union-attr]

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        """``rec``'s tick arrived (its timer is already disarmed)."""
        raise NotImplementedError

    # -- lifespans (sentinel.bitemporal.lifespan) ---------------------------------------
    def stored(self, state: list[Any]) -> Iterator[Any]:
        """The occurrences held: pending records stand for their reference
        occurrence (a relative event's, an interval's E1); ticks and E1s kept
        beside them count too."""
        for item in state:
            if isinstance(item, Pending):
                yield item.ref
            elif isinstance(item, (list, deque)):
                for x in item:
                    if isinstance(x, Pending):
                        yield x.ref
                    elif type(x) is tuple and len(x) == 2 and isinstance(x[0], Pending):
                        yield x[1]  # (interval, tick)
                    elif x is not None:
                        yield x

    def purge(self, state: list[Any], dead: Any, removed: list[Any]) -> None:
        """Drop pending records whose reference occurrence expired (their timers
        are cancelled), with what was collected for them, and expired
        occurrences kept beside them."""
        gone: set[int] = set()
        for i, item in enumerate(state):
            if isinstance(item, Pending):
                if dead(item.ref):
                    self._drop(item, removed, gone)
                    state[i] = None
            elif isinstance(item, (list, deque)):
                kept: list[Any] = []
                for x in item:
                    if isinstance(x, Pending):
                        if dead(x.ref):
                            self._drop(x, removed, gone)
                            continue
                    elif len(x) == 8 and dead(x):
                        removed.append(x)
                        continue
                    kept.append(x)
                state[i] = deque(kept) if isinstance(item, deque) else kept
        if not gone:
            return
        for i, item in enumerate(state):
            if isinstance(item, (list, deque)):
                pairs = [
                    x for x in item if not (type(x) is tuple and len(x) == 2 and id(x[0]) in gone)
                ]
                state[i] = deque(pairs) if isinstance(item, deque) else pairs
        if len(state) == 2 and state[0] is None and isinstance(state[1], list):
            state[1] = []  # the ticks an interval collected go with it

    def _drop(self, rec: Pending, removed: list[Any], gone: set[int]) -> None:
        self.cancel(rec)
        removed.append(rec.ref)
        gone.add(id(rec))


# -- E + [t] -------------------------------------------------------------------------------


class _Relative(TemporalHandler):
    __slots__ = ("offset",)
    arity = 1
    role_order = (0,)

    def __init__(self, hid: int, expr: Expression) -> None:
        super().__init__(hid, expr)
        assert isinstance(expr, tm.Relative)
        self.offset = expr.offset.micros / _MICROS

    def due(self, ref: Any) -> float:
        return timestamp(ref) + self.offset


@strategy(tm.Relative, Context.RECENT)
class RelativeRecent(KeepsLatest, _Relative):
    """One pending timer: a newer occurrence replaces it (cancelled)."""

    __slots__ = ()

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        old = st[0]
        if old is not None:
            self.cancel(old)
        st[0] = self.start(store, occ, self.due(occ))

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        st = rec.store[self.hid]
        if st[0] is rec:
            st[0] = None
            self.emit(rec.store, (self.expr, tick[1], (rec.ref, tick)))


@strategy(tm.Relative, Context.CHRONICLE, Context.CONTINUOUS, Context.UNRESTRICTED)
class RelativeEach(_Relative):
    """Each occurrence its own timer and its own detection (chronicle, continuous,
    unrestricted)."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [deque()]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(self.start(store, occ, self.due(occ)))

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        q = rec.store[self.hid][0]
        if q and q[0] is rec:
            q.popleft()  # the usual case: timers of one offset fire in order
        else:
            try:
                q.remove(rec)
            except ValueError:
                return
        self.emit(rec.store, (self.expr, tick[1], (rec.ref, tick)))


@strategy(tm.Relative, Context.CUMULATIVE)
class RelativeCumulative(_Relative):
    """The first occurrence starts the timer; later ones join its detection."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[], None]

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        st[0].append(occ)
        if st[1] is None:
            st[1] = self.start(store, occ, self.due(occ))

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        st = rec.store[self.hid]
        if st[1] is rec:
            refs = st[0]
            st[0], st[1] = [], None
            self.emit(rec.store, (self.expr, tick[1], (*refs, tick)))


# -- P and P* ------------------------------------------------------------------------------


class _Periodic(TemporalHandler):
    __slots__ = ("period",)
    arity = 2
    #: An E3 and an E1 at one instant close the old interval, then open a new one.
    role_order = (1, 0)

    def __init__(self, hid: int, expr: Expression) -> None:
        super().__init__(hid, expr)
        assert isinstance(expr, (tm.P, tm.Pstar))
        self.period = expr.interval.micros

    def tick_due(self, e1: Any, n: int) -> float:
        # Exact multiples of the period (n * 0.1 s is 0.3 s at n = 3, not 0.30000000000000004).
        return timestamp(e1) + n * self.period / _MICROS

    def open(self, store: Store, e1: Any) -> Pending:
        return self.start(store, e1, self.tick_due(e1, 1), 1)

    def again(self, rec: Pending) -> None:
        """Arm ``rec`` for its interval's next tick."""
        self.svc.rearm(rec, self.tick_due(rec.ref, rec.n + 1), rec.n + 1)  # type: ignore[union-attr]


@strategy(tm.P, Context.RECENT)
class PRecent(KeepsLatest, _Periodic):
    """The latest E1's interval ticks; a new E1 restarts it; E3 closes it."""

    __slots__ = ()

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is not None:
            self.cancel(st[0])
        st[0] = self.open(store, occ)

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is not None:
            self.cancel(st[0])
            st[0] = None

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        if rec.store[self.hid][0] is rec:
            self.again(rec)
            self.emit(rec.store, (self.expr, tick[1], (rec.ref, tick)))


@strategy(tm.P, Context.CHRONICLE)
class PChronicle(_Periodic):
    """Intervals in order; a tick consumes its interval (each E1 is used once)."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [deque()]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(self.open(store, occ))

    def on1(self, store: Store, occ: Any) -> None:
        q = store[self.hid][0]
        for rec in q:
            self.cancel(rec)
        q.clear()

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        q = rec.store[self.hid][0]
        if q and q[0] is rec:
            q.popleft()
        else:
            try:
                q.remove(rec)
            except ValueError:
                return
        self.emit(rec.store, (self.expr, tick[1], (rec.ref, tick)))


@strategy(tm.P, Context.CONTINUOUS, Context.UNRESTRICTED)
class PContinuous(_Periodic):
    """Every interval ticks until E3 closes them all."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[]]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(self.open(store, occ))

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        for rec in st[0]:
            self.cancel(rec)
        st[0] = []

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        # Armed means held in the state (the service's invariant): no search.
        self.again(rec)
        self.emit(rec.store, (self.expr, tick[1], (rec.ref, tick)))


@strategy(tm.P, Context.CUMULATIVE)
class PCumulative(KeepsFirst, _Periodic):
    """The first E1 of an interval; its first tick consumes it."""

    __slots__ = ()

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is None:
            st[0] = self.open(store, occ)

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is not None:
            self.cancel(st[0])
            st[0] = None

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        st = rec.store[self.hid]
        if st[0] is rec:
            st[0] = None
            self.emit(rec.store, (self.expr, tick[1], (rec.ref, tick)))


@strategy(tm.Pstar, Context.RECENT)
class PstarRecent(_Periodic):
    """The latest E1's interval collects its ticks; E3 emits them."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [None, []]

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is not None:
            self.cancel(st[0])
        st[0] = self.open(store, occ)
        st[1] = []

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        rec = st[0]
        if rec is not None:
            self.cancel(rec)
            ticks = st[1]
            st[0], st[1] = None, []
            self.emit(store, (self.expr, occ[1], (rec.ref, *ticks, occ)))

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        st = rec.store[self.hid]
        if st[0] is rec:
            st[1].append(tick)
            self.again(rec)


@strategy(tm.Pstar, Context.CUMULATIVE)
class PstarCumulative(PstarRecent):
    """The first E1 of an interval collects its ticks; E3 emits them."""

    __slots__ = ()

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is None:
            st[0] = self.open(store, occ)
            st[1] = []


@strategy(tm.Pstar, Context.CHRONICLE)
class PstarChronicle(_Periodic):
    """E3 closes the oldest interval with its own ticks; the others go on."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        # Open intervals in order; (interval, tick) pairs.
        return [deque(), []]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(self.open(store, occ))

    def on1(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        q = st[0]
        if not q:
            return
        head = q.popleft()
        self.cancel(head)
        mine = [tick for r, tick in st[1] if r is head]
        st[1] = [pair for pair in st[1] if pair[0] is not head]
        self.emit(store, (self.expr, occ[1], (head.ref, *mine, occ)))

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        rec.store[self.hid][1].append((rec, tick))
        self.again(rec)


@strategy(tm.Pstar, Context.CONTINUOUS, Context.UNRESTRICTED)
class PstarContinuous(_Periodic):
    """E3 closes every interval, each with its own ticks (one batch)."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[], []]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(self.open(store, occ))

    def on1(self, store: Store, occ: Any) -> None:
        self.on1_batch(store, [occ])

    def on1_batch(self, store: Store, occs: list[Any]) -> None:
        # Every E3 of one instant (a continuous E3 detects several at once) closes
        # every interval open before it.
        st = store[self.hid]
        recs, pairs = st[0], st[1]
        if not recs:
            return
        st[0], st[1] = [], []
        ticks: dict[int, list[Any]] = {id(r): [] for r in recs}
        for r, tick in pairs:
            ticks[id(r)].append(tick)
        for r in recs:
            self.cancel(r)
        expr = self.expr
        self.emit_batch(
            store, [(expr, x[1], (r.ref, *ticks[id(r)], x)) for r in recs for x in occs]
        )

    def on_tick(self, rec: Pending, tick: Occurrence) -> None:
        rec.store[self.hid][1].append((rec, tick))
        self.again(rec)
