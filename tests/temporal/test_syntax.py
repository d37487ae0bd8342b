"""Temporal events in Snoop text and Python: parsing, printing, round trips, and
bad input reported with its position."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sentinel import (
    SOURCE,
    A,
    Absolute,
    Astar,
    Duration,
    ExpressionError,
    Not,
    P,
    Primitive,
    Pstar,
    Relative,
    SnoopSyntaxError,
    parse,
)
from sentinel import Any as AnyOf
from sentinel.errors import TimeStringError

E1, E2, E3 = Primitive("E1"), Primitive("E2"), Primitive("E3")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<(17:00:00)*/*/*>", Absolute(hour=17, minute=0, second=0)),
        ("<(14:00:00)03/15/94>", Absolute(year=1994, month=3, day=15, hour=14, minute=0, second=0)),
        ("<(14:00:00)03/15/1994>", Absolute("(14:00:00)03/15/94")),
        ("<(*:*:*)*/*/*>", Absolute()),
        ("< (9:5:0) 1/2/05 >", Absolute(year=2005, month=1, day=2, hour=9, minute=5, second=0)),
        ("E1 + [00:10:00]", Relative(E1, timedelta(minutes=10))),
        ("E1 + [::30]", Relative(E1, 30)),
        ("E1 + [2d]", Relative(E1, timedelta(days=2))),
        ("E1 + [2d 12:00:00]", Relative(E1, timedelta(days=2, hours=12))),
        ("E1 + [48:00:00]", Relative(E1, timedelta(days=2))),
        ("E1 + [00:00:00.25]", Relative(E1, 0.25)),
        ("E1 ; E2 + [00:00:01]", E1 >> Relative(E2, 1)),
        ("(E1 ; E2) + [00:00:01]", Relative(E1 >> E2, 1)),
        ("E1 + [00:00:01] by k", Relative(E1, 1).by("k")),
        ("E1 by k + [00:00:01]", Relative(E1.by("k"), 1)),
        ("E1 + [00:00:01] + [00:00:02]", Relative(Relative(E1, 1), 2)),
        ("P(E1, [00:00:10], E3)", P(E1, 10, E3)),
        ("P*(E1, [00:00:10] price, E3)", Pstar(E1, 10, E3, "price")),
        ("P*(E1, [00:00:10], E3)", Pstar(E1, 10, E3)),
        ("NOT(E2)[E1, E1 + [00:00:10]]", Not(E2, E1, Relative(E1, 10))),
        ("A(E1, E2, <(17:00:00)*/*/*>)", A(E1, E2, Absolute("(17:00:00)*/*/*"))),
        ("P(E1, [1d], E1)", P(E1, timedelta(days=1), E1)),
    ],
)
def test_parse(text: str, expected: object) -> None:
    assert parse(text) == expected
    assert parse(str(expected)) == expected


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (Absolute("(14:00:00)03/15/94"), "<(14:00:00)03/15/1994>"),
        (Relative(E1, timedelta(days=2, seconds=1.5)), "E1 + [2d 00:00:01.5]"),
        (Relative(E1, timedelta(hours=36)), "E1 + [1d 12:00:00]"),
        (Relative(E1 | E2, 60), "(E1 | E2) + [00:01:00]"),
        (Relative(E1 & E2, 60), "(E1 ^ E2) + [00:01:00]"),
        (Relative(E1, 60) & E2, "E1 + [00:01:00] ^ E2"),
        (Pstar(E1, 0.5, E3, "px"), "P*(E1, [00:00:00.5] px, E3)"),
    ],
)
def test_print(expr: object, text: str) -> None:
    assert str(expr) == text


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("E1 + [00:61:00]", 10, "minutes must be 0-59, not 61"),
        ("E1 + [00:00:75]", 13, "seconds must be 0-59, not 75"),
        ("E1 + [*:10:00]", 7, "wild card in a relative offset"),
        ("P(E1, [00:*:10], E3)", 11, "wild card in a periodic interval"),
        ("P(E1, [*:*:*], E3)", 8, "wild card in a periodic interval"),
        ("P*(E1, [*:*:*] x, E3)", 9, "wild card in a periodic interval"),
        ("P(E1, [00:00:00], E3)", 7, "periodic interval must be positive"),
        ("E1 + [0d]", 6, "relative offset must be positive"),
        ("E1 + [10]", 9, "expected ':' in hh:mm:ss"),
        ("E1 + [1:2:3:4]", 12, "unexpected ':'"),
        ("E1 + [2d00:00:01]", 9, "space between the days"),
        ("E1 + [1.5:00:00]", 8, "only the seconds may have a fraction"),
        ("E1 + [00:00:01.1234567]", 22, "at most six digits"),
        ("<(25:00:00)*/*/*>", 3, "hour must be 0-23, not 25"),
        ("<(17:00:00)13/*/*>", 12, "month must be 1-12, not 13"),
        ("<(17:00:00)*/32/*>", 14, "day must be 1-31, not 32"),
        ("<(17:00:00)02/30/*>", 12, "02/30 never occurs"),
        ("<(17:00:00)02/29/2023>", 12, "2023 is not a leap year"),
        ("<(17:00:00)*/*/123>", 16, "two digits (94) or four"),
        ("<(1*:00:00)*/*/*>", 4, "a wild card is a whole field"),
        ("<(ab:00:00)*/*/*>", 3, "hour must be a number or '*'"),
        ("<(17:00)*/*/*>", 8, "expected an absolute time like"),
        ("<(17:00:00)*/*>", 15, "expected an absolute time like"),
        ("<(17:00:00)*//*>", 14, "missing day"),
        ("P(E1, [00:00:10] price, E3)", 7, "only P* takes a parameter"),
    ],
)
def test_bad_time_strings_report_their_position(text: str, column: int, message: str) -> None:
    with pytest.raises(SnoopSyntaxError) as info:
        parse(text)
    err = info.value
    assert message in str(err)
    assert (err.line, err.column) == (1, column), str(err)
    assert err.context.splitlines()[1].index("^") == column + 3  # under the column


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("P(E1, E2, E3)", "P is written P(E1, [t], E3), got 3 argument(s): an event, an event"),
        ("P(E1, [00:00:01])", "P is written P(E1, [t], E3)"),
        ("P*([00:00:01], E1, E3)", "P* is written"),
        ("A(E1, [00:00:01], E3)", "A takes 3 event expression(s)"),
        ("P(E1, [00:00:01], E3)[E1, E2]", "only NOT takes an interval in brackets"),
        ("Q(E1, [00:00:01], E3)", "expected ANY, A, A*, NOT, P or P*"),
    ],
)
def test_malformed_periodic_operators(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(message)):
        parse(text)


def test_plus_needs_an_interval() -> None:
    with pytest.raises(SnoopSyntaxError) as info:
        parse("E1 + 10")
    assert "a time interval like [00:10:00]" in str(info.value)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Duration.of(0), "must be positive"),
        (lambda: Duration.of(-5), "must be positive"),
        (lambda: Duration.of(timedelta(seconds=-1)), "must be positive"),
        (lambda: Duration.of(float("nan")), "finite"),
        (lambda: Duration.of([1]), "is a timedelta, a number of seconds or a time string"),
        (lambda: Relative(E1, 0), "relative offset must be positive"),
        (lambda: P(E1, "00:00:00", E3), "periodic interval must be positive"),
        (lambda: P(E1, -1, E3), "periodic interval must be positive"),
        (lambda: P(E1, "*:*:*", E3), "wild card in a periodic interval"),
        (lambda: Pstar(E1, 1, E3, "no good"), "names a sampler"),
        (lambda: E1 + "[00:61:00]", "minutes must be 0-59"),
        (lambda: Absolute(hour=24), "hour must be 0-23"),
        (lambda: Absolute(month=4, day=31), "04/31 never occurs"),
        (lambda: Absolute("(17:00:00)*/*/*", hour=3), "as text or as fields, not both"),
        (lambda: Absolute("17:00:00"), "expected an absolute time like"),
    ],
)
def test_bad_python_values(make: object, message: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(message)):
        make()  # type: ignore[operator]


def test_time_string_errors_point_at_the_problem() -> None:
    with pytest.raises(TimeStringError) as info:
        Duration.of("00:90:00")
    err = info.value
    assert (err.position, err.text) == (3, "00:90:00")
    assert str(err).splitlines()[-1] == "       ^"


def test_durations() -> None:
    d = Duration.of("[1d 00:00:00.000001]")
    assert d.micros == 86_400_000_001 and d.timedelta() == timedelta(days=1, microseconds=1)
    assert Duration.of(timedelta(minutes=1)) == Duration.of(60) == Duration.of("0:1:0")
    assert len({Duration.of(60), Duration.of("00:01:00")}) == 1


# -- round trips ------------------------------------------------------------------------

names = st.sampled_from(["E1", "E2", "txn:begin", "A", "P", "odd name"]).map(Primitive)
durations = st.one_of(
    st.integers(1, 10**12).map(Duration),
    st.integers(1, 10**6).map(lambda s: Duration(s * 1_000_000)),
)
field = st.one_of(st.none(), st.integers(0, 23))
absolutes = st.builds(
    lambda h, m, s, mo, d, y: Absolute(hour=h, minute=m, second=s, month=mo, day=d, year=y),
    field,
    st.one_of(st.none(), st.integers(0, 59)),
    st.one_of(st.none(), st.integers(0, 59)),
    st.one_of(st.none(), st.integers(1, 12)),
    st.one_of(st.none(), st.integers(1, 28)),
    st.one_of(st.none(), st.integers(1900, 9999)),
)


def _ops(children: st.SearchStrategy) -> st.SearchStrategy:  # type: ignore[type-arg]
    pair = st.tuples(children, children)
    triple = st.tuples(children, children, children)
    return st.one_of(
        pair.map(lambda p: p[0] | p[1]),
        pair.map(lambda p: p[0] & p[1]),
        pair.map(lambda p: p[0] >> p[1]),
        triple.map(lambda t: A(*t)),
        triple.map(lambda t: Astar(*t)),
        triple.map(lambda t: Not(t[1], t[0], t[2])),
        st.tuples(children, st.sampled_from(["k", SOURCE])).map(lambda t: t[0].by(t[1])),
        st.tuples(children, durations).map(lambda t: Relative(*t)),
        st.tuples(children, durations, children).map(lambda t: P(*t)),
        st.tuples(children, durations, children, st.sampled_from([None, "px", "a.b"])).map(
            lambda t: Pstar(*t)
        ),
        st.lists(children, min_size=2, max_size=3, unique=True).map(lambda cs: AnyOf(1, *cs)),
    )


@given(st.recursive(st.one_of(names, absolutes), _ops, max_leaves=8))
def test_parse_of_str_round_trips(expr: object) -> None:
    assert parse(str(expr)) == expr


def test_pickle_round_trips() -> None:
    import pickle

    for e in (Absolute("(17:00:00)*/*/*"), Relative(E1, 1.5), P(E1, 2, E3), Pstar(E1, 2, E3, "x")):
        assert pickle.loads(pickle.dumps(e)) == e
