"""Temporal event expressions (Snoop 2.1.1 and 2.1.2 item 6): values only.

The detection of these expressions (clocks, timers, per-context strategies) lives
in :mod:`sentinel.temporal`; this module holds what the text syntax and the printer
need: time strings and the four expression types.

``Duration``
    a constant, positive amount of time (a relative offset or a periodic
    interval), written ``[hh:mm:ss]``, ``[hh:mm:ss.ffffff]``, ``[2d 12:00:00]`` or
    ``[2d]``. Empty fields stand for zero (``[:10:]`` is ten minutes: "an empty
    field ... is substituted with the minimum value", 2.1.1). Exact to the
    microsecond.
``AbsoluteTime``
    the paper's ``(hh:mm:ss)mm/dd/yy`` with ``*`` wild cards in any field; years
    have two digits (``94`` is 1994, ``05`` is 2005: the POSIX pivot, 69-99 in
    the 1900s) or four.
``Absolute``
    ``<(17:00:00)*/*/*>``: a primitive event that occurs at every second whose
    fields match all the fixed fields of its time string (so ``<(17:00:00)*/*/*>``
    is daily at 17:00 and ``<(17:*:*)*/*/*>`` every second from 17:00:00 to
    17:59:59).
``Relative``
    ``E + [t]``: t after each occurrence of E.
``P`` / ``Pstar``
    ``P(E1, [t], E3)`` and ``P*(E1, [t] arg, E3)``: every t in the interval that
    E1 opens and E3 closes; P* occurs once, at E3, with every tick.

Malformed time strings raise :class:`~sentinel.errors.TimeStringError`, which
says what is wrong and where (``position``, 0-based, in ``text``).
"""

from __future__ import annotations

import calendar
import re
import typing as t
from datetime import timedelta

from sentinel.algebra.expressions import And, Call, Expression, Interval, Or, Primitive, Seq, _check
from sentinel.algebra.structural import arg
from sentinel.errors import ExpressionError, TimeStringError

__all__ = ["Absolute", "AbsoluteTime", "Duration", "P", "Pstar", "Relative"]

_MICROS = 1_000_000
_DAY = 86_400 * _MICROS


class Duration:
    """A constant, positive amount of time, exact to the microsecond.

    ``Duration.of(value)`` accepts a Duration, a :class:`datetime.timedelta`, a
    number of seconds, or a time string (``"00:10:00"``, ``"[2d 00:00:00]"``).
    Raises :class:`~sentinel.errors.TimeStringError` for a malformed string (with a
    wild card: durations must be constant) and
    :class:`~sentinel.errors.ExpressionError` for a zero or negative amount.

    >>> str(Duration.of("00:90:00"))  # doctest: +SKIP
    TimeStringError: minutes must be 0-59, not 90 at position 5 of '00:90:00' ...
    >>> str(Duration.of(timedelta(days=2, seconds=1.5)))
    '[2d 00:00:01.5]'
    """

    __slots__ = ("micros",)
    micros: int

    def __init__(self, micros: int) -> None:
        if isinstance(micros, bool) or not isinstance(micros, int):
            raise ExpressionError(f"a duration is a whole number of microseconds, not {micros!r}")
        if micros <= 0:
            raise ExpressionError(
                f"a duration must be positive, not {_plain(micros)} (a relative offset or a "
                "periodic interval of zero or less never moves time forward)"
            )
        object.__setattr__(self, "micros", micros)

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise AttributeError("Duration is immutable")

    @classmethod
    def of(cls, value: Duration | timedelta | str | float, *, what: str = "duration") -> Duration:
        """``value`` as a Duration (see the class docs). ``what`` names the value in
        errors (``"relative offset"``, ``"periodic interval"``)."""
        if isinstance(value, Duration):
            return value
        if isinstance(value, timedelta):
            micros = (value.days * 86_400 + value.seconds) * _MICROS + value.microseconds
        elif isinstance(value, str):
            return parse_duration(value, what=what)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if value != value or value in (float("inf"), float("-inf")):
                raise ExpressionError(f"a {what} must be a finite number of seconds, not {value}")
            micros = round(value * _MICROS)
        else:
            raise ExpressionError(
                f"a {what} is a timedelta, a number of seconds or a time string like "
                f"'00:10:00', not {type(value).__name__} ({value!r})"
            )
        if micros <= 0:
            raise ExpressionError(
                f"a {what} must be positive, not {_plain(micros)} (zero or negative amounts "
                "of time never move forward)"
            )
        return cls(micros)

    @property
    def seconds(self) -> float:
        """The duration in seconds."""
        return self.micros / _MICROS

    def timedelta(self) -> timedelta:
        return timedelta(microseconds=self.micros)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Duration):
            return NotImplemented
        return self.micros == other.micros

    def __hash__(self) -> int:
        return hash(("Duration", self.micros))

    def __reduce__(self) -> tuple[t.Any, ...]:
        return (Duration, (self.micros,))

    def __str__(self) -> str:
        return "[" + _plain(self.micros) + "]"

    def __repr__(self) -> str:
        return f"Duration({self})"


def _plain(micros: int) -> str:
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    days, rest = divmod(micros, _DAY)
    secs, frac = divmod(rest, _MICROS)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    clock = f"{h:02d}:{m:02d}:{s:02d}"
    if frac:
        clock += ("." + f"{frac:06d}").rstrip("0")
    if days:
        return f"{sign}{days}d" + ("" if not rest else " " + clock)
    return sign + clock


_WS = re.compile(r"\s*")


def parse_duration(text: str, *, what: str = "duration") -> Duration:
    """Read ``[2d hh:mm:ss.ffffff]`` (brackets optional; days, the fraction and any
    field's digits optional). Raises :class:`~sentinel.errors.TimeStringError` with
    the position of the problem."""
    s = text
    i, end = 0, len(s)
    if s.startswith("["):
        if not s.endswith("]") or len(s) < 2:
            raise TimeStringError(f"a {what} in brackets needs its closing ']'", text, end)
        i, end = 1, len(s) - 1
    i = _WS.match(s, i, end).end()  # type: ignore[union-attr]
    if i >= end:
        raise TimeStringError(f"empty {what}; expected hh:mm:ss (for example 00:10:00)", text, i)
    star = s.find("*", i, end)
    if star >= 0:
        raise TimeStringError(
            f"a wild card in a {what}: {what}s must be constant durations (Snoop 2.1.2: "
            "'t is a constant'), so '*' is not allowed",
            text,
            star,
        )
    days = 0
    m = re.compile(r"(\d+)d").match(s, i, end)
    if m:
        days = int(m.group(1))
        i = _WS.match(s, m.end(), end).end()  # type: ignore[union-attr]
        if i < end and i == m.end():
            raise TimeStringError("expected a space between the days and hh:mm:ss", text, i)
    micros = days * _DAY
    if i < end:
        micros += _clock_part(s, i, end, what)
    elif not m:  # pragma: no cover - excluded by the empty check above
        raise TimeStringError(f"empty {what}", text, i)
    if micros <= 0:
        raise TimeStringError(
            f"a {what} must be positive, not zero (it would never move time forward)", text, 0
        )
    return Duration(micros)


_FIELD = re.compile(r"\s*(\d*)(?:\.(\d*))?\s*")


def _clock_part(s: str, i: int, end: int, what: str) -> int:
    """hh:mm:ss[.f] starting at ``i`` (empty fields are zero) -> microseconds."""
    fields: list[tuple[int, int, str, str | None]] = []
    pos = i
    for n in range(3):
        m = _FIELD.match(s, pos, end)
        assert m is not None  # the pattern matches the empty string
        digits, frac = m.group(1), m.group(2)
        if frac is not None and n < 2:
            raise TimeStringError(
                "only the seconds may have a fraction", s, m.start(2) - 1 if m.start(2) else pos
            )
        fields.append((m.start(1), m.end(), digits, frac))
        pos = m.end()
        if n < 2:
            if pos >= end or s[pos] != ":":
                found = "the end" if pos >= end else repr(s[pos])
                raise TimeStringError(
                    f"expected ':' in hh:mm:ss, found {found} (a {what} is written like "
                    "00:10:00, or 2d 00:00:00 with days)",
                    s,
                    pos,
                )
            pos += 1
    if pos != end:
        raise TimeStringError(f"unexpected {s[pos]!r} after hh:mm:ss", s, pos)
    (_, _, hd, _), (mp, _, md, _), (sp, _, sd, sf) = fields
    h = int(hd) if hd else 0
    mi = int(md) if md else 0
    se = int(sd) if sd else 0
    if len(md) > 2 or mi > 59:
        raise TimeStringError(f"minutes must be 0-59, not {md}", s, mp)
    if len(sd) > 2 or se > 59:
        raise TimeStringError(f"seconds must be 0-59, not {sd}", s, sp)
    micros = ((h * 60 + mi) * 60 + se) * _MICROS
    if sf:
        if len(sf) > 6:
            raise TimeStringError(
                "at most six digits of fraction (microseconds)", s, s.index(".", sp) + 7
            )
        micros += int(sf.ljust(6, "0"))
    return micros


# -- absolute time strings ------------------------------------------------------------

_ORDER = ("hour", "minute", "second", "month", "day", "year")
_RANGES = {
    "hour": (0, 23),
    "minute": (0, 59),
    "second": (0, 59),
    "month": (1, 12),
    "day": (1, 31),
    "year": (1900, 9999),
}
_MAX_DAY = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class AbsoluteTime:
    """The fields of an absolute time string; ``None`` is a wild card.

    Built from text (``AbsoluteTime.parse("(17:00:00)*/*/*")``, angle brackets
    optional) or fields (``AbsoluteTime(hour=17, minute=0, second=0)``: fields left
    out are wild cards). Raises :class:`~sentinel.errors.TimeStringError` for a
    malformed string and :class:`~sentinel.errors.ExpressionError` for a field out
    of range or a date that never occurs (``04/31``, ``02/29/2023``).
    """

    __slots__ = ("day", "hour", "minute", "month", "second", "year")
    hour: int | None
    minute: int | None
    second: int | None
    month: int | None
    day: int | None
    year: int | None

    def __init__(
        self,
        *,
        year: int | None = None,
        month: int | None = None,
        day: int | None = None,
        hour: int | None = None,
        minute: int | None = None,
        second: int | None = None,
    ) -> None:
        given = {
            "hour": hour,
            "minute": minute,
            "second": second,
            "month": month,
            "day": day,
            "year": year,
        }
        for name, value in given.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ExpressionError(f"{name} must be an int or None (a wild card), not {value!r}")
            lo, hi = _RANGES[name]
            if not lo <= value <= hi:
                raise ExpressionError(f"{name} must be {lo}-{hi}, not {value}")
            object.__setattr__(self, name, value)
        for name, value in given.items():
            if value is None:
                object.__setattr__(self, name, None)
        problem = _impossible_date(month, day, year)
        if problem:
            raise ExpressionError(problem)

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise AttributeError("AbsoluteTime is immutable")

    @classmethod
    def parse(cls, text: str) -> AbsoluteTime:
        """Read ``<(hh:mm:ss)mm/dd/yy>`` (angle brackets optional, ``*`` in any field,
        two- or four-digit years)."""
        return parse_absolute(text)

    def fields(self) -> tuple[int | None, ...]:
        """(hour, minute, second, month, day, year)."""
        return tuple(getattr(self, n) for n in _ORDER)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AbsoluteTime):
            return NotImplemented
        return self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(("AbsoluteTime", self.fields()))

    def __str__(self) -> str:
        def f(v: int | None, width: int) -> str:
            return "*" if v is None else f"{v:0{width}d}"

        return (
            f"<({f(self.hour, 2)}:{f(self.minute, 2)}:{f(self.second, 2)})"
            f"{f(self.month, 2)}/{f(self.day, 2)}/{f(self.year, 4)}>"
        )

    def __repr__(self) -> str:
        return f"AbsoluteTime({self})"


def _impossible_date(month: int | None, day: int | None, year: int | None) -> str:
    if day is None or month is None:
        return ""
    most = _MAX_DAY[month - 1]
    if day > most:
        return f"{month:02d}/{day:02d} never occurs: month {month} has at most {most} days"
    if year is not None and day > calendar.monthrange(year, month)[1]:
        return f"{month:02d}/{day:02d}/{year} never occurs: {year} is not a leap year"
    return ""


_ABS_SHAPE = re.compile(
    r"\s*\(\s*(?P<hour>[^:()]*?)\s*:\s*(?P<minute>[^:()]*?)\s*:\s*(?P<second>[^:()]*?)\s*\)"
    r"\s*(?P<month>[^/]*?)\s*/\s*(?P<day>[^/]*?)\s*/\s*(?P<year>[^/]*?)\s*\Z"
)


def parse_absolute(text: str) -> AbsoluteTime:
    """Read an absolute time string; see :class:`AbsoluteTime`."""
    s = text
    start, end = 0, len(s)
    if s.startswith("<"):
        if not s.endswith(">") or len(s) < 2:
            raise TimeStringError("an absolute time needs its closing '>'", text, end)
        start, end = 1, len(s) - 1
    m = _ABS_SHAPE.match(s, start, end)
    if m is None:
        raise TimeStringError(
            "expected an absolute time like <(17:00:00)03/15/94> (fields may be '*')",
            text,
            _first_bad_shape(s, start, end),
        )
    values: dict[str, int | None] = {}
    for name in _ORDER:
        raw, pos = m.group(name), m.start(name)
        if raw == "*":
            values[name] = None
            continue
        if not raw:
            raise TimeStringError(f"missing {name}; write a number or '*'", text, pos)
        if not raw.isdigit() or not raw.isascii():
            bad = next((k for k, ch in enumerate(raw) if not ch.isdigit()), 0)
            if "*" in raw:
                reason = f"a wild card is a whole field ('*'), so {name} cannot be {raw!r}"
            else:
                reason = f"{name} must be a number or '*', not {raw!r}"
            raise TimeStringError(reason, text, pos + bad)
        if name == "year":
            if len(raw) == 2:
                v = int(raw)
                values[name] = v + (1900 if v >= 69 else 2000)
                continue
            if len(raw) != 4:
                raise TimeStringError(
                    f"a year has two digits (94) or four (1994), not {raw!r}", text, pos
                )
        elif len(raw) > 2:
            raise TimeStringError(f"{name} has at most two digits, not {raw!r}", text, pos)
        v = int(raw)
        lo, hi = _RANGES[name]
        if not lo <= v <= hi:
            raise TimeStringError(f"{name} must be {lo}-{hi}, not {v}", text, pos)
        values[name] = v
    problem = _impossible_date(values["month"], values["day"], values["year"])
    if problem:
        raise TimeStringError(problem, text, m.start("month"))
    return AbsoluteTime(**values)


def _first_bad_shape(s: str, start: int, end: int) -> int:
    """Where the text stops looking like (hh:mm:ss)mm/dd/yy, for the caret."""
    i = _WS.match(s, start, end).end()  # type: ignore[union-attr]
    if i >= end or s[i] != "(":
        return i
    close = s.find(")", i, end)
    if close < 0:
        return end
    if s.count(":", i, close) != 2:
        return close
    if s.count("/", close, end) != 2:
        return end if s.count("/", close, end) < 2 else s.rfind("/", close, end)
    return close + 1


# -- expressions ----------------------------------------------------------------------


class Absolute(Primitive):
    """``<(hh:mm:ss)mm/dd/yy>``: an absolute temporal event (a primitive event).

    It occurs at every second, in the detector's clock's time zone, whose fields
    match all the fixed fields of the time string; the clock signals it in the
    process scope. ``Absolute("<(17:00:00)*/*/*>")``, ``Absolute("(17:00:00)*/*/*")``
    or ``Absolute(hour=17, minute=0, second=0)`` (fields left out are wild cards).
    Its name (and channel) is the canonical text, with four-digit years.
    """

    __slots__ = ("time",)
    op = "absolute"
    time: AbsoluteTime

    def __init__(
        self,
        text: str | AbsoluteTime | None = None,
        *,
        year: int | None = None,
        month: int | None = None,
        day: int | None = None,
        hour: int | None = None,
        minute: int | None = None,
        second: int | None = None,
    ) -> None:
        fields = (year, month, day, hour, minute, second)
        if isinstance(text, AbsoluteTime):
            spec = text
        elif text is not None:
            if any(f is not None for f in fields):
                raise ExpressionError("give an absolute time as text or as fields, not both")
            if not isinstance(text, str):
                raise ExpressionError(f"an absolute time is text or fields, not {text!r}")
            spec = parse_absolute(text)
        else:
            spec = AbsoluteTime(
                year=year, month=month, day=day, hour=hour, minute=minute, second=second
            )
        super().__init__(str(spec))
        object.__setattr__(self, "time", spec)

    def _reduce_node(self) -> tuple[t.Callable[..., Expression], tuple[t.Any, ...]]:
        return (Absolute, (self.name,))

    def text_parts(self) -> list[Expression | str]:
        return [self.name]


class Relative(Expression):
    """``E + [t]``: t after each occurrence of E (a relative temporal event).

    Each occurrence of E that reaches the node starts a timer due at its time plus
    ``offset``; when it is due the node occurs with the reference occurrence(s) and
    a tick (see :mod:`sentinel.temporal` for what each parameter context keeps).
    ``offset`` is anything :meth:`Duration.of` accepts. Python also spells it
    ``E + timedelta(minutes=10)``.
    """

    __slots__ = ()
    op = "+"

    def __init__(self, event: Expression, offset: Duration | timedelta | str | float) -> None:
        self._init(_check(event, "+ [t]"), Duration.of(offset, what="relative offset"))

    event: Expression = arg(0)
    offset: Duration = arg(1)

    def text_parts(self) -> list[Expression | str]:
        if isinstance(self.event, (Or, Seq, And)):
            # "+ [t]" binds tighter than every infix operator
            return ["(", self.event, f") + {self.offset}"]
        return [self.event, f" + {self.offset}"]


class P(Expression):
    """``P(E1, [t], E3)``: every t in the interval E1 opens and E3 closes.

    The interval opened by an occurrence e1 ticks at e1 + t, e1 + 2t, ... until
    an E3 closes it; each tick is a detection ``{e1, tick}``. ``interval`` is
    anything :meth:`Duration.of` accepts (constant and positive).
    """

    __slots__ = ()
    op = "P"
    keywords = ("P",)

    def __init__(
        self, start: Expression, interval: Duration | timedelta | str | float, end: Expression
    ) -> None:
        self._init(
            _check(start, self.op),
            Duration.of(interval, what="periodic interval"),
            _check(end, self.op),
        )

    start: Expression = arg(0)
    interval: Duration = arg(1)
    end: Expression = arg(2)

    def text_parts(self) -> list[Expression | str]:
        return ["P(", self.start, f", {self.interval}, ", self.end, ")"]

    @classmethod
    def from_call(cls, call: Call) -> Expression:
        start, iv, end = _periodic_args(call, "P(E1, [t], E3)")
        if iv.name is not None:
            raise iv.error(
                f"only P* takes a parameter after its interval ({iv.name!r}); "
                "P's ticks carry their times"
            )
        return cls(start, iv.duration, end)


class Pstar(Expression):
    """``P*(E1, [t] arg, E3)``: once, at E3, with every tick of the interval.

    ``arg`` names a sampler registered on the detector (``detector.sampler(arg,
    fn)``): each tick stores ``fn()`` as its parameter ``arg`` (so
    ``detection.values(arg)`` lists the samples). Without ``arg`` the ticks carry
    only their times.
    """

    __slots__ = ()
    op = "P*"
    keywords = ("P*",)

    def __init__(
        self,
        start: Expression,
        interval: Duration | timedelta | str | float,
        end: Expression,
        arg: str | None = None,
    ) -> None:
        if arg is not None and not (isinstance(arg, str) and _SAMPLER.match(arg)):
            raise ExpressionError(
                f"the parameter of P* names a sampler (an identifier), not {arg!r}"
            )
        self._init(
            _check(start, self.op),
            Duration.of(interval, what="periodic interval"),
            _check(end, self.op),
            arg,
        )

    start: Expression = arg(0)
    interval: Duration = arg(1)
    end: Expression = arg(2)
    arg: str | None = arg(3)

    def text_parts(self) -> list[Expression | str]:
        arg = f" {self.arg}" if self.arg else ""
        return ["P*(", self.start, f", {self.interval}{arg}, ", self.end, ")"]

    @classmethod
    def from_call(cls, call: Call) -> Expression:
        start, iv, end = _periodic_args(call, "P*(E1, [t] arg, E3) or P*(E1, [t], E3)")
        return cls(start, iv.duration, end, iv.name)


def _periodic_args(call: Call, shape: str) -> tuple[Expression, Interval, Expression]:
    """P's and P*'s arguments: an event, an interval, an event."""
    call.refuse_bracket()
    args = call.args
    ok = (
        len(args) == 3
        and isinstance(args[0], Expression)
        and isinstance(args[1], Interval)
        and isinstance(args[2], Expression)
    )
    if not ok:
        raise ExpressionError(f"{call.keyword} is written {shape}, got {call.described()}")
    return args[0], args[1], args[2]


_SAMPLER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)*\Z")
