"""Bitemporal expressions (the BiCEP thesis, 2.2 and 2.5): values only.

The detection of these expressions lives in :mod:`sentinel.bitemporal`; this
module holds what the text syntax and the printer need.

``Timing``
    a *timing primitive* of a primitive event E: the occurrences of E that are
    announcements, changes, cancellations, on time, late, in the future,
    retroactive changes, postponements or revocations (Figure 2.1 and Example
    2.2; ``docs/bitemporal.md`` has the definitions). Written like a call in
    Snoop text, ``ONTIME(ResourceLow)``; ``LATE(E, [05:00:00], [1d])`` bounds
    the delay; nesting asks for several primitives of one occurrence at once:
    ``FUTURE(CHANGE(Delivery))`` is a change into the future. A timing
    primitive is a primitive event (a leaf of the event graph), so it combines
    with every operator and detects in every context.
``Within``
    ``WITHIN(E1, E2, [t])``: each E2 within t of an E1 (A's algorithms, with
    each E1 taking part for t after its occurrence time; see
    :func:`sentinel.within`).
"""

from __future__ import annotations

import re
import typing as t
from itertools import combinations

from sentinel.algebra.expressions import Call, Expression, Interval, Primitive, _check
from sentinel.algebra.structural import arg
from sentinel.algebra.temporal import Duration
from sentinel.errors import ExpressionError

__all__ = [
    "ANNOUNCEMENT",
    "CANCELLATION",
    "CHANGE",
    "FUTURE",
    "KINDS",
    "LATE",
    "ONTIME",
    "POSTPONE",
    "RETROACTIVECHANGE",
    "REVOCATION",
    "Timing",
    "TimingSelector",
    "Within",
    "build_call",
    "duration",
]

#: The timing primitives, in the order the printer nests them (outermost first).
KINDS: t.Final = (
    "ANNOUNCEMENT",
    "CHANGE",
    "CANCELLATION",
    "FUTURE",
    "ONTIME",
    "LATE",
    "RETROACTIVECHANGE",
    "POSTPONE",
    "REVOCATION",
)
#: One bit per timing primitive (what the detector's classification yields).
BIT: t.Final = {k: 1 << i for i, k in enumerate(KINDS)}

#: Every set of timing primitives one occurrence can match at once (the rows of
#: the table in ``docs/bitemporal.md``); a combination that is in none of them can
#: never occur and is refused.
POSSIBLE: t.Final = tuple(
    frozenset(row)
    for row in (
        ("ANNOUNCEMENT", "FUTURE"),
        ("ANNOUNCEMENT", "ONTIME"),
        ("ANNOUNCEMENT", "LATE"),
        ("CHANGE", "FUTURE"),
        ("CHANGE", "ONTIME"),
        ("CHANGE", "LATE"),
        ("CHANGE", "POSTPONE"),
        ("CHANGE", "RETROACTIVECHANGE"),
        ("CANCELLATION",),
        ("CANCELLATION", "REVOCATION"),
        ("ONTIME",),  # a FUTURE occurrence whose time has come
    )
)


class TimingSelector:
    """The selector of a timing primitive's leaf: which primitives it requires
    (a bit mask of :data:`BIT`) and, for ``LATE(E, min, max)``, the delay's
    bounds in microseconds. Every signal on the event's channel may match it
    (``all_signals``): the bitemporal layer's dispatcher decides per occurrence."""

    __slots__ = ("kinds", "late_max", "late_min", "mask")
    all_signals: t.ClassVar[bool] = True
    kinds: frozenset[str]
    mask: int
    late_min: int | None
    late_max: int | None

    def __init__(self, kinds: frozenset[str], late: tuple[int, int] | None) -> None:
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "mask", sum(BIT[k] for k in kinds))
        lo, hi = late if late is not None else (None, None)
        object.__setattr__(self, "late_min", lo)
        object.__setattr__(self, "late_max", hi)

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise AttributeError("TimingSelector is immutable")

    def _key(self) -> tuple[t.Any, ...]:
        return (self.mask, self.late_min, self.late_max)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TimingSelector):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("TimingSelector", *self._key()))

    def __reduce__(self) -> tuple[t.Any, ...]:
        late = None if self.late_min is None else (self.late_min, self.late_max)
        return (TimingSelector, (self.kinds, late))

    def __repr__(self) -> str:
        names = "+".join(k for k in KINDS if k in self.kinds)
        if self.late_min is not None:
            hi = self.late_max if self.late_max is not None else 0
            names += f"[{self.late_min / 1e6:g}s..{hi / 1e6:g}s]"
        return f"<timing {names}>"


class Timing(Primitive):
    """The timing primitives ``kinds`` of the primitive event ``event``: its
    occurrences that match every one of them (see the module docs).

    ``late`` bounds the delay of ``LATE``: ``(min, max)`` durations (a
    timedelta, seconds or a time string each), ``min <= max``. ``event`` may be
    a timing primitive itself: the primitives are combined. Raises
    :class:`~sentinel.errors.ExpressionError` for an unknown primitive, an event
    that is not a plain primitive event, bounds without ``LATE``, and
    combinations no occurrence can match (``FUTURE(LATE(E))``).

    >>> from sentinel.algebra.expressions import Primitive
    >>> str(Timing(Timing(Primitive("Delivery"), ["CHANGE"]), ["FUTURE"]))
    'CHANGE(FUTURE(Delivery))'
    """

    __slots__ = ("event", "kinds", "late")
    keywords = KINDS
    event: Primitive
    kinds: frozenset[str]
    late: tuple[Duration, Duration] | None

    def __init__(
        self,
        event: Expression,
        kinds: t.Iterable[str],
        late: tuple[t.Any, t.Any] | None = None,
    ) -> None:
        kinds = frozenset(kinds)
        _check(event, "a timing primitive")
        if isinstance(event, Timing):
            if late is not None and event.late is not None:
                raise ExpressionError(f"{event} already bounds the delay of LATE")
            late = late if late is not None else event.late
            kinds = kinds | event.kinds
            event = event.event
        if not isinstance(event, Primitive) or event.selector is not None:
            what = (
                "an instance-level event"
                if isinstance(event, Primitive)
                else f"the composite event {event}"
            )
            raise ExpressionError(
                f"timing primitives apply to primitive events (an explicit event, a class-"
                f"level method or database event, an event class), not to {what}"
            )
        unknown = sorted(kinds - set(KINDS))
        if unknown or not kinds:
            raise ExpressionError(
                f"unknown timing primitive {', '.join(unknown) or '(none)'}; expected one of "
                + ", ".join(KINDS)
            )
        bounds: tuple[Duration, Duration] | None = None
        if late is not None:
            if "LATE" not in kinds:
                raise ExpressionError("delay bounds belong to LATE: LATE(E, [min], [max])")
            lo = duration(late[0], what="minimum delay")
            hi = duration(late[1], what="maximum delay")
            if lo.micros > hi.micros:
                raise ExpressionError(f"LATE's minimum delay {lo} exceeds its maximum {hi}")
            bounds = (lo, hi)
        if not any(kinds <= row for row in POSSIBLE):
            pair = next(
                (
                    f"{a} and {b}"
                    for a, b in combinations(sorted(kinds, key=KINDS.index), 2)
                    if not any({a, b} <= row for row in POSSIBLE)
                ),
                " and ".join(sorted(kinds, key=KINDS.index)),
            )
            raise ExpressionError(
                f"no occurrence of {event.label} can be both {pair}; see the table of timing "
                "primitives in docs/bitemporal.md"
            )
        micros = None if bounds is None else (bounds[0].micros, bounds[1].micros)
        super().__init__(event.name, TimingSelector(kinds, micros))
        object.__setattr__(self, "event", event)
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "late", bounds)
        object.__setattr__(self, "label", self.to_text(str))

    def resolve_inner(self, resolve: t.Callable[[Expression], Expression]) -> Timing:
        """This timing primitive of the event ``resolve`` makes of its event (the
        detector resolves names this way)."""
        event = resolve(self.event)
        if event is self.event or (
            isinstance(event, Primitive) and event == self.event and event.label == self.event.label
        ):
            return self
        return Timing(event, self.kinds, self.late)

    @property
    def timing(self) -> TimingSelector:
        return self.selector  # type: ignore[return-value]

    def to_text(self, text: t.Callable[[Expression], str]) -> str:
        return "".join(p if isinstance(p, str) else text(p) for p in self.text_parts())

    def text_parts(self) -> list[Expression | str]:
        """How the printer writes it: the primitives nested in a fixed order
        (outermost first), around the event."""
        kinds = [k for k in KINDS if k in self.kinds]
        opening = "".join(f"{k}(" for k in kinds)
        closing = "".join(
            f", {self.late[0]}, {self.late[1]})" if k == "LATE" and self.late is not None else ")"
            for k in reversed(kinds)
        )
        return [opening, self.event, closing]

    def _reduce_node(self) -> tuple[t.Callable[..., Expression], tuple[t.Any, ...]]:
        return (Timing, (self.event, self.kinds, self.late))

    @classmethod
    def from_call(cls, call: Call) -> Expression:
        return _from_call(call)


def ANNOUNCEMENT(event: Expression) -> Timing:
    """First announcements of ``event`` (for an event without keys: every occurrence)."""
    return Timing(event, ["ANNOUNCEMENT"])


def CHANGE(event: Expression) -> Timing:
    """Revisions of an announced instance of the event class ``event``."""
    return Timing(event, ["CHANGE"])


def CANCELLATION(event: Expression) -> Timing:
    """Revocations of an announced instance of the event class ``event``."""
    return Timing(event, ["CANCELLATION"])


def ONTIME(event: Expression) -> Timing:
    """Occurrences detected in the chronon they occur in, and announced future
    occurrences when their time arrives."""
    return Timing(event, ["ONTIME"])


def FUTURE(event: Expression) -> Timing:
    """Occurrences announced for a later chronon than that of their detection."""
    return Timing(event, ["FUTURE"])


def LATE(event: Expression, min: t.Any = None, max: t.Any = None) -> Timing:
    """Occurrences detected after the chronon they occurred in; with ``min`` and
    ``max``, only those whose delay lies between them (inclusive)."""
    if (min is None) != (max is None):
        raise ExpressionError("LATE takes both delay bounds or neither: LATE(E, min, max)")
    return Timing(event, ["LATE"], None if min is None else (min, max))


def RETROACTIVECHANGE(event: Expression) -> Timing:
    """Revisions of an instance whose occurrence time had passed, to a time that
    has passed too."""
    return Timing(event, ["RETROACTIVECHANGE"])


def POSTPONE(event: Expression) -> Timing:
    """Revisions of an instance whose occurrence time had passed, to a future time."""
    return Timing(event, ["POSTPONE"])


def REVOCATION(event: Expression) -> Timing:
    """Revocations of an instance whose occurrence time had passed."""
    return Timing(event, ["REVOCATION"])


class Within(Expression):
    """``WITHIN(E1, E2, [t])``: occurs at each E2 within ``t`` of an E1, that is
    while the E1 is younger than ``t`` (by occurrence times: ``t(E1) <= t(E2) <
    t(E1) + t``); the window is the E1's lifespan in this node. Detected with A's
    algorithms (an E1 opens an interval, each E2 inside it pairs) with the
    closing E3 replaced by the E1's expiry, so in every context each E1 has its
    own window."""

    __slots__ = ()
    op = "WITHIN"
    keywords = ("WITHIN",)

    def __init__(self, start: Expression, middle: Expression, window: t.Any) -> None:
        self._init(_check(start, "WITHIN"), _check(middle, "WITHIN"), _window(window))

    start: Expression = arg(0)
    middle: Expression = arg(1)
    window: Duration = arg(2)

    def to_text(self, text: t.Callable[[Expression], str]) -> str:
        return "".join(p if isinstance(p, str) else text(p) for p in self.text_parts())

    def text_parts(self) -> list[Expression | str]:
        return ["WITHIN(", self.start, ", ", self.middle, f", {self.window})"]

    @classmethod
    def from_call(cls, call: Call) -> Expression:
        return _from_call(call)


def _from_call(call: Call) -> Expression:
    """A timing primitive or WITHIN from Snoop text: its intervals are plain
    durations (no parameter after them)."""
    call.refuse_bracket()
    plain: list[t.Any] = []
    for a in call.args:
        if isinstance(a, Interval):
            if a.name is not None:
                raise a.error(f"only P* takes a parameter after its interval ({a.name!r})")
            plain.append(a.duration)
        else:
            plain.append(a)
    built = build_call(call.keyword, plain)
    assert built is not None
    return built


def _window(value: t.Any) -> Duration:
    return duration(value, what="window")


_LITERAL = re.compile(r"\s*(\d+)\s*([dhms])\s*\Z", re.IGNORECASE)
_UNIT = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def duration(value: t.Any, *, what: str = "duration") -> Duration:
    """``value`` as a positive :class:`~sentinel.algebra.temporal.Duration`: what
    ``Duration.of`` accepts, plus the thesis's time literals ``5d``, ``5h``,
    ``10m`` and ``30s`` (case-insensitive; ``m`` is minutes, as in the thesis's
    Example 2.5)."""
    if isinstance(value, str):
        m = _LITERAL.match(value)
        if m is not None:
            return Duration.of(int(m.group(1)) * _UNIT[m.group(2).lower()], what=what)
    return Duration.of(value, what=what)


def build_call(op: str, args: list[t.Any]) -> Expression | None:
    """The expression for the call ``op(args)`` in Snoop text if ``op`` is a timing
    primitive or WITHIN (``args``: expressions and durations), else ``None``."""
    if op == "WITHIN":
        ok = (
            len(args) == 3
            and isinstance(args[0], Expression)
            and isinstance(args[1], Expression)
            and isinstance(args[2], Duration)
        )
        if not ok:
            raise ExpressionError("WITHIN is written WITHIN(E1, E2, [t])")
        return Within(args[0], args[1], args[2])
    if op not in BIT:
        return None
    if op == "LATE" and len(args) == 3:
        if not (isinstance(args[0], Expression) and all(isinstance(a, Duration) for a in args[1:])):
            raise ExpressionError("LATE is written LATE(E) or LATE(E, [min], [max])")
        return Timing(args[0], ["LATE"], (args[1], args[2]))
    if len(args) != 1 or not isinstance(args[0], Expression):
        shape = f"{op}(E)" + (" or LATE(E, [min], [max])" if op == "LATE" else "")
        raise ExpressionError(f"{op} is written {shape}")
    return Timing(args[0], [op])
