"""ECA rules: an event, a condition, an action, and how and when they run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any

from sentinel.algebra import expressions as ex
from sentinel.detector import Context, Mode, Subscription
from sentinel.detector.contexts import Choice
from sentinel.occurrence import EVENT, SOURCE, params_of
from sentinel.rules.coupling import Coupling

if TYPE_CHECKING:
    from sentinel.rules.local import LocalEventDetector

__all__ = ["Rule", "TriggerMode", "abridged", "expression_text"]

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

    ``partition_keys`` are the keys of the partitions at the top of ``event``
    (``(A ; B) by order_id``: ``("order_id",)``; outermost first), empty when it
    is not partitioned; :meth:`partition` reads a detection's key values.

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
    #: The keys of the partitions at the top of ``event``, outermost first.
    partition_keys: tuple[ex.KeySpec, ...] = field(init=False)

    def __post_init__(self, detector: LocalEventDetector) -> None:
        self._detector = detector
        self.partition_keys = _partition_keys(self.event)
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

    def partition(self, occurrence: Any) -> tuple[tuple[str, str | None, Any], ...]:
        """What the detection ``occurrence`` of this rule was partitioned by:
        :meth:`partition_of` its constituents (``()`` at once for a rule whose
        event is not partitioned)."""
        if not self.partition_keys:
            return ()
        return self.partition_of(occurrence.constituents)

    def partition_of(self, constituents: Any) -> tuple[tuple[str, str | None, Any], ...]:
        """The partition key of a detection of this rule made of the primitive
        occurrences ``constituents``: one ``(event, param, value)`` per key of
        :attr:`partition_keys`, outermost first (``param`` ``None`` for
        ``by @source``, whose value is the source's reference), read from the
        first constituent that carries them all; ``()`` when the rule is not
        partitioned, when no constituent carries the key (those outside the
        partition, a timer's), or when they carry different values (a deferred
        rule's firing combines the transaction's detections of every key).

        >>> from sentinel import LocalEventDetector, Occurrence
        >>> det = LocalEventDetector()
        >>> _ = det.explicit("A"), det.explicit("B")
        >>> r = det.rule("r", "(A ; B) by order_id", action=print)
        >>> r.partition_of([Occurrence("A", 1, 0.0, params={"order_id": 7})])
        (('A', 'order_id', 7),)
        """
        keys = self.partition_keys
        if not keys:
            return ()
        found: tuple[tuple[str, str | None, Any], ...] = ()
        for c in constituents:
            params = params_of(c)
            parts: list[tuple[str, str | None, Any]] = []
            for k in keys:
                if k is ex.SOURCE:
                    value = c[SOURCE]
                    if value is None:
                        break
                    parts.append((c[EVENT], None, value))
                else:
                    if k not in params:
                        break
                    parts.append((c[EVENT], str(k), params[k]))
            else:
                if not found:
                    found = tuple(parts)
                elif any(p[2] != f[2] for p, f in zip(parts, found, strict=True)):
                    return ()
        return found

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


def _partition_keys(event: ex.Expression) -> tuple[ex.KeySpec, ...]:
    """The keys of the partitions at the top of ``event``, outermost first
    (``((A ; B) by a) by b``: ``("b", "a")``)."""
    keys = []
    while isinstance(event, ex.Keyed):
        keys.append(event.key)
        event = event.expression
    return tuple(keys)


def _unbound(occ: Any, scope: Any) -> None:  # pragma: no cover - replaced at once
    raise AssertionError("rule subscription used before it was bound")


#: Characters of an expression shown before it is abridged (:func:`abridged`).
SHOWN = 160


def abridged(expr: ex.Expression, hint: str = "") -> str:
    """``expr``'s Snoop text, at most about :data:`SHOWN` characters of it:
    printed whole, an expression that uses a sub-expression twice at each of n
    levels prints it 2**n times. An abridged text says so, how many events the
    whole names, and (``hint``) how to print it whole."""
    from sentinel.algebra.syntax import text_prefix

    text, whole = text_prefix(expr, SHOWN)
    if whole:
        return text
    return f"{text} ... (abridged: {_events(expr):,} events in all{hint})"


def expression_text(rule: Rule) -> str:
    """The expression ``rule`` detects, so that a listing of rules stays linear
    in the program's size: short, or with the ``#id`` of its nodes (a long
    expression of an enabled rule: its nodes are in the graph), or
    :func:`abridged` (a long expression of a disabled rule)."""
    sub = rule._subscription
    if sub.active:
        return str(rule._detector.graph.text(sub.expression, sub.mode))
    return abridged(
        rule.detected_expression,
        f"; str(detector.rules[{rule.name!r}].detected_expression) prints it whole",
    )


def _events(expr: ex.Expression) -> int:
    """How many events the text of ``expr`` names (a sub-expression used twice
    counts twice), at a cost linear in the number of distinct sub-expressions."""
    counts: dict[ex.Expression, int] = {}
    todo = [expr]
    while todo:  # a stack, not recursion: expressions of any depth
        e = todo[-1]
        if e in counts:
            todo.pop()
            continue
        waiting = [c for c in e.children if c not in counts]
        if waiting:
            todo.extend(waiting)
            continue
        todo.pop()
        counts[e] = sum(counts[c] for c in e.children) if e.children else 1
    return counts[expr]
