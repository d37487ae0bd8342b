"""Lifespans: how long an occurrence may take part in detections, and purging.

The sliding-window semantics of the BiCEP thesis (2.5, 4.1.3) applied to the
event graph's detection state. A lifespan comes from

- an event class (``lifespan=`` when it is defined): its occurrences, wherever
  they are stored;
- a rule (``lifespan=``): every node of the rule is then a complex event class
  with that lifespan, as the thesis's complex event classes are; occurrences of
  events without a lifespan of their own take the rule's;
- ``WITHIN(E1, E2, [t])``: its E1s, for ``t`` (see :mod:`sentinel.algebra.bitemporal`).

Expiration times follow 2.5, in stratified order over the occurrences one
detection store holds (a scope's, or one partition's of ``E by key``):

1. a primitive occurrence: ``exp = o + lifespan``;
2. a composite (a stored partial detection), from the lowest node to the
   highest: ``prelim = max(o + lifespan, {o_c + lifespan_c})`` over its parts;
3. from the highest node down, each part's expiration time is raised to that of
   every stored composite it belongs to (a constituent lives as long as what
   depends on it), and a composite keeps its preliminary time.

At each clock tick ``T`` the stores registered for it are purged: every stored
occurrence with ``exp < T`` leaves the operator's state (each strategy's
:meth:`~sentinel.detector.operators.Handler.purge`); partitions left empty are
released; expired primitive occurrences of archiving rules and classes are
handed to the archive listeners. A store is registered, when an occurrence
enters it, for the first tick after that occurrence's expiration time (if that
is earlier than its registration so far), and again after each purge for its
earliest remaining expiration time: the per-event cost is one comparison in the
common case, and a tick visits only stores that may hold something expired.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from math import inf, nextafter
from typing import TYPE_CHECKING, Any

from sentinel.algebra import expressions as ex
from sentinel.algebra.bitemporal import Within
from sentinel.bitemporal.ordering import boundary_after
from sentinel.detector.graph import Key, Mode
from sentinel.detector.operators import Entry, Handler
from sentinel.detector.operators.base import timestamp as _ts
from sentinel.detector.scopes import Store
from sentinel.errors import BitemporalError
from sentinel.occurrence import SOURCE, Occurrence, finished, param

if TYPE_CHECKING:
    from sentinel.bitemporal.service import BitemporalService

__all__ = ["Expired", "Lifespans", "Policy", "expirations"]

_MISSING = object()


@dataclass(frozen=True)
class Expired:
    """One occurrence that expired from detection: the primitive
    ``occurrence``, when (``at``, the tick's time in POSIX seconds) and where
    (``where``: the rule's expression or the event class)."""

    occurrence: Occurrence
    at: float
    where: str


class Policy:
    """How long the occurrences stored by one handler live."""

    __slots__ = ("archive", "classes", "composites", "handler", "life", "part", "window")

    def __init__(
        self,
        handler: Handler,
        mode: Mode,
        classes: dict[str, float],
        window: float | None,
        part: tuple[int | None, Any] | None,
    ) -> None:
        self.handler = handler
        #: The rule's lifespan (the lifespan of this node's composites and of
        #: events without one of their own), or infinity.
        self.life = mode.lifespan if mode.lifespan is not None else inf
        self.classes = classes
        self.window = window
        self.archive = mode.archive
        #: ``(router id, key spec)`` of the partition the handler sits in, if any.
        self.part = part
        #: Whether the handler stores composite occurrences (the extension of
        #: step 3 is needed only then).
        self.composites = any(
            not isinstance(_unkeyed(c), ex.Primitive) for c in handler.expr.children
        )

    def base(self, occ: Any) -> float:
        """Step 1 and 2: a primitive's expiration time, a composite's preliminary
        one."""
        e: float
        if len(occ) == 8:
            e = occ[2] + self.classes.get(occ[0], self.life)
        else:
            e = _ts(occ) + self.life
            for p in occ[2]:
                if len(p) == 8:
                    e = max(e, p[2] + self.classes.get(p[0], self.life))
                else:
                    e = max(e, _ts(p) + self.life)
        if self.window is not None:
            e = min(e, _ts(occ) + self.window)
        return e


def refuse_lifespan(expression: ex.Expression, lifespan: float) -> None:
    """Refuse a lifespan of ``lifespan`` seconds on ``expression`` (a rule's,
    which applies to each of its nodes) when a node of it keeps its whole
    history (``keeps_history``: an Ode automaton) and so cannot let one of its
    occurrences expire. Raises :class:`~sentinel.errors.BitemporalError`."""
    for node in expression.walk():
        if getattr(node, "keeps_history", False):
            why = f"the rule's lifespan ({lifespan:g} s) applies to each of its nodes"
            raise BitemporalError(_no_expiry(node, why), event=str(expression))


def refuse_class_lifespans(expression: ex.Expression, classes: dict[str, float]) -> None:
    """Refuse ``expression`` (a node) when it keeps its whole history and reads
    one of the event classes ``classes`` (names and lifespans) directly."""
    if not getattr(expression, "keeps_history", False):
        return
    for child in expression.children:
        name = getattr(_unkeyed(child), "name", None)
        if name in classes:
            why = f"the event class {name!r} it reads has a lifespan ({classes[name]:g} s)"
            raise BitemporalError(_no_expiry(expression, why), event=name)


def _no_expiry(expr: ex.Expression, why: str) -> str:
    """Why ``expr`` (a strategy whose occurrences cannot expire one by one)
    refuses a lifespan (``why``: where it comes from)."""
    return (
        f"{expr} cannot let its occurrences expire: {why}, but its state (an Ode "
        "automaton) stands for the whole history it read, and cannot forget one "
        "occurrence of it. Give the rule no lifespan (or read an event without one), "
        "or write the event with Snoop operators, whose stored occurrences expire"
    )


def _unkeyed(e: ex.Expression) -> ex.Expression:
    while isinstance(e, ex.Keyed):
        e = e.expression
    return e


def _nested(occ: Any) -> Iterator[Any]:
    stack = list(occ[2])
    while stack:
        o = stack.pop()
        yield o
        if len(o) != 8:
            stack.extend(o[2])


def expirations(
    occurrences: Iterable[Any], lifespan: Callable[[Any], float]
) -> list[tuple[Any, float]]:
    """The expiration times of 2.5 for a set of live occurrences: each primitive
    or composite occurrence given, and everything a composite is made of, as
    ``(occurrence, expiration)`` pairs (occurrences are told apart by identity:
    their parameters need not be hashable).

    ``lifespan(occ)`` is the lifespan (seconds) of a primitive occurrence's event
    class, or of a composite's complex event class. Stratified: composites are
    taken from the most nested up for their preliminary times (``max(o +
    lifespan, {o_c + lifespan_c})`` over their parts), then from the outermost
    down, each part's time is raised to that of the composites depending on it.
    This is the thesis's algorithm on its own terms (the purge computes the same
    per store, from the handlers' policies).

    >>> from sentinel.occurrence import Occurrence
    >>> e = Occurrence("ResourceEmpty", 1, 0.0)
    >>> irn = ("InstantReplenishingNeeded", 2, (e,))
    >>> life = {"ResourceEmpty": 3 * 86400, "InstantReplenishingNeeded": 5 * 86400}
    >>> exp = dict(expirations([irn], lambda o: life[o[0]]))
    >>> exp[e] / 86400, exp[irn] / 86400
    (5.0, 5.0)
    """
    nodes: dict[int, Any] = {}

    def depth(occ: Any) -> int:
        return 0 if len(occ) == 8 else 1 + max(depth(p) for p in occ[2])

    for occ in occurrences:
        nodes[id(occ)] = occ
        if len(occ) != 8:
            for q in _nested(occ):
                nodes[id(q)] = q
    prelim: dict[int, float] = {}
    for occ in sorted(nodes.values(), key=depth):
        e = _ts(occ) + lifespan(occ)
        if len(occ) != 8:
            for p in occ[2]:
                e = max(e, _ts(p) + lifespan(p))
        prelim[id(occ)] = e
    exp = dict(prelim)
    for occ in sorted(nodes.values(), key=depth, reverse=True):
        if len(occ) != 8:
            for p in occ[2]:
                if exp[id(p)] < exp[id(occ)]:
                    exp[id(p)] = exp[id(occ)]
    return [(occ, exp[i]) for i, occ in nodes.items()]


def partition_key(occ: Any, key: Any) -> Any:
    """The partition value of ``occ`` under the key spec ``key`` (that of its
    terminator for a composite)."""
    while len(occ) != 8:
        occ = occ[2][-1]
    return occ[SOURCE] if key is ex.SOURCE else param(occ, key, _MISSING)


class Lifespans:
    """The lifespans of one detector's graph: the handlers they apply to, the
    registrations of stores to purge, and the purge itself."""

    def __init__(self, svc: BitemporalService) -> None:
        self.svc = svc
        self.policies: dict[int, Policy] = {}
        #: Registered stores by the tick they are due at, and those ticks (a heap).
        self._buckets: dict[float, list[tuple[Store, Any, Any]]] = {}
        self._chronon = svc.det.chronon
        self._ticks: list[float] = []
        #: Event classes with a lifespan, by name (set by the service).
        self.classes: dict[str, float] = {}
        self.class_archive: set[str] = set()
        self._building: dict[int, Policy] = {}
        self._inliners: dict[int, _Registering] = {}

    # -- wiring --------------------------------------------------------------------------
    def rewired(self) -> None:
        """The graph's wiring was compiled again: the policies its entry hooks
        made are now the ones in force."""
        self.policies, self._building = self._building, {}
        self._inliners = {h: r for h, r in self._inliners.items() if h in self.policies}

    def entry_hook(
        self, key: Key, h: Handler, slot: int, one: Entry, many: Entry
    ) -> tuple[Entry, Entry, Any] | None:
        """The graph's entry hook: wrap the entries of handlers whose stored
        occurrences have a lifespan so that stores register for purging."""
        expr, mode, region = key
        child = _unkeyed(expr.children[slot]) if slot < len(expr.children) else None
        classes = self.classes
        window = None
        if isinstance(expr, Within):
            window = expr.window.seconds if slot == 0 else None
        relevant = (
            mode.lifespan is not None
            or window is not None
            or (isinstance(child, ex.Primitive) and child.name in classes)
        )
        if not relevant:
            return None
        if not h.expires:
            # refused before wiring (refuse_lifespan, refuse_class_lifespans);
            # a strategy that cannot expire must not get here
            raise BitemporalError(_no_expiry(expr, "a lifespan applies to it"))
        policy = self._building.get(h.hid)
        if policy is None:
            part = None
            if region:
                rid = self.svc.det.graph.routers.get((region[-1], mode, region[:-1]))
                part = (rid, region[-1].key)
            win = expr.window.seconds if isinstance(expr, Within) else None
            policy = self._building[h.hid] = Policy(h, mode, dict(classes), win, part)
        exp_of = policy.base
        push = self.push
        part = policy.part
        inline = self._inliners.get(h.hid)
        if inline is None or inline.policy is not policy:
            inline = self._inliners[h.hid] = _Registering(h, policy, push)

        hid = h.hid

        def one_w(store: Store, occ: Any) -> None:
            e = exp_of(occ)
            if hid not in store or e < getattr(store, "expires", inf):
                if part is None:
                    push(store, e, None, None)
                else:
                    push(store, e, part[0], partition_key(occ, part[1]))
            one(store, occ)

        def many_w(store: Store, occs: list[Any]) -> None:
            e = min(map(exp_of, occs))
            if hid not in store or e < getattr(store, "expires", inf):
                if part is None:
                    push(store, e, None, None)
                else:
                    push(store, e, part[0], partition_key(occs[0], part[1]))
            many(store, occs)

        inline.entries[slot] = one_w
        return one_w, many_w, inline

    # -- registrations -------------------------------------------------------------------
    def tick_after(self, e: float) -> float:
        """The first tick at which an occurrence expiring at ``e`` is purged
        (the first chronon boundary after ``e``; without chronons, just after)."""
        c = self.svc.det.chronon
        if c:
            return boundary_after(e, c)
        return nextafter(e, inf)

    def push(self, store: Store, e: float, rid: Any, k: Any) -> None:
        """Register ``store`` (the partition ``k`` of router ``rid``, or a scope's
        store when ``rid`` is ``None``) for the tick after ``e``. Registrations
        are kept in one bucket per tick: most land in an existing one."""
        store.expires = e
        c = self._chronon
        if c:
            t = (e // c + 1) * c
            if t <= e:  # the division rounded down
                t = self.tick_after(e)
        else:
            t = nextafter(e, inf)
        bucket = self._buckets.get(t)
        if bucket is None:
            bucket = self.new_bucket(t)
        # A partition is registered through its parent store and key, not held:
        # most are emptied and released long before their tick.
        if rid is None:
            bucket.append((store, None, None))
        else:
            bucket.append((store.parent, rid, k))  # type: ignore[arg-type]

    def new_bucket(self, t: float) -> list[tuple[Store, Any, Any]]:
        bucket: list[tuple[Store, Any, Any]] = []
        self._buckets[t] = bucket
        heapq.heappush(self._ticks, t)
        self.svc.wake(t)
        return bucket

    @property
    def next_tick(self) -> float | None:
        return self._ticks[0] if self._ticks else None

    def due(self, now: float) -> bool:
        return bool(self._ticks) and self._ticks[0] <= now

    # -- purging ------------------------------------------------------------------------
    def purge(self, now: float) -> list[Expired]:
        """Purge every registered store due at ``now`` (under the detector's lock);
        returns what expired for the archive listeners."""
        ticks = self._ticks
        expired: list[Expired] = []
        seen: set[int] = set()
        due: list[tuple[Store, Any, Any]] = []
        while ticks and ticks[0] <= now:
            due.extend(self._buckets.pop(heapq.heappop(ticks)))
        for holder, rid, k in due:
            parts = None
            if rid is None:
                store = holder
            else:
                state = holder.get(rid)
                if not state:
                    continue
                parts = state[0]
                store = parts.get(k)
                if store is None:
                    continue  # the partition is gone (emptied and released)
            if id(store) in seen:
                continue
            seen.add(id(store))
            earliest = self._purge_store(store, now, expired)
            if parts is not None and store.is_empty():
                del parts[k]
            elif earliest < inf:
                self.push(store, earliest, rid, k)
        return expired

    def _purge_store(self, store: Store, now: float, expired: list[Expired]) -> float:
        """Purge one store; returns the earliest expiration time left in it."""
        policies = self.policies
        store.expires = inf
        here = [(policies[hid], st) for hid, st in store.items() if hid in policies]
        if not here:
            return inf
        if len(here) == 1 and not here[0][0].composites:
            return self._purge_simple(here[0][0], here[0][1], now, expired)
        here.sort(key=lambda ps: -ps[0].handler.height)
        # By identity (id): occurrences' parameters need not be hashable, and
        # every occurrence meant is held by the store while this runs.
        ext: dict[int, float] = {}
        if any(p.composites for p, _ in here):
            # Step 3: from the highest node down, stored composites lend their
            # expiration time to everything they are made of.
            for p, st in here:
                for occ in p.handler.stored(st):
                    if len(occ) == 8:
                        continue
                    e = max(p.base(occ), ext.get(id(occ), -inf))
                    for q in _nested(occ):
                        if ext.get(id(q), -inf) < e:
                            ext[id(q)] = e
        earliest = inf
        removed: list[Any] = []
        for p, st in here:
            base = p.base

            def exp(occ: Any, _base: Callable[[Any], float] = base) -> float:
                e = _base(occ)
                return max(e, ext.get(id(occ), e)) if ext else e

            def dead(occ: Any, _exp: Callable[[Any], float] = exp) -> bool:
                return _exp(occ) < now

            removed.clear()
            p.handler.purge(st, dead, removed)
            if removed and (p.archive or self.class_archive):
                where = str(p.handler.expr)
                for occ in removed:
                    if len(occ) == 8 and (p.archive or occ[0] in self.class_archive):
                        expired.append(Expired(finished(occ), now, where))
            for occ in p.handler.stored(st):
                e = exp(occ)
                if e < earliest:
                    earliest = e
        return earliest

    def _purge_simple(self, p: Policy, st: list[Any], now: float, expired: list[Expired]) -> float:
        """:meth:`_purge_store` for the usual store: one handler with a lifespan,
        holding primitive occurrences (nothing to extend)."""
        base = p.base
        removed: list[Any] = []
        earliest = inf
        for occ in p.handler.stored(st):
            e = base(occ)
            if e < now:
                break
            if e < earliest:
                earliest = e
        else:
            return earliest  # nothing expired: the state is left alone
        p.handler.purge(st, lambda occ: base(occ) < now, removed)
        if removed and (p.archive or self.class_archive):
            where = str(p.handler.expr)
            for occ in removed:
                if len(occ) == 8 and (p.archive or occ[0] in self.class_archive):
                    expired.append(Expired(finished(occ), now, where))
        earliest = inf
        for occ in p.handler.stored(st):
            e = base(occ)
            if e < earliest:
                earliest = e
        return earliest

    def stored_expirations(self, store: Store) -> list[tuple[Any, float]]:
        """Every occurrence the lifespan handlers of ``store`` hold, with its
        expiration time (steps 1 to 3), as ``(occurrence, expiration)`` pairs
        (an occurrence stored by several handlers once): for inspection, tests
        and the earliest expiration of a store."""
        policies = self.policies
        here = sorted(
            ((policies[hid], st) for hid, st in store.items() if hid in policies),
            key=lambda ps: -ps[0].handler.height,
        )
        ext: dict[int, float] = {}
        out: dict[int, tuple[Any, float]] = {}
        for p, st in here:
            for occ in p.handler.stored(st):
                i = id(occ)
                e = max(p.base(occ), ext.get(i, -inf))
                seen = out.get(i)
                out[i] = (occ, e if seen is None else max(seen[1], e))
                if len(occ) != 8:
                    for q in _nested(occ):
                        if ext.get(id(q), -inf) < e:
                            ext[id(q)] = e
        return list(out.values())


class _Registering:
    """What the leaf compiler inlines for a handler with a lifespan: the store's
    registration (one comparison in the common case), then the handler's own
    code (see :mod:`sentinel.detector.codegen`)."""

    def __init__(self, handler: Handler, policy: Policy, push: Callable[..., None]) -> None:
        self.hid = handler.hid
        self.handler = handler
        self.policy = policy
        self.push = push
        self.entries: dict[int, Entry] = {}

    def entry(self, slot: int) -> Entry:
        return self.entries[slot]

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        policy = self.policy
        e = g.var("x")
        if not policy.classes:
            # A primitive's expiration time in one addition (its own lifespan is
            # the rule's, or the window's when shorter); composites call base().
            life = policy.life if policy.window is None else min(policy.life, policy.window)
            base = g.const(policy.base)
            g.line(f"{e} = {occ}[2] + {g.const(life)} if len({occ}) == 8 else {base}({occ})")
        else:
            g.line(f"{e} = {g.const(policy.base)}({occ})")
        # The handler's state is created right after this code, so a store without
        # it has not been registered for this handler yet (a new partition: the
        # common case, and reading an unset slot would cost more than registering).
        g.line(
            f"if {self.hid} not in {store} or "
            f"{e} < {g.const(getattr)}({store}, 'expires', {g.const(inf)}):"
        )
        with g.block():
            # Lifespans.push, inlined: the tick after x, its bucket, the entry.
            lifespans: Lifespans = self.push.__self__  # type: ignore[attr-defined]
            t, b = g.var("t"), g.var("b")
            g.line(f"{store}.expires = {e}")
            c = lifespans._chronon
            if c:
                g.line(f"{t} = ({e} // {c!r} + 1.0) * {c!r}")
                g.line(f"if {t} <= {e}:")
                with g.block():
                    g.line(f"{t} = {g.const(lifespans.tick_after)}({e})")
            else:
                g.line(f"{t} = {g.const(nextafter)}({e}, {g.const(inf)})")
            g.line(f"{b} = {g.const(lifespans._buckets)}.get({t})")
            g.line(f"if {b} is None:")
            with g.block():
                g.line(f"{b} = {g.const(lifespans.new_bucket)}({t})")
            if policy.part is None:
                g.line(f"{b}.append(({store}, None, None))")
            else:
                rid, key = policy.part
                if key is ex.SOURCE:
                    pk = f"{occ}[4] if len({occ}) == 8 else "
                    pk += f"{g.const(partition_key)}({occ}, {g.const(key)})"
                else:
                    pk = f"{g.const(partition_key)}({occ}, {g.const(key)})"
                g.line(f"{b}.append(({store}.parent, {rid!r}, {pk}))")
        inner = getattr(self.handler, "gen", None)
        if inner is not None:
            inner(slot, g, store, occ)
        else:
            g.line(f"{g.const(self.handler.entry(slot))}({store}, {occ})")
