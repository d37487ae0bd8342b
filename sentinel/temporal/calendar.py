"""When an absolute time string next matches: wild cards, month lengths, leap
years and time zones (daylight saving time included).

:func:`next_match` jumps field by field (a cron-style search), so finding the
next ``<(17:00:00)02/29/*>`` from a date years away takes a handful of steps, never
a scan over seconds.

Readings: an absolute event occurs at every second whose wall-clock reading in
the clock's time zone matches all fixed fields. A wall-clock time that a
daylight-saving gap skips does not occur that day; one that a fall-back repeats
occurs twice (it matches twice).
"""

from __future__ import annotations

import calendar as _calendar
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone, tzinfo

from sentinel.algebra.temporal import AbsoluteTime

__all__ = ["matches", "next_match"]

_SECOND = timedelta(seconds=1)
_WINDOW = timedelta(hours=12)


def next_match(time: AbsoluteTime, after: float, tz: tzinfo | None) -> float | None:
    """The first instant strictly after ``after`` (POSIX seconds) whose wall-clock
    reading in ``tz`` (``None``: the system's local time zone) matches ``time``;
    ``None`` when there is none (a fixed date in the past)."""
    if isinstance(tz, timezone):  # fixed offset (UTC): wall clock and instants agree
        start = _wall(after, tz).replace(microsecond=0) + _SECOND
        first = _first(time, start)
        return None if first is None else first.replace(tzinfo=tz).timestamp()
    offsets = {_offset(after + d, tz) for d in (-43_200.0, 0.0, 43_200.0)}
    if len(offsets) == 1:
        # No transition near ``after``: the first matching wall time that exists is
        # the answer (a later fold repeats it later; a gap skips it).
        start = _wall(after, tz).replace(microsecond=0) + _SECOND
        for wall in _walk(time, start):
            instants = [x for x in _instants(wall, tz) if x > after]
            if instants:
                return min(instants)
        return None
    # A transition within half a day: wall times repeat or are skipped, so look
    # from shortly before ``after``'s wall time and keep the earliest instant.
    shift = max(offsets) - min(offsets)
    start = _wall(after, tz).replace(microsecond=0) - shift
    best: float | None = None
    best_wall: datetime | None = None
    for wall in _walk(time, start):
        if best_wall is not None and wall > best_wall + shift:
            break
        for x in _instants(wall, tz):
            if x > after and (best is None or x < best):
                best, best_wall = x, wall
    return best


def matches(time: AbsoluteTime, when: float, tz: tzinfo | None) -> bool:
    """Whether the wall-clock second of ``when`` in ``tz`` matches ``time``."""
    w = _wall(when, tz)
    actual = (w.hour, w.minute, w.second, w.month, w.day, w.year)
    return all(f is None or f == a for f, a in zip(time.fields(), actual, strict=True))


def _wall(x: float, tz: tzinfo | None) -> datetime:
    """The naive wall-clock time of instant ``x`` in ``tz``."""
    return datetime.fromtimestamp(x, tz).replace(tzinfo=None)


def _offset(x: float, tz: tzinfo | None) -> timedelta:
    local = datetime.fromtimestamp(x, tz)
    off = (local if tz is not None else local.astimezone()).utcoffset()
    return off if off is not None else timedelta(0)


def _instants(wall: datetime, tz: tzinfo | None) -> list[float]:
    """The instants whose wall-clock reading is ``wall``: none in a gap, two in a
    fold, else one."""
    out: list[float] = []
    for fold in (0, 1):
        x = wall.replace(tzinfo=tz, fold=fold).timestamp()
        if _wall(x, tz) == wall and x not in out:
            out.append(x)
    return out


def _walk(time: AbsoluteTime, start: datetime) -> Iterator[datetime]:
    """Matching wall-clock times from ``start`` on, in order."""
    wall = _first(time, start)
    while wall is not None:
        yield wall
        wall = _first(time, wall + _SECOND) if wall.year < 9999 or wall.month < 12 else None


def _first(time: AbsoluteTime, start: datetime) -> datetime | None:
    """The first wall-clock second at or after ``start`` matching every fixed field.

    Each step either returns or moves strictly forward to the start of the next
    possible unit, so the search is bounded (at most a few steps per year
    skipped, and a fixed February 29 skips at most eight years).
    """
    y, mo, d = start.year, start.month, start.day
    h, mi, s = start.hour, start.minute, start.second
    fy, fmo, fd = time.year, time.month, time.day
    fh, fmi, fs = time.hour, time.minute, time.second
    for _ in range(100_000):  # a safety net: real searches take a few dozen steps
        if y > 9999:
            return None
        if fy is not None:
            if y > fy:
                return None
            if y < fy:
                y, mo, d, h, mi, s = fy, 1, 1, 0, 0, 0
        if fmo is not None:
            if mo > fmo:
                y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
                continue
            if mo < fmo:
                mo, d, h, mi, s = fmo, 1, 0, 0, 0
        days = _calendar.monthrange(y, mo)[1]
        if fd is not None:
            if d > fd or fd > days:
                y, mo = (y + 1, 1) if mo == 12 else (y, mo + 1)
                d, h, mi, s = 1, 0, 0, 0
                continue
            if d < fd:
                d, h, mi, s = fd, 0, 0, 0
        if fh is not None:
            if h > fh:
                y, mo, d = _next_day(y, mo, d, days)
                h, mi, s = 0, 0, 0
                continue
            if h < fh:
                h, mi, s = fh, 0, 0
        if fmi is not None:
            if mi > fmi:
                if h == 23:
                    y, mo, d = _next_day(y, mo, d, days)
                    h = 0
                else:
                    h += 1
                mi, s = 0, 0
                continue
            if mi < fmi:
                mi, s = fmi, 0
        if fs is not None:
            if s > fs:
                s = 0
                if mi == 59:
                    mi = 0
                    if h == 23:
                        y, mo, d = _next_day(y, mo, d, days)
                        h = 0
                    else:
                        h += 1
                else:
                    mi += 1
                continue
            if s < fs:
                s = fs
        return datetime(y, mo, d, h, mi, s)
    raise AssertionError(f"no progress finding the next {time}")  # pragma: no cover


def _next_day(y: int, mo: int, d: int, days: int) -> tuple[int, int, int]:
    if d < days:
        return y, mo, d + 1
    if mo < 12:
        return y, mo + 1, 1
    return y + 1, 1, 1
