"""When absolute time strings match: wild cards, day/month/year boundaries,
month lengths, leap years, time zones, and the jump search against a plain
enumeration."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import Absolute
from sentinel.algebra.temporal import AbsoluteTime
from sentinel.temporal import matches, next_match

PARIS = ZoneInfo("Europe/Paris")


def ts(*args: int, tz: timezone | ZoneInfo = UTC, fold: int = 0) -> float:
    return datetime(*args, tzinfo=tz, fold=fold).timestamp()  # type: ignore[misc]


def at(x: float | None, tz: timezone | ZoneInfo = UTC) -> str | None:
    return None if x is None else datetime.fromtimestamp(x, tz).isoformat()


def nxt(text: str, after: float, tz: timezone | ZoneInfo = UTC) -> str | None:
    return at(next_match(AbsoluteTime.parse(text), after, tz), tz)


@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        # daily at 17:00, strictly after the given instant
        ("(17:00:00)*/*/*", ts(2024, 5, 1, 9), "2024-05-01T17:00:00+00:00"),
        ("(17:00:00)*/*/*", ts(2024, 5, 1, 17), "2024-05-02T17:00:00+00:00"),
        ("(17:00:00)*/*/*", ts(2024, 5, 1, 16, 59, 59) + 0.5, "2024-05-01T17:00:00+00:00"),
        # across a month, a year, a leap day
        ("(17:00:00)*/*/*", ts(2024, 1, 31, 18), "2024-02-01T17:00:00+00:00"),
        ("(17:00:00)*/*/*", ts(2023, 12, 31, 18), "2024-01-01T17:00:00+00:00"),
        ("(00:00:00)*/*/*", ts(2024, 2, 28, 12), "2024-02-29T00:00:00+00:00"),
        ("(00:00:00)*/*/*", ts(2023, 2, 28, 12), "2023-03-01T00:00:00+00:00"),
        # granularity of the wild cards: every second, minute, hour
        ("(*:*:*)*/*/*", ts(2024, 12, 31, 23, 59, 59), "2025-01-01T00:00:00+00:00"),
        ("(*:*:00)*/*/*", ts(2024, 12, 31, 23, 59, 30), "2025-01-01T00:00:00+00:00"),
        ("(*:00:00)*/*/*", ts(2024, 6, 30, 23, 0, 1), "2024-07-01T00:00:00+00:00"),
        ("(*:30:*)*/*/*", ts(2024, 6, 1, 10, 30, 59), "2024-06-01T11:30:00+00:00"),
        ("(17:*:*)*/*/*", ts(2024, 6, 1, 17, 59, 59), "2024-06-02T17:00:00+00:00"),
        # month lengths: the 31st skips the short months
        ("(12:00:00)*/31/*", ts(2024, 1, 31, 13), "2024-03-31T12:00:00+00:00"),
        ("(12:00:00)*/31/*", ts(2024, 4, 1), "2024-05-31T12:00:00+00:00"),
        ("(12:00:00)*/30/*", ts(2024, 1, 30, 13), "2024-03-30T12:00:00+00:00"),
        # leap years: February 29 every four years, not in 2100
        ("(00:00:00)02/29/*", ts(2024, 3, 1), "2028-02-29T00:00:00+00:00"),
        ("(00:00:00)02/29/*", ts(2096, 3, 1), "2104-02-29T00:00:00+00:00"),
        # fixed years, two digits (the POSIX pivot) or four
        ("(14:00:00)03/15/94", ts(1990, 1, 1), "1994-03-15T14:00:00+00:00"),
        ("(14:00:00)03/15/30", ts(2024, 1, 1), "2030-03-15T14:00:00+00:00"),
        ("(14:00:00)03/15/1994", ts(2024, 1, 1), None),
        ("(*:*:*)*/*/2024", ts(2024, 12, 31, 23, 59, 59), None),
        ("(09:00:00)*/*/2025", ts(2024, 12, 31, 23), "2025-01-01T09:00:00+00:00"),
        # yearly, the first of a month
        ("(00:00:00)01/01/*", ts(2024, 1, 1, 0, 0, 1), "2025-01-01T00:00:00+00:00"),
        ("(08:15:00)*/01/*", ts(2024, 12, 1, 8, 15), "2025-01-01T08:15:00+00:00"),
    ],
)
def test_next_match_utc(text: str, after: float, expected: str | None) -> None:
    assert nxt(text, after) == expected


def test_time_zones_daylight_saving() -> None:
    # 17:00 in Paris is 16:00 UTC in winter, 15:00 UTC in summer
    winter = next_match(AbsoluteTime.parse("(17:00:00)*/*/*"), ts(2024, 1, 10), PARIS)
    summer = next_match(AbsoluteTime.parse("(17:00:00)*/*/*"), ts(2024, 7, 10), PARIS)
    assert at(winter) == "2024-01-10T16:00:00+00:00"
    assert at(summer) == "2024-07-10T15:00:00+00:00"
    # 02:30 does not exist on 2024-03-31 in Paris (02:00 -> 03:00): skipped that day
    gap = next_match(AbsoluteTime.parse("(02:30:00)*/*/*"), ts(2024, 3, 30, 12), PARIS)
    assert at(gap, PARIS) == "2024-04-01T02:30:00+02:00"
    # 02:30 happens twice on 2024-10-27 (03:00 -> 02:00): it matches twice
    t = ts(2024, 10, 26, 12)
    seen = []
    for _ in range(3):
        t = next_match(AbsoluteTime.parse("(02:30:00)*/*/*"), t, PARIS)  # type: ignore[assignment]
        seen.append(at(t, PARIS))
    assert seen == [
        "2024-10-27T02:30:00+02:00",
        "2024-10-27T02:30:00+01:00",
        "2024-10-28T02:30:00+01:00",
    ]
    # every minute goes straight through both transitions
    t = ts(2024, 10, 27, 2, 59, tz=PARIS)
    assert at(next_match(AbsoluteTime.parse("(*:*:00)*/*/*"), t, PARIS), PARIS) == (
        "2024-10-27T02:00:00+01:00"
    )
    t = ts(2024, 3, 31, 1, 59, 30, tz=PARIS)
    assert at(next_match(AbsoluteTime.parse("(*:*:00)*/*/*"), t, PARIS), PARIS) == (
        "2024-03-31T03:00:00+02:00"
    )


def test_matches() -> None:
    spec = AbsoluteTime.parse("(17:*:00)*/*/*")
    assert matches(spec, ts(2024, 5, 1, 17, 42), UTC)
    assert not matches(spec, ts(2024, 5, 1, 17, 42, 1), UTC)
    assert matches(spec, ts(2024, 5, 1, 15, 7), PARIS)  # 17:07 in Paris


def test_a_far_date_is_found_in_a_few_steps() -> None:
    import time

    spec = AbsoluteTime.parse("(23:59:59)12/31/9998")
    t0 = time.perf_counter()
    assert nxt("(23:59:59)12/31/9998", ts(2024, 1, 1)) == "9998-12-31T23:59:59+00:00"
    assert next_match(spec, ts(2024, 1, 1), UTC) is not None
    assert time.perf_counter() - t0 < 0.5  # a jump search, not a scan (generous bound)


# -- against an enumeration of the calendar --------------------------------------------

fields = {
    "hour": st.one_of(st.none(), st.integers(0, 23)),
    "minute": st.one_of(st.none(), st.integers(0, 59)),
    "second": st.one_of(st.none(), st.integers(0, 59)),
    "month": st.one_of(st.none(), st.integers(1, 12)),
    "day": st.one_of(st.none(), st.integers(1, 31), st.sampled_from([28, 29, 30, 31])),
    "year": st.one_of(st.none(), st.integers(2023, 2030)),
}


def _valid(f: dict[str, int | None]) -> bool:
    if f["month"] is None or f["day"] is None:
        return True
    most = 29 if f["month"] == 2 else calendar.monthrange(2023, f["month"])[1]
    if f["day"] > most:
        return False
    return not (f["year"] is not None and f["day"] > calendar.monthrange(f["year"], f["month"])[1])


specs = st.fixed_dictionaries(fields).filter(_valid)


def _enumerate(spec: AbsoluteTime, after: datetime, days: int) -> datetime | None:
    """The first matching second after ``after`` within ``days`` days, by walking
    the calendar day by day and every fitting hour, minute and second."""

    def values(v: int | None, n: int) -> range | list[int]:
        return range(n) if v is None else [v]

    day = after.replace(hour=0, minute=0, second=0, microsecond=0)
    for _ in range(days + 1):
        if all(
            f is None or f == a
            for f, a in ((spec.year, day.year), (spec.month, day.month), (spec.day, day.day))
        ):
            for h in values(spec.hour, 24):
                for m in values(spec.minute, 60):
                    for s in values(spec.second, 60):
                        cand = day.replace(hour=h, minute=m, second=s)
                        if cand > after:
                            return cand
        day += timedelta(days=1)
    return None


@settings(max_examples=200, deadline=None)
@given(
    specs,
    st.datetimes(min_value=datetime(2023, 1, 1), max_value=datetime(2030, 12, 31)),
)
def test_next_match_agrees_with_enumeration(f: dict[str, int | None], after: datetime) -> None:
    spec = AbsoluteTime(**f)
    after = after.replace(tzinfo=UTC)
    horizon = 4 * 366
    expected = _enumerate(spec, after, horizon)
    got = next_match(spec, after.timestamp(), UTC)
    if expected is None:
        assert got is None or got > (after + timedelta(days=horizon)).timestamp()
    else:
        assert got == expected.timestamp(), (str(spec), after)


# -- near daylight-saving transitions, against a model of wall-clock readings -----

#: Zones with the transitions that break naive searches: an hour each way (Paris,
#: New York), half an hour (Lord Howe), a whole skipped day (Apia, 30 Dec 2011),
#: transitions at midnight (Santiago) and a DST suspended for Ramadan (Casablanca).
ZONES = [
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "America/Santiago",
    "Africa/Casablanca",
]


def _transitions(tz: ZoneInfo, year: int) -> list[float]:
    """The instants in ``year`` at which ``tz``'s offset changes (to the second)."""
    out = []
    t = datetime(year, 1, 1, tzinfo=UTC).timestamp()
    end = datetime(year + 1, 1, 1, tzinfo=UTC).timestamp()
    before = datetime.fromtimestamp(t, tz).utcoffset()
    while t < end:
        if datetime.fromtimestamp(t + 3600, tz).utcoffset() != before:
            lo, hi = t, t + 3600
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if datetime.fromtimestamp(mid, tz).utcoffset() == before:
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
            before = datetime.fromtimestamp(hi, tz).utcoffset()
        t += 3600
    return out


TRANSITIONS = [
    (zone, x) for zone in ZONES for year in (2011, 2023) for x in _transitions(ZoneInfo(zone), year)
]


def _wall_model(spec: AbsoluteTime, after: float, tz: ZoneInfo) -> float | None:
    """The first instant after ``after`` whose reading in ``tz`` matches ``spec``,
    from the readings' side: every matching wall-clock second of the days around
    ``after``, each turned into the instants that read it (none in a gap, two in
    a fold: an instant reads ``w`` when converting it back gives ``w``)."""

    def values(v: int | None, n: int) -> range | list[int]:
        return range(n) if v is None else [v]

    start = datetime.fromtimestamp(after, tz).replace(tzinfo=None)
    day = (start - timedelta(days=2)).replace(hour=0, minute=0, second=0, microsecond=0)
    best: float | None = None
    for _ in range(6):
        for h in values(spec.hour, 24):
            for m in values(spec.minute, 60):
                for s in values(spec.second, 60):
                    wall = day.replace(hour=h, minute=m, second=s)
                    for fold in (0, 1):
                        x = wall.replace(tzinfo=tz, fold=fold).timestamp()
                        reads = datetime.fromtimestamp(x, tz).replace(tzinfo=None)
                        if reads == wall and x > after and (best is None or x < best):
                            best = x
        day += timedelta(days=1)
    return best


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(TRANSITIONS),
    st.one_of(st.floats(-86_400, 86_400), st.integers(-7_200, 7_200).map(float)),
    st.one_of(st.none(), st.integers(0, 23)),
    st.sampled_from([None, 0, 30, 45, 59]),
    st.sampled_from([0, 30, 59]),
)
def test_next_match_near_transitions_agrees_with_wall_clock_readings(
    transition: tuple[str, float], offset: float, hour: int | None, minute: int | None, second: int
) -> None:
    zone, x = transition
    tz = ZoneInfo(zone)
    spec = AbsoluteTime(hour=hour, minute=minute, second=second)
    after = x + offset
    assert next_match(spec, after, tz) == _wall_model(spec, after, tz), (zone, str(spec), after)


def test_absolute_events_are_primitive_events_named_by_their_text() -> None:
    e = Absolute("<(17:00:00)*/*/94>")
    assert e.name == e.label == "<(17:00:00)*/*/1994>" and str(e) == e.name
    assert e == Absolute(hour=17, minute=0, second=0, year=1994)
    assert e.time == AbsoluteTime(year=1994, hour=17, minute=0, second=0)
    assert Absolute("(17:00:00)*/*/*") == Absolute("< ( 17 : 00 : 00 ) * / * / * >")
