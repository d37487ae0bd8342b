"""The timer service: temporal events on one detector.

One :class:`TemporalService` per detector that uses temporal expressions,
created when the first one is resolved there (``detector.expression``, a rule, a
subscription). It

- chooses the clock timers run on: the detector's clock if it is a clock of
  :mod:`sentinel.temporal.clocks`; a :class:`~.SystemClock` (local time) for a
  detector created without one; a :class:`~.ReplayClock` on a detector that
  replays the log (``replaying=True``);
- binds the temporal handlers of the event graph to itself when they are wired,
  and cancels the timers of handlers that are unwired;
- arms a timer for each listened absolute event and signals it when due, in the
  process scope;
- signals each due tick through the detector's ordinary path
  (:meth:`~sentinel.detector.EventDetector.notify`: lock, ``t_occ``, occurrence
  listeners such as the event log, rules) to the one handler that armed it;
- keeps, per store, the timers started from it: flushing a scope (commit, abort,
  ``flush``) cancels them; rolling a scope back to a savepoint cancels the timers
  started since and re-arms the ones that were pending then;
- matches a logged tick injected on a replaying detector with the pending timer
  it belongs to.

A tick is a primitive occurrence of :data:`TICK` whose ``timestamp`` is the
time it was due and ``detected_timestamp`` the time it fired. Its parameter
``timer`` (one mapping, so it never mixes with an application's parameters) says
which timer it is: ``expr`` (the temporal expression's text), ``context``,
``ref`` (the reference occurrence: ``(scope, (t_occ, ...))`` of its constituents),
``n`` (1 for a relative event, the tick's number in a P / P* interval), plus
``flush: False`` for process-wide rules and ``region`` inside partitioned
expressions. A tick of ``P*(E1, [t] price, E3)`` also carries the sample as
``price``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Final

from sentinel.algebra import expressions as ex
from sentinel.algebra import temporal as tm
from sentinel.detector import Channel, EventDetector, Scope, Store
from sentinel.detector.events import listen
from sentinel.detector.plugins import per_detector
from sentinel.errors import SentinelError, TemporalError
from sentinel.occurrence import SOURCE, Occurrence, param, params_of
from sentinel.params import normalize
from sentinel.temporal.calendar import next_match
from sentinel.temporal.clocks import Clock, ReplayClock, SystemClock, Timer
from sentinel.temporal.handlers import Pending, TemporalHandler, _Periodic

__all__ = ["TICK", "TemporalService", "replay_events", "service"]

#: The event name of ticks (the temporal primitive occurrences of relative events
#: and of P / P* intervals).
TICK: Final = "temporal:tick"

_MISSING = object()
_ATTR = "_sentinel_temporal"


def service(det: EventDetector) -> TemporalService:
    """The timer service of ``det``, created on first use. Raises
    :class:`~sentinel.errors.TemporalError` when the detector's clock cannot run
    timers (a plain function other than ``time.time``)."""
    return per_detector(det, _ATTR, TemporalService)


def replay_events(expr: ex.Expression) -> frozenset[str]:
    """The events a replay of ``expr`` must read from the log beyond
    ``expr.primitives()``: :data:`TICK` when it holds a relative event, P or P*
    (absolute events are primitives already). Tick parameters are read by the
    detector itself (to find the timer a tick belongs to)."""
    kinds = (tm.Relative, tm.P, tm.Pstar)
    return frozenset((TICK,)) if any(isinstance(e, kinds) for e in expr.walk()) else frozenset()


def _clock_for(det: EventDetector) -> Clock:
    clock = det.wall_clock
    if det.replaying:
        return ReplayClock(tz=clock.tz) if isinstance(clock, Clock) else ReplayClock()
    if isinstance(clock, ReplayClock):
        return clock
    if isinstance(clock, Clock):
        return clock
    if clock is time.time:
        return SystemClock()
    raise TemporalError(
        f"temporal events need a clock that runs timers, and this detector's clock is the "
        f"plain function {clock!r}; create it with clock=SystemClock() or clock=VirtualClock()"
    )


class _AbsoluteTimer(Timer):
    __slots__ = ("channel", "svc", "time")
    late = True  # at one instant, after the ticks: an interval it closes keeps its last tick

    def __init__(self, svc: TemporalService, channel: Channel, time: tm.AbsoluteTime) -> None:
        super().__init__(0.0)
        self.svc = svc
        self.channel = channel
        self.time = time

    def fire(self, seq: int) -> None:
        self.svc.fire_absolute(self, seq)


class TemporalService:
    """Timers of one detector (see the module docs). Create with :func:`service`."""

    def __init__(self, det: EventDetector) -> None:
        self.det = det
        self.clock = _clock_for(det)
        #: id(root store) -> (root store, its pending records in order of start).
        self._by_root: dict[int, tuple[Store, dict[Pending, None]]] = {}
        self._absolute: dict[str, _AbsoluteTimer] = {}
        self._bound: set[int] = set()
        self._index: dict[tuple[Any, ...], Pending] | None = {} if det.replaying else None
        self._release: list[Pending] = []
        listen(det, "changed", self._changed)
        listen(det, "flush", self._flushed)
        listen(det, "route", self._route_for)
        # Set now rather than with the first timer: views of the process scope
        # copy it when they are made.
        det.process_scope.on_restore = self._restore

    # -- what is pending -------------------------------------------------------------
    def pending(self, scope: Scope | None = None) -> int:
        """How many relative / periodic timers are pending (in ``scope``'s store, or
        everywhere)."""
        with self.det._lock:
            if scope is not None:
                entry = self._by_root.get(id(scope.store))
                return len(entry[1]) if entry else 0
            return sum(len(recs) for _, recs in self._by_root.values())

    def scheduled_absolute(self) -> dict[str, float]:
        """The absolute events armed now, by name, with their next due time."""
        with self.det._lock:
            return {n: t.due for n, t in self._absolute.items() if t.armed}

    # -- wiring --------------------------------------------------------------------------
    def add_absolute(self, expr: tm.Absolute) -> None:
        """Make ``expr`` an event of the detector; its timer is armed while some
        subscription listens to it."""
        det = self.det
        with det._lock:
            if expr.name not in self._absolute:
                det.define_primitive(expr)
                self._absolute[expr.name] = _AbsoluteTimer(self, det.channel(expr.name), expr.time)

    def _changed(self) -> None:
        """Subscriptions changed (under the detector's lock): bind new handlers,
        cancel the timers of removed ones, arm or disarm absolute events."""
        graph = self.det.graph
        current: set[int] = set()
        for (_expr, mode, region), h in graph.handlers.items():
            if isinstance(h, TemporalHandler):
                current.add(h.hid)
                if h.svc is not self:
                    h.bind(self, mode, region)
        gone = self._bound - current
        self._bound = current
        if gone and self._by_root:
            for rec in [r for _, recs in self._by_root.values() for r in recs]:
                if rec.handler.hid in gone:
                    self.cancel(rec)
        clock = self.clock
        for timer in self._absolute.values():
            if timer.channel.listened:
                # neither armed nor firing right now (a firing timer, popped
                # and not yet re-armed by fire_absolute, keeps its match: armed
                # again here, from now, it would skip the match it is firing)
                if timer.seq == 0:
                    due = next_match(timer.time, clock.now(), clock.tz)
                    if due is not None:
                        timer.due = due
                        clock.schedule(timer)
            elif timer.armed:
                clock.cancel(timer)

    # -- timers of handlers --------------------------------------------------------------
    def start(
        self, handler: TemporalHandler, store: Store, ref: Any, due: float, n: int
    ) -> Pending:
        """Arm a timer for ``handler`` whose state is in ``store`` (called by the
        handler, under the detector's lock)."""
        root = store
        while root.parent is not None:
            root = root.parent
        det = self.det
        scope: Scope | None
        if root is det.graph.global_store:
            scope = det.process_scope
        else:
            owner = root.owner
            scope = owner() if owner is not None else None
            if scope is None:  # pragma: no cover - stores are created by scopes
                raise TemporalError(f"{handler.expr}: the store of this occurrence has no scope")
            if scope.on_restore is None:
                scope.on_restore = self._restore
        rec = Pending(due, handler, store, root, scope, ref, n)
        self._register(rec)
        self.clock.schedule(rec)
        return rec

    def rearm(self, rec: Pending, due: float, n: int) -> None:
        """Arm ``rec`` again, for tick ``n`` at ``due`` (a periodic interval)."""
        rec.due, rec.n = due, n
        self._register(rec)
        self.clock.schedule(rec)

    def cancel(self, rec: Pending) -> None:
        """Disarm ``rec`` (its handler no longer holds it)."""
        self.clock.cancel(rec)
        self._forget(rec)

    def _register(self, rec: Pending) -> None:
        entry = self._by_root.get(id(rec.root))
        if entry is None:
            entry = self._by_root[id(rec.root)] = (rec.root, {})
        entry[1][rec] = None
        if self._index is not None:
            self._index[self._key(rec)] = rec

    def _forget(self, rec: Pending) -> None:
        entry = self._by_root.get(id(rec.root))
        if entry is not None:
            recs = entry[1]
            recs.pop(rec, None)
            if not recs:
                del self._by_root[id(rec.root)]
        if self._index is not None:
            self._index.pop(self._key(rec), None)

    @staticmethod
    def _key(rec: Pending) -> tuple[Any, ...]:
        return (*rec.handler.tick_id, rec.n, _ref_id(rec.ref))

    # -- firing ---------------------------------------------------------------------------
    def fire(self, rec: Pending, seq: int) -> None:
        """``rec`` is due (called by the clock): signal its tick."""
        if rec.seq != -seq:
            return  # cancelled or re-armed meanwhile
        handler = rec.handler
        try:
            params = self._tick_params(rec, sample=True)
        except BaseException as exc:
            # A failing sampler skips this tick; the interval goes on.
            with self.det._lock:
                if rec.seq == -seq:
                    self.clock.cancel(rec)
                    self._forget(rec)
                    assert isinstance(handler, _Periodic)
                    handler.again(rec)
            if isinstance(exc, SentinelError) or not isinstance(exc, Exception):
                raise
            arg = getattr(handler.expr, "arg", None)
            raise TemporalError(
                f"the sampler {arg!r} of {handler.expr} failed at {rec.due}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        channel = Channel(TICK)
        channel.any = (partial(self._on_tick, rec, -seq),)
        scope = rec.scope
        if not scope.process and threading.current_thread() is getattr(self.clock, "_thread", None):
            # the clock's thread, beside the application's thread in the same
            # transaction: its own handle on the scope, with its own cascade
            # depth (sharing one, each thread restored the other's count); the
            # scope counts it, so that a transaction ending meanwhile is seen
            # ending under a running rule
            view = scope.thread_view()
            me = threading.get_ident()
            with scope.lock:  # the only writers: clock threads
                counts = scope.elsewhere = dict(scope.elsewhere or ())
                counts[me] = counts.get(me, 0) + 1
            try:
                self.det.notify(channel, params, scope=view, timestamp=rec.due)
            finally:
                with scope.lock:
                    counts = dict(scope.elsewhere or ())
                    if counts.get(me, 0) > 1:
                        counts[me] -= 1
                    else:
                        counts.pop(me, None)
                    scope.elsewhere = counts or None
        else:
            self.det.notify(channel, params, scope=scope, timestamp=rec.due)
        if self._release:
            with self.det._lock:
                self._release_pending()

    def _tick_params(self, rec: Pending, *, sample: bool) -> dict[str, Any]:
        expr_text, context, flush, region = rec.handler.tick_id
        timer: dict[str, Any] = {
            "expr": expr_text,
            "context": context,
            "ref": _ref_id(rec.ref),
            "n": rec.n,
        }
        if not flush:
            timer["flush"] = False
        if region:
            timer["region"] = region
        params: dict[str, Any] = {"timer": timer}
        expr = rec.handler.expr
        if sample and isinstance(expr, tm.Pstar) and expr.arg is not None:
            fn = self.det.samplers.get(expr.arg)
            if fn is None:
                raise TemporalError(
                    f"{expr} samples {expr.arg!r}, which is not a sampler of this detector; "
                    f"register it with detector.sampler({expr.arg!r}, fn)"
                )
            params[expr.arg] = normalize(fn(), event=TICK, param=expr.arg)
        return params

    def _on_tick(self, rec: Pending, seq: int, store: Store, tick: Occurrence) -> None:
        """The tick reaches its handler (under the detector's lock, while it
        propagates). ``seq`` is the firing (negative) or, for an injected tick, the
        armed (positive) sequence number the record must still have."""
        if self._release:
            self._release_pending()
        if rec.seq != seq:
            return
        self.clock.cancel(rec)
        self._forget(rec)
        handler = rec.handler
        handler.on_tick(rec, tick)
        if handler.region and not rec.armed:
            if self.det.graph.agenda:
                self._release.append(rec)  # buffered nodes may still use the partition
            else:
                self._release_partitions(rec)

    def _release_pending(self) -> None:
        """Release the partitions ticks left empty while buffered nodes still had
        arrivals to process (an instant has ended since, unless one is draining)."""
        if not self.det.graph.agenda:
            for r in self._release:
                self._release_partitions(r)
            self._release.clear()

    def _release_partitions(self, rec: Pending) -> None:
        """Release the partitions (``E by key``) a tick left empty, as the router
        does after an occurrence."""
        handler = rec.handler
        region, mode = handler.region, handler.mode
        routers = self.det.graph.routers
        store = rec.store
        term = rec.ref
        while len(term) != 8:
            term = term[2][-1]
        while region.keyed is not None and region.parent is not None:
            parent = store.parent
            if parent is None or not store.is_empty():
                return
            keyed: ex.Keyed = region.keyed
            region = region.parent
            rid = routers.get((keyed, mode, region))
            state = parent.get(rid) if rid is not None else None
            if not state:
                return
            parts = state[0]
            key = term[SOURCE] if keyed.key is ex.SOURCE else param(term, keyed.key, _MISSING)
            try:
                if parts.get(key) is store:
                    del parts[key]
            except TypeError:
                return
            store = parent

    def fire_absolute(self, timer: _AbsoluteTimer, seq: int) -> None:
        """An absolute event is due (called by the clock): arm the next match, then
        signal it in the process scope."""
        det = self.det
        with det._lock:
            if timer.seq != -seq:
                return
            due = timer.due
            clock = self.clock
            clock.cancel(timer)
            if timer.channel.listened:
                nxt = next_match(timer.time, due, clock.tz)
                if nxt is not None:
                    timer.due = nxt
                    clock.schedule(timer)
            else:  # pragma: no cover - unlistened absolute timers are cancelled
                return
        det.notify(timer.channel, {}, scope=det.process_scope, timestamp=due)

    # -- flush, savepoints, replay -----------------------------------------------------
    def _flushed(self, scope: Scope | None) -> None:
        """A flush forgets ``scope``'s state (or all of it): cancel its timers."""
        clock = self.clock
        if scope is None:
            entries = list(self._by_root.values())
            self._by_root.clear()
            if self._index is not None:
                self._index.clear()
        else:
            entry = self._by_root.pop(id(scope.store), None)
            if entry is None:
                return
            entries = [entry]
            if self._index is not None:
                for rec in entry[1]:
                    self._index.pop(self._key(rec), None)
        for _, recs in entries:
            for rec in recs:
                clock.cancel(rec)

    def _restore(self, scope: Scope, snapshot: dict[int, list[Any]]) -> None:
        """Roll ``scope`` back to a savepoint: restore its store, cancel the timers
        started since, re-arm those that were pending then (a timer whose due time
        has passed fires at the clock's next opportunity)."""
        with self.det._lock:
            root = scope.store
            root.restore(snapshot)
            found: dict[Pending, Store] = {}
            for rec, store in _records(root):
                found[rec] = store
            entry = self._by_root.get(id(root))
            for rec in list(entry[1]) if entry else []:
                if rec not in found:
                    self.cancel(rec)
            for rec, store in found.items():
                rec.store = store  # partitions are copies after a restore
                if rec.seq == 0:  # neither armed nor firing right now
                    self._register(rec)
                    self.clock.schedule(rec)

    def _route_for(self, event: str) -> Callable[..., Any] | None:
        """The detector's ``route`` event: logged ticks go to :meth:`_route`."""
        return self._route if event == TICK else None

    def _route(self, occ: Occurrence, scope: Scope) -> tuple[Callable[[Store, Any], None], ...]:
        """Where an injected (logged) tick goes: the pending timer it belongs to."""
        params = params_of(occ)
        try:
            timer = params["timer"]
            key = (
                timer["expr"],
                timer["context"],
                timer.get("flush", True),
                timer.get("region", ""),
                timer["n"],
                _freeze(timer["ref"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return ()
        if self._index is not None:
            rec = self._index.get(key)
        else:  # not a replaying detector: look for it
            rec = next(
                (r for _, recs in self._by_root.values() for r in recs if self._key(r) == key),
                None,
            )
        if rec is None or not rec.armed:
            return ()
        return (partial(self._on_tick, rec, rec.seq),)


def _ref_id(ref: Any) -> tuple[str, tuple[int, ...]]:
    """``(scope, (t_occ, ...))`` of a reference occurrence's constituents."""
    if len(ref) == 8:
        return (str(ref[6]), (ref[1],))
    stack, t_occs = [ref], []
    term = ref
    while len(term) != 8:
        term = term[2][-1]
    while stack:
        o = stack.pop()
        if len(o) == 8:
            t_occs.append(o[1])
        else:
            stack.extend(o[2])
    return (str(term[6]), tuple(sorted(t_occs)))


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _records(store: Store) -> Iterator[tuple[Pending, Store]]:
    """Every pending record held in ``store`` and its partitions."""
    for state in store.values():
        for item in state:
            if isinstance(item, Pending):
                yield item, store
            elif isinstance(item, (list, deque)):
                for x in item:
                    if isinstance(x, Pending):
                        yield x, store
            elif isinstance(item, dict):
                for sub in item.values():
                    yield from _records(sub)


def _prepare_absolute(det: EventDetector, expr: ex.Expression) -> None:
    assert isinstance(expr, tm.Absolute)
    service(det).add_absolute(expr)


def _prepare_operator(det: EventDetector, expr: ex.Expression) -> None:
    service(det)
    arg = expr.arg if isinstance(expr, tm.Pstar) else None
    if arg is not None and not det.replaying and arg not in det.samplers:
        known = ", ".join(sorted(det.samplers)) or "none registered"
        raise TemporalError(
            f"{expr} samples {arg!r}, which is not a sampler of this detector "
            f"({known}); register it first with detector.sampler({arg!r}, fn)"
        )


_PREPARE: Final = {
    tm.Absolute: _prepare_absolute,
    tm.Relative: _prepare_operator,
    tm.P: _prepare_operator,
    tm.Pstar: _prepare_operator,
}


def _prepare(det: EventDetector, expr: ex.Expression) -> None:
    prepare = _PREPARE.get(type(expr))
    if prepare is not None:
        prepare(det, expr)


def install(det: EventDetector) -> None:
    """The temporal layer's plug-in (:mod:`sentinel.detector.plugins`): resolving
    a temporal expression sets up the detector's timer service (and an
    absolute event's channel)."""
    listen(det, "prepare", _prepare)
