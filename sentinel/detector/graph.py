"""The event graph: shared nodes, per-context handlers, and their wiring.

Every distinct sub-expression is one node; a node detects in a parameter context
only while some subscription (a rule, usually) needs it there: each (expression,
mode, region) has one handler and a reference count, as Snoop's per-context
counters (4.4). A *mode* is the parameter context plus whether detection state is
per scope (flushed at commit and abort) or process-wide. A *region* is the chain of
partitioned (``by key``) expressions a node sits inside; its handlers keep their
state in one sub-store per key value.

Wiring is compiled whenever subscriptions change (rare) so that the per-event path
is plain calls through tuples of bound methods, and handlers one signal can reach
by several routes are *buffered*: how, in :mod:`sentinel.detector.wiring` (the
compiler, a part of :class:`EventGraph`). This module holds the graph's nodes and
reference counts, the subscriptions, the instant's agenda of buffered handlers,
and the graph's description (``sentinel graph``).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sentinel.algebra import expressions as ex
from sentinel.algebra.syntax import text_within
from sentinel.detector.contexts import Context
from sentinel.detector.operators import Entry, Handler, handler_class
from sentinel.detector.operators.base import instant_order
from sentinel.detector.regions import ROOT, Region
from sentinel.detector.scopes import Store
from sentinel.detector.wiring import Wiring, _keyed_chain

__all__ = ["Channel", "EventGraph", "Mode", "Subscription"]


class Mode(NamedTuple):
    """How a subscription's expression is detected: the parameter context, and
    whether detection state is per scope (``flush=True``: flushed at commit and
    abort) or shared by every scope of the process (``flush=False``).

    The bitemporal layer (:mod:`sentinel.bitemporal`) adds three: ``lifespan``
    (seconds an occurrence may take part in the expression's detections, or
    ``None``), ``lateness`` (``None``: arrival order; seconds: occurrence-time
    order with that allowed lateness) and ``archive`` (expired occurrences are
    handed to the archive listeners). Nodes are shared only between equal modes.
    A rule in occurrence-time order also names itself (``watermark``): its
    watermark is its own, advanced only by the events its expression reads, so
    it shares neither nodes nor a buffer with another rule, and adding a rule
    never changes what another detects.
    """

    context: Context
    flush: bool = True
    lifespan: float | None = None
    lateness: float | None = None
    archive: bool = False
    watermark: str | None = None

    @property
    def plain(self) -> bool:
        """No lifespan and arrival order: what the graph wires without hooks."""
        return self.lifespan is None and self.lateness is None


Key = tuple[ex.Expression, Mode, Region]


class Channel:
    """Where one kind of signal is dispatched: the leaves listening to it.

    ``any`` are the entries of primitive events without a selector; ``selected``
    maps a selector (for example an object reference) to the entries of the
    primitive events that carry it.

    ``direct`` is set by the wiring when everything ``any`` reaches is a
    subscription on the primitive event itself (or on a mask of it): those
    subscriptions, higher priority first (ties in the order ``any`` would
    trigger them), so that a signal reaching only them skips the graph and
    goes straight to its subscribers (:meth:`EventDetector.emit`). ``masks``
    is then ``None``, or holds for each of them the mask's test of the
    parameters (``None`` for an unmasked one). ``any`` keeps doing the same
    work through the graph, for the paths that do not take this shortcut.
    """

    __slots__ = ("any", "direct", "masks", "name", "selected")

    def __init__(self, name: str) -> None:
        self.name = name
        self.any: tuple[Entry, ...] = ()
        self.selected: dict[Hashable, tuple[Entry, ...]] = {}
        self.direct: tuple[Subscription, ...] | None = None
        self.masks: tuple[Callable[[Any], Any] | None, ...] | None = None

    @property
    def listened(self) -> bool:
        return bool(self.any or self.selected)

    def targets(self, selectors: tuple[Hashable, ...] = ()) -> tuple[Entry, ...]:
        fns = self.any
        if selectors and self.selected:
            for s in selectors:
                more = self.selected.get(s)
                if more:
                    fns = fns + more
        return fns

    def listens_to(self, selectors: tuple[Hashable, ...] = ()) -> bool:
        if self.any:
            return True
        sel = self.selected
        return bool(sel) and any(s in sel for s in selectors)

    def __repr__(self) -> str:
        return f"<Channel {self.name}>"


@dataclass(eq=False)
class Subscription:
    """A sink on an expression: receives each detection of ``expression`` in
    ``mode``. Rules hold one each.

    ``deliver(occurrence, scope)`` is called after the instant's propagation;
    subscriptions triggered at one instant are called in order of ``priority``
    (higher first; ties in order of triggering).
    """

    expression: ex.Expression
    mode: Mode
    deliver: Callable[[Any, Any], Any]
    #: Detections whose earliest constituent precedes this ``t_occ`` are dropped
    #: (the NOW trigger mode); 0 accepts all.
    since: int = 0
    priority: int = 0
    owner: Any = None
    active: bool = field(default=False, init=False)


class EventGraph(Wiring):
    """Handlers, their reference counts, the channels' leaves, and the wiring.

    Not thread-safe by itself: the detector serialises changes and propagation.
    """

    #: Compile each channel's leaf targets into one function (codegen.py). Off,
    #: every arrival is a call through the wired bound methods.
    compile = True

    def __init__(
        self,
        channels: dict[str, Channel],
        sink: Callable[[Subscription], tuple[Entry, Entry]],
        triggered: list[Any] | None = None,
    ) -> None:
        self.channels = channels
        self._make_sink = sink
        #: The detector's list of the instant's detections (inlined sinks append).
        self.triggered = triggered
        self.handlers: dict[Key, Handler] = {}
        self.routers: dict[Key, int] = {}
        self.refs: Counter[Key] = Counter()
        self.subscriptions: list[Subscription] = []
        self.factories: dict[int, Callable[[], list[Any]]] = {}
        self.global_store = Store(self.factories)
        self.agenda: list[tuple[int, int, Handler]] = []
        self._pending: dict[int, list[tuple[int, Store, Any]]] = {}
        self._release: list[tuple[dict[Any, Store], Any, Store]] = []
        self._hids = itertools.count(1)
        self.buffered: set[int] = set()
        #: False while every subscription has the same priority (no sorting needed).
        self.mixed_priorities = False
        #: How many active subscriptions use each primitive event (channel, selector).
        self.leaf_refs: Counter[tuple[str, Hashable]] = Counter()
        #: Subscriptions changed since the wiring was compiled.
        self.dirty = False
        #: Layers that change how entries are wired (the bitemporal layer), all
        #: empty unless used, so plain graphs are wired exactly as before:
        #: ``leaf_hook(mode, leaf, fn) -> fn`` wraps the function a leaf calls for
        #: one edge into a mode that is not plain; ``entry_hook(key, handler,
        #: slot, one, many) -> (one, many) | None`` wraps a handler's entries;
        #: ``rewire_hook(graph)`` runs after the channels are wired. An entry hook
        #: may return a third item, an object the leaf compiler inlines in place of
        #: the handler (``gen(slot, g, store, occ)`` and ``entry(slot)``, as a
        #: strategy has).
        self.leaf_hooks: list[Callable[[Mode, tuple[str, Hashable], Entry], Entry | None]] = []
        self.entry_hooks: list[Callable[[Key, Handler, int, Entry, Entry], Any]] = []
        self.rewire_hooks: list[Callable[[EventGraph], None]] = []
        self._wrapped: dict[tuple[int, int], Any] = {}
        #: Per rewiring: each region's partitions (:meth:`_region_levels`), and the
        #: partitions with a buffered handler inside (:meth:`_buffered_region`).
        self._levels: dict[tuple[Region, Mode], tuple[Any, ...]] = {}
        self._inside_buffered: set[tuple[ex.Keyed, Mode]] = set()

    # -- subscriptions -----------------------------------------------------------
    def subscribe(self, sub: Subscription) -> bool:
        """Wire ``sub``. Returns True when every node it needs was created for it
        (so no stored occurrence predates it)."""
        if sub.active:
            return False
        # In the expression's order, not a set's: node ids, and so the order of
        # nodes of one height in an instant, must not depend on hash seeds.
        keys = self._keys(sub.expression, sub.mode, ROOT)
        fresh = True
        for key in keys:
            self.refs[key] += 1
            if self.refs[key] == 1:
                self._create(key)
            else:
                fresh = False
        self.subscriptions.append(sub)
        sub.active = True
        leaves = _leaves(sub)
        self.leaf_refs.update(leaves)
        self._changed(leaves)
        return fresh

    def unsubscribe(self, sub: Subscription) -> list[int]:
        """Unwire ``sub``; returns the ids of handlers no longer needed."""
        if not sub.active:
            return []
        self.subscriptions.remove(sub)
        sub.active = False
        gone = []
        for key in self._keys(sub.expression, sub.mode, ROOT):
            self.refs[key] -= 1
            if self.refs[key] == 0:
                del self.refs[key]
                hid = self._destroy(key)
                gone.append(hid)
        leaves = _leaves(sub)
        self.leaf_refs.subtract(leaves)
        for leaf in leaves:
            if self.leaf_refs[leaf] <= 0:
                del self.leaf_refs[leaf]
        self._changed(leaves)
        for hid in gone:
            self.global_store.pop(hid, None)
        return gone

    def _changed(self, leaves: list[tuple[str, Hashable]]) -> None:
        """Note that the wiring is out of date; it is compiled again before the next
        signal (:meth:`ensure`), so defining many rules costs one compilation.
        Meanwhile a channel's ``any`` and ``selected`` already tell truthfully
        whether something listens (layers that signal only while listened read
        them), through placeholders that are never called."""
        self.dirty = True
        refs = self.leaf_refs
        for name, selector in leaves:
            ch = self.channels[name]
            ch.direct = ch.masks = None
            if selector is None:
                ch.any = _PENDING if refs[(name, None)] else ()
            elif refs[(name, selector)]:
                ch.selected[selector] = _PENDING
            else:
                ch.selected.pop(selector, None)
            if selector is not None and getattr(selector, "all_signals", False):
                # A selector that every signal of the channel may match (a
                # timing primitive): the channel listens to all its signals.
                wide = refs[(name, None)] or any(
                    getattr(s, "all_signals", False) for s in ch.selected
                )
                ch.any = _PENDING if wide else ()

    def ensure(self) -> None:
        """Compile the wiring if subscriptions changed since it was last compiled
        (the detector calls this, under its lock, before dispatching)."""
        if self.dirty:
            self.rewire()

    def _keys(self, expr: ex.Expression, mode: Mode, region: Region) -> list[Key]:
        """The nodes ``expr`` needs, once each, children before their parents and
        left before right (node ids follow this order, the same in every process)."""
        return list(dict.fromkeys(reversed(list(self._keys_down(expr, mode, region)))))

    def _keys_down(self, expr: ex.Expression, mode: Mode, region: Region) -> Iterator[Key]:
        """The nodes of ``expr``, parents first, the last child first."""
        # With a stack, not recursively: expressions of any depth.
        todo: list[tuple[ex.Expression, Region]] = [(expr, region)]
        while todo:
            e, r = todo.pop()
            if isinstance(e, ex.Primitive):
                continue
            if isinstance(e, ex.Keyed):
                # The partitions straight inside each other, in one walk (asking of
                # each whether a primitive event ends the chain would walk it again).
                chain = _keyed_chain(e)
                if isinstance(chain[-1].expression, ex.Primitive):
                    continue  # a partitioned primitive event is a filter on its leaf
                for keyed in chain:
                    yield (keyed, mode, r)  # the router
                    r = r.inside(keyed)
                todo.append((chain[-1].expression, r))
                continue
            yield (e, mode, r)
            todo.extend((c, r) for c in e.children)

    def _create(self, key: Key) -> int:
        expr, mode, _region = key
        hid = next(self._hids)
        if isinstance(expr, ex.Keyed):
            self.routers[key] = hid
            self.factories[hid] = _router_state
        else:
            h = handler_class(expr, mode.context)(hid, expr)
            self.handlers[key] = h
            self.factories[hid] = h.new_state
            self._pending[hid] = []
        return hid

    def _destroy(self, key: Key) -> int:
        if key in self.routers:
            hid = self.routers.pop(key)
        else:
            hid = self.handlers.pop(key).hid
            del self._pending[hid]
        del self.factories[hid]
        return hid

    # -- per instant -------------------------------------------------------------
    def drain(self) -> None:
        """Process buffered handlers' arrivals of this instant, lowest first."""
        agenda = self.agenda
        pop = heapq.heappop
        while agenda:
            _, hid, h = pop(agenda)
            pending = self._pending[hid]
            items = pending[:]
            pending.clear()
            n = h.slots()
            twins = h.twins
            groups: dict[int, tuple[Store, list[list[Any]]]] = {}
            for slot, store, occ in items:
                g = groups.get(id(store))
                if g is None:
                    g = groups[id(store)] = (store, [[] for _ in range(n)])
                batch = g[1][slot]
                # Equal occurrences are one occurrence, whichever node made them
                # (an expression and its partition: E and E by k).
                if twins:
                    if not any(occ is o or occ == o for o in batch):
                        batch.append(occ)
                elif not any(occ is o for o in batch):
                    batch.append(occ)
            for store, batches in groups.values():
                for b in batches:
                    if len(b) > 1:
                        instant_order(b)
                h.process_instant(store, batches)
        if self._release:
            for parts, k, sub in self._release:
                if parts.get(k) is sub and sub.is_empty():
                    del parts[k]
            self._release.clear()

    def reset(self) -> None:
        """Drop an instant's leftovers after an error inside propagation."""
        for _, hid, _h in self.agenda:
            self._pending[hid].clear()
        self.agenda.clear()
        self._release.clear()

    def describe(self) -> list[str]:
        """One line per handler, for debugging and ``sentinel graph``.

        A short expression is printed whole; a longer one as its operator, with
        each long operand written as the ``#id`` of the operand's own line, so
        the description grows linearly with the expression, however deep."""
        self.ensure()
        lines = []
        for (expr, mode, region), h in sorted(self.handlers.items(), key=lambda kv: kv[1].hid):
            tag = " buffered" if h.hid in self.buffered else ""
            where = " in " + self._region_text(mode, region) if region else ""
            scope = "" if mode.flush else " process-wide"
            summary = getattr(h, "summary", None)  # strategies may add their sizes (Ode)
            sizes = f" [{summary()}]" if summary is not None else ""
            if mode.lifespan is not None:
                scope += f" lifespan={mode.lifespan:g}s"
            if mode.lateness is not None:
                scope += f" occurrence-order lateness={mode.lateness:g}s"
            if mode.watermark is not None:
                scope += f" watermark of {mode.watermark!r}"
            lines.append(
                f"#{h.hid} {type(h).__name__} h={h.height}{tag}{scope}{where}: "
                f"{self.text(expr, mode, region)} (refs {self.refs[(expr, mode, region)]}){sizes}"
            )
        return lines

    def code(self) -> list[tuple[str, str]]:
        """What each listened primitive event runs, for ``sentinel graph --code``:
        ``(heading, text)`` per leaf, by event name (its instance-level leaves
        after the class-level one). ``text`` is the Python source the leaf
        compiler generated (:func:`~sentinel.detector.codegen.compile_leaf`),
        or the handlers called one by one when the leaf was not compiled; a
        channel whose rules are reached without its leaf (``Channel.direct``)
        says so in its heading."""
        self.ensure()
        out: list[tuple[str, str]] = []
        for name in sorted(self.channels):
            ch = self.channels[name]
            leaves: list[tuple[Hashable | None, tuple[Entry, ...]]] = (
                [(None, ch.any)] if ch.any else []
            )
            leaves += ch.selected.items()
            for selector, fns in leaves:
                heading = name if selector is None else f"{name} for {selector!r}"
                if selector is None and ch.direct is not None:
                    masked = "" if ch.masks is None else " (their masks tested first)"
                    rules = ", ".join(repr(_owner_name(sub)) for sub in ch.direct)
                    heading += (
                        f": delivered straight to {rules}{masked}; the leaf below is not called"
                    )
                out.append((heading, "".join(map(_leaf_text, fns))))
        return out

    def text(self, expr: ex.Expression, mode: Mode, region: Region = ROOT) -> str:
        """``expr`` as Snoop text if it is short; else its operator with each long
        operand that has a node in ``mode`` and ``region`` written as that node's
        ``#id`` (the ids of :meth:`describe`). Costs as much as the printed text,
        whatever the expression's depth."""
        short = text_within(expr, _SHORT)
        if short is not None:
            return short
        refs: dict[ex.Expression, str] = {}
        inside = region.inside(expr) if isinstance(expr, ex.Keyed) else region
        for child in expr.children:
            if text_within(child, _SHORT) is None:
                ref = self._ref(child, mode, inside)
                if ref is not None:
                    refs[child] = ref
        whole = text_within(expr, None, refs)
        assert whole is not None  # no budget
        return whole

    def _ref(self, expr: ex.Expression, mode: Mode, region: Region) -> str | None:
        """``#id`` of ``expr``'s node, ``#id by key ...`` for a partitioned one."""
        keys: list[str] = []
        while isinstance(expr, ex.Keyed) and (expr, mode, region) in self.routers:
            keys.append(" by " + ("@source" if expr.key is ex.SOURCE else str(expr.key)))
            region = region.inside(expr)
            expr = expr.expression
        h = self.handlers.get((expr, mode, region))
        return None if h is None else f"#{h.hid}" + "".join(reversed(keys))

    def where(self, mode: Mode, region: Region) -> str:
        """`` in <partitions>`` for a node inside partitions (``E by k``), as
        :meth:`describe` prints it; empty outside every partition."""
        return " in " + self._region_text(mode, region) if region else ""

    def _region_text(self, mode: Mode, region: Region) -> str:
        """The partitions a node sits in, outermost first (the first and last
        only, when there are many)."""
        texts = [self.text(r, mode, region[:i]) for i, r in _ends(region)]
        if len(region) > _REGION_SHOWN:
            texts[1:1] = [f"... ({len(region) - 2} more)"]
        return " / ".join(texts)


#: Printing steps (operators, operands, pieces of text) of an expression that
#: :meth:`EventGraph.text` prints whole.
_SHORT = 64
#: Partitions a node line lists in full; of more, the outermost and innermost.
_REGION_SHOWN = 4


def _ends(region: Region) -> list[tuple[int, ex.Keyed]]:
    if len(region) <= _REGION_SHOWN:
        return list(enumerate(region))
    return [(0, region[0]), (len(region) - 1, region[-1])]


def _leaves(sub: Subscription) -> list[tuple[str, Hashable]]:
    """The primitive events ``sub`` listens to, once each, in the expression's order."""
    return list(dict.fromkeys((p.name, p.selector) for p in sub.expression.primitives()))


def _pending_wiring(store: Store, occ: Any) -> None:  # pragma: no cover - never called
    raise AssertionError("the event graph was used before its wiring was compiled")


_PENDING: tuple[Entry, ...] = (_pending_wiring,)


def _router_state() -> list[Any]:
    return [{}]


def _owner_name(sub: Subscription) -> str:
    """The name of the rule (or other owner) of a subscription, for messages."""
    owner = sub.owner
    return str(getattr(owner, "name", owner if owner is not None else sub.expression))


def _leaf_text(fn: Any) -> str:
    """A leaf function's generated source, after a comment line per constant
    it names (``_c0`` and so on); for a handler called as it is, one line."""
    source: str | None = getattr(fn, "__sentinel_source__", None)
    if source is None:
        return f"# calls {fn!r}\n"
    consts: dict[str, Any] = getattr(fn, "__sentinel_consts__", {})
    names = "".join(f"# {k} = {_short(v)}\n" for k, v in consts.items())
    return names + source


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."
