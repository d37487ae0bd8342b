"""Compiling the event graph's wiring: edges, buffering, routers, leaf specs.

Wiring is compiled whenever subscriptions change (rare) so that the per-event path
is plain calls through tuples of bound methods: a primitive event's leaf calls its
parents' entry points, which call theirs, up to the subscription sinks. Nothing is
wired for nodes or contexts nobody listens to.

One signal can reach a handler by several routes: one occurrence matching several
primitive events of a channel (a class-level and an instance-level event of one
call), an event used twice in one expression, or a shared sub-expression. Such
handlers are found statically and *buffered*: their arrivals of one instant are
processed together, in the operator's role order, after the direct propagation
(in order of height), so that results never depend on which route came first.

:class:`Wiring` is the part of :class:`~sentinel.detector.graph.EventGraph` that
does this (the graph's state and its per-instant work are in
:mod:`sentinel.detector.graph`).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sentinel.algebra import expressions as ex
from sentinel.detector.codegen import Spec, compile_leaf
from sentinel.detector.operators import Entry, Handler
from sentinel.detector.regions import ROOT, Region
from sentinel.detector.scopes import Store
from sentinel.errors import SentinelError
from sentinel.occurrence import SOURCE, has_param, param

if TYPE_CHECKING:
    from sentinel.detector.graph import Channel, EventGraph, Key, Mode, Subscription

__all__ = ["Wiring"]

_MISSING = object()
#: Levels of the graph a signal's propagation may nest before a buffered handler
#: (see EventGraph.rewire); far more than any hand-written expression has.
_DEPTH_BREAK = 40


@dataclass
class _Edge:
    """child -> parent slot, before it is turned into a function."""

    source: tuple[str, Any]  # ("leaf", (channel, selector)) | ("handler", key)
    #: leaf: (region, mode, keys the occurrence must carry); handler: (levels exited,)
    wrap: tuple[Any, ...]
    target: tuple[str, Any, int]  # ("handler", key, slot) | ("sink", subscription, 0)


class Wiring:
    """The wiring compiler of :class:`~sentinel.detector.graph.EventGraph` (a
    mixin: the graph holds the state named below)."""

    compile: bool
    channels: dict[str, Channel]
    triggered: list[Any] | None
    handlers: dict[Key, Handler]
    routers: dict[Key, int]
    subscriptions: list[Subscription]
    factories: dict[int, Callable[[], list[Any]]]
    global_store: Store
    agenda: list[tuple[int, int, Handler]]
    buffered: set[int]
    mixed_priorities: bool
    dirty: bool
    leaf_hooks: list[Callable[[Mode, tuple[str, Hashable], Entry], Entry | None]]
    entry_hooks: list[Callable[[Key, Handler, int, Entry, Entry], Any]]
    rewire_hooks: list[Callable[[EventGraph], None]]
    _make_sink: Callable[[Subscription], tuple[Entry, Entry]]
    _pending: dict[int, list[tuple[int, Store, Any]]]
    _release: list[tuple[dict[Any, Store], Any, Store]]
    _wrapped: dict[tuple[int, int], Any]
    _levels: dict[tuple[Region, Mode], tuple[Any, ...]]
    _inside_buffered: set[tuple[ex.Keyed, Mode]]

    def rewire(self) -> None:
        self.dirty = False
        self.mixed_priorities = len({s.priority for s in self.subscriptions}) > 1
        edges: list[_Edge] = []
        for key in self.handlers:
            expr, mode, region = key
            for slot, child in enumerate(expr.children):
                self._edges_from(child, mode, region, ("handler", key, slot), 0, edges)
        for sub in self.subscriptions:
            self._edges_from(sub.expression, sub.mode, ROOT, ("sink", sub, 0), 0, edges)

        self._wrapped = {}
        self._levels = {}
        heights, routes = self._analyse(edges)
        # Buffered: handlers one signal can reach by several routes, and every
        # _DEPTH_BREAK-th level of a deep graph (a detection then waits for the
        # instant's agenda instead of calling further up, so propagation never
        # nests deeper than that, whatever the expression's depth).
        self.buffered = {
            self.handlers[k].hid
            for k, r in routes.items()
            if heights[k] % _DEPTH_BREAK == 0 or any(n > 1 for n in r.values())
        }
        # The partitions (keyed expression, mode) with a buffered handler inside:
        # each region visited once, from the inside out, whatever the depth.
        inside_buffered: set[tuple[ex.Keyed, Mode]] = set()
        visited: set[tuple[Region, Mode]] = set()
        for (_e, m, r), h in self.handlers.items():
            if h.hid in self.buffered:
                while r.keyed is not None and (r, m) not in visited:
                    visited.add((r, m))
                    inside_buffered.add((r.keyed, m))
                    r = r.parent  # type: ignore[assignment]
        self._inside_buffered = inside_buffered
        # Two nodes of one expression (in and out of a partition) make equal
        # occurrences as distinct objects; only then are arrivals compared by value.
        made = Counter((e, m) for e, m, _r in self.handlers)
        twins = any(n > 1 for n in made.values())
        for key, h in self.handlers.items():
            h.height = heights[key]
            h.twins = twins
        # Each handler's outputs, collected here and set as tuples below (the
        # handler's attributes are tuples: compiled, a list there is a TypeError).
        outs: dict[int, tuple[list[Entry], list[Entry]]] = {
            h.hid: ([], []) for h in self.handlers.values()
        }

        # Each edge becomes a function in its source's outputs (the wiring every
        # path can use) and a spec for the leaf compiler (see codegen.py).
        leaves: dict[tuple[str, Hashable], list[Entry]] = {}
        leaf_specs: dict[tuple[str, Hashable], list[Spec]] = {}
        out_specs: dict[int, list[Spec]] = {}
        for edge in self._bypass_or(edges):
            one, many = self._target(edge.target)
            kind, src = edge.source
            if kind == "leaf":
                region, mode, required = edge.wrap
                if len(region) == 1:
                    fn = self._router((region[0], mode, ROOT), one)
                elif region:
                    fn = self._routers(region, mode, one)
                else:
                    fn = one
                if required:
                    fn = _requiring(required, fn)
                if not mode.flush:
                    fn = _with_store(fn, self.global_store)
                spec: Spec
                if mode.lateness is not None:
                    hooked: Entry | None = fn
                    for leaf_hook in self.leaf_hooks:
                        if hooked is not None:
                            hooked = leaf_hook(mode, src, hooked)
                    if hooked is None:
                        continue  # a hook took the edge over (its own entry calls fn)
                    fn = hooked
                leaves.setdefault(src, []).append(fn)
                if mode.lateness is not None:
                    spec = ("call", fn)
                elif not region and mode.flush:
                    spec = self._spec(edge.target, one)
                elif (
                    len(region) == 1
                    and mode.flush
                    and not self._buffered_region((region[0], mode, ROOT))
                ):
                    key = (region[0], mode, ROOT)
                    spec = ("route", region[0].key, self.routers[key], self._spec(edge.target, one))
                else:
                    spec = ("call", fn)
                    required = ()
                if required:
                    spec = ("require", required, spec)
                leaf_specs.setdefault(src, []).append(spec)
            else:
                levels = edge.wrap[0]
                if edge.target[0] == "sink":
                    # A sink ignores the store it is called with: leaving the
                    # partitions first would only cost calls (and, compiled, keep
                    # the leaf from inlining the sink).
                    levels = 0
                source = self.handlers[src]
                out, outb = outs[source.hid]
                out.append(_exit(one, levels))
                outb.append(_exit(many, levels))
                out_specs.setdefault(source.hid, []).append(
                    self._spec(edge.target, one) if levels == 0 else ("call", _exit(one, levels))
                )
        for h in self.handlers.values():
            out, outb = outs[h.hid]
            h.out, h.outb = tuple(out), tuple(outb)

        for ch in self.channels.values():
            ch.any, ch.selected, ch.direct, ch.masks = (), {}, None, None
        planned: dict[str, tuple[Entry, ...]] = {}
        for (name, selector), fns in leaves.items():
            if selector is not None and getattr(selector, "all_signals", False):
                # Reached through the channel's dispatcher (a rewire hook): not compiled
                # with the selector's own leaves.
                self.channels[name].selected[selector] = tuple(fns)
                continue
            if self.compile and self.triggered is not None:
                targets: tuple[Entry, ...] = (
                    compile_leaf(
                        name,
                        leaf_specs[(name, selector)],
                        out_specs,
                        self.triggered,
                        self.factories,
                    ),
                )
            else:
                targets = tuple(fns)
            ch = self.channels[name]
            if selector is None:
                ch.any = targets
                if self.compile and self.triggered is not None:
                    plan = self._direct(leaf_specs[(name, None)], out_specs)
                    if plan is not None:
                        ch.direct, ch.masks = plan
                        planned[name] = targets
            else:
                ch.selected[selector] = targets
        for rewired in self.rewire_hooks:
            rewired(self)  # type: ignore[arg-type]  # the mixin of EventGraph only
        for name, targets in planned.items():
            ch = self.channels[name]
            if ch.any is not targets:  # a rewire hook put more on the channel
                ch.direct = ch.masks = None

    def _direct(
        self, specs: list[Spec], out_specs: dict[int, list[Spec]]
    ) -> tuple[tuple[Subscription, ...], tuple[Callable[[Any], Any] | None, ...] | None] | None:
        """The subscriptions a leaf reaches when it reaches nothing else (see
        ``Channel.direct``): each spec a subscription's sink, or a mask (not
        buffered) whose every output is one; else ``None``. Ordered by priority,
        higher first, and otherwise in the order the leaf triggers them (its
        specs' order, a mask's outputs in theirs), as the detector's delivery
        orders an instant's detections."""
        subs: list[Subscription] = []
        masks: list[Callable[[Any], Any] | None] = []
        for spec in specs:
            if spec[0] == "sink":
                subs.append(spec[1])
                masks.append(None)
            elif spec[0] == "h" and getattr(spec[1], "filters", False) and spec[2] == 0:
                outputs = out_specs.get(spec[1].hid, ())
                if not outputs or any(o[0] != "sink" for o in outputs):
                    return None
                for o in outputs:
                    subs.append(o[1])
                    masks.append(spec[1].test)
            else:
                return None
        if not subs:
            return None
        order = sorted(range(len(subs)), key=lambda i: -subs[i].priority)
        tests = tuple(masks[i] for i in order)
        return (
            tuple(subs[i] for i in order),
            tests if any(t is not None for t in tests) else None,
        )

    def _spec(self, target: tuple[str, Any, int], one: Entry) -> Spec:
        kind, obj, slot = target
        if kind == "sink":
            return ("sink", obj)
        h = self.handlers[obj]
        if h.hid in self.buffered:
            return ("call", one)
        if (h.hid, slot) in self._wrapped:
            inline = self._wrapped[(h.hid, slot)]
            return ("call", one) if inline is None else ("h", inline, slot)
        return ("h", h, slot)

    def _bypass_or(self, edges: list[_Edge]) -> list[_Edge]:
        """Connect what feeds an OR straight to what the OR feeds.

        OR passes occurrences on unchanged and stores nothing, so a call through it
        is pure overhead, unless it is buffered (one occurrence reaching both
        operands must be emitted once).
        """
        direct_or = {
            key
            for key, h in self.handlers.items()
            if isinstance(key[0], ex.Or) and h.hid not in self.buffered
        }
        if not direct_or:
            return edges
        outgoing: dict[Key, list[_Edge]] = {k: [] for k in direct_or}
        for e in edges:
            if e.source[0] == "handler" and e.source[1] in outgoing:
                outgoing[e.source[1]].append(e)

        def expand(first: _Edge) -> Iterator[_Edge]:
            todo = [first]  # a stack: chains of ORs of any length
            while todo:
                e = todo.pop()
                kind, target_key, _slot = e.target
                if kind != "handler" or target_key not in direct_or:
                    yield e
                    continue
                for out in reversed(outgoing[target_key]):
                    levels = out.wrap[0]
                    if e.source[0] == "leaf":
                        # The OR stores nothing, so leaving its partitions at once is
                        # all they do: the occurrence must carry their keys (a filter).
                        region, mode, required = e.wrap
                        left = []
                        for _ in range(levels):
                            assert region.keyed is not None and region.parent is not None
                            left.append(region.keyed.key)
                            region = region.parent
                        left.reverse()  # outermost first, as the region lists them
                        wrap: tuple[Any, ...] = (region, mode, required + tuple(left))
                    else:
                        wrap = (e.wrap[0] + levels,)
                    todo.append(_Edge(e.source, wrap, out.target))

        return [
            x
            for e in edges
            if not (e.source[0] == "handler" and e.source[1] in direct_or)
            for x in expand(e)
        ]

    def _edges_from(
        self,
        child: ex.Expression,
        mode: Mode,
        region: Region,
        target: tuple[str, Any, int],
        levels: int,
        out: list[_Edge],
    ) -> None:
        if isinstance(child, ex.Keyed):
            chain = _keyed_chain(child)
            inner = chain[-1].expression
            if isinstance(inner, ex.Primitive):
                # A partition of one primitive event pairs nothing: it only keeps
                # the occurrences that carry the key.
                leaf = ("leaf", (inner.name, inner.selector))
                keys = tuple(k.key for k in chain)
                out.append(_Edge(leaf, (region, mode, keys), target))
                return
            for keyed in chain:
                region = region.inside(keyed)
            levels += len(chain)
            child = inner
        if isinstance(child, ex.Primitive):
            out.append(_Edge(("leaf", (child.name, child.selector)), (region, mode, ()), target))
        else:
            # ``levels`` counts the partitions entered between this child and the
            # target: its detections leave that many sub-stores on the way up.
            out.append(_Edge(("handler", (child, mode, region)), (levels,), target))

    def _analyse(self, edges: list[_Edge]) -> tuple[dict[Key, int], dict[Key, Counter[str]]]:
        """Heights (leaves are 0) and, per handler, how many routes each channel
        that may have several has to it."""
        incoming: dict[Key, list[_Edge]] = {k: [] for k in self.handlers}
        fanout: Counter[Key] = Counter()
        leaf_edges: Counter[str] = Counter()
        for e in edges:
            if e.target[0] == "handler":
                incoming[e.target[1]].append(e)
                if e.source[0] == "handler":
                    fanout[e.source[1]] += 1
                else:
                    leaf_edges[e.source[1][0]] += 1
        # A channel has one route to each handler above its leaf unless it has
        # several leaves or a handler on the way feeds several. Routes are counted
        # for the other channels only: counting every channel at every handler
        # would cost the depth of the graph times its size.
        several = {ch for ch, n in leaf_edges.items() if n > 1}
        below_fanout: set[Key] = set()
        down = [k for k, n in fanout.items() if n > 1]
        while down:
            k = down.pop()
            if k in below_fanout:
                continue
            below_fanout.add(k)
            for e in incoming[k]:
                if e.source[0] == "handler":
                    down.append(e.source[1])
                else:
                    several.add(e.source[1][0])
        heights: dict[Key, int] = {}
        routes: dict[Key, Counter[str]] = {}
        for start in self.handlers:
            # Children before parents, with a stack: graphs of any depth.
            todo = [start]
            while todo:
                key = todo[-1]
                if key in heights:
                    todo.pop()
                    continue
                waiting = [
                    e.source[1]
                    for e in incoming[key]
                    if e.source[0] == "handler" and e.source[1] not in heights
                ]
                if waiting:
                    todo.extend(waiting)
                    continue
                todo.pop()
                h, r = 1, Counter[str]()
                for e in incoming[key]:
                    kind, src = e.source
                    if kind == "leaf":
                        if src[0] in several:
                            r[src[0]] += 1
                    else:
                        h = max(h, heights[src] + 1)
                        if routes[src]:
                            r.update(routes[src])
                heights[key], routes[key] = h, r
        return heights, routes

    def _target(self, target: tuple[str, Any, int]) -> tuple[Entry, Entry]:
        kind, obj, slot = target
        if kind == "sink":
            return self._make_sink(obj)
        h = self.handlers[obj]
        if h.hid in self.buffered:
            one, many = self._buffer_entries(h, slot)
        else:
            one, many = h.entry(slot), h.entry_batch(slot)
        if self.entry_hooks:
            for hook in self.entry_hooks:
                wrapped = hook(obj, h, slot, one, many)
                if wrapped is not None:
                    one, many = wrapped[0], wrapped[1]
                    inline = wrapped[2] if len(wrapped) > 2 else None
                    if h.hid in self.buffered:
                        inline = None
                    self._wrapped[(h.hid, slot)] = inline
        return one, many

    def _buffer_entries(self, h: Handler, slot: int) -> tuple[Entry, Entry]:
        pending = self._pending[h.hid]
        agenda = self.agenda
        item = (h.height, h.hid, h)
        push = heapq.heappush

        def one(store: Store, occ: Any) -> None:
            if not pending:
                push(agenda, item)
            pending.append((slot, store, occ))

        def many(store: Store, occs: list[Any]) -> None:
            if not pending:
                push(agenda, item)
            pending.extend([(slot, store, o) for o in occs])

        return one, many

    def _buffered_region(self, router_key: Key) -> bool:
        """Whether a handler inside the partition ``router_key`` enters is buffered
        (then partitions are released at the end of the instant, not at once)."""
        return (router_key[0], router_key[1]) in self._inside_buffered

    def _router(self, router_key: Key, inner: Entry) -> Entry:
        keyed = router_key[0]
        assert isinstance(keyed, ex.Keyed)
        rid = self.routers[router_key]
        factories = self.factories
        region_buffered = self._buffered_region(router_key)
        release_later = self._release.append
        key = keyed.key
        idx = SOURCE if key is ex.SOURCE else None

        def route(store: Store, occ: Any) -> None:
            if idx == SOURCE:
                k = occ[SOURCE]
                if k is None:
                    return
            else:
                k = param(occ, key, _MISSING)
                if k is _MISSING:
                    return
            parts = store[rid][0]
            try:
                sub = parts.get(k)
            except TypeError:
                raise SentinelError(
                    f"cannot partition {keyed} by {key!r}: value {k!r} of {occ[0]} is not hashable"
                ) from None
            if sub is None:
                sub = parts[k] = Store(factories, store)
            inner(sub, occ)
            if region_buffered:
                release_later((parts, k, sub))
            elif not any(map(any, sub.values())):
                del parts[k]

        return route

    def _routers(self, region: Region, mode: Mode, inner: Entry) -> Entry:
        """Enter the nested partitions of ``region``, outermost first, in one loop
        (as many nested :meth:`_router` calls would; a loop nests no calls, however
        deep the partitions)."""
        levels = self._region_levels(region, mode)
        factories = self.factories
        release_later = self._release.append

        def route(store: Store, occ: Any) -> None:
            values = []
            for _rid, _keyed, key, _buffered in levels:
                if key is ex.SOURCE:
                    k = occ[SOURCE]
                    if k is None:
                        return
                else:
                    k = param(occ, key, _MISSING)
                    if k is _MISSING:
                        return
                values.append(k)
            path = []
            for (rid, keyed, key, buffered), k in zip(levels, values, strict=True):
                parts = store[rid][0]
                try:
                    sub = parts.get(k)
                except TypeError:
                    raise SentinelError(
                        f"cannot partition {keyed} by {key!r}: value {k!r} of {occ[0]} "
                        "is not hashable"
                    ) from None
                if sub is None:
                    sub = parts[k] = Store(factories, store)
                path.append((parts, k, sub, buffered))
                store = sub
            inner(store, occ)
            for parts, k, sub, buffered in reversed(path):
                if buffered:
                    release_later((parts, k, sub))
                elif not any(map(any, sub.values())):
                    del parts[k]

        return route

    def _region_levels(self, region: Region, mode: Mode) -> tuple[Any, ...]:
        """``(router id, keyed, key, buffered)`` of each partition of ``region``,
        outermost first. Made once per region and rewiring, from the region
        around it's: leaves in nested partitions share the work of the levels
        they have in common."""
        cache = self._levels
        missing = []
        r = region
        while r.keyed is not None and (r, mode) not in cache:
            missing.append(r)
            r = r.parent  # type: ignore[assignment]
        levels: tuple[Any, ...] = cache.get((r, mode), ())
        for r in reversed(missing):
            keyed, parent = r.keyed, r.parent
            assert keyed is not None and parent is not None
            router_key: Key = (keyed, mode, parent)
            level = (self.routers[router_key], keyed, keyed.key, self._buffered_region(router_key))
            levels = cache[(r, mode)] = (*levels, level)
        return levels


def _keyed_chain(expr: ex.Keyed) -> list[ex.Keyed]:
    """``expr`` and the partitions straight inside it, outermost first (the last
    one's expression is not a partition)."""
    chain = [expr]
    inner = expr.expression
    while isinstance(inner, ex.Keyed):
        chain.append(inner)
        inner = inner.expression
    return chain


def _requiring(keys: tuple[ex.KeySpec, ...], fn: Entry) -> Entry:
    """``fn`` for the occurrences that carry every key of ``keys`` (a parameter
    name, or SOURCE: a source object)."""

    def require(store: Store, occ: Any) -> None:
        for key in keys:
            if key is ex.SOURCE:
                if occ[SOURCE] is None:
                    return
            elif not has_param(occ, key):
                return
        fn(store, occ)

    return require


def _with_store(fn: Entry, store: Store) -> Entry:
    def with_store(_: Store, occ: Any) -> None:
        fn(store, occ)

    return with_store


def _exit(fn: Entry, levels: int) -> Entry:
    if levels == 0:
        return fn
    if levels == 1:

        def exit1(store: Store, occ: Any) -> None:
            fn(store.parent, occ)  # type: ignore[arg-type]

        return exit1

    def exit_n(store: Store, occ: Any) -> None:
        for _ in range(levels):
            store = store.parent  # type: ignore[assignment]
        fn(store, occ)

    return exit_n
