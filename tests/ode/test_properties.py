"""Property tests: online detection through compiled automata equals E[h] from the
definitions (tests/ode/brute.py), and records name the latest split point.

Expressions are random over three events (a, b, c) with masks on a parameter x;
histories are random sequences of them. Detection runs in a real detector (rules,
leaves, the Ode node), with the universe declared as all three events, which is
the history the evaluator reads.
"""

from __future__ import annotations

from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from sentinel import LocalEventDetector, Primitive, ode
from sentinel.ode import terms as tm
from sentinel.ode.syntax import parse_term
from tests.ode.brute import evaluate, history

NAMES = ("a", "b", "c")
EVENTS = {n: Primitive(n) for n in NAMES}
MASKS = ("x > 1", "x == 0")

letters = st.one_of(
    st.sampled_from(NAMES).map(lambda n: tm.Letter(EVENTS[n])),
    st.tuples(st.sampled_from(NAMES), st.sampled_from(MASKS)).map(
        lambda p: tm.Letter(EVENTS[p[0]].where(p[1]))
    ),
    st.just(tm.ANY),
    st.just(tm.FIRST),
)


def _extend(kids: st.SearchStrategy[tm.Term]) -> st.SearchStrategy[tm.Term]:
    two = st.tuples(kids, kids)
    n = st.integers(1, 3)
    return st.one_of(
        two.map(lambda p: tm.Conj(*p)),
        kids.map(tm.Neg),
        two.map(lambda p: tm.Rel(*p)),
        kids.map(tm.RelPlus),
        two.map(lambda p: tm.Disj(*p)),
        st.lists(kids, min_size=2, max_size=3).map(lambda xs: tm.Prior(*xs)),
        st.lists(kids, min_size=2, max_size=3).map(lambda xs: tm.Sequence(*xs)),
        two.map(lambda p: tm.Pipe(*p)),
        st.tuples(n, kids).map(lambda p: tm.Nth(*p)),
        st.tuples(n, kids).map(lambda p: tm.Every(*p)),
        two.map(lambda p: tm.After(*p)),
        two.map(lambda p: tm.AfterEach(*p)),
        st.tuples(kids, kids, kids).map(lambda p: tm.FirstAfter(*p)),
        kids.map(tm.Before),
        kids.map(tm.Happened),
        two.map(lambda p: tm.Star(*p)),
    )


terms = st.recursive(letters, _extend, max_leaves=5)
points = st.tuples(st.sampled_from(NAMES), st.integers(0, 2))
histories = st.lists(points, min_size=1, max_size=9)
# Generation is slow (nested terms), so most health checks are off; but not
# filter_too_much: examples are rejected only for expressions refused as too
# large, and a change that made many refused would fail rather than test less.
QUIET = [h for h in HealthCheck if h is not HealthCheck.filter_too_much]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=QUIET)


def compiled(term: tm.Term) -> ode.OdeEvent:
    """The Ode event of ``term`` over a, b and c; an example whose automaton
    needs more than MAX_STATES states is rejected. Some do, inherently (the
    27th a after a large one remembers the last 27 a's: 2**28 states); that they
    are refused, naming the expression, and that the ones that used to be
    refused for nothing compile, is tests/ode/test_automata.py's."""
    try:
        return ode.event(term, over=[EVENTS[n] for n in NAMES])
    except ode.AutomatonTooLarge:
        hypothesis.event("refused: too many states")
        reject()


def detect(term: tm.Term, hist: list[tuple[str, int]]) -> list[Any]:
    det = LocalEventDetector()
    for n in NAMES:
        det.explicit(n)
    out: list[Any] = []
    det.rule("r", compiled(term), action=out.append)
    for name, x in hist:
        det.signal(name, x=x)
    return out


def expected(term: tm.Term, hist: list[tuple[str, int]], **kw: Any) -> list[int]:
    h = history([n for n, _ in hist], [{"x": x} for _, x in hist])
    return sorted(p + 1 for p in evaluate(term, h, **kw))  # t_occ counts from 1


@SETTINGS
@given(terms, histories)
def test_online_detections_equal_the_definitions(
    term: tm.Term, hist: list[tuple[str, int]]
) -> None:
    got = detect(term, hist)
    assert [d.t_occ for d in got] == expected(term, hist)
    for d in got:
        # The record ends with the terminator and holds points of the history.
        assert d.terminator.t_occ == d.t_occ
        assert all(1 <= c.t_occ <= d.t_occ for c in d.constituents)


@pytest.mark.explore
@settings(max_examples=3000, deadline=None, suppress_health_check=QUIET)
@given(st.recursive(letters, _extend, max_leaves=7), st.lists(points, min_size=1, max_size=11))
def test_online_detections_equal_the_definitions_long(term: tm.Term, hist: Any) -> None:
    assert [d.t_occ for d in detect(term, hist)] == expected(term, hist)


plain = st.recursive(
    st.sampled_from(NAMES).map(lambda n: tm.Letter(EVENTS[n])) | st.just(tm.ANY),
    _extend,
    max_leaves=4,
)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(plain, st.lists(st.sampled_from(NAMES), min_size=1, max_size=6))
def test_not_prefix_fires_exactly_where_no_extension_can_satisfy(
    term: tm.Term, names: list[str]
) -> None:
    event = compiled(tm.Neg(tm.Prefix(term)))
    # A word of at most as many points as the expression's minimal automaton has
    # states reaches an accepting state if any word does (pumping).
    states = compiled(term).automaton.plain().n
    assume(states <= 5)
    got = [d.t_occ for d in detect(event.term, [(n, 0) for n in names])]
    h = history(names)
    alphabet = [(0, n, {}) for n in NAMES]
    never = [p + 1 for p, _, _ in h if not _extensible(term, h, p, alphabet, states)]
    assert got == never


def _extensible(term: tm.Term, h: Any, p: int, alphabet: Any, depth: int) -> bool:
    return p in evaluate(tm.Prefix(term), h[: p + 1], alphabet=alphabet, depth=depth)


simple = st.recursive(
    letters, lambda k: k.map(tm.Neg) | st.tuples(k, k).map(lambda p: tm.Conj(*p)), max_leaves=3
)
small = st.recursive(letters, _extend, max_leaves=3)


def _latest_split(term: tm.Rel, h: Any, p: int) -> int:
    e, f = term.children
    works = [i for i in evaluate(e, h) if p in evaluate(f, tuple(pt for pt in h if pt[0] > i))]
    return max(works)


def _check_relative(term: tm.Term, h: Any, p: int, parts: tuple[Any, ...]) -> None:
    """parts[0] is the latest split point of relative(E, F) at p; when E is a
    relative too, its record there is checked the same way."""
    assert isinstance(term, tm.Rel)
    split = parts[0]
    i = split.t_occ - 1
    assert i == _latest_split(term, h, p)
    e = term.children[0]
    if isinstance(e, tm.Rel):
        inner = split.parts if hasattr(split, "parts") else (split,)
        _check_relative(e, h, i, inner)


@SETTINGS
@given(
    st.recursive(small, lambda k: st.tuples(k, small).map(lambda p: tm.Rel(*p)), max_leaves=3),
    small,
    histories,
)
def test_relative_records_the_latest_split_that_works(
    e: tm.Term, f: tm.Term, hist: list[tuple[str, int]]
) -> None:
    h = history([n for n, _ in hist], [{"x": x} for _, x in hist])
    term = tm.Rel(e, f)
    for d in detect(term, hist):
        _check_relative(term, h, d.t_occ - 1, d.parts)


@settings(max_examples=100, deadline=None, suppress_health_check=QUIET)
@given(small, small, histories)
def test_prior_records_the_latest_earlier_occurrence(
    e: tm.Term, f: tm.Term, hist: list[tuple[str, int]]
) -> None:
    h = history([n for n, _ in hist], [{"x": x} for _, x in hist])
    es = evaluate(e, h)
    for d in detect(tm.Prior(e, f), hist):
        p = d.t_occ - 1
        assert d.parts[0].t_occ - 1 == max(i for i in es if i < p)


@settings(max_examples=100, deadline=None, suppress_health_check=QUIET)
@given(simple, simple, histories)
def test_after_each_records_the_delimiter(
    f: tm.Term, e: tm.Term, hist: list[tuple[str, int]]
) -> None:
    h = history([n for n, _ in hist], [{"x": x} for _, x in hist])
    cuts = evaluate(e, h)
    for d in detect(tm.AfterEach(f, e), hist):
        p = d.t_occ - 1
        assert d.parts[0].t_occ - 1 == max(c for c in cuts if c < p)


correlated = st.sampled_from(
    [
        "exists x: prior(b = x, c) ^ !relative(x, prior(a, c)) ^ relative(x, prior(a, c))",
        "exists x: relative(a, relative(b = x, c)) ^ !relative(x, prior(a, any))",
        "exists x: relative(a = x, b) ^ !relative(x, c)",
        "exists x: !(b = x) ^ prior(x, c)",
        "exists x, y: prior(a = x, b = y) ^ !relative(x, relative(y, any) ^ c) ^ c",
        "exists x: (a = x) || relative(x, b)",
        "exists x: relative(x, relative(c, b)) | first",
    ]
)


@settings(max_examples=100, deadline=None, suppress_health_check=QUIET)
@given(correlated, st.lists(points, min_size=1, max_size=8))
def test_correlation_variables_equal_the_definitions(text: str, hist: Any) -> None:
    term = parse_term(text)
    assert [d.t_occ for d in detect(term, hist)] == expected(term, hist)


@settings(max_examples=60, deadline=None, suppress_health_check=QUIET)
@given(terms, histories)
def test_inlined_and_called_handlers_detect_the_same(
    term: tm.Term, hist: list[tuple[str, int]]
) -> None:
    from sentinel.detector import EventGraph

    def shape(d: Any) -> Any:
        return (d.t_occ, [c.t_occ for c in d.constituents])

    inlined = [shape(d) for d in detect(term, hist)]
    EventGraph.compile = False
    try:
        called = [shape(d) for d in detect(term, hist)]
    finally:
        EventGraph.compile = True
    assert inlined == called
