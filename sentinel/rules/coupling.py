"""Coupling modes: when a triggered rule runs relative to its transaction (HiPAC,
Snoop 3.2).

Each mode is a small strategy chosen once, when the rule is defined:

IMMEDIATE
    at detection, inside the triggering transaction, before the signalling call
    returns. An exception aborts the transaction.
DEFERRED
    once, just before commit, with every detection of the event in the
    transaction (the net effect). Implemented as Snoop prescribes, by detecting
    ``A*(txn:begin, E, txn:pre_commit)`` in the rule's context; the rule does not
    run when E never occurred. An exception aborts the commit.
DETACHED
    after the triggering transaction committed, in a transaction of its own
    (causally dependent: never after an abort).
DETACHED_INDEPENDENT
    after the triggering transaction ended, whether it committed or not.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from sentinel.algebra import expressions as ex
from sentinel.detector import TXN_BEGIN, TXN_PRE_COMMIT, Scope
from sentinel.detector.contexts import Choice
from sentinel.occurrence import CompositeOccurrence

if TYPE_CHECKING:
    from sentinel.rules.local import LocalEventDetector
    from sentinel.rules.rule import Rule

__all__ = ["Coupling", "CouplingStrategy"]


class Coupling(Choice, what="coupling mode"):
    """A coupling mode. ``Coupling.parse("deferred")`` accepts names too."""

    IMMEDIATE = "immediate"
    DEFERRED = "deferred"
    DETACHED = "detached"
    DETACHED_INDEPENDENT = "detached_independent"

    @property
    def strategy(self) -> CouplingStrategy:
        return _STRATEGIES[self]


class CouplingStrategy:
    """How one coupling mode detects and runs a rule."""

    mode: Coupling

    def detected_expression(self, event: ex.Expression) -> ex.Expression:
        """The expression the detector watches for a rule on ``event``."""
        return event

    def bind(self, det: LocalEventDetector, rule: Rule) -> Callable[[Any, Scope], None]:
        """What the detector calls with each detection for ``rule`` (after ordering
        by priority)."""
        return partial(self.triggered, det, rule)

    def triggered(self, det: LocalEventDetector, rule: Rule, occ: Any, scope: Scope) -> None:
        raise NotImplementedError


class _Immediate(CouplingStrategy):
    mode = Coupling.IMMEDIATE

    def bind(self, det: LocalEventDetector, rule: Rule) -> Callable[[Any, Scope], None]:
        return det.scheduler.runner(rule)  # no step in between: the hot path

    def triggered(self, det: LocalEventDetector, rule: Rule, occ: Any, scope: Scope) -> None:
        det.scheduler.run(rule, occ)


class _Deferred(CouplingStrategy):
    mode = Coupling.DEFERRED

    def detected_expression(self, event: ex.Expression) -> ex.Expression:
        return ex.Astar(TXN_BEGIN, event, TXN_PRE_COMMIT)

    def triggered(self, det: LocalEventDetector, rule: Rule, occ: Any, scope: Scope) -> None:
        # occ is A*(begin, E, pre_commit): its middle parts are E's detections.
        detections = occ[2][1:-1]
        if not detections:
            return
        net = tuple.__new__(CompositeOccurrence, (rule.event, occ[1], detections))
        det.scheduler.run(rule, net)


class _Detached(CouplingStrategy):
    mode = Coupling.DETACHED
    dependent = True

    def triggered(self, det: LocalEventDetector, rule: Rule, occ: Any, scope: Scope) -> None:
        det._detach(rule, occ, scope, dependent=self.dependent)


class _DetachedIndependent(_Detached):
    mode = Coupling.DETACHED_INDEPENDENT
    dependent = False


_STRATEGIES: dict[Coupling, CouplingStrategy] = {
    s.mode: s for s in (_Immediate(), _Deferred(), _Detached(), _DetachedIndependent())
}
