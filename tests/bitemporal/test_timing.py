"""Timing primitives: what each occurrence matches (against the model written
from the thesis's definitions), their text, several at once, and their use as
events in every operator and context."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import (
    CHANGE,
    FUTURE,
    LATE,
    ONTIME,
    Context,
    ExpressionError,
    LocalEventDetector,
    Occurrence,
    Primitive,
    VirtualClock,
    announce,
    event_class,
    parse,
    revoke,
)
from sentinel.bitemporal import KINDS, REVISION, classify
from sentinel.bitemporal.classify import make_dispatcher
from sentinel.detector.events import listen
from sentinel.errors import UnknownEventError
from sentinel.occurrence import finished
from tests.bitemporal.model import timing

D = Primitive("D")


def occurrence(kind: str, o: float, d: float, old: float | None) -> Occurrence:
    rev: dict[str, Any] = {"kind": kind, "key": ("k",), "n": 2, "gen": 1}
    if old is not None:
        rev["old_ts"] = old
    return Occurrence("D", 1, o, d, None, {REVISION: rev, "k": "k"})


def names(bits: int) -> set[str]:
    from sentinel.algebra.bitemporal import BIT

    return {k for k in KINDS if bits & BIT[k]}


times = st.integers(min_value=0, max_value=40).map(float)


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(["announce", "revise", "revoke", "due"]),
    o=times,
    d=times,
    old=times,
    chronon=st.sampled_from([None, 1.0, 5.0, 7.5]),
)
def test_classification_follows_the_definitions(
    kind: str, o: float, d: float, old: float, chronon: float | None
) -> None:
    prior = None if kind in ("announce", "due") else old
    bits, delay = classify(occurrence(kind, o, d, prior), chronon)
    want, want_delay = timing(kind, o, d, prior, chronon)
    assert names(bits) == want
    if want_delay is None:
        assert delay is None
    else:
        assert delay == round(want_delay * 1e6)


def test_an_event_without_revisions_is_an_announcement() -> None:
    bits, _ = classify(Occurrence("E", 1, 5.0, 5.0), None)
    assert names(bits) == {"ANNOUNCEMENT", "ONTIME"}
    bits, delay = classify(Occurrence("E", 1, 3.0, 5.5), None)
    assert names(bits) == {"ANNOUNCEMENT", "LATE"} and delay == 2_500_000
    bits, _ = classify(Occurrence("E", 1, 3.0, 5.5), 10.0)  # one chronon: on time
    assert names(bits) == {"ANNOUNCEMENT", "ONTIME"}


# -- text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "ONTIME(D)",
        "CHANGE(FUTURE(D))",
        "LATE(D, [05:00:00], [1d])",
        "ANNOUNCEMENT(LATE(D, [00:00:05], [00:00:10])) ; CHANGE(E)",
        "NOT(REVOCATION(D))[ANNOUNCEMENT(D), CANCELLATION(D)] by k",
        "RETROACTIVECHANGE(D) | POSTPONE(D)",
    ],
)
def test_text_round_trips(text: str) -> None:
    e = parse(text)
    assert parse(str(e)) == e
    assert str(parse(str(e))) == str(e)


def test_nesting_is_a_set_of_primitives() -> None:
    assert parse("FUTURE(CHANGE(D))") == parse("CHANGE(FUTURE(D))") == FUTURE(CHANGE(D))
    assert str(FUTURE(CHANGE(D))) == "CHANGE(FUTURE(D))"
    assert LATE(D, "5h", "1d") == parse("LATE(D, [05:00:00], [1d])")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("FUTURE(LATE(D))", "can be both FUTURE and LATE"),
        ("ANNOUNCEMENT(REVOCATION(D))", "can be both ANNOUNCEMENT and REVOCATION"),
        ("ONTIME(D ; E)", "apply to primitive events"),
        ("LATE(D, [1d], [00:00:01])", "minimum delay [1d] exceeds its maximum"),
        ("ONTIME(D, E)", "ONTIME is written ONTIME(E)"),
        ("LATE(D, [00:00:01] x, [00:00:02])", "only P* takes a parameter"),
    ],
)
def test_malformed(text: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(message)):
        parse(text)


def test_names_resolve_on_the_detector() -> None:
    det = LocalEventDetector()
    det.explicit("E")
    assert det.expression("ONTIME(E)") == ONTIME(Primitive("E"))
    with pytest.raises(UnknownEventError, match="'F'"):
        det.expression("ONTIME(F)")
    det.define("X", "E ; E")
    with pytest.raises(ExpressionError, match="apply to primitive events"):
        det.expression("ONTIME(X)")


# -- every announcement matches what the model says, end to end ---------------------------

OPS = st.lists(
    st.tuples(
        st.integers(0, 2),  # key
        st.sampled_from(["set", "set", "revoke"]),
        st.integers(1, 4),  # clock step
        st.integers(-3, 3),  # occurrence time - detection time
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_announcements_reach_the_primitives_they_match(ops: list[Any]) -> None:
    """Immediate processing (no chronon): each announcement, revision, revocation
    and due notice reaches exactly the rules of the primitives the model gives."""
    clock = VirtualClock(1000.0)
    det = LocalEventDetector(clock=clock)
    event_class(det, "D", key="k", lifespan=None)
    seen: list[tuple[int, str]] = []
    for kind in KINDS:
        det.rule(kind, f"{kind}(D)", action=lambda o, kind=kind: seen.append((o.t_occ, kind)))
    signalled: list[Occurrence] = []
    listen(det, "occurrence", lambda o: signalled.append(finished(o)))

    state: dict[int, float] = {}  # key -> occurrence time of its current version
    dues: dict[int, float] = {}
    expected: list[tuple[str, set[str]]] = []

    def due_until(t: float) -> None:
        for k, at in sorted(dues.items(), key=lambda kv: kv[1]):
            if at <= t:
                expected.append(("due", {"ONTIME"}))
                del dues[k]

    for k, op, step, offset in ops:
        now = clock.now() + step
        due_until(now)
        clock.set(now)
        o = now + offset
        if op == "revoke":
            if k not in state:
                with pytest.raises(Exception, match="no such instance"):
                    revoke(det, "D", k=k)
                continue
            revoke(det, "D", k=k)
            expected.append(("revoke", timing("revoke", now, now, state.pop(k), None)[0]))
            dues.pop(k, None)
            continue
        kind = "revise" if k in state else "announce"
        announce(det, "D", o, k=k)
        expected.append((kind, timing(kind, o, now, state.get(k), None)[0]))
        state[k] = o
        dues.pop(k, None)
        if o > now:
            dues[k] = o
    due_until(math.inf)
    clock.advance(10)

    by_occurrence: dict[int, set[str]] = {}
    for t, kind in seen:
        by_occurrence.setdefault(t, set()).add(kind)
    got = [by_occurrence.get(o.t_occ, set()) for o in signalled if o.event == "D"]
    assert got == [want for _, want in expected]


def test_a_future_instance_becomes_ontime_when_its_time_comes() -> None:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock)
    event_class(det, "D", key="k", lifespan=None)
    got: list[tuple[float, str, Any]] = []
    det.rule("on time", ONTIME(D), action=lambda o: got.append((clock.now(), o.params["k"], o.at)))
    announce(det, "D", 10.0, k="a")  # FUTURE
    announce(det, "D", 20.0, k="b")
    announce(det, "D", 30.0, k="c")
    clock.set(5)
    announce(det, "D", 25.0, k="a")  # postponed before its time: the due moves
    revoke(det, "D", k="b")  # cancelled: no due
    clock.set(100)
    assert [(t, k) for t, k, _ in got] == [(25.0, "a"), (30.0, "c")]
    assert got[0][2].timestamp() == 25.0  # the occurrence time of the instance


def test_several_primitives_in_one_leaf() -> None:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock)
    event_class(det, "D", key="k", lifespan=None)
    got: list[str] = []
    det.rule("delayed", "CHANGE(FUTURE(D))", action=lambda o: got.append(o.params["k"]))
    announce(det, "D", 10.0, k="a")  # an announcement, not a change
    announce(det, "D", 12.0, k="a")  # a change into the future: yes
    announce(det, "D", -5.0, k="a")  # a change into the past: no (CHANGE, LATE)
    clock.set(20)
    announce(det, "D", 30.0, k="a")  # the old time had passed: POSTPONE, not FUTURE
    assert got == ["a"]


def test_late_bounds_compare_the_delay_in_chronons() -> None:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=60)
    det.explicit("E")
    got: list[float] = []
    det.rule("1-5 min", "LATE(E, [00:01:00], [00:05:00])", action=lambda o: got.append(o.timestamp))
    clock.set(1000)  # chronon 16 (960-1019)
    for o in (999, 959, 900, 899, 720, 719, 600):  # delays 0, 1, 1, 2, 4, 5, 6 chronons
        det.signal_at("E", float(o))
    assert got == [959.0, 900.0, 899.0, 720.0, 719.0]


# -- in every operator and context -------------------------------------------------------

SHAPES = [
    "{a} ; {b}",
    "{a} ^ {b}",
    "A({a}, {b}, {c})",
    "A*({a}, {b}, {c})",
    "NOT({b})[{a}, {c}]",
    "ANY(2, {a}, {b}, {c})",
    "{a} | {b}",
]
PRIMS = {"a": "ANNOUNCEMENT(D)", "b": "CHANGE(D)", "c": "CANCELLATION(D)"}
SHADOWS = {"a": "Sa", "b": "Sb", "c": "Sc"}


@pytest.mark.parametrize("context", list(Context), ids=str)
@pytest.mark.parametrize("shape", SHAPES)
def test_timing_primitives_detect_like_the_events_they_stand_for(
    shape: str, context: Context
) -> None:
    """A rule over timing primitives detects what the same expression detects over
    explicit events signalled exactly when the primitives match (by the model)."""
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock)
    event_class(det, "D", key="k", lifespan=None)
    for s in SHADOWS.values():
        det.explicit(s)
    real: list[Any] = []
    shadow: list[Any] = []
    det.rule("real", shape.format(**PRIMS), action=real.append, context=context)
    det.rule("shadow", shape.format(**SHADOWS), action=shadow.append, context=context)
    steps = [("a", 1), ("a", 2), ("b", 1), ("a", 1), ("c", 2), ("b", 2), ("a", 2), ("c", 1)]
    alive: set[int] = set()
    for op, k in steps:
        clock.advance(1)
        if op == "a":
            if k in alive:
                continue
            announce(det, "D", clock.now(), k=k)
            alive.add(k)
            det.signal("Sa", k=k)
        elif op == "b":
            announce(det, "D", clock.now() + 5, k=k)
            det.signal("Sb" if k in alive else "Sa", k=k)  # a revoked key is announced anew
            alive.add(k)
        else:
            revoke(det, "D", k=k)
            alive.discard(k)
            det.signal("Sc", k=k)

    def shape_of(occs: list[Any]) -> list[list[Any]]:
        return [[c.params["k"] for c in o.constituents] for o in occs]

    assert shape_of(real) == shape_of(shadow)
    assert real  # the steps make every shape detect something


def test_a_dispatcher_without_timing_leaves_keeps_due_notices_away() -> None:
    got: list[Any] = []
    dispatch = make_dispatcher([lambda s, o: got.append(o)], [], None, None)
    dispatch({}, occurrence("due", 1.0, 1.0, None))
    assert got == []
    dispatch({}, occurrence("announce", 1.0, 1.0, None))
    assert len(got) == 1
