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
from typing import TYPE_CHECKING, Any

from sentinel.detector import Scope
from sentinel.errors import CascadeLimitError, RuleError, SentinelError

if TYPE_CHECKING:
    from sentinel.rules.local import LocalEventDetector
    from sentinel.rules.rule import Rule

__all__ = ["Scheduler"]

class Scheduler:
    """Orders and runs the rules one detector triggers."""

    def __init__(self, detector: LocalEventDetector, cascade_limit: int) -> None:
        if cascade_limit < 1:
            raise ValueError(f"cascade_limit must be at least 1, not {cascade_limit}")
        self.detector = detector
        self.cascade_limit = cascade_limit
        self._depth = _Depth()

    @property
    def depth(self) -> int:
        """How deep the current thread is in nested rule execution (0 outside)."""
        return self._depth.n

    def run(self, rule: Rule, occ: Any, scope: Scope | None = None) -> None:
        """Evaluate ``rule``'s condition on ``occ`` and, if it holds, run its
        action (the immediate coupling mode, and the last step of the others)."""
        if not rule._subscription.active:
            return  # disabled by an earlier rule of the same instant
        local = self._depth
        depth = local.n
        if depth >= self.cascade_limit:
            raise CascadeLimitError(rule.name, self.cascade_limit)
        cond = rule.condition
        if cond is not None:
            with self.detector.muted():
                try:
                    ok = cond(occ)
                except SentinelError:
                    raise
                except Exception as e:
                    raise RuleError(rule.name, "condition", e) from e
            if not ok:
                return
        local.n = depth + 1
        try:
            rule.action(occ)
        except SentinelError:
            raise
        except Exception as e:
            raise RuleError(rule.name, "action", e) from e
        finally:
            local.n = depth


class _Depth(threading.local):
    n = 0
