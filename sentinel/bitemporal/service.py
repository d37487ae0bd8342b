"""The bitemporal service of one detector: event classes, clock ticks, wiring.

One :class:`BitemporalService` per detector that uses the bitemporal model,
created on first use (:func:`service`: defining an event class, a rule with a
lifespan or in occurrence-time order, a timing primitive or WITHIN). It

- keeps the event classes and their instances' current versions, and turns
  announcements and revocations into occurrences of the class's event: at once
  without a chronon; with a chronon, at the next clock tick, the net effect per
  instance of what the chronon brought, in an order that does not depend on the
  order of arrival within the chronon;
- makes FUTURE instances ONTIME when their chronon comes (a *due notice*: an
  occurrence of the class's event with revision kind ``due``);
- wires the graph: a dispatcher on each channel with timing primitives (and on
  each event class's channel), the lifespan registrations, the observers of
  occurrence-time order;
- runs the clock ticks. A tick at time ``T`` is due when something is: a store
  to purge, occurrences to release, announcements to process, due notices,
  instances to expire. It first signals one occurrence of :data:`TICK` (logged;
  replay injects it and redoes the purge and the releases there), then purges
  (archiving what the rules and classes ask to), releases the occurrences of
  occurrence-time order, processes the chronon's announcements and signals the
  due notices.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from math import floor
from numbers import Real
from types import MappingProxyType
from typing import Any, Final

from sentinel.algebra import expressions as ex
from sentinel.algebra.bitemporal import Timing, TimingSelector, Within, duration
from sentinel.bitemporal.classes import (
    EventClass,
    Instance,
    attributes,
    revision_params,
)
from sentinel.bitemporal.classify import make_dispatcher
from sentinel.bitemporal.lifespan import Expired, Lifespans, refuse_class_lifespans
from sentinel.bitemporal.ordering import Orderer, boundary_after, release_tick
from sentinel.detector import Channel, EventDetector, Scope
from sentinel.detector.events import listen
from sentinel.detector.graph import EventGraph, Mode
from sentinel.detector.plugins import per_detector
from sentinel.errors import (
    BitemporalError,
    DuplicateEventError,
    ExpressionError,
    UnknownEventError,
)
from sentinel.occurrence import Occurrence, finished, occurrence_time, split_params

__all__ = ["TICK", "BitemporalService", "lifespan_seconds", "service"]

#: The event name of the bitemporal clock ticks.
TICK: Final = "bitemporal:tick"

_ATTR = "_sentinel_bitemporal"

ArchiveListener = Callable[[list[Expired]], None]


def service(det: EventDetector) -> BitemporalService:
    """The bitemporal service of ``det``, created on first use."""
    return per_detector(det, _ATTR, BitemporalService)


def lifespan_seconds(value: Any, what: str, event: str | None = None) -> float:
    """A lifespan (a timedelta, seconds or a time string) in seconds. Raises
    :class:`~sentinel.errors.BitemporalError` naming ``what`` for a zero or
    negative one, or anything that is not an amount of time."""
    if isinstance(value, timedelta) and value <= timedelta(0):
        raise BitemporalError(f"{what}: a lifespan must be positive, not {value}", event=event)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
        raise BitemporalError(f"{what}: a lifespan must be positive, not {value}", event=event)
    try:
        return duration(value, what="lifespan").seconds
    except ExpressionError as err:
        raise BitemporalError(f"{what}: {err}", event=event) from None


@dataclass
class _Op:
    """An announcement or revocation waiting for the next tick."""

    detected: float
    name: str
    key: tuple[Hashable, ...]
    ts: float | None  # None: a revocation
    attrs: Mapping[str, Any] | None


@dataclass
class _Versioned(Instance):
    """An instance's current version, with what the service needs besides."""

    gen: int = 0
    occ: Occurrence | None = field(default=None, repr=False)


class _Tick:
    """The service's one timer (duck-types :class:`sentinel.temporal.Timer`)."""

    __slots__ = ("due", "seq", "svc")
    late = False

    def __init__(self, svc: BitemporalService) -> None:
        self.svc = svc
        self.due = 0.0
        self.seq = 0

    @property
    def armed(self) -> bool:
        return self.seq > 0

    def fire(self, seq: int) -> None:
        if self.seq != -seq:
            return
        self.seq = 0
        self.svc.tick(self.due)


class BitemporalService:
    """The bitemporal model on one detector (see the module docs). Create with
    :func:`service`; thread-safe (state changes under the detector's lock)."""

    def __init__(self, det: EventDetector) -> None:
        self.det = det
        self.classes: dict[str, EventClass] = {}
        self.instances: dict[str, dict[tuple[Hashable, ...], _Versioned]] = {}
        self._gens: dict[tuple[str, tuple[Hashable, ...]], int] = {}
        self._queue: list[_Op] = []
        self._pending: dict[tuple[str, tuple[Hashable, ...]], _Op] = {}
        # (time, seq, class, key, (gen, n)): stale entries are skipped when they surface.
        self._dues: list[tuple[float, int, str, tuple[Hashable, ...], tuple[int, int]]] = []
        self._expiries: list[tuple[float, int, str, tuple[Hashable, ...], tuple[int, int]]] = []
        self._seq = itertools.count()
        self.lifespans = Lifespans(self)
        self.orderer = Orderer(self)
        self._fired: dict[str, set[tuple[str, Any, int]]] = {}
        self._timer = _Tick(self)
        #: The service's one timer (``due`` is when the next tick is armed for).
        self.timer = self._timer
        self._clock: Any = None
        self._tick_channel = Channel(TICK)
        graph = det.graph
        graph.entry_hooks.append(self.lifespans.entry_hook)
        graph.leaf_hooks.append(self.orderer.leaf_hook)
        graph.rewire_hooks.append(self._rewired)
        graph.dirty = True
        listen(det, "route", self._route_for)
        listen(det, "replica", _copy_to_replica)

    # -- event classes ---------------------------------------------------------------
    def event_class(
        self,
        name: str,
        *,
        key: str | tuple[str, ...] | list[str] | None,
        mutable: bool = True,
        lifespan: Any = None,
        archive: bool = False,
    ) -> EventClass:
        """Define the event class ``name`` (see :func:`sentinel.bitemporal.event_class`)."""
        if not isinstance(name, str) or not ex._IDENT.match(name.replace(".", "_")):
            raise BitemporalError(f"an event class needs an identifier as its name, not {name!r}")
        keys = (key,) if isinstance(key, str) else tuple(key or ())
        if not all(isinstance(k, str) and k and k != "$revision" for k in keys):
            raise BitemporalError(f"the key of {name} is attribute names, not {key!r}", event=name)
        life = None
        if lifespan is not None:
            life = lifespan_seconds(lifespan, f"event class {name}", name)
        cls = EventClass(name, keys, bool(mutable), life, bool(archive))
        det = self.det
        with det._lock:
            old = self.classes.get(name)
            if old is not None:
                if old == cls:
                    return old
                raise DuplicateEventError(name, f"it is the {old}")
            if name in det.events:
                raise DuplicateEventError(name, f"it is {det.events[name]}")
            det.define_primitive(cls.event)
            self.classes[name] = cls
            self.instances[name] = {}
            if life is not None:
                self.lifespans.classes[name] = life
            if archive:
                self.lifespans.class_archive.add(name)
            det.graph.dirty = True
            det._changed()
        return cls

    def _class(self, name: str, what: str) -> EventClass:
        cls = self.classes.get(name)
        if cls is None:
            raise UnknownEventError(name, self.classes, where=what)
        return cls

    def _current(self, name: str, key: tuple[Hashable, ...]) -> tuple[bool, float | None]:
        """Whether the instance exists once the queued requests are applied, and
        its occurrence time then. An instance past its expiration time (``o +``
        the class's lifespan, before the detector's time) does not: the tick that
        forgets it may not have come yet."""
        op = self._pending.get((name, key))
        if op is not None:
            ts = op.ts
        else:
            inst = self.instances[name].get(key)
            ts = None if inst is None else inst.ts
        if ts is None:
            return False, None
        life = self.classes[name].lifespan
        if life is not None and ts + life < self._now():
            return False, ts
        return True, ts

    def announce(self, name: str, at: Any, attrs: dict[str, Any]) -> Occurrence | None:
        """Announce an instance of ``name`` (see :func:`sentinel.bitemporal.announce`)."""
        cls = self._class(name, "announce()")
        ts = occurrence_time(at, name)
        values = attributes(cls, attrs, "an announcement")
        key = cls.key_of(values, "an announcement") if cls.key else (next(self._seq),)
        det = self.det
        with det._lock:
            exists, _ = self._current(name, key)
            if exists and not cls.mutable:
                raise BitemporalError(
                    f"{name} is IMMUTABLE: its instance {_key_text(cls, key)} was announced "
                    "already and cannot be revised",
                    event=name,
                )
            if det.chronon:
                op = _Op(self._now(), name, key, ts, values)
                self._queue.append(op)
                self._pending[(name, key)] = op
                self.wake(self._next_boundary(op.detected))
                return None
            inst = self.instances[name].get(key)
            params, version = self._version(cls, key, inst, ts, values)
        return self._signal(cls, key, params, version, ts, None)

    def revoke(self, name: str, attrs: dict[str, Any]) -> Occurrence | None:
        """Revoke an instance of ``name`` (see :func:`sentinel.bitemporal.revoke`)."""
        cls = self._class(name, "revoke()")
        values = attributes(cls, attrs, "a revocation")
        if not cls.key:
            raise BitemporalError(f"{name} has no key: its instances cannot be revoked", event=name)
        key = cls.key_of(values, "a revocation")
        det = self.det
        with det._lock:
            exists, _ = self._current(name, key)
            if not exists:
                raise BitemporalError(
                    f"revocation of {name} {_key_text(cls, key)}: no such instance is announced "
                    "(never, or it was revoked or has expired)",
                    event=name,
                )
            if not cls.mutable:
                raise BitemporalError(
                    f"{name} is IMMUTABLE: its instance {_key_text(cls, key)} cannot be revoked",
                    event=name,
                )
            if det.chronon:
                op = _Op(self._now(), name, key, None, None)
                self._queue.append(op)
                self._pending[(name, key)] = op
                self.wake(self._next_boundary(op.detected))
                return None
            inst = self.instances[name][key]
            params = self._revocation(cls, key, inst)
        return self._signal(cls, key, params, None, det._wall(), None)

    def _version(
        self,
        cls: EventClass,
        key: tuple[Hashable, ...],
        inst: _Versioned | None,
        ts: float,
        values: Mapping[str, Any],
    ) -> tuple[dict[str, Any], _Versioned]:
        """The parameters of a (re)announcement and the new version (under the lock)."""
        if inst is None:
            gen = self._gens.get((cls.name, key), 0) + 1
            self._gens[(cls.name, key)] = gen
            params = revision_params("announce", key, 1, values, None)
            version = _Versioned(ts, values, 1, 0.0, gen)
        else:
            params = revision_params("revise", key, inst.n + 1, values, inst)
            version = _Versioned(ts, values, inst.n + 1, 0.0, inst.gen)
        params["$revision"] = MappingProxyType({**params["$revision"], "gen": version.gen})
        return params, version

    def _revocation(
        self, cls: EventClass, key: tuple[Hashable, ...], inst: _Versioned
    ) -> dict[str, Any]:
        params = revision_params("revoke", key, inst.n + 1, inst.attrs, inst)
        params["$revision"] = MappingProxyType({**params["$revision"], "gen": inst.gen})
        return params

    def _signal(
        self,
        cls: EventClass,
        key: tuple[Hashable, ...],
        params: dict[str, Any],
        version: _Versioned | None,
        ts: float,
        detected: float | None,
    ) -> Occurrence:
        """Apply a version (or a revocation: ``version`` None) and signal it."""
        det = self.det
        ch = det._channels[cls.name]
        scope = det.process_scope
        with det._lock:
            instances = self.instances[cls.name]
            old = instances.get(key)
            if version is None:
                instances.pop(key, None)
                if old is not None:
                    self._forget(cls.name, key, old.gen)
            else:
                version.detected = det._wall() if detected is None else detected
                instances[key] = version
                self._schedule(cls, key, version)
        if detected is None:
            occ = det.emit(ch, *split_params(params), None, (), scope, ts, False)
        else:
            occ = det.emit_detected(ch, params, scope, ts, detected)
        made: Occurrence = finished(occ)  # emitted unmuted: never None
        if version is not None:
            version.occ = made
        return made

    def _schedule(self, cls: EventClass, key: tuple[Hashable, ...], v: _Versioned) -> None:
        """Arm the due notice of a FUTURE version and the expiry of a class with a
        lifespan (under the lock)."""
        c = self.det.chronon
        due = floor(v.ts / c) * c if c else v.ts
        if due > v.detected and not (c and floor(v.ts / c) == floor(v.detected / c)):
            heapq.heappush(self._dues, (due, next(self._seq), cls.name, key, (v.gen, v.n)))
            self.wake(due)
        if cls.lifespan is not None:
            t = self.lifespans.tick_after(v.ts + cls.lifespan)
            heapq.heappush(self._expiries, (t, next(self._seq), cls.name, key, (v.gen, v.n)))
            self.wake(t)

    def _forget(self, name: str, key: tuple[Hashable, ...], gen: int) -> None:
        for fired in self._fired.values():
            fired.discard((name, key, gen))

    # -- FIRED --------------------------------------------------------------------------
    def fired_registry(self, rule: str) -> set[tuple[str, Any, int]]:
        """The event instances ``rule`` fired for (see :mod:`sentinel.bitemporal.fired`)."""
        with self.det._lock:
            return self._fired.setdefault(rule, set())

    # -- wiring --------------------------------------------------------------------------
    def _rewired(self, graph: EventGraph) -> None:
        self.lifespans.rewired()
        self.orderer.rewired(graph)
        for (_expr, mode, _region), h in graph.handlers.items():
            if mode.lateness is not None:
                h.set_order(occurrence_order)
        chronon = self.det.chronon
        for name, ch in graph.channels.items():
            timing = [(s, fns) for s, fns in ch.selected.items() if isinstance(s, TimingSelector)]
            if not timing and name not in self.classes:
                continue
            for s, _ in timing:
                del ch.selected[s]
            if not timing and not ch.any:
                continue
            ch.any = (make_dispatcher(ch.any, timing, chronon, None),)

    # -- clock ticks ----------------------------------------------------------------------
    def _now(self) -> float:
        return self.det._wall()

    def _next_boundary(self, t: float) -> float:
        c: float = self.det.chronon  # type: ignore[assignment]
        return boundary_after(t, c)

    def release_tick(self, due: float) -> float:
        return release_tick(due, self.det.chronon)

    def wake(self, t: float) -> None:
        """Make sure a tick happens at ``t`` or earlier (under the lock)."""
        if self.det.replaying:
            return
        timer = self._timer
        if timer.armed and timer.due <= t:
            return
        clock = self._clock
        if clock is None:
            from sentinel.temporal import timers

            clock = self._clock = timers(self.det).clock
        timer.due = t
        clock.schedule(timer)

    def _next_needed(self) -> float | None:
        candidates = (
            self.lifespans.next_tick,
            self.orderer.next_release(),
            self._dues[0][0] if self._dues else None,
            self._expiries[0][0] if self._expiries else None,
            self._next_boundary(min(op.detected for op in self._queue)) if self._queue else None,
        )
        times = [t for t in candidates if t is not None]
        return min(times) if times else None

    def _has_work(self, now: float) -> bool:
        return (
            self.lifespans.due(now)
            or self.orderer.due(now)
            or bool(self._dues and self._dues[0][0] <= now)
            or bool(self._expiries and self._expiries[0][0] <= now)
            or any(op.detected < now for op in self._queue)
        )

    def tick(self, now: float) -> None:
        """Run the clock tick at ``now`` (the timer calls this)."""
        det = self.det
        try:
            with det._lock:
                work = self._has_work(now)
            if work:
                det.notify(self._tick_channel, {}, scope=det.process_scope, timestamp=now)
                self._work(now, live=True)
        finally:
            with det._lock:
                nxt = self._next_needed()
                if nxt is not None:
                    self.wake(max(nxt, now))

    def _route_for(self, event: str) -> Callable[..., Any] | None:
        """The detector's ``route`` event: logged ticks go to :meth:`_route_tick`."""
        return self._route_tick if event == TICK else None

    def _route_tick(self, occ: Occurrence, scope: Scope) -> tuple[Any, ...]:
        """A logged tick injected by replay: redo its purge and releases."""
        self._work(occ[2], live=False)
        return ()

    def _work(self, now: float, *, live: bool) -> None:
        det = self.det
        expired: list[Expired] = []
        with det._lock:
            expired = self.lifespans.purge(now)
            gone = self._expire_instances(now) if live else {}
            released = self.orderer.release(now)
        scope = det.process_scope
        propagate, deliver, lock = det._propagate, det._deliver, det._lock
        for _o, _t, occ, fns in released:
            with lock:
                items = propagate(fns, occ, scope)
            if items:
                deliver(items, scope)
        if expired and det.dispatch.expired:
            det.dispatch.expired(expired)
        if live:
            self._process_queue(now, gone)
            self._signal_dues(now)

    def _expire_instances(self, now: float) -> dict[tuple[str, tuple[Hashable, ...]], _Versioned]:
        """Forget the instances whose lifespan is over (the as-of-now view: a later
        announcement of the key is a new instance), and return them. What
        detection state holds of them is purged by the lifespans, with the
        extension of 2.5."""
        heap = self._expiries
        gone: dict[tuple[str, tuple[Hashable, ...]], _Versioned] = {}
        while heap and heap[0][0] <= now:
            _t, _s, name, key, version = heapq.heappop(heap)
            inst = self.instances[name].get(key)
            if inst is None or (inst.gen, inst.n) != version:
                continue
            del self.instances[name][key]
            self._forget(name, key, inst.gen)
            gone[(name, key)] = inst
        return gone

    def _process_queue(
        self, now: float, gone: Mapping[tuple[str, tuple[Hashable, ...]], _Versioned]
    ) -> None:
        """Process the announcements and revocations of the chronons before
        ``now``. ``gone``: the instances this tick expired; a revocation detected
        before its instance's expiration still cancels it (``revoke`` refused
        those detected after)."""
        det = self.det
        with det._lock:
            ready = [op for op in self._queue if op.detected < now]
            if not ready:
                return
            self._queue = [op for op in self._queue if op.detected >= now]
            last: dict[tuple[str, tuple[Hashable, ...]], _Op] = {}
            for op in ready:
                last[(op.name, op.key)] = op
            self._pending = {(op.name, op.key): op for op in self._queue}
            c: float = det.chronon  # type: ignore[assignment]
            plan: list[
                tuple[
                    tuple[float, str, tuple[tuple[int, str, Any], ...]],
                    EventClass,
                    tuple[Hashable, ...],
                    dict[str, Any],
                    _Versioned | None,
                    float,
                    _Op,
                ]
            ] = []
            for (name, key), op in last.items():
                cls = self.classes[name]
                inst = self.instances[name].get(key)
                if op.ts is None:
                    if inst is None:
                        inst = gone.get((name, key))
                    if inst is None:
                        continue  # announced and revoked within the chronon: nothing happened
                    params = self._revocation(cls, key, inst)
                    # A revocation has no occurrence time of its own: it occurs at
                    # the chronon it was detected in (all of a chronon is one
                    # instant), and takes its place by that time.
                    ts = floor(op.detected / c) * c
                    plan.append(((ts, name, key_order(key)), cls, key, params, None, ts, op))
                else:
                    params, new = self._version(cls, key, inst, op.ts, op.attrs or {})
                    plan.append(((op.ts, name, key_order(key)), cls, key, params, new, op.ts, op))
            try:
                plan.sort(key=lambda p: p[0])
            except TypeError:  # values of one type that order only some pairs
                plan.sort(key=lambda p: (p[0][0], p[0][1], _by_repr(p[0][2])))
        for _order, cls, key, params, version, ts, op in plan:
            self._signal(cls, key, params, version, ts, op.detected)

    def _signal_dues(self, now: float) -> None:
        det = self.det
        while True:
            with det._lock:
                heap = self._dues
                if not heap or heap[0][0] > now:
                    return
                _t, _s, name, key, version = heapq.heappop(heap)
                inst = self.instances[name].get(key)
                if inst is None or (inst.gen, inst.n) != version:
                    continue
                params = dict(inst.attrs)
                params["$revision"] = MappingProxyType(
                    {"kind": "due", "key": key, "n": inst.n, "gen": inst.gen}
                )
            det.emit(
                det._channels[name],
                *split_params(params),
                None,
                (),
                det.process_scope,
                inst.ts,
                False,
            )

    # -- inspection ---------------------------------------------------------------------
    def too_late(self, mode: Mode) -> dict[str, int]:
        """How many occurrences of each event arrived too late for the
        occurrence-time order of ``mode`` (a rule's mode)."""
        buf = self.orderer.buffers.get(mode)
        return dict(buf.too_late) if buf is not None else {}


def occurrence_order(occ: Any) -> tuple[float, int]:
    """The order a node in occurrence-time order processed an occurrence in: its
    occurrence time (a composite's terminator's), then its ``t_occ``."""
    t = occ
    while len(t) != 8:
        t = t[2][-1]
    return (t[2], occ[1])


def key_order(key: tuple[Hashable, ...]) -> tuple[tuple[int, str, Any], ...]:
    """How instances with the same occurrence time and class are ordered within
    a tick: by their key values, one after the other. Numbers (but NaN) come
    first, by value (1, 2, 10); then every other value grouped by its type's
    name, values of one type by value ("a", "b"), or by ``repr`` where that type
    does not order its values (and, for every value that is not a number, when
    two values of one type refuse to be compared: mixed tuples, naive and aware
    datetimes). Total and independent of arrival order."""
    out: list[tuple[int, str, Any]] = []
    v: Any
    for v in key:
        if isinstance(v, Real) and v == v:  # NaN is not equal to itself
            out.append((0, "", v))
            continue
        t = type(v)
        name = f"{t.__module__}.{t.__qualname__}"
        try:
            v < v  # noqa: B015 (does the type order its values?)
        except TypeError:
            out.append((2, name, repr(v)))
        else:
            out.append((1, name, v))
    return tuple(out)


def _by_repr(order: tuple[tuple[int, str, Any], ...]) -> tuple[tuple[int, str, Any], ...]:
    """:func:`key_order` with every value that is not a number read by ``repr``:
    the order when some values of one type refuse to be compared."""
    return tuple(x if x[0] == 0 else (x[0], x[1], repr(x[2])) for x in order)


def _key_text(cls: EventClass, key: tuple[Hashable, ...]) -> str:
    return "(" + ", ".join(f"{k}={v!r}" for k, v in zip(cls.key, key, strict=True)) + ")"


def _copy_to_replica(src: EventDetector, dst: EventDetector) -> None:
    """A replica of a detector gets the same event classes (and a service)."""
    svc = service(src)
    rep = service(dst)
    for cls in svc.classes.values():
        rep.event_class(
            cls.name, key=cls.key, mutable=cls.mutable, lifespan=cls.lifespan, archive=cls.archive
        )


def _prepare_timing(det: EventDetector, expr: ex.Expression) -> None:
    """Resolving a timing primitive: its event must be a primitive event here."""
    assert isinstance(expr, Timing)
    known = det.events.get(expr.event.label)
    if known is not None and not (isinstance(known, ex.Primitive) and known.selector is None):
        raise ExpressionError(
            f"{expr}: timing primitives apply to primitive events; {expr.event.label} is {known}"
        )
    service(det)


def _prepare_within(det: EventDetector, expr: ex.Expression) -> None:
    service(det)


def prepare(det: EventDetector, expr: ex.Expression) -> None:
    """The bitemporal layer's listener of the detector's ``prepare`` event."""
    svc = det.__dict__.get(_ATTR)
    if svc is not None and svc.lifespans.classes:
        refuse_class_lifespans(expr, svc.lifespans.classes)
    if type(expr) is Timing:
        _prepare_timing(det, expr)
    elif type(expr) is Within:
        _prepare_within(det, expr)
