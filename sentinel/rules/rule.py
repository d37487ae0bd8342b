"""ECA rules: an event, a condition, an action, and how and when they run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any

from sentinel.algebra import expressions as ex
from sentinel.detector import Context, Mode, Subscription
from sentinel.detector.contexts import Choice
from sentinel.rules.coupling import Coupling

if TYPE_CHECKING:
    from sentinel.rules.local import LocalEventDetector

__all__ = ["Rule", "TriggerMode"]

Condition = Callable[[Any], Any]
Action = Callable[[Any], Any]


class TriggerMode(Choice, what="trigger mode"):
    """Which occurrences may trigger a rule (Snoop 4.1, ``rule_trigger_mode``).

    NOW
        only detections whose constituents all occurred after the rule was
        (last) enabled. The default.
    PREVIOUS
        also detections that combine occurrences from before the rule was enabled,
        which shared event nodes may still hold for other rules.
    """

    NOW = "now"
    PREVIOUS = "previous"


@dataclass(eq=False, repr=False, slots=True)
class Rule:
    """An ECA rule registered on a detector.

    Create rules with :meth:`LocalEventDetector.rule`. ``event`` is the rule's
    event expression; ``condition(occurrence)`` decides (side-effect free: events
    it signals are not detected); ``action(occurrence)`` reacts. The occurrence is
    the detection (for deferred rules: one composite whose ``parts`` are every
    detection of the event in the transaction).

    ``lifespan`` (seconds or ``None``), ``lateness`` (``None`` for arrival
    order, else the allowed lateness of occurrence-time order) and ``archive``
    are the bitemporal choices (``docs/bitemporal.md``).

    Attributes are read-only; change a rule with :meth:`enable`, :meth:`disable`
    and :meth:`delete`.
    """

    #: The detector (the first argument, kept as ``_detector``).
    detector: InitVar[LocalEventDetector]
    name: str
    event: ex.Expression
    condition: Condition | None
    action: Action
    context: Context
    coupling: Coupling
    priority: int
    trigger_mode: TriggerMode
    flush: bool
    lifespan: float | None = None
    lateness: float | None = None
    archive: bool = False
    _detector: LocalEventDetector = field(init=False)
    #: The coupling mode's strategy (how a detection becomes a run of the rule).
    strategy: Any = field(init=False)
    _subscription: Subscription = field(init=False)

    def __post_init__(self, detector: LocalEventDetector) -> None:
        self._detector = detector
        self.strategy = strategy = self.coupling.strategy
        late = self.lateness
        # In occurrence-time order the rule's name makes its mode its own: one
        # buffer and one watermark per rule (issue 29.1).
        own = None if late is None else self.name
        mode = Mode(self.context, self.flush, self.lifespan, late, self.archive, own)
        self._subscription = Subscription(
            strategy.detected_expression(self.event),
            mode,
            _unbound,
            priority=self.priority,
            owner=self,
        )
        self._subscription.deliver = strategy.bind(detector, self)

    @property
    def enabled(self) -> bool:
        return self._subscription.active

    @property
    def detected_expression(self) -> ex.Expression:
        """What the detector watches: the event, or its deferred rewrite
        ``A*(txn:begin, event, txn:pre_commit)``."""
        return self._subscription.expression

    def enable(self) -> None:
        """Start detecting for this rule (its context counters go up). Under the
        NOW trigger mode, only occurrences from now on can trigger it."""
        self._detector._enable(self)

    def disable(self) -> None:
        """Stop detecting for this rule; nodes nobody else needs stop detecting
        in its context and drop their state."""
        self._detector._disable(self)

    def delete(self) -> None:
        """Disable the rule and remove it from its detector."""
        self._detector._delete(self)

    def __repr__(self) -> str:
        state = "enabled" if self.enabled else "disabled"
        return (
            f"<Rule {self.name!r} on {self.event} {self.context} {self.coupling} "
            f"priority={self.priority} {state}>"
        )


def _unbound(occ: Any, scope: Any) -> None:  # pragma: no cover - replaced at once
    raise AssertionError("rule subscription used before it was bound")
