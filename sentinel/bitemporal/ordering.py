"""Occurrence-time order for rules that ask for it (``order="occurrence"``).

A rule in occurrence-time order with an allowed lateness ``L`` detects over its
primitive events sorted by occurrence time: each arriving occurrence waits in a
buffer (one per mode; an ordered rule's mode names the rule, so one per rule,
and the watermark is the rule's own) until a clock tick ``T``
with ``o + L <= T`` releases it; released occurrences go through the rule's
expression one at a time, in ``(o, t_occ)`` order. The *watermark* is the time
of the last tick that released something, minus ``L``; an occurrence whose
occurrence time is behind it when it arrives is *too late*: it can no longer
take its place. It is then not fed to the rule's expression; it is counted (per
event, :meth:`Buffer.too_late`) and, at once, handed to the rule's ``LATE(E)``
leaves, which in occurrence-time order receive exactly these (their delay
bounds compare the delay arrival order compares,
:func:`~sentinel.bitemporal.classify.late_delay`: in chronons with a chronon).
Nothing is dropped silently.

The graph's leaf hook takes every leaf edge of such a mode; after each wiring an
*observer* per mode and channel (and per object selector) is installed on the
channel: it classifies, checks the watermark, and buffers the occurrence with the
leaf functions it must reach. Replay injects the logged ticks, so it releases the
same occurrences at the same points.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Hashable
from math import ceil, floor, inf, isinf, nextafter
from typing import TYPE_CHECKING, Any

from sentinel.algebra.bitemporal import BIT, TimingSelector
from sentinel.bitemporal.classify import classify, late_delay
from sentinel.detector.graph import EventGraph, Mode
from sentinel.detector.operators import Entry
from sentinel.detector.scopes import Store

if TYPE_CHECKING:
    from sentinel.bitemporal.service import BitemporalService

__all__ = ["Buffer", "Orderer", "boundary_after", "release_tick"]

_LATE = BIT["LATE"]


class Buffer:
    """The occurrences of one ordered mode waiting for their release.

    Each observer of the mode keeps its occurrences in one list per release tick
    (nothing is allocated per occurrence: waiting occurrences are many, and the
    cyclic garbage collector would walk every wrapper); a heap holds the ticks.
    A release sorts the due occurrences by ``(o, t_occ)`` and merges one
    occurrence that reached several observers into one instant.
    """

    __slots__ = (
        "chronon",
        "lateness",
        "mark",
        "mode",
        "observers",
        "seen_late",
        "tick_set",
        "ticks",
        "too_late",
    )

    def __init__(self, mode: Mode, chronon: float | None) -> None:
        self.mode = mode
        self.chronon = chronon
        self.lateness: float = mode.lateness  # type: ignore[assignment]
        #: The last tick that released something (the watermark is ``mark - L``).
        self.mark = -inf
        self.ticks: list[float] = []
        self.tick_set: set[float] = set()
        #: Per observer: ``(its leaf functions, {tick: occurrences})``; an entry is
        #: an occurrence, or ``(occurrence, leaf functions)`` when a timing primitive
        #: added some.
        self.observers: list[tuple[tuple[Entry, ...], dict[float, list[Any]]]] = []
        #: How many occurrences of each event arrived too late.
        self.too_late: Counter[str] = Counter()
        self.seen_late: int = -1

    @property
    def watermark(self) -> float:
        return self.mark - self.lateness

    def new_tick(self, t: float) -> None:
        self.tick_set.add(t)
        heapq.heappush(self.ticks, t)

    def release(self, now: float) -> list[tuple[float, int, Any, tuple[Entry, ...]]]:
        """The occurrences due at ``now`` (``o + L <= now``) with their leaf
        functions, in occurrence-time order."""
        ticks = self.ticks
        out: list[tuple[float, int, Any, tuple[Entry, ...]]] = []
        while ticks and ticks[0] <= now:
            t = heapq.heappop(ticks)
            self.tick_set.discard(t)
            for plain, by_tick in self.observers:
                for x in by_tick.pop(t, ()):
                    if len(x) == 8:
                        out.append((x[2], x[1], x, plain))
                    else:
                        out.append((x[0][2], x[0][1], x[0], x[1]))
        if not out:
            return out
        self.mark = now
        out.sort(key=_by_time)
        merged = [out[0]]
        for item in out[1:]:
            prev = merged[-1]
            if item[2] is prev[2]:  # one occurrence, several observers: one instant
                merged[-1] = (prev[0], prev[1], prev[2], prev[3] + item[3])
            else:
                merged.append(item)
        return merged

    @property
    def next_release(self) -> float | None:
        return self.ticks[0] if self.ticks else None


def _by_time(item: tuple[float, int, Any, Any]) -> tuple[float, int]:
    return (item[0], item[1])


class Orderer:
    """The buffers of every ordered mode of one detector's graph."""

    def __init__(self, svc: BitemporalService) -> None:
        self.svc = svc
        self.buffers: dict[Mode, Buffer] = {}
        self._edges: dict[tuple[Mode, str, Hashable], list[Entry]] = {}

    def leaf_hook(self, mode: Mode, leaf: tuple[str, Hashable], fn: Entry) -> Entry | None:
        """The graph's leaf hook: take the leaf edges of ordered modes (the
        observers installed after wiring call them)."""
        if mode.lateness is None:
            return fn
        self._edges.setdefault((mode, leaf[0], leaf[1]), []).append(fn)
        return None

    def rewired(self, graph: EventGraph) -> None:
        """Install one observer per ordered mode and channel (and object selector)."""
        edges, self._edges = self._edges, {}
        groups: dict[tuple[Mode, str, Hashable], dict[Any, list[Entry]]] = {}
        for (mode, name, selector), fns in edges.items():
            timing = isinstance(selector, TimingSelector)
            where = (mode, name, None if timing else selector)
            groups.setdefault(where, {}).setdefault(selector if timing else None, []).extend(fns)
        old, self.buffers = self.buffers, {}
        for (mode, name, selector), by_sel in groups.items():
            buf = self.buffers.get(mode)
            if buf is None:
                buf = self.buffers[mode] = Buffer(mode, self.svc.det.chronon)
                prev = old.get(mode)
                if prev is not None:  # keep what waits, and the watermark
                    buf.mark, buf.too_late = prev.mark, prev.too_late
                    buf.ticks, buf.tick_set = prev.ticks, prev.tick_set
                    buf.observers = prev.observers
            observer = self._observer(buf, by_sel)
            ch = graph.channels[name]
            if selector is None:
                ch.any = (*ch.any, observer)
            else:
                ch.selected[selector] = (*ch.selected.get(selector, ()), observer)

    def _observer(self, buf: Buffer, by_sel: dict[Any, list[Entry]]) -> Entry:
        plain = tuple(by_sel.get(None, ()))
        timing = tuple(
            (s.mask, s.late_min, s.late_max, tuple(fns))
            for s, fns in by_sel.items()
            if s is not None and not s.mask & _LATE
        )
        late = tuple(
            (s.mask & ~_LATE, s.late_min, s.late_max, tuple(fns))
            for s, fns in by_sel.items()
            if s is not None and s.mask & _LATE
        )
        svc = self.svc
        chronon = svc.det.chronon
        lateness = buf.lateness
        by_tick: dict[float, list[Any]] = {}
        buf.observers.append((plain, by_tick))
        tick_set = buf.tick_set

        def observe(store: Store, occ: Any) -> None:
            o = occ[2]
            if o < buf.mark - lateness:
                self._too_late(buf, store, occ, late, chronon)
                return
            entry = occ
            if timing:
                fns = plain
                bits, _delay = classify(occ, chronon)
                for mask, _lo, _hi, tfns in timing:
                    if bits & mask == mask:
                        fns = fns + tfns
                if fns is not plain:
                    entry = (occ, fns)
                elif not fns:
                    return
            t = release_tick(o + lateness, chronon)
            waiting = by_tick.get(t)
            if waiting is None:
                waiting = by_tick[t] = []
                if t not in tick_set:
                    buf.new_tick(t)
                    svc.wake(t)
            waiting.append(entry)

        return observe

    def _too_late(
        self,
        buf: Buffer,
        store: Store,
        occ: Any,
        late: tuple[tuple[int, Any, Any, tuple[Entry, ...]], ...],
        chronon: float | None,
    ) -> None:
        if buf.seen_late != occ[1]:
            buf.seen_late = occ[1]
            buf.too_late[occ[0]] += 1
        if not late:
            return
        bits, _ = classify(occ, chronon)
        delay = late_delay(occ, chronon)
        for mask, lo, hi, fns in late:
            if bits & mask == mask and (lo is None or lo <= delay <= hi):
                for f in fns:
                    f(store, occ)

    # -- ticks -----------------------------------------------------------------------
    def due(self, now: float) -> bool:
        return any(b.ticks and b.ticks[0] <= now for b in self.buffers.values())

    def next_release(self) -> float | None:
        times = [t for b in self.buffers.values() if (t := b.next_release) is not None]
        return min(times) if times else None

    def release(self, now: float) -> list[tuple[float, int, Any, tuple[Entry, ...]]]:
        """Every buffer's occurrences due at ``now``, in occurrence-time order."""
        out: list[tuple[float, int, Any, tuple[Entry, ...]]] = []
        for b in self.buffers.values():
            out.extend(b.release(now))
        if len(self.buffers) > 1:
            out.sort(key=_by_time)
        return out


def release_tick(due: float, chronon: float | None) -> float:
    """The first tick at or after ``due``: the chronon boundary, or ``due``."""
    if not chronon or isinf(due):
        return due
    t = ceil(due / chronon) * chronon
    if t < due:  # the division rounded down
        t = _step(t, due, chronon)
    return t


def boundary_after(t: float, chronon: float) -> float:
    """The first multiple of ``chronon`` strictly after ``t``.

    Where floats no longer hold every multiple (``t + chronon == t``: a time
    near or beyond the year 9999 with a chronon of microseconds, or one far
    past it), the next float after ``t``: stepping by the chronon would never
    pass ``t``. An infinite ``t`` is its own boundary.
    """
    if isinf(t):
        return t
    b = (floor(t / chronon) + 1) * chronon
    if b <= t:  # the division rounded down
        b = _step(b, nextafter(t, inf), chronon)
    return b


def _step(b: float, target: float, chronon: float) -> float:
    """``b`` moved up by chronons until it reaches ``target``; ``target`` itself
    once a step no longer moves ``b``."""
    while b < target:
        nb = b + chronon
        if nb <= b:
            return target
        b = nb
    return b
