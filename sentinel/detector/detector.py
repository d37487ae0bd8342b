"""The event detector core: definitions, signals, subscriptions, scopes.

:class:`EventDetector` owns the event graph and the logical clock. It knows nothing
of rules (the rules layer builds :class:`~sentinel.LocalEventDetector` on top of
it), of SQLAlchemy or of Spark.
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from threading import get_ident
from typing import Any

from sentinel.algebra import expressions as ex
from sentinel.algebra.syntax import parse
from sentinel.detector import plugins
from sentinel.detector.contexts import Context
from sentinel.detector.events import Dispatch
from sentinel.detector.graph import Channel, EventGraph, Mode, Subscription
from sentinel.detector.scopes import Scope, Store
from sentinel.errors import (
    AmbiguousScopeError,
    BitemporalError,
    DuplicateEventError,
    ExpressionError,
    ScopeError,
    UnknownEventError,
)
from sentinel.occurrence import AnyOccurrence, CompositeOccurrence, Occurrence, occurrence_time

__all__ = [
    "TXN_ABORT",
    "TXN_BEGIN",
    "TXN_COMMIT",
    "TXN_PRE_COMMIT",
    "EventDetector",
]

TXN_BEGIN = ex.Primitive("txn:begin")
TXN_PRE_COMMIT = ex.Primitive("txn:pre_commit")
TXN_COMMIT = ex.Primitive("txn:commit")
TXN_ABORT = ex.Primitive("txn:abort")
_TXN = (TXN_BEGIN, TXN_PRE_COMMIT, TXN_COMMIT, TXN_ABORT)

_new: Any = tuple.__new__
#: ``Scope.status`` of an active scope: the signal path compares by identity
#: (the literal is interned); a scope whose status is not this object takes the
#: slow path, which compares by value.
_ACTIVE = "active"
OccurrenceListener = Callable[[Occurrence], None]
#: Routes a logged occurrence that no channel carries to the entries it reaches
#: (the answer of a listener of the ``route`` event, :mod:`sentinel.detector.events`).
InjectRoute = Callable[[Occurrence, Scope], tuple[Callable[[Store, Any], None], ...]]


class EventDetector:
    """Detects composite events over the primitive events signalled to it.

    Thread-safe: signals from several threads are serialised (each gets its
    ``t_occ`` and is propagated under one lock); callbacks run outside the lock.
    Each thread (or asyncio task) has its own current scope.

    ``clock`` is where wall-clock times come from: a function returning POSIX
    seconds, or a clock of :mod:`sentinel.temporal` (``SystemClock``,
    ``VirtualClock``), which also runs the timers of temporal events.
    ``replaying=True`` marks a detector that replays the event log: temporal
    events do not fire on their own there (the log holds what they produced).
    ``chronon`` (seconds, a timedelta or a time string such as ``"00:15:00"``)
    is the granularity of the bitemporal model (``docs/bitemporal.md``).

    Layers plug in by listening to the detector's events
    (:mod:`sentinel.detector.events`, ``docs/architecture.md``); the plug-ins of
    :mod:`sentinel.detector.plugins` are installed on every new detector.
    """

    #: Hands an instant's detections to their subscribers (``deliver(items,
    #: scope)``): :meth:`_deliver_in_order` here; a detector with rules binds its
    #: scheduler's ``deliver`` (``LocalEventDetector.scheduler_class``).
    _deliver: Callable[[list[tuple[Subscription, Any]], Scope], None]

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        replaying: bool = False,
        chronon: float | timedelta | str | None = None,
    ) -> None:
        self._lock = threading.RLock()
        #: The listeners of the detector's events (:mod:`sentinel.detector.events`).
        self.dispatch = Dispatch()
        self._deliver = self._deliver_in_order
        #: The length of a chronon in seconds (``None``: none, times are exact).
        #: Occurrence and detection times in one chronon count as one instant for
        #: the timing primitives, and bitemporal work runs at chronon boundaries
        #: (see :mod:`sentinel.bitemporal`).
        self.chronon: float | None = _chronon(chronon)
        self._t = 0
        #: The clock given as ``clock=`` (a function, or a clock object).
        self.wall_clock = clock
        now = getattr(clock, "now", None)
        self._wall: Callable[[], float] = now if callable(now) else clock
        self.replaying = replaying
        #: Named value sources (``P*(E1, [t] name, E3)`` samples them); see :meth:`sampler`.
        self.samplers: dict[str, Callable[[], Any]] = {}
        self._channels: dict[str, Channel] = {}
        self._explicit: dict[str, Channel] = {}
        self._events: dict[str, ex.Expression] = {}
        self._triggered: list[tuple[Subscription, Any]] = []
        #: Threads whose signals are ignored (a rule's condition is running there).
        self._muted: set[int] = set()
        self.graph = EventGraph(self._channels, self._sink, self._triggered)
        self._scope_var: ContextVar[Scope | None] = ContextVar(
            f"sentinel_scope_{id(self)}", default=None
        )
        #: The scopes made current by :meth:`enter_ambient` in this thread (or
        #: task), oldest first, and what stands for them in ``_scope_var`` (the
        #: value last written there by this mechanism, or None).
        self._ambient_var: ContextVar[tuple[tuple[Scope, ...], Scope | None]] = ContextVar(
            f"sentinel_ambient_{id(self)}", default=((), None)
        )
        self.process_scope = Scope(f"process:{uuid.uuid4().hex[:12]}", self._new_store())
        self.process_scope.process = True
        self._scopes: weakref.WeakSet[Scope] = weakref.WeakSet()
        for p in _TXN:
            self._define_primitive(p)
        plugins.install(self)

    # -- definitions -------------------------------------------------------------
    def explicit(self, name: str) -> ex.Primitive:
        """Define (or look up) the explicit event ``name`` and return it.

        Explicit events are signalled by the application with :meth:`signal`.
        Raises :class:`~sentinel.errors.DuplicateEventError` if ``name`` is
        already a different kind of event.
        """
        existing = self._events.get(name)
        if existing is not None:
            if isinstance(existing, ex.Primitive) and name in self._explicit:
                return existing
            raise DuplicateEventError(name, f"it is {existing}")
        prim = ex.Primitive(name)
        with self._lock:
            self._define_primitive(prim)
            self._explicit[name] = self._channels[name]
        return prim

    def _define_primitive(self, prim: ex.Primitive) -> None:
        if prim.name not in self._channels:
            self._channels[prim.name] = Channel(prim.name)
        self._events[prim.label] = prim

    def channel(self, name: str) -> Channel:
        """The channel ``name``, created if needed (for layers that signal events
        of their own kinds, such as method events)."""
        with self._lock:
            ch = self._channels.get(name)
            if ch is None:
                ch = self._channels[name] = Channel(name)
            return ch

    def define_primitive(self, prim: ex.Primitive) -> ex.Primitive:
        """Register a primitive event built by another layer (a method event, an
        instance-level event) under its label, so text expressions can name it."""
        existing = self._events.get(prim.label)
        if existing is not None and existing != prim:
            raise DuplicateEventError(prim.label, f"it is {existing!r}")
        with self._lock:
            self.channel(prim.name)
            self._events[prim.label] = prim
        return prim

    def define(self, name: str, expression: ex.Expression | str) -> ex.Expression:
        """Name a composite event so text expressions can refer to it.

        ``expression`` may be Snoop text; names in it are resolved now.
        """
        if not isinstance(name, str) or not name:
            raise ExpressionError(f"an event name must be a non-empty string, not {name!r}")
        expr = self.expression(expression)
        existing = self._events.get(name)
        if existing is not None and existing != expr:
            raise DuplicateEventError(name, f"it is {existing}")
        self._events[name] = expr
        return expr

    def event(self, name: str) -> ex.Expression:
        """The event defined as ``name``; raises UnknownEventError."""
        try:
            return self._events[name]
        except KeyError:
            raise UnknownEventError(name, self._events) from None

    @property
    def events(self) -> Mapping[str, ex.Expression]:
        """Every defined event by name (a read-only view)."""
        from types import MappingProxyType

        return MappingProxyType(self._events)

    def expression(self, value: ex.Expression | str) -> ex.Expression:
        """``value`` as an expression whose events are all defined here.

        Snoop text is parsed; names refer to events defined on this detector
        (primitive or named composite). Raises
        :class:`~sentinel.errors.UnknownEventError` naming the first unknown
        event, :class:`~sentinel.errors.SnoopSyntaxError` for malformed text.
        """
        text = value if isinstance(value, str) else None
        expr = parse(value) if isinstance(value, str) else value
        convert = getattr(expr, "__sentinel_expression__", None)
        if convert is not None:  # an expression of another algebra (an Ode term)
            expr = convert()
        if not isinstance(expr, ex.Expression):
            raise ExpressionError(
                f"expected an event expression or Snoop text, not {type(value).__name__}"
            )
        return self._resolve(expr, text)

    def sampler(self, name: str, fn: Callable[[], Any]) -> None:
        """Register ``fn`` as the sampler ``name``: ``P*(E1, [t] name, E3)`` calls
        ``fn()`` at each tick and keeps the value (it must be loggable) as the
        tick's parameter ``name``. Replaces a sampler of the same name.

        A registry of named values, not an event (``docs/architecture.md``, "The
        detector's events")."""
        if not isinstance(name, str) or not name or not callable(fn):
            raise ExpressionError(f"a sampler is a name and a callable, not {name!r}, {fn!r}")
        self.samplers[name] = fn

    def _resolve(self, expr: ex.Expression, text: str | None) -> ex.Expression:
        # Parents are prepared before their operands (pre-order), then resolved
        # after them; with stacks, not recursively: expressions of any depth.
        seen: set[int] = set()
        todo = [expr]
        prepare = self.dispatch.prepare
        while todo:
            e = todo.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            if prepare:
                prepare(self, e)
            todo.extend(reversed(e.children))
        # id -> (resolved, whether it equals the original)
        done: dict[int, tuple[ex.Expression, bool]] = {}
        for e in expr.walk():
            if id(e) in done:
                continue
            if isinstance(e, ex.Primitive):
                resolved = self._resolve_primitive(e, text)
                done[id(e)] = (resolved, resolved == e)
            elif all(done[id(c)][1] for c in e.children):
                done[id(e)] = (e, True)
            else:
                done[id(e)] = (e.with_children([done[id(c)][0] for c in e.children]), False)
        return done[id(expr)][0]

    def _resolve_primitive(self, expr: ex.Primitive, text: str | None) -> ex.Expression:
        resolve_inner = getattr(expr, "resolve_inner", None)
        if resolve_inner is not None:  # a leaf built on another event (a timing primitive)
            return resolve_inner(lambda e: self._resolve(e, text))  # type: ignore[no-any-return]
        if expr.selector is None and expr.label == expr.name:
            known = self._events.get(expr.name)
            if known is not None:
                return known
        elif expr.name in self._channels:
            return expr  # built by another layer (an instance-level event)
        raise UnknownEventError(expr.label, self._events, where=repr(text) if text else "")

    # -- signalling --------------------------------------------------------------
    def signal(self, name: str, /, **params: Any) -> Occurrence | None:
        """Signal the explicit event ``name`` with ``params`` in the current scope.

        Returns the occurrence after every subscription it triggered has been
        called (rules: every immediate rule has run), or ``None`` when signals are
        muted (inside a rule's condition). Raises UnknownEventError for a name not
        defined with :meth:`explicit`.
        """
        ch = self._explicit.get(name)
        if ch is None:
            raise UnknownEventError(name, self._explicit, where="signal()")
        return self.emit(ch, params, None, (), None)

    def signal_at(self, name: str, at: datetime | float, /, **params: Any) -> Occurrence | None:
        """Signal the explicit event ``name`` with its *occurrence time* ``at``, as
        its source says (in the past for a late report, in the future for an
        announced one); the detection time is now.

        ``at`` is an aware datetime (a naive one is read as UTC) or POSIX
        seconds. Raises :class:`~sentinel.errors.OccurrenceTimeError` for
        anything else, before anything is signalled or logged.

        >>> det = EventDetector()
        >>> _ = det.explicit("delivery")
        >>> det.signal_at("delivery", 0.0).timestamp
        0.0
        """
        ch = self._explicit.get(name)
        if ch is None:
            raise UnknownEventError(name, self._explicit, where="signal_at()")
        ts = occurrence_time(at, name)
        return self.emit(ch, params, None, (), None, ts)

    def notify(
        self,
        channel: Channel,
        params: dict[str, Any],
        *,
        source: Hashable | None = None,
        selectors: tuple[Hashable, ...] = (),
        scope: Scope | None = None,
        timestamp: float | None = None,
    ) -> Occurrence | None:
        """Signal one occurrence on ``channel`` (the low-level form of
        :meth:`signal` used by other layers). ``selectors`` pick the
        selector-carrying primitive events that also receive it. ``params`` is
        owned by the occurrence from now on."""
        return self.emit(channel, params, source, selectors, scope, timestamp)

    def emit(
        self,
        channel: Channel,
        params: dict[str, Any],
        source: Hashable | None,
        selectors: tuple[Hashable, ...],
        scope: Scope | None,
        timestamp: float | None = None,
        muting: bool = True,
    ) -> Occurrence | None:
        """:meth:`notify` with every argument positional: the reactive layer's
        per-call path, where keyword passing costs a measurable share.
        ``scope`` ``None`` is the current scope; ``muting=False`` signals even
        from a thread whose signals are muted (the transaction events)."""
        if muting and self._muted and get_ident() in self._muted:
            return None
        if scope is None:
            scope = self._scope_var.get() or self._process_view()
            if scope.status is not _ACTIVE:  # an ambient scope that ended, or several
                scope = self._settle(scope)
        # The hot path of every signal: one lock, one tuple, one call per leaf
        # target. Rules run after the lock is released. The targets are read under
        # the lock: a rule deleted meanwhile must not leave a stale target.
        lock = self._lock
        lock.acquire()
        try:
            self._t = t = self._t + 1
            now = self._wall()
            occ: Occurrence = _new(
                Occurrence,
                (
                    channel.name,
                    t,
                    now if timestamp is None else timestamp,
                    now,
                    source,
                    params,
                    scope.id,
                ),
            )
            if self.graph.dirty:
                self.graph.rewire()
            targets = channel.any
            if selectors and channel.selected:
                targets = channel.targets(selectors)
            listeners = self.dispatch.occurrence
            if listeners:  # the event log: the loop inlined (the signal's hot path)
                for listener in listeners:
                    listener(occ)
            if not targets:
                return occ
            # _propagate, inlined: one call less on every listened signal.
            triggered = self._triggered
            store = scope.store
            try:
                for f in targets:
                    f(store, occ)
                if self.graph.agenda:
                    self.graph.drain()
            except BaseException:
                self.graph.reset()
                triggered.clear()
                raise
            if not triggered:
                return occ
            items = triggered[:]
            triggered.clear()
        finally:
            lock.release()
        self._deliver(items, scope)
        return occ

    def emit_detected(
        self,
        channel: Channel,
        params: dict[str, Any],
        scope: Scope,
        timestamp: float,
        detected: float,
    ) -> Occurrence:
        """Signal one occurrence on ``channel`` in ``scope`` with both its times
        given: the bitemporal layer processes announcements at clock ticks, after
        they were detected. Not muted; otherwise as :meth:`emit`."""
        with self._lock:
            self._t = t = self._t + 1
            occ: Occurrence = _new(
                Occurrence, (channel.name, t, timestamp, detected, None, params, scope.id)
            )
            if self.graph.dirty:
                self.graph.rewire()
            if self.dispatch.occurrence:
                self.dispatch.occurrence(occ)
            targets = channel.any
            items = self._propagate(targets, occ, scope) if targets else None
        if items:
            self._deliver(items, scope)
        return occ

    def _propagate(
        self, targets: tuple[Callable[[Store, Any], None], ...], occ: Any, scope: Scope
    ) -> list[tuple[Subscription, Any]] | None:
        """Run one instant through the graph (under the lock); return the
        detections that reached subscriptions."""
        triggered = self._triggered
        store = scope.store
        try:
            for f in targets:
                f(store, occ)
            if self.graph.agenda:
                self.graph.drain()
        except BaseException:
            self.graph.reset()
            triggered.clear()
            raise
        if not triggered:
            return None
        items = triggered[:]
        triggered.clear()
        return items

    def inject(self, occ: Occurrence, scope: Scope) -> None:
        """Feed an occurrence that was signalled before (replay of the event log):
        it keeps its ``t_occ`` and times, reaches the primitive events it matched
        then (see :attr:`selectors_for`), and triggers subscriptions as it did
        online. Occurrence listeners are not called (it is logged already).
        Occurrences must be injected in ``t_occ`` order within a scope."""
        ch = self._channels.get(occ[0])
        lock = self._lock
        lock.acquire()
        try:
            if occ[1] > self._t:
                self._t = occ[1]
            graph = self.graph
            if graph.dirty:
                graph.rewire()
            if ch is None:
                routes = self.dispatch.route
                route = routes.first(occ[0]) if routes else None
                if route is None:
                    return
                targets = route(occ, scope)
            else:
                # ch.targets(selectors), inlined: replay's per-row path
                targets = ch.any
                source = occ[4]
                if source is not None and ch.selected:
                    targets = ch.targets(self.selectors_for(occ[0], source))
            if not targets:
                return
            # _propagate, inlined, as in emit
            triggered = self._triggered
            store = scope.store
            try:
                for f in targets:
                    f(store, occ)
                if graph.agenda:
                    graph.drain()
            except BaseException:
                graph.reset()
                triggered.clear()
                raise
            if not triggered:
                return
            items = triggered[:]
            triggered.clear()
        finally:
            lock.release()
        self._deliver(items, scope)

    def selectors_for(self, event: str, source: Hashable) -> tuple[Hashable, ...]:
        """The selectors a logged occurrence of ``event`` from ``source`` carried
        (used by :meth:`inject`). By default the source itself (instance-level
        events), unless a listener of the ``selectors`` event answers."""
        resolvers = self.dispatch.selectors
        if resolvers:
            answer = resolvers.first(event, source)
            if answer is not None:
                return answer  # type: ignore[no-any-return]
        return (source,)

    @property
    def clock(self) -> int:
        """The ``t_occ`` of the latest occurrence (0 before the first)."""
        return self._t

    @property
    def has_listeners(self) -> bool:
        """True while some listener of the ``occurrence`` event (the event log)
        wants every event."""
        return bool(self.dispatch.occurrence)

    def _changed(self) -> None:
        if self.dispatch.changed:
            self.dispatch.changed()

    # -- subscriptions -----------------------------------------------------------
    def subscribe(
        self,
        expression: ex.Expression | str,
        callback: Callable[[AnyOccurrence], Any],
        *,
        context: Context | str = Context.RECENT,
        flush: bool = True,
        since: int = 0,
        owner: Any = None,
    ) -> Subscription:
        """Call ``callback(occurrence)`` for each detection of ``expression`` in
        ``context``. ``since`` drops detections with a constituent older than that
        ``t_occ``. ``flush=False`` keeps detection state across scopes."""
        sub = Subscription(
            self.expression(expression),
            Mode(Context.parse(context), flush),
            lambda occ, scope: callback(occ),
            since,
            owner=owner,
        )
        self.activate(sub)
        return sub

    def activate(self, sub: Subscription) -> bool:
        """Wire a subscription into the graph (its context counters go up).

        Returns True when every node it needs was created for it: then no stored
        occurrence predates the subscription and ``since`` need not be checked.
        """
        mode = sub.mode
        if (not mode.plain or mode.archive) and self.dispatch.prepare_mode:
            self.dispatch.prepare_mode(self, mode)
        with self._lock:
            fresh = self.graph.subscribe(sub)
            self._changed()
            return fresh

    def deactivate(self, sub: Subscription) -> None:
        """Unwire a subscription; handlers nobody needs any more drop their state."""
        with self._lock:
            gone = self.graph.unsubscribe(sub)
            if gone:
                for store in self._stores():
                    for hid in gone:
                        store.pop(hid, None)
            self._changed()

    def unsubscribe(self, sub: Subscription) -> None:
        self.deactivate(sub)

    def _sink(
        self, sub: Subscription
    ) -> tuple[Callable[[Store, Any], None], Callable[[Store, list[Any]], None]]:
        # Detections leave the graph here: plain composite tuples become
        # CompositeOccurrence (see sentinel.occurrence.finished).
        append = self._triggered.append
        composite = CompositeOccurrence

        def one(store: Store, occ: Any) -> None:
            if type(occ) is tuple:
                occ = _new(composite, occ)
            append((sub, occ))

        def many(store: Store, occs: list[Any]) -> None:
            for o in occs:
                if type(o) is tuple:
                    o = _new(composite, o)
                append((sub, o))

        return one, many

    def _deliver_in_order(self, items: list[tuple[Subscription, Any]], scope: Scope) -> None:
        """Hand an instant's detections to their subscribers, higher priority first
        (the sort is stable: ties keep the order of triggering)."""
        if len(items) == 1:
            sub, occ = items[0]
            since = sub.since
            if not since or t_init(occ) >= since:
                sub.deliver(occ, scope)
            return
        if self.graph.mixed_priorities:
            items.sort(key=_by_priority)
        for sub, occ in items:
            since = sub.since
            if since and t_init(occ) < since:
                continue
            sub.deliver(occ, scope)

    # -- scopes and transactions -------------------------------------------------
    def _new_store(self) -> Store:
        return Store(self.graph.factories)

    def _stores(self) -> Iterator[Store]:
        yield self.process_scope.store
        yield self.graph.global_store
        for s in list(self._scopes):
            yield s.store

    def current_scope(self) -> Scope:
        """The scope signals of this thread (or task) go to. Raises
        :class:`~sentinel.errors.AmbiguousScopeError` when several ambient
        scopes are current (see :meth:`enter_ambient`)."""
        scope = self._scope_var.get() or self._process_view()
        if scope.status is not _ACTIVE:
            scope = self._settle(scope)
        return scope

    # The current scope of a thread (or task) is, in order: the scope of a
    # use_scope() block, of the rule running, of a transaction() block; else
    # the one ambient scope (a session transaction begun in the thread); else
    # the process scope. The ambient scopes are kept in _ambient_var, and the
    # one in force is written into _scope_var itself (when no explicit scope
    # is), so that a signal costs no more than before: one context-variable
    # lookup, and one comparison that sends the unusual cases (an ambient scope
    # that ended elsewhere, several at once) to _settle().

    def enter_ambient(self, scope: Scope) -> None:
        """Make ``scope`` (a transaction begun in this thread or asyncio task)
        current for the signals of this thread or task that name no scope, until
        :meth:`leave_ambient` or its end (commit or abort). A scope made current
        explicitly (:meth:`use_scope`, a rule's run, :meth:`transaction`) takes
        precedence. While several ambient scopes are current, such a signal
        raises :class:`~sentinel.errors.AmbiguousScopeError`.

        The ORM layer calls this for every root transaction of an attached
        session (``docs/orm.md``)."""
        scopes, written = self._ambient_var.get()
        scopes = (*scopes, scope)
        current = self._scope_var.get()
        # not while a rule runs here: what its action signals belongs to the
        # transaction that triggered it, even if the action opens another
        if current is None or ((current.process or current is written) and not current.depth):
            scopes, written = self._ambient(scopes)
            self._scope_var.set(written)
        self._ambient_var.set((scopes, written))

    def leave_ambient(self, scope: Scope) -> None:
        """Undo :meth:`enter_ambient` for ``scope`` in this thread or task
        (nothing if it is not current here)."""
        scopes, written = self._ambient_var.get()
        scopes = tuple(s for s in scopes if s is not scope)
        if written is not None and self._scope_var.get() is written:
            scopes, written = self._ambient(scopes)
            self._scope_var.set(written)
        self._ambient_var.set((scopes, written))

    @staticmethod
    def _ambient(scopes: tuple[Scope, ...]) -> tuple[tuple[Scope, ...], Scope | None]:
        """The active ones of ``scopes``, and what stands for them in
        ``_scope_var``: the one, ``None`` (the process scope) for none, a
        marker scope for several."""
        live = tuple(s for s in scopes if s.status == "active")
        if len(live) == 1:
            return live, live[0]
        if not live:
            return live, None
        marker = Scope.__new__(Scope)
        marker.id, marker.status, marker.process, marker.depth = None, "ambiguous", False, 0
        marker.info = {"scopes": live}
        return live, marker

    def _settle(self, scope: Scope) -> Scope:
        """The scope a signal goes to when ``_scope_var`` holds one that is not
        active: an explicit scope that ended is used as it is (as always); what
        :meth:`enter_ambient` wrote is replaced by what is current now (an
        ambient scope may end in another thread or task). Raises
        :class:`~sentinel.errors.AmbiguousScopeError` for several."""
        scopes, written = self._ambient_var.get()
        if scope is not written:
            return scope
        scopes, written = self._ambient(scopes)
        self._ambient_var.set((scopes, written))
        self._scope_var.set(written)
        if written is None:
            return self._process_view()
        if written.status != "active":
            raise AmbiguousScopeError(tuple(s.id for s in written.info["scopes"]))
        return written

    def _process_view(self) -> Scope:
        """This thread's (or task's) view of the process scope: the same id and
        store, its own rule-cascade depth. Made once per context, so the per-signal
        path stays a context-variable lookup."""
        view = self.process_scope.view()
        self._scope_var.set(view)
        return view

    @contextmanager
    def muted(self) -> Iterator[None]:
        """Ignore signals from this thread inside the block (conditions are side-effect
        free: events they signal are not detected)."""
        me = get_ident()
        if me in self._muted:
            yield
            return
        self._muted.add(me)
        try:
            yield
        finally:
            self._muted.discard(me)

    @contextmanager
    def use_scope(self, scope: Scope) -> Iterator[Scope]:
        """Make ``scope`` current for signals in this block."""
        token = self._scope_var.set(scope)
        try:
            yield scope
        finally:
            self._scope_var.reset(token)

    def begin(self, id: Hashable | None = None) -> Scope:
        """Start a detection scope for a transaction and signal ``txn:begin`` in it."""
        scope = Scope(id if id is not None else uuid.uuid4().hex, self._new_store())
        self._scopes.add(scope)
        self.emit(self._channels["txn:begin"], {}, None, (), scope, None, False)
        return scope

    def scope(self, id: Hashable) -> Scope:
        """A new, active detection scope with ``id``, *without* signalling
        ``txn:begin`` (replay injects the logged ``txn:begin`` itself). Finish it
        with :meth:`end_scope`."""
        scope = Scope(id, self._new_store())
        self._scopes.add(scope)
        return scope

    def end_scope(self, scope: Scope, status: str) -> None:
        """Mark ``scope`` ``"committed"`` or ``"aborted"``, flush it and run what
        follows the end of a transaction (detached rules), *without* signalling
        ``txn:commit`` / ``txn:abort`` (replay injected the logged ones)."""
        if status not in ("committed", "aborted"):
            raise ScopeError(f"status must be 'committed' or 'aborted', not {status!r}")
        scope._check_active("commit" if status == "committed" else "abort")
        scope.status = status
        self.flush(scope)
        self._after_end(scope)

    def pre_commit(self, scope: Scope) -> None:
        """Signal ``txn:pre_commit`` in ``scope`` (deferred rules run here)."""
        scope._check_active("pre-commit")
        self.emit(self._channels["txn:pre_commit"], {}, None, (), scope, None, False)

    def commit(self, scope: Scope) -> None:
        """Signal ``txn:commit`` in ``scope``, then flush it."""
        scope._check_active("commit")
        try:
            self.emit(self._channels["txn:commit"], {}, None, (), scope, None, False)
        finally:
            scope.status = "committed"
            self.flush(scope)
        self._after_end(scope)

    def abort(self, scope: Scope) -> None:
        """Signal ``txn:abort`` in ``scope``, then flush it."""
        if scope.status == "aborted":
            return
        scope._check_active("abort")
        try:
            self.emit(self._channels["txn:abort"], {}, None, (), scope, None, False)
        finally:
            scope.status = "aborted"
            self.flush(scope)
        self._after_end(scope)

    def _after_end(self, scope: Scope) -> None:
        """Called once ``scope`` has committed or aborted and been flushed (the
        rules layer runs detached rules here)."""

    @contextmanager
    def transaction(self) -> Iterator[Scope]:
        """A detection scope for the block: ``txn:begin`` on entry; on success
        ``txn:pre_commit`` then ``txn:commit``; on an exception (including one
        raised at pre-commit) ``txn:abort``. Commit and abort flush the scope."""
        scope = self.begin()
        token = self._scope_var.set(scope)
        try:
            try:
                yield scope
                self.pre_commit(scope)
            except BaseException:
                self.abort(scope)
                raise
            self.commit(scope)
        finally:
            self._scope_var.reset(token)

    def flush(self, scope: Scope | None = None) -> None:
        """Forget detection state: of ``scope``, or of every scope (and the
        process-wide state of rules that do not flush) when ``scope`` is None."""
        with self._lock:
            if self.dispatch.flush:
                self.dispatch.flush(scope)
            if scope is not None:
                scope.store.clear()
                return
            for store in self._stores():
                store.clear()

    def stored(self, scope: Scope | None = None) -> int:
        """How many occurrence entries detection state holds (in ``scope``, or
        everywhere)."""
        with self._lock:
            if scope is not None:
                return scope.store.occurrences()
            return sum(s.occurrences() for s in self._stores())


def _chronon(value: float | timedelta | str | None) -> float | None:
    if value is None:
        return None
    from sentinel.algebra.bitemporal import duration

    try:
        return duration(value, what="chronon").seconds
    except ExpressionError as err:
        raise BitemporalError(f"bad chronon {value!r}: {err}") from None


def _by_priority(item: tuple[Subscription, Any]) -> int:
    return -item[0].priority


def t_init(occ: AnyOccurrence) -> int:
    """The earliest ``t_occ`` among an occurrence's constituents."""
    if type(occ) is Occurrence:
        return occ[1]  # type: ignore[no-any-return]
    assert isinstance(occ, CompositeOccurrence)
    return occ.t_init
