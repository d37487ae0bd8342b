"""Lifespans: expired occurrences leave every operator's state at the clock
ticks, against a hand-written model; the stratified extension never lets a
purge remove an occurrence a stored detection is made of; archiving; WITHIN;
memory stays flat."""

from __future__ import annotations

import warnings
from collections import deque
from math import floor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel import Context, LocalEventDetector, VirtualClock, announce, event_class
from sentinel.bitemporal import bitemporal
from sentinel.bitemporal.lifespan import expirations
from sentinel.detector.events import listen
from sentinel.errors import LifespanWarning, SentinelWarning

CONTEXTS = list(Context)

# -- keyed chronicle "A then B" against a dict of deques ---------------------------------

STREAM = st.lists(
    st.tuples(st.sampled_from("AB"), st.integers(0, 3), st.integers(0, 3)),  # event, key, step
    min_size=1,
    max_size=60,
)


def model_keyed_chronicle(
    stream: list[tuple[str, int, int]], lifespan: float, chronon: float
) -> list[tuple[int, int, int]]:
    """A ; B by key, chronicle, each A alive until the first tick after its
    expiration (a tick every chronon): (key, A's index, B's index)."""
    pending: dict[int, deque[tuple[int, float]]] = {}
    out = []
    now = 0.0
    for i, (ev, key, step) in enumerate(stream):
        now += step
        tick = floor(now / chronon) * chronon  # the last tick at or before now
        q = pending.setdefault(key, deque())
        while q and q[0][1] + lifespan < tick:  # purged at a tick after expiry
            q.popleft()
        if ev == "A":
            q.append((i, now))
        elif q:
            out.append((key, q.popleft()[0], i))
    return out


@settings(max_examples=80, deadline=None)
@given(stream=STREAM, lifespan=st.sampled_from([1, 2, 5]), chronon=st.sampled_from([1.0, 2.0]))
def test_keyed_chronicle_with_a_lifespan_matches_the_model(
    stream: list[tuple[str, int, int]], lifespan: int, chronon: float
) -> None:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=chronon)
    det.explicit("A")
    det.explicit("B")
    got: list[tuple[int, int, int]] = []
    det.rule(
        "ab",
        "A ; B",
        key="k",
        context="chronicle",
        flush=False,
        lifespan=lifespan,
        action=lambda o: got.append((o.params["k"], *(c.params["i"] for c in o.constituents))),
    )
    for i, (ev, key, step) in enumerate(stream):
        clock.advance(step)
        det.signal(ev, k=key, i=i)
    assert got == model_keyed_chronicle(stream, lifespan, chronon)
    clock.advance(lifespan + 2 * chronon)
    assert det.stored() == 0  # everything expired, every partition released


# -- every operator and context: nothing expired is used, the extension holds ------------

EXPRESSIONS = [
    "A ; B",
    "A ^ B",
    "(A ^ B) ; C",
    "A(A, B, C)",
    "A*(A, B, C)",
    "NOT(B)[A, C]",
    "ANY(2, A, B, C)",
    "(A ; B) ^ (B ; C)",
    "WITHIN(A, B, [00:00:03])",
]
EVENTS = st.lists(st.tuples(st.sampled_from("ABC"), st.integers(0, 2)), min_size=1, max_size=40)


def run_with_lifespans(
    expression: str, context: Context, events: list[tuple[str, int]], lifespan: float
) -> tuple[list[Any], list[tuple[float, list[Any], list[Any]]]]:
    """Detections, and per tick (purged, still stored) what the purge did."""
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=1.0)
    event_class(det, "A", key=None, lifespan=lifespan / 2)  # A's own, shorter lifespan
    det.explicit("B")
    det.explicit("C")
    got: list[Any] = []
    det.rule(
        "r",
        expression,
        context=context,
        flush=False,
        lifespan=lifespan,
        archive=True,
        action=got.append,
    )
    ticks: list[tuple[float, list[Any], list[Any]]] = []
    # Called right after each purge: what it removed, and what is still stored.
    listen(
        det,
        "expired",
        lambda items: ticks.append((clock.now(), [e.occurrence for e in items], stored(det))),
    )
    for i, (ev, step) in enumerate(events):
        clock.advance(step)
        if ev == "A":
            announce(det, "A", clock.now(), i=i)
        else:
            det.signal(ev, i=i)
    clock.advance(3 * lifespan)
    return got, ticks


def stored(det: LocalEventDetector) -> list[Any]:
    g = det.graph
    out = []
    for (_e, _m, _r), h in g.handlers.items():
        st_ = g.global_store.get(h.hid)
        if st_ is not None:
            out.extend(h.stored(st_))
    return out


def nested(occ: Any) -> list[Any]:
    if len(occ) == 8:
        return []
    out = []
    for p in occ[2]:
        out.append(p)
        out.extend(nested(p))
    return out


@pytest.mark.parametrize("context", CONTEXTS, ids=str)
@pytest.mark.parametrize("expression", EXPRESSIONS)
@settings(max_examples=15, deadline=None)
@given(events=EVENTS, lifespan=st.sampled_from([2.0, 4.0]))
def test_purging_never_removes_what_a_stored_detection_is_made_of(
    expression: str, context: Context, events: list[tuple[str, int]], lifespan: float
) -> None:
    _, ticks = run_with_lifespans(expression, context, events, lifespan)
    for now, purged, remaining in ticks:
        inside = {id(q) for occ in remaining for q in nested(occ)}
        assert not [p for p in purged if id(p) in inside], f"tick {now}"
        for p in purged:  # and its own lifespan was over
            assert p[2] + (lifespan / 2 if p[0] == "A" else lifespan) < now


@pytest.mark.parametrize("context", CONTEXTS, ids=str)
@pytest.mark.parametrize("expression", EXPRESSIONS[:7])
def test_no_detection_uses_an_occurrence_after_its_purge(expression: str, context: Context) -> None:
    events = [
        (e, s) for e, s in zip("ABCABCBBACCAB" * 3, [0, 1, 2, 0, 3, 1, 1, 4] * 5, strict=False)
    ]
    got, ticks = run_with_lifespans(expression, context, events, 3.0)
    purged_at = {id(p): now for now, purged, _ in ticks for p in purged}
    for d in got:
        for c in d.constituents:
            t = purged_at.get(id(c))
            assert t is None or d.terminator.detected_timestamp < t, (str(d), t)


def test_the_store_agrees_with_the_thesis_computation() -> None:
    """What the purge computes per store equals :func:`expirations` over the same
    occurrences."""
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=1.0)
    event_class(det, "A", key=None, lifespan=1.0)
    det.explicit("B")
    det.explicit("C")
    det.rule("r", "(A ^ B) ; C", flush=False, lifespan=5.0, action=lambda o: None)
    announce(det, "A", 0.0, i=1)
    clock.set(1.0)
    det.signal("B", i=2)
    svc = bitemporal(det)
    # Occurrences are told apart by identity: A's $revision is not hashable.
    got = svc.lifespans.stored_expirations(det.graph.global_store)
    life = {"A": 1.0, "B": 5.0}
    stored_occs = [o for o, _ in got]
    model = {
        id(o): e
        for o, e in expirations(stored_occs, lambda o: life.get(o[0], 5.0) if len(o) == 8 else 5.0)
    }
    assert {str(o): e for o, e in got} == {str(o): model[id(o)] for o in stored_occs}
    (a_exp,) = [e for o, e in got if len(o) == 8 and o[0] == "A"]
    assert a_exp == 6.0  # its own 1 s, extended to the pair's 1 + 5


def test_archive_marks_only_archiving_rules() -> None:
    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=1.0)
    det.explicit("A")
    det.explicit("B")
    det.rule("kept", "A ; B", flush=False, lifespan=2, action=lambda o: None, archive=True)
    det.rule("lost", "B ; A", flush=False, lifespan=2, action=lambda o: None)
    seen: list[tuple[str, float, str]] = []
    listen(
        det,
        "expired",
        lambda items: seen.extend((e.occurrence.event, e.at, e.where) for e in items),
    )
    det.signal("A")
    det.signal("B")
    clock.advance(10)
    assert seen == [("A", 3.0, "A ; B")]
    assert det.stored() == 0


# -- WITHIN ---------------------------------------------------------------------------


def model_within(events: list[tuple[str, int, float]], window: float) -> list[tuple[int, int]]:
    """WITHIN(E1, E2) by key in chronicle: each E2 with the oldest E1 of its key
    younger than the window, consumed."""
    pending: dict[int, deque[tuple[int, float]]] = {}
    out = []
    for i, (ev, key, t) in enumerate(events):
        q = pending.setdefault(key, deque())
        if ev == "E1":
            q.append((i, t))
            continue
        while q and q[0][1] + window <= t:
            q.popleft()
        if q:
            out.append((q.popleft()[0], i))
    return out


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["E1", "E2"]), st.integers(0, 2), st.integers(0, 4)),
        min_size=1,
        max_size=40,
    )
)
def test_within_by_key_matches_the_model(steps: list[tuple[str, int, int]]) -> None:
    from sentinel import within

    clock = VirtualClock(0.0)
    det = LocalEventDetector(clock=clock, chronon=1.0)
    e1, e2 = det.explicit("E1"), det.explicit("E2")
    got: list[tuple[int, int]] = []
    det.rule(
        "w",
        within(e1, e2, 5, key="k"),
        context="chronicle",
        flush=False,
        action=lambda o: got.append(tuple(c.params["i"] for c in o.constituents)),
    )
    events = []
    for i, (ev, key, step) in enumerate(steps):
        clock.advance(step)
        events.append((ev, key, clock.now()))
        det.signal(ev, k=key, i=i)
    assert got == model_within(events, 5.0)
    clock.advance(7)
    assert det.stored() == 0  # windows over: purged, partitions released


def model_within_any_order(
    events: list[tuple[str, int, float]], window: float, context: str
) -> list[tuple[int, int]]:
    """WITHIN(E1, E2, [window]) by key in arrival order, occurrence times in any
    order: at each E2 (in arrival order), the E1s that arrived before it whose
    window ``[t(E1), t(E1) + window)`` holds its time, chosen as the context
    chooses (``docs/bitemporal.md``, "WITHIN")."""
    kept: dict[int, list[tuple[int, float]]] = {}
    out = []
    for i, (ev, key, t) in enumerate(events):
        e1s = kept.setdefault(key, [])
        if ev == "E1":
            if context == "recent":
                e1s[:] = [(i, t)]
            elif context == "cumulative":
                if not any(u <= t < u + window for _, u in e1s):
                    e1s[:] = [(i, t)]
            else:
                e1s.append((i, t))
            continue
        held = [(j, u) for j, u in e1s if u <= t < u + window]
        if not held:
            continue
        if context == "chronicle":
            out.append((held[0][0], i))
            e1s.remove(held[0])
        elif context == "cumulative":
            out.append((held[0][0], i))
            e1s.clear()
        elif context == "recent":
            out.append((held[0][0], i))
        else:
            out.extend((j, i) for j, _ in held)
    return out


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["E1", "E2"]), st.integers(0, 1), st.integers(-6, 12)),
        min_size=1,
        max_size=30,
    ),
    context=st.sampled_from(["recent", "chronicle", "continuous", "cumulative", "unrestricted"]),
)
def test_within_in_arrival_order_with_occurrence_times_in_any_order_matches_the_model(
    steps: list[tuple[str, int, int]], context: str
) -> None:
    """Reported late or announced (``signal_at``), an E2 pairs only with E1s
    whose window holds its occurrence time: not with an E1 that occurred after
    it, and an E2 far in the future does not close the windows of E1s that a
    later-arriving E2 falls into."""
    from sentinel import within

    clock = VirtualClock(100.0)
    det = LocalEventDetector(clock=clock)
    e1, e2 = det.explicit("E1"), det.explicit("E2")
    got: list[tuple[int, int]] = []
    det.rule(
        "w",
        within(e1, e2, 5, key="k"),
        context=context,
        flush=False,
        action=lambda o: got.append(tuple(c.params["i"] for c in o.constituents)),
    )
    events = []
    for i, (ev, key, offset) in enumerate(steps):
        at = 100.0 + offset
        events.append((ev, key, at))
        det.signal_at(ev, at, k=key, i=i)
    assert sorted(got) == sorted(model_within_any_order(events, 5.0, context))


def test_memory_stays_flat_under_a_lifespan() -> None:
    """10% of the As never get their B: without a lifespan they pile up, with one
    the state stays bounded by what a lifespan's worth of events leaves."""

    def run(lifespan: float | None) -> list[int]:
        clock = VirtualClock(0.0)
        det = LocalEventDetector(clock=clock, chronon=1.0)
        det.explicit("A")
        det.explicit("B")
        det.rule(
            "ab",
            "A ; B",
            key="k",
            context="chronicle",
            flush=False,
            lifespan=lifespan,
            action=lambda o: None,
        )
        sizes = []
        for i in range(6000):
            clock.advance(0.01)
            det.signal("A", k=i)
            if i % 10:
                det.signal("B", k=i)
            if i % 1000 == 999:
                sizes.append(det.stored())
        return sizes

    unbounded = run(None)
    bounded = run(5.0)
    assert unbounded == [100 * n for n in range(1, 7)]
    # 5 to 6 s of pending As (a lifespan, plus at most a chronon) at 100 events/s, 10%
    assert all(50 <= n <= 60 for n in bounded), bounded


# -- an event class without a lifespan: the thesis makes one mandatory -----------------------


def test_an_event_class_without_a_lifespan_warns_that_it_keeps_everything() -> None:
    det = LocalEventDetector()
    with pytest.warns(LifespanWarning) as caught:
        event_class(det, "Delivery", key="resource")
    (w,) = caught
    assert str(w.message) == (
        "event class Delivery has no lifespan: every occurrence and instance of it is kept for "
        "ever (memory grows with them); give it one (event_class(..., lifespan='14d')), or "
        "lifespan=None to keep them on purpose"
    )
    assert isinstance(w.message, SentinelWarning) and w.message.event == "Delivery"
    assert w.filename == __file__  # it points at the definition
    assert bitemporal(det).classes["Delivery"].lifespan is None  # kept for ever, as before


def test_an_explicit_lifespan_or_lifespan_none_does_not_warn() -> None:
    det = LocalEventDetector()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        event_class(det, "Delivery", key="resource", lifespan="14d")
        event_class(det, "Forever", key="resource", lifespan=None)  # on purpose
    assert bitemporal(det).classes["Forever"].lifespan is None
