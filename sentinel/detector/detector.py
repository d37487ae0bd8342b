"""The event detector core: definitions, signals, subscriptions, scopes.

:class:`EventDetector` owns the event graph and the logical clock. It knows nothing
of rules (the rules layer builds :class:`~sentinel.LocalEventDetector` on top of
it), of SQLAlchemy or of Spark.

Naming events is in :mod:`sentinel.detector.definitions`; scopes, transactions
and flushing in :mod:`sentinel.detector.transactions` (parts of
:class:`EventDetector`); the signal path, subscriptions and delivery are here.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Hashable, Sequence
from contextvars import ContextVar
from datetime import datetime, timedelta
from threading import get_ident
from typing import Any

from sentinel.algebra import expressions as ex
from sentinel.detector import plugins
from sentinel.detector.contexts import Context
from sentinel.detector.definitions import Definitions
from sentinel.detector.events import Dispatch
from sentinel.detector.graph import Channel, EventGraph, Mode, Subscription
from sentinel.detector.scopes import Scope, Store
from sentinel.detector.transactions import _ACTIVE, ProcessViews, Transactions, flow
from sentinel.errors import (
    BitemporalError,
    ExpressionError,
    UnknownEventError,
)
from sentinel.occurrence import (
    _NAMES,
    AnyOccurrence,
    CompositeOccurrence,
    Occurrence,
    names_of,
    occurrence_time,
    params_of,
    split_params,
)

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
OccurrenceListener = Callable[[Occurrence], None]
#: Routes a logged occurrence that no channel carries to the entries it reaches
#: (the answer of a listener of the ``route`` event, :mod:`sentinel.detector.events`).
InjectRoute = Callable[[Occurrence, Scope], tuple[Callable[[Store, Any], None], ...]]


def asynchronous(fn: Any) -> bool:
    """Whether calling ``fn`` makes a coroutine or an async generator rather
    than running it (an ``async def``, also behind ``functools.partial`` or as
    an object's ``__call__``)."""
    if not (inspect.isroutine(fn) or isinstance(fn, functools.partial)) and callable(fn):
        fn = fn.__call__  # an object: its method (inspect unwraps partials itself)
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


class EventDetector(Definitions, Transactions):
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
    #: Hands one primitive occurrence to the subscriptions on its event that a
    #: signal reaches without the graph (``Channel.direct``: already in
    #: priority order): ``deliver_direct(subscriptions, occurrence, scope)``,
    #: what :attr:`_deliver` does with those detections.
    #: :meth:`_deliver_as_items` here; a detector with rules binds its
    #: scheduler's ``deliver_direct``.
    _deliver_direct: Callable[[Sequence[Subscription], Any, Scope], None]

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
        self._deliver_direct = self._deliver_as_items
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
        #: Threads whose signals are ignored (a rule's condition is running
        #: there): each thread, or each greenlet in it (a condition of an
        #: asyncio application that waits on the database switches greenlets,
        #: and other tasks run meanwhile: their signals count). See ``flow``.
        self._muted: set[Any] = set()
        self.graph = EventGraph(self._channels, self._sink, self._triggered)
        self._scope_var: ContextVar[Scope | None] = ContextVar(
            f"sentinel_scope_{id(self)}", default=None
        )
        #: Each thread's view of the process scope (see :meth:`_process_view`);
        #: the thread that made the detector reads its own from ``_home_view``.
        self._views = ProcessViews()
        self._home = get_ident()
        #: The scopes made current by :meth:`enter_ambient` in this thread (or
        #: task), oldest first, and what stands for them in ``_scope_var`` (the
        #: value last written there by this mechanism, or None).
        self._ambient_var: ContextVar[tuple[tuple[Scope, ...], Scope | None]] = ContextVar(
            f"sentinel_ambient_{id(self)}", default=((), None)
        )
        self.process_scope = Scope(f"process:{uuid.uuid4().hex[:12]}", self._new_store())
        self.process_scope.lock = self._lock
        self.process_scope.process = True
        self._home_view = self.process_scope.view()
        self._scopes: weakref.WeakSet[Scope] = weakref.WeakSet()
        for p in _TXN:
            self._define_primitive(p)
        plugins.install(self)

    # -- signalling --------------------------------------------------------------
    def signal(self, name: str, /, **params: Any) -> Occurrence | None:
        """Signal the explicit event ``name`` with ``params`` in the current scope.

        Returns the occurrence after every subscription it triggered has been
        called (rules: every immediate rule has run), or ``None`` when signals are
        muted (inside a rule's condition). Raises UnknownEventError for a name not
        defined with :meth:`explicit`.
        """
        try:
            ch = self._explicit.get(name)
        except TypeError:  # unhashable
            ch = None
        if ch is None:
            raise self._not_signalled(name, "signal()")
        if params:  # positional, under the interned names (names_of, inlined)
            names = tuple(params)
            names = _NAMES.get(names) or names_of(names)
            occ = self.emit(ch, tuple(params.values()), names, None, (), None)
        else:
            occ = self.emit(ch, (), (), None, (), None)
        return None if occ is None else _new(Occurrence, occ)

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
        try:
            ch = self._explicit.get(name)
        except TypeError:  # unhashable
            ch = None
        if ch is None:
            raise self._not_signalled(name, "signal_at()")
        ts = occurrence_time(at, name)
        values, names = split_params(params)
        occ = self.emit(ch, values, names, None, (), None, ts)
        return None if occ is None else _new(Occurrence, occ)

    def _not_signalled(self, name: Any, where: str) -> UnknownEventError:
        """Why ``name`` cannot be signalled: not a name, an event of another
        kind, or unknown."""
        if not isinstance(name, str):
            label = getattr(name, "label", None)
            hint = f" (pass its name: {label!r})" if isinstance(label, str) else ""
            return UnknownEventError(
                name,
                where=where,
                detail=f"an event is named by a string, not a {type(name).__name__}{hint}",
            )
        if name in self._events:
            return UnknownEventError(
                name,
                where=where,
                detail="it is defined, but not as an explicit event: transaction events "
                "are signalled by transactions, a method's events by its calls, a "
                "composite event by its constituents; signal() takes events defined "
                "with detector.explicit(name)",
            )
        return UnknownEventError(name, self._explicit, where=where)

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
        selector-carrying primitive events that also receive it."""
        values, names = split_params(params)
        occ = self.emit(channel, values, names, source, selectors, scope, timestamp)
        return None if occ is None else _new(Occurrence, occ)

    def emit(
        self,
        channel: Channel,
        values: tuple[Any, ...],
        names: tuple[str, ...],
        source: Hashable | None,
        selectors: tuple[Hashable, ...],
        scope: Scope | None,
        timestamp: float | None = None,
        muting: bool = True,
    ) -> tuple[Any, ...] | None:
        """:meth:`notify` with every argument positional and the parameters as
        an occurrence stores them (``values``, and ``names`` interned with
        :func:`~sentinel.occurrence.names_of`): the reactive layer's per-call
        path, where keyword passing and packing cost a measurable share.
        ``scope`` ``None`` is the current scope; ``muting=False`` signals even
        from a thread whose signals are muted (the transaction events). Returns
        the occurrence in the graph's form (a plain tuple: see
        :mod:`sentinel.occurrence`)."""
        if muting and self._muted and flow() in self._muted:
            return None
        if scope is None:
            scope = self._scope_var.get() or (
                self._home_view if get_ident() == self._home else self._process_view()
            )
            if scope.status is not _ACTIVE:  # an ambient scope that ended, or several
                scope = self._settle(scope)
        # The hot path of every signal: one lock, one clock reading, one tuple,
        # then either one call per leaf target or, when only subscriptions on
        # the primitive event itself listen, none (Channel.direct). Rules run
        # after the lock is released. The targets are read under the lock: a
        # rule deleted meanwhile must not leave a stale target.
        lock = self._lock
        lock.acquire()
        try:
            self._t = t = self._t + 1
            now = self._wall()
            occ = (
                channel.name,
                t,
                now if timestamp is None else timestamp,
                now,
                source,
                values,
                scope.id,
                names,
            )
            if self.graph.dirty:
                self.graph.rewire()
            targets = channel.any
            if selectors and channel.selected:
                targets = channel.targets(selectors)
            listeners = self.dispatch.occurrence
            if listeners:  # the event log: the loop inlined (the signal's hot path)
                for listener in listeners:
                    made = listener(occ)
                    if type(made) is tuple and len(made) == 8:  # the log's, made loggable
                        occ = made
            if not targets:
                return occ
            direct: Sequence[Subscription] | None = channel.direct
            if direct is not None and targets is channel.any:
                # Only subscriptions on this primitive event (or masks of it)
                # listen: they are delivered to without a walk of the graph.
                masks = channel.masks
                if masks is not None:
                    # after the listeners: the log's may have made the values loggable
                    direct = _unmasked(direct, masks, params_of(occ))
                    if not direct:
                        return occ
                items = None
            else:
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
        if items is None:
            # The rules on the primitive event receive an Occurrence: made here,
            # where the graph's plain tuple leaves it.
            self._deliver_direct(direct, _new(Occurrence, occ), scope)  # type: ignore[arg-type]  # set with items None
        else:
            self._deliver(items, scope)
        return occ

    def emit_detected(
        self,
        channel: Channel,
        params: dict[str, Any],
        scope: Scope,
        timestamp: float,
        detected: float,
    ) -> tuple[Any, ...]:
        """Signal one occurrence on ``channel`` in ``scope`` with both its times
        given: the bitemporal layer processes announcements at clock ticks, after
        they were detected. Not muted; otherwise as :meth:`emit` (and returns
        the occurrence in the graph's form)."""
        values, names = split_params(params)
        with self._lock:
            self._t = t = self._t + 1
            occ = (channel.name, t, timestamp, detected, None, values, scope.id, names)
            if self.graph.dirty:
                self.graph.rewire()
            for listener in self.dispatch.occurrence:
                made = listener(occ)
                if type(made) is tuple and len(made) == 8:
                    occ = made
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
        ``t_occ``. ``flush=False`` keeps detection state across scopes. A
        coroutine function is refused (``TypeError``): callbacks run inside the
        signal, and its coroutine would never be awaited."""
        if asynchronous(callback):
            raise TypeError(
                f"subscribe: {getattr(callback, '__qualname__', callback)!r} is a coroutine "
                "function; callbacks run synchronously, inside the signal (its coroutine "
                "would never be awaited): give a plain function"
            )
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
            self.dispatch.prepare_mode(self, mode, sub.expression)
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
        # Detections leave the graph here: plain tuples become Occurrence and
        # CompositeOccurrence (see sentinel.occurrence.finished).
        append = self._triggered.append
        composite = CompositeOccurrence
        primitive = Occurrence

        def one(store: Store, occ: Any) -> None:
            if type(occ) is tuple:
                occ = _new(composite if len(occ) == 3 else primitive, occ)
            append((sub, occ))

        def many(store: Store, occs: list[Any]) -> None:
            for o in occs:
                if type(o) is tuple:
                    o = _new(composite if len(o) == 3 else primitive, o)
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

    def _deliver_as_items(self, subs: Sequence[Subscription], occ: Any, scope: Scope) -> None:
        """Hand one primitive occurrence to the subscriptions on its event that
        the graph was not walked for (``Channel.direct``) through
        :attr:`_deliver`, as the detections the graph would have made."""
        self._deliver([(sub, occ) for sub in subs], scope)


def _unmasked(
    subs: Sequence[Subscription], masks: tuple[Callable[[Any], Any] | None, ...], params: Any
) -> list[Subscription]:
    """The subscriptions of ``Channel.direct`` whose mask (if any) ``params`` satisfy."""
    return [s for s, m in zip(subs, masks, strict=True) if m is None or m(params)]


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
    if len(occ) == 8:
        return occ[1]  # type: ignore[no-any-return]
    assert isinstance(occ, CompositeOccurrence)
    return occ.t_init
