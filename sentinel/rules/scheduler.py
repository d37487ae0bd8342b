"""Rule scheduling: which triggered rule runs when, and what a failure means.

At each instant the detector hands over the detections it made. Rules with higher
priority run first; rules of equal priority run in the order they were triggered.
An action that signals events triggers nested rules, which run at once, before the
action returns (depth-first, as Sentinel's priority inheritance achieves). A
cascade deeper than the detector's ``cascade_limit`` raises
:class:`~sentinel.errors.CascadeLimitError`.

A condition runs with signals muted in its thread: events it signals are not
detected (conditions are side-effect free). An exception from a condition or action
is wrapped in :class:`~sentinel.errors.RuleError` naming the rule, with the original
as ``__cause__``; sentinel's own errors pass through unwrapped. Rules still pending
at that instant do not run; the exception reaches the code that signalled the event
(and, inside a transaction, aborts it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sentinel.detector import Scope, Subscription, t_init
from sentinel.detector.transactions import flow
from sentinel.errors import (
    CascadeLimitError,
    RuleDefinitionError,
    RuleError,
    ScopeError,
    SentinelError,
)

if TYPE_CHECKING:
    from sentinel.rules.local import LocalEventDetector
    from sentinel.rules.rule import Rule

__all__ = ["RuleObserver", "Scheduler"]

#: ``observer(rule, occurrence, status, error)``: a listener of the detector's
#: ``rule_run`` event (:mod:`sentinel.detector.events`).
RuleObserver = Callable[["Rule", Any, str, "BaseException | None"], None]


class Scheduler:
    """Orders and runs the rules one detector triggers."""

    def __init__(self, detector: LocalEventDetector, cascade_limit: int) -> None:
        if type(cascade_limit) is not int or cascade_limit < 1:
            raise RuleDefinitionError(
                f"cascade_limit is a whole number of levels, at least 1, not {cascade_limit!r}"
            )
        self.detector = detector
        self.cascade_limit = cascade_limit
        #: The process scope's cascade depth, per thread (its ``depth``, 0 until
        #: set).
        self._depth: Any = _Depth()
        self._muted = detector._muted
        self._process_scope = detector.process_scope
        self._scope_var = detector._scope_var
        self._graph = detector.graph
        #: The detector's events: every rule run fires ``rule_run(rule,
        #: occurrence, status, error)`` after it, with status ``"fired"`` (the
        #: action ran), ``"condition_false"`` or ``"failed"`` (``error`` is the
        #: exception about to reach the signaller). Nobody listening costs one
        #: truth test per run. The ORM layer records rule firings with it.
        self._dispatch = detector.dispatch

    @property
    def depth(self) -> int:
        """How deep rule execution is nested right now in the current thread's
        scope (0 outside any rule)."""
        scope = self.detector.current_scope()
        depth: int = getattr(self._depth if scope is self._process_scope else scope, "depth", 0)
        return depth

    def deliver(self, items: list[tuple[Subscription, Any]], scope: Scope) -> None:
        """Run an instant's triggered rules, higher priority first (ties in order of
        triggering), one level deeper in the cascade."""
        # The cascade depth lives on the scope: a transaction's scope is used by one
        # thread at a time, and each thread signals outside transactions through
        # its own view of the process scope. Only the shared process scope itself
        # (passed explicitly, e.g. by the timer thread) needs a thread-local.
        depth_of = self._depth if scope is self._process_scope else scope
        depth: int = depth_of.depth
        if depth >= self.cascade_limit:
            raise CascadeLimitError(_first_rule(items), self.cascade_limit)
        depth_of.depth = depth + 1
        # Rules run in the scope that triggered them: what their actions signal
        # belongs to the same transaction (the ORM resolves scopes per object, so
        # the thread's current scope may be another one).
        var = self._scope_var
        current = var.get()
        # A thread's view of the process scope (``process`` set, not the
        # process scope itself) is what a signal finds with nothing set.
        token = (
            var.set(scope)
            if current is not scope
            and (current is not None or not scope.process or scope is self._process_scope)
            else None
        )
        status = scope.status
        try:
            if len(items) > 1 and self._graph.mixed_priorities:
                items.sort(key=_by_priority)
            for sub, occ in items:
                since = sub.since
                if since and t_init(occ) < since:
                    continue
                sub.deliver(occ, scope)
                if scope.status is not status:
                    _ended_by_subscriber(sub, scope)
        finally:
            depth_of.depth = depth
            if token is not None:
                var.reset(token)

    def deliver_direct(self, subs: Sequence[Subscription], occ: Any, scope: Scope) -> None:
        """:meth:`deliver` for one primitive occurrence and the subscriptions
        on its event that the detector reached without its graph
        (``Channel.direct``, already in priority order): the same cascade
        depth, scope and order, without a list of detections to build."""
        depth_of = self._depth if scope is self._process_scope else scope
        depth: int = depth_of.depth
        if depth >= self.cascade_limit:
            raise CascadeLimitError(_rule_name(subs[0]), self.cascade_limit)
        depth_of.depth = depth + 1
        var = self._scope_var
        current = var.get()
        token = (  # as in deliver (inline: one call less per delivery)
            var.set(scope)
            if current is not scope
            and (current is not None or not scope.process or scope is self._process_scope)
            else None
        )
        status = scope.status
        try:
            for sub in subs:
                since = sub.since
                if since and occ[1] < since:
                    continue
                sub.deliver(occ, scope)
                if scope.status is not status:
                    _ended_by_subscriber(sub, scope)
        finally:
            depth_of.depth = depth
            if token is not None:
                var.reset(token)

    def runner(self, rule: Rule) -> Callable[[Any, Scope], None]:
        """What runs ``rule`` for a detection: ``runner(rule)(occurrence, scope)``.

        Built once per rule, so the per-detection path holds only what this rule
        needs (no condition: just the action, with no muting). A subclass that
        overrides :meth:`run` gets its ``run`` called instead.
        """
        if type(self).run is not Scheduler.run:
            return partial(self.run, rule)
        return self._runner(rule)

    def _runner(self, rule: Rule) -> Callable[[Any, Scope | None], None]:
        """:meth:`runner`'s function, whatever :meth:`run` a subclass has: the
        one implementation of a rule's run (condition muted, errors wrapped,
        the ``rule_run`` listeners told)."""
        sub = rule._subscription
        action = rule.action
        dispatch = self._dispatch
        cond = rule.condition
        muted = self._muted

        def run_rule(occ: Any, scope: Scope | None = None) -> None:
            if not sub.active:
                return  # disabled by an earlier rule of the same instant
            observer = dispatch.rule_run
            if cond is not None:
                me = flow()  # this thread, or greenlet (an asyncio task's)
                mine = me not in muted
                if mine:
                    muted.add(me)
                try:
                    # its truth too: an object whose bool() raises (an array) fails here
                    refused = not cond(occ)
                except Exception as e:
                    err = _failure(observer, rule, occ, "condition", e)
                    if err is e:
                        raise
                    raise err from e
                finally:
                    if mine:
                        muted.discard(me)
                if refused:
                    if observer:
                        for fn in observer:
                            fn(rule, occ, "condition_false", None)
                    return
            try:
                action(occ)
            except Exception as e:
                err = _failure(observer, rule, occ, "action", e)
                if err is e:
                    raise
                raise err from e
            if observer:
                for fn in observer:
                    fn(rule, occ, "fired", None)

        return run_rule

    def run(self, rule: Rule, occ: Any, scope: Scope | None = None) -> None:
        """Evaluate ``rule``'s condition on ``occ`` and, if it holds, run its
        action (the immediate coupling mode, and the last step of the others).
        Immediate rules are run by their :meth:`runner`, made once; this
        makes one for the call (deferred and detached rules run once per
        transaction or detection)."""
        self._runner(rule)(occ, scope)


def _failure(observer: Any, rule: Rule, occ: Any, phase: str, error: Exception) -> Exception:
    """The exception a rule's failure in ``phase`` raises (``error`` itself if
    it is sentinel's, else a :class:`~sentinel.errors.RuleError` naming the
    rule), reported to the ``rule_run`` listeners ``observer`` first."""
    err = error if isinstance(error, SentinelError) else RuleError(rule.name, phase, error)
    if observer:
        observer(rule, occ, "failed", err)
    return err


class _Depth(threading.local):
    """The process scope's cascade depth in each thread (0 until set)."""

    depth = 0


def _ended_by_subscriber(sub: Subscription, scope: Scope) -> None:
    """A subscriber ended the transaction (scope) it was called in: the code
    that signalled the event would go on outside it (with the ORM, in the
    session's next transaction). Raises :class:`~sentinel.errors.ScopeError`
    naming it. A rule's run reports this itself (the ORM's rule observer fails
    it with a :class:`~sentinel.errors.RuleError`), so rules pass here."""
    from sentinel.rules.rule import Rule

    if isinstance(sub.owner, Rule) or scope.status not in ("committed", "aborted"):
        return  # (detached, or abandoned: not the subscriber's doing)
    name = _subscriber_name(sub)
    raise ScopeError(
        f"subscriber {name} of {sub.expression} ended the transaction it was called in "
        f"(scope {scope.id!r} is {scope.status} now: session.rollback(), commit() or "
        "close() in it); the call that signalled the event would go on outside that "
        "transaction (with the ORM, in the session's next one). To abort the "
        "transaction, raise an exception in the subscriber",
        subscriber=name,
    )


def _subscriber_name(sub: Subscription) -> str:
    """The owner of ``sub``, else the function ``detector.subscribe`` was given."""
    if sub.owner is not None:
        return repr(getattr(sub.owner, "name", sub.owner))
    fn: Any = sub.deliver
    for cell in getattr(fn, "__closure__", None) or ():
        inner = cell.cell_contents
        if callable(inner):
            fn = inner
            break
    return repr(getattr(fn, "__qualname__", fn))


def _by_priority(item: tuple[Subscription, Any]) -> int:
    return -item[0].priority


def _first_rule(items: list[tuple[Subscription, Any]]) -> str:
    return _rule_name(max(items, key=lambda it: it[0].priority)[0])


def _rule_name(sub: Subscription) -> str:
    name: str = getattr(sub.owner, "name", repr(sub.expression))
    return name
