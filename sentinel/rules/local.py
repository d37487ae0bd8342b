"""The local event detector: the event detector plus ECA rules."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, ClassVar, overload

from sentinel.algebra import expressions as ex
from sentinel.detector import Context, EventDetector, Scope
from sentinel.detector.detector import asynchronous
from sentinel.detector.events import listen
from sentinel.errors import (
    BitemporalError,
    CascadeLimitError,
    ExpressionError,
    RuleDefinitionError,
)
from sentinel.rules.coupling import Coupling
from sentinel.rules.rule import Action, Condition, Rule, TriggerMode
from sentinel.rules.scheduler import Scheduler

__all__ = ["DetachedExecutor", "LocalEventDetector"]

log = logging.getLogger("sentinel.rules")

#: A listener of the ``run_detached`` event: ``executor(rule, occurrence, committed)``.
DetachedExecutor = Callable[[Rule, Any, bool], None]


class LocalEventDetector(EventDetector):
    """A per-application event detector with ECA rules (Sentinel's local event
    detector).

    ``cascade_limit`` bounds nested rule triggering; ``priority_classes`` names
    priorities (``{"integrity": 100}``) so rules can say ``priority="integrity"``.
    Thread-safe: rules may be defined and events signalled from several threads.

    >>> det = LocalEventDetector()
    >>> e1, e2 = det.explicit("E1"), det.explicit("E2")
    >>> seen = []
    >>> r = det.rule("r", e1 >> e2, action=lambda occ: seen.append(occ.t_occ))
    >>> _ = det.signal("E1"); _ = det.signal("E2")
    >>> seen
    [2]

    Its scheduler is a part a subclass may replace: :attr:`scheduler_class`.
    Detached rules go to the first listener of the ``run_detached`` event
    (:mod:`sentinel.detector.events`; the ORM layer listens with its outbox),
    else to :meth:`_run_detached`.
    """

    #: The scheduler's class: ``scheduler_class(detector, cascade_limit)`` orders
    #: and runs the rules this detector triggers (replay declares one that records).
    scheduler_class: ClassVar[type[Scheduler]] = Scheduler
    scheduler: Scheduler

    def __init__(
        self,
        *,
        cascade_limit: int = 64,
        priority_classes: Mapping[str, int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.scheduler = self.scheduler_class(self, cascade_limit)
        self._deliver = self.scheduler.deliver
        if type(self.scheduler).deliver is Scheduler.deliver:
            self._deliver_direct = self.scheduler.deliver_direct
        # else a scheduler that delivers its own way gets these detections
        # through its ``deliver`` as well (EventDetector._deliver_as_items)
        self.priority_classes: dict[str, int] = dict(priority_classes or {})
        self._rules: dict[str, Rule] = {}

    # -- rules ---------------------------------------------------------------------
    @overload
    def rule(
        self,
        name: str,
        event: ex.Expression | str,
        condition: Condition | None = ...,
        *,
        action: Action,
        context: Context | str = ...,
        coupling: Coupling | str = ...,
        priority: int | str = ...,
        trigger_mode: TriggerMode | str = ...,
        enabled: bool = ...,
        flush: bool = ...,
        key: ex.KeySpec | None = ...,
        lifespan: Any = ...,
        order: str = ...,
        lateness: Any = ...,
        archive: bool = ...,
    ) -> Rule: ...

    @overload
    def rule(
        self,
        name: str,
        event: ex.Expression | str,
        condition: Condition | None = ...,
        *,
        action: None = ...,
        context: Context | str = ...,
        coupling: Coupling | str = ...,
        priority: int | str = ...,
        trigger_mode: TriggerMode | str = ...,
        enabled: bool = ...,
        flush: bool = ...,
        key: ex.KeySpec | None = ...,
        lifespan: Any = ...,
        order: str = ...,
        lateness: Any = ...,
        archive: bool = ...,
    ) -> Callable[[Action], Rule]: ...

    def rule(
        self,
        name: str,
        event: ex.Expression | str,
        condition: Condition | None = None,
        *,
        action: Action | None = None,
        context: Context | str = Context.RECENT,
        coupling: Coupling | str = Coupling.IMMEDIATE,
        priority: int | str = 0,
        trigger_mode: TriggerMode | str = TriggerMode.NOW,
        enabled: bool = True,
        flush: bool = True,
        key: ex.KeySpec | None = None,
        lifespan: Any = None,
        order: str = "arrival",
        lateness: Any = None,
        archive: bool = False,
    ) -> Rule | Callable[[Action], Rule]:
        """Define the rule ``name`` on ``event`` (an expression or Snoop text whose
        names are events defined here).

        ``condition(occurrence)`` is optional (always true); ``action(occurrence)``
        runs when it holds. Without ``action`` this returns a decorator::

            @det.rule("restock", low_stock, context="chronicle")
            def restock(occ): ...

        ``context`` is the parameter context; ``coupling`` immediate, deferred,
        detached or detached_independent; higher ``priority`` runs first (an int or
        the name of a priority class); ``trigger_mode`` now or previous;
        ``flush=False`` lets detection combine occurrences of different
        transactions; ``key`` partitions the event (``event.by(key)``).

        Bitemporal choices (``docs/bitemporal.md``): ``lifespan`` (a timedelta,
        seconds or a time string) bounds how long an occurrence may take part in
        the rule's detections; expired occurrences are purged at clock ticks and,
        with ``archive=True``, handed to the archive listeners. ``order=
        "occurrence"`` detects in occurrence-time order, holding each occurrence
        until the clock passes it by ``lateness`` (seconds; 0 by default; giving
        ``lateness`` alone implies this order); it needs ``flush=False``.

        Raises :class:`~sentinel.errors.UnknownEventError` for an undefined event,
        :class:`~sentinel.errors.RuleDefinitionError` for a name already used, a
        bad mode or priority, or a coupling that cannot be combined with
        ``flush=False``, an order other than ``"arrival"`` or
        ``"occurrence"``, and a lifespan or lateness that is not an amount of time
        (a zero or negative lifespan, a negative lateness). A failing definition
        changes nothing.
        """
        if action is None:
            return lambda fn: self.rule(
                name,
                event,
                condition,
                action=fn,
                context=context,
                coupling=coupling,
                priority=priority,
                trigger_mode=trigger_mode,
                enabled=enabled,
                flush=flush,
                key=key,
                lifespan=lifespan,
                order=order,
                lateness=lateness,
                archive=archive,
            )
        if not isinstance(name, str) or not name:
            raise RuleDefinitionError(f"a rule needs a non-empty name, not {name!r}")
        if not callable(action):
            raise RuleDefinitionError(f"rule {name!r}: action must be callable, not {action!r}")
        if condition is not None and not callable(condition):
            raise RuleDefinitionError(
                f"rule {name!r}: condition must be callable or None, not {condition!r}"
            )
        for role, fn in (("action", action), ("condition", condition)):
            if fn is not None and asynchronous(fn):
                raise RuleDefinitionError(
                    f"rule {name!r}: its {role} {getattr(fn, '__qualname__', fn)!r} is a "
                    "coroutine function: rules run synchronously, inside the signal (its "
                    "coroutine would never be awaited: a condition always true, an action "
                    "never run). In an asyncio application, give a plain function; to do "
                    "asynchronous work, schedule a task from it or use a detached rule"
                )
        ctx = Context.parse(context)
        cpl = Coupling.parse(coupling)
        mode = TriggerMode.parse(trigger_mode)
        prio = self._priority(name, priority)
        if not flush and cpl is Coupling.DEFERRED:
            raise RuleDefinitionError(
                f"rule {name!r}: a deferred rule runs at its transaction's pre-commit, so "
                "it cannot opt out of flushing (flush=False)"
            )
        life, late = _bitemporal_mode(name, event, lifespan, order, lateness, flush)
        unbound = getattr(condition, "__sentinel_unbound__", None)
        if unbound is not None:  # a FIRED condition bound to another detector's rule
            condition = unbound
        bind = getattr(condition, "__sentinel_bind__", None)
        if bind is not None:
            condition = bind(self, name)
        expr = self.expression(event)
        if key is not None:
            expr = expr.by(key)
        with self._lock:
            if name in self._rules:
                raise RuleDefinitionError(f"a rule named {name!r} already exists")
            r = Rule(
                self,
                name,
                expr,
                condition,
                action,
                ctx,
                cpl,
                prio,
                mode,
                flush,
                life,
                late,
                bool(archive),
            )
            # a listener may reject the rule (RuleDefinitionError): nothing applied yet
            if self.dispatch.define_rule:
                self.dispatch.define_rule(r)
            self._rules[name] = r
            try:
                if enabled:
                    self._enable(r)
            except BaseException:
                del self._rules[name]
                raise
        return r

    def replica(self, cls: type[LocalEventDetector] | None = None) -> LocalEventDetector:
        """A fresh detector with this one's event definitions and rules (in the
        same state, enabled or not) and no detection state: what replay runs the
        logged occurrences through. ``cls`` (a subclass of LocalEventDetector)
        is the replica's class instead of this detector's."""
        with self._lock:
            det = (cls or type(self))(
                cascade_limit=self.scheduler.cascade_limit,
                priority_classes=self.priority_classes,
                clock=self._wall,
                replaying=True,  # temporal events come from the log, not from timers
                chronon=self.chronon,
            )
            for name in self._channels:
                det.channel(name)
            det._explicit = {n: det._channels[n] for n in self._explicit}
            if self.dispatch.replica:
                self.dispatch.replica(self, det)
            det._events.update(self._events)
            for answer in self.dispatch.selectors:
                listen(det, "selectors", answer)
            for r in self._rules.values():
                det.rule(
                    r.name,
                    r.event,
                    r.condition,
                    action=r.action,
                    context=r.context,
                    coupling=r.coupling,
                    priority=r.priority,
                    trigger_mode=r.trigger_mode,
                    enabled=r.enabled,
                    flush=r.flush,
                    lifespan=r.lifespan,
                    lateness=r.lateness,
                    archive=r.archive,
                )
            return det

    def _priority(self, name: str, priority: int | str) -> int:
        if isinstance(priority, bool):
            raise RuleDefinitionError(f"rule {name!r}: priority must be an int or a class name")
        if isinstance(priority, int):
            return priority
        if isinstance(priority, str):
            try:
                return self.priority_classes[priority]
            except KeyError:
                known = ", ".join(sorted(self.priority_classes)) or "none defined"
                raise RuleDefinitionError(
                    f"rule {name!r}: unknown priority class {priority!r} ({known})"
                ) from None
        raise RuleDefinitionError(f"rule {name!r}: priority must be an int or a class name")

    @property
    def rules(self) -> Mapping[str, Rule]:
        """The rules defined here, by name (a read-only view)."""
        from types import MappingProxyType

        return MappingProxyType(self._rules)

    def get_rule(self, name: str) -> Rule:
        try:
            return self._rules[name]
        except KeyError:
            raise RuleDefinitionError(f"no rule named {name!r}") from None

    def _enable(self, r: Rule) -> None:
        sub = r._subscription
        with self._lock:
            if sub.active:
                return
            if self._rules.get(r.name) is not r:
                raise RuleDefinitionError(f"rule {r.name!r} was deleted")
            sub.since = self.clock + 1 if r.trigger_mode is TriggerMode.NOW else 0
            if self.activate(sub):
                sub.since = 0  # fresh nodes hold nothing older than the rule

    def _disable(self, r: Rule) -> None:
        self.deactivate(r._subscription)

    def _delete(self, r: Rule) -> None:
        with self._lock:
            self.deactivate(r._subscription)
            if self._rules.get(r.name) is r:
                del self._rules[r.name]

    # -- running rules -------------------------------------------------------------
    def _run(self, rule: Rule, occ: Any) -> None:
        self.scheduler.run(rule, occ)

    def _detach(self, rule: Rule, occ: Any, scope: Scope, *, dependent: bool) -> None:
        if scope.process:
            # No transaction to wait for: the triggering event is already final.
            self._run_detached_now(rule, occ, True)
            return
        scope.info.setdefault("detached", []).append((rule, occ, dependent))

    def _after_end(self, scope: Scope) -> None:
        pending = scope.info.pop("detached", None)
        if not pending:
            return
        committed = scope.status == "committed"
        for rule, occ, dependent in pending:
            if committed or not dependent:
                self._run_detached_now(rule, occ, committed)

    def _run_detached_now(self, rule: Rule, occ: Any, committed: bool) -> None:
        """Hand a due detached rule to the first listener of ``run_detached``
        (the ORM layer's outbox), else to :meth:`_run_detached`."""
        executors = self.dispatch.run_detached
        if executors:
            executors[0](rule, occ, committed)
        else:
            self._run_detached(rule, occ, committed)

    def _run_detached(self, rule: Rule, occ: Any, committed: bool) -> None:
        """Run a detached rule at once in a transaction of its own; a failure is
        logged (the triggering transaction has already ended).

        That transaction's end runs the detached rules it triggered in turn,
        nested in this call: a chain of them (a detached rule on ``txn:commit``
        triggers itself) stops at the detector's ``cascade_limit``, as immediate
        rules do, with an error logged once, instead of running until Python's
        recursion limit."""
        depth = _DETACHED_DEPTH.get()
        if depth >= self.scheduler.cascade_limit:
            log.error(
                "sentinel: %s",
                CascadeLimitError(rule.name, self.scheduler.cascade_limit).args[0]
                + " (detached rules, each in its own transaction, triggered each other: "
                "not run)",
            )
            return
        token = _DETACHED_DEPTH.set(depth + 1)
        try:
            with self.transaction():
                self._run(rule, occ)
        except Exception:
            log.exception("detached rule %r failed", rule.name)
        finally:
            _DETACHED_DEPTH.reset(token)


#: How deep detached rules run at once (no outbox) are nested in this context.
_DETACHED_DEPTH: ContextVar[int] = ContextVar("sentinel_detached_depth", default=0)


def _bitemporal_mode(
    name: str, event: Any, lifespan: Any, order: str, lateness: Any, flush: bool
) -> tuple[float | None, float | None]:
    """A rule's lifespan and lateness in seconds, checked."""
    from sentinel.algebra.bitemporal import duration

    life = None
    where = f"rule {name!r} on {event}"
    if lifespan is not None:
        bad = isinstance(lifespan, bool) or (
            isinstance(lifespan, (int, float)) and not lifespan > 0
        )
        if bad:
            raise BitemporalError(
                f"{where}: a lifespan must be a positive amount of time, not {lifespan!r}",
                event=str(event),
            )
        try:
            life = duration(lifespan, what="lifespan").seconds
        except ExpressionError as err:
            raise BitemporalError(f"{where}: {err}", event=str(event)) from None
    if order not in ("arrival", "occurrence"):
        raise RuleDefinitionError(
            f"rule {name!r}: order is 'arrival' or 'occurrence', not {order!r}"
        )
    late = None
    if order == "occurrence" or lateness is not None:
        late = 0.0
        if lateness is not None:
            if isinstance(lateness, timedelta):
                lateness = lateness.total_seconds()
            elif isinstance(lateness, str):
                try:
                    lateness = duration(lateness, what="lateness").seconds
                except ExpressionError as err:
                    raise BitemporalError(f"{where}: {err}", event=str(event)) from None
            if (
                isinstance(lateness, bool)
                or not isinstance(lateness, (int, float))
                or not 0 <= lateness < float("inf")
            ):
                raise BitemporalError(
                    f"{where}: the allowed lateness is a time of zero or more, not {lateness!r}",
                    event=str(event),
                )
            late = float(lateness)
        if flush:
            raise RuleDefinitionError(
                f"rule {name!r}: occurrence-time order holds occurrences across "
                "transactions until the clock passes them, so it needs flush=False"
            )
    return life, late
