"""Relative events, P and P* in every parameter context, on a virtual clock.

Each case is (expression, steps, {context: detections}); steps are event names
and clock moves in seconds; detections are in the paper's notation, ticks named
by the second of the timeline they were due (``t14``). The expectations were
worked out by hand from the readings in docs/temporal.md (A's and A*'s
algorithms of Appendix A, a tick pairing only with the interval that armed it),
not recorded from the implementation.
"""

from __future__ import annotations

from typing import Any

import pytest

from sentinel import Context, timers
from tests.temporal.timeline import Timeline

R, CH, CO, CU, U = (
    Context.RECENT,
    Context.CHRONICLE,
    Context.CONTINUOUS,
    Context.CUMULATIVE,
    Context.UNRESTRICTED,
)

CASES: list[tuple[str, str, list[Any], dict[Context, list[str]]]] = [
    (
        "relative: recent replaces the pending timer (a debounce), chronicle and "
        "continuous give each occurrence its own, cumulative accumulates until due",
        "E1 + [00:00:10]",
        ["E1", 4, "E1", 10, "E1", 20],
        {
            R: ["{e1^2, t14}", "{e1^3, t24}"],
            CH: ["{e1^1, t10}", "{e1^2, t14}", "{e1^3, t24}"],
            CO: ["{e1^1, t10}", "{e1^2, t14}", "{e1^3, t24}"],
            CU: ["{e1^1, e1^2, t10}", "{e1^3, t24}"],
            U: ["{e1^1, t10}", "{e1^2, t14}", "{e1^3, t24}"],
        },
    ),
    (
        "relative of a composite: the timer starts at the terminator's time",
        "(E1 ; E2) + [00:00:05]",
        ["E1", 1, "E1", 1, "E2", 10],
        {
            R: ["{e1^2, e2^1, t7}"],
            CH: ["{e1^1, e2^1, t7}"],
            CO: ["{e1^1, e2^1, t7}", "{e1^2, e2^1, t7}"],
            CU: ["{e1^1, e1^2, e2^1, t7}"],
            U: ["{e1^1, e2^1, t7}", "{e1^2, e2^1, t7}"],
        },
    ),
    (
        "relative inside a sequence: it occurs at its tick, so an E2 between E1 and "
        "the tick initiates it",
        "E2 ; E1 + [00:00:05]",
        ["E1", 2, "E2", 10],
        {c: ["{e1^1, e2^1, t5}"] for c in (R, CH, CO, CU, U)},
    ),
    (
        "relative inside a sequence, with its initiator before",
        "E2 ; E1 + [00:00:05]",
        ["E2", 1, "E1", 10],
        {c: ["{e2^1, e1^1, t6}"] for c in (R, CH, CO, CU, U)},
    ),
    (
        "P: recent ticks the latest interval; chronicle and cumulative consume an "
        "interval at its first tick; continuous ticks every interval; E3 closes all; "
        "a tick due at E3's instant is inside (E1, E3]",
        "P(E1, [00:00:03], E3)",
        ["E1", 1, "E1", 8, "E3", 2, "E1", 4, "E3", 10],
        {
            R: ["{e1^2, t4}", "{e1^2, t7}", "{e1^3, t14}"],
            CH: ["{e1^1, t3}", "{e1^2, t4}", "{e1^3, t14}"],
            CO: [
                "{e1^1, t3}",
                "{e1^2, t4}",
                "{e1^1, t6}",
                "{e1^2, t7}",
                "{e1^1, t9}",
                "{e1^3, t14}",
            ],
            CU: ["{e1^1, t3}", "{e1^3, t14}"],
            U: [
                "{e1^1, t3}",
                "{e1^2, t4}",
                "{e1^1, t6}",
                "{e1^2, t7}",
                "{e1^1, t9}",
                "{e1^3, t14}",
            ],
        },
    ),
    (
        "P*: E3 emits an interval with its own ticks; chronicle closes the oldest "
        "interval only (the others keep ticking)",
        "P*(E1, [00:00:03], E3)",
        ["E1", 1, "E1", 8, "E3", 2, "E1", 4, "E3", 10],
        {
            R: ["{e1^2, t4, t7, e3^1}", "{e1^3, t14, e3^2}"],
            CH: ["{e1^1, t3, t6, t9, e3^1}", "{e1^2, t4, t7, t10, t13, e3^2}"],
            CO: ["{e1^1, t3, t6, t9, e3^1}", "{e1^2, t4, t7, e3^1}", "{e1^3, t14, e3^2}"],
            CU: ["{e1^1, t3, t6, t9, e3^1}", "{e1^3, t14, e3^2}"],
            U: ["{e1^1, t3, t6, t9, e3^1}", "{e1^2, t4, t7, e3^1}", "{e1^3, t14, e3^2}"],
        },
    ),
    (
        "P*: fires with no tick at all; needs an open interval",
        "P*(E1, [00:00:10], E3)",
        ["E3", 1, "E1", 2, "E3"],
        {c: ["{e1^1, e3^2}"] for c in (R, CH, CO, CU, U)},
    ),
    (
        "P and E3 at one instant: one occurrence closes the old interval and opens a new one",
        "P(E1, [00:00:04], E1)",
        ["E1", 5, "E1", 9],
        {
            R: ["{e1^1, t4}", "{e1^2, t9}", "{e1^2, t13}"],
            CH: ["{e1^1, t4}", "{e1^2, t9}"],
            CO: ["{e1^1, t4}", "{e1^2, t9}", "{e1^2, t13}"],
            CU: ["{e1^1, t4}", "{e1^2, t9}"],
            U: ["{e1^1, t4}", "{e1^2, t9}", "{e1^2, t13}"],
        },
    ),
]


@pytest.mark.parametrize("context", [R, CH, CO, CU, U], ids=str)
@pytest.mark.parametrize(
    ("expression", "steps", "expected"),
    [pytest.param(e, s, x, id=d[:60]) for d, e, s, x in CASES],
)
def test_each_context(
    expression: str, steps: list[Any], expected: dict[Context, list[str]], context: Context
) -> None:
    tl = Timeline()
    tl.watch("r", expression, context)
    tl.run(*steps)
    assert tl.labelled("r") == expected[context]


@pytest.mark.parametrize("context", [R, CH, CO, CU, U], ids=str)
def test_a_timer_fires_with_no_other_event(context: Context) -> None:
    tl = Timeline()
    seen = tl.watch("r", "E1 + [00:10:00]", context)
    tl.run("E1")
    assert tl.clock.advance(599) == 0 and not seen
    assert tl.clock.advance(1) == 1
    (occ,) = seen
    tick = occ.terminator
    assert tick.timestamp == tick.detected_timestamp == tl.start + 600
    assert occ.t_occ == tick.t_occ == 2 and tl.det.clock == 2
    assert timers(tl.det).pending() == 0


def test_tick_parameters_name_the_timer() -> None:
    tl = Timeline()
    tl.watch("p", "P(E1, [00:00:02], E3)", "continuous", flush=False)
    tl.run("E1", 4)
    ticks = [o for o in tl.log if o.event == "temporal:tick"]
    assert [dict(t.params["timer"]) for t in ticks] == [
        {
            "expr": "P(E1, [00:00:02], E3)",
            "context": "continuous",
            "ref": (str(tl.det.process_scope.id), (1,)),
            "n": n,
            "flush": False,
        }
        for n in (1, 2)
    ]
    assert list(ticks[0].params) == ["timer"]
    assert [t.timestamp - tl.start for t in ticks] == [2, 4]
    assert all(t.scope == tl.det.process_scope.id and t.source is None for t in ticks)


def test_periods_are_exact_multiples() -> None:
    tl = Timeline(start=0.0)
    seen = tl.watch("p", "P(E1, [00:00:00.1], E3)", "recent")
    tl.run("E1")
    for n in range(1, 11):
        tl.at(n / 10)
    dues = [o.terminator.timestamp for o in seen]
    assert dues == [n / 10 for n in range(1, 11)]  # 0.3, not 0.30000000000000004


def test_pstar_samples_a_registered_sampler() -> None:
    tl = Timeline()
    price = iter([101.5, 102.0, 99.25])
    tl.det.sampler("price", lambda: next(price))
    seen = tl.watch("avg", "P*(E1, [00:00:01] price, E3)", "recent")
    tl.run("E1", 3.5, "E3")
    (occ,) = seen
    assert occ.values("price") == (101.5, 102.0, 99.25)
    assert [t.params["timer"]["n"] for t in occ.of("temporal:tick")] == [1, 2, 3]


def test_pstar_without_sampler_collects_tick_times() -> None:
    tl = Timeline()
    seen = tl.watch("t", "P*(E1, [00:00:01], E3)", "recent")
    tl.run("E1", 2, "E3")
    (occ,) = seen
    assert [t.timestamp - tl.start for t in occ.of("temporal:tick")] == [1, 2]
    assert occ.values("price") == ()


def test_shared_nodes_in_two_contexts_keep_their_own_timers() -> None:
    tl = Timeline()
    tl.watch("recent", "E1 + [00:00:05]", "recent")
    tl.watch("chronicle", "E1 + [00:00:05]", "chronicle")
    tl.run("E1", 1, "E1", 10)
    assert tl.labelled("recent") == ["{e1^2, t6}"]
    assert tl.labelled("chronicle") == ["{e1^1, t5}", "{e1^2, t6}"]
    ticks = [o for o in tl.log if o.event == "temporal:tick"]
    assert sorted((t.params["timer"]["context"], t.timestamp - tl.start) for t in ticks) == [
        ("chronicle", 5),
        ("chronicle", 6),
        ("recent", 6),
    ]


def test_nested_relative_events_are_relative_to_due_times() -> None:
    tl = Timeline()
    tl.watch("r", "E1 + [00:00:02] + [00:00:03]", "chronicle")
    tl.run("E1", 10)
    assert tl.labelled("r") == ["{e1^1, t2, t5}"]


def test_python_spelling_matches_the_text() -> None:
    from datetime import timedelta

    from sentinel import P, Pstar

    tl = Timeline()
    e1, e3 = tl.det.event("E1"), tl.det.event("E3")
    assert e1 + timedelta(minutes=10) == tl.det.expression("E1 + [00:10:00]")
    assert P(e1, 10, e3) == tl.det.expression("P(E1, [00:00:10], E3)")
    tl.det.sampler("px", lambda: 1)
    assert Pstar(e1, "00:00:10", e3, "px") == tl.det.expression("P*(E1, [00:00:10] px, E3)")


@pytest.mark.parametrize("context", [R, CH, CO, CU, U], ids=str)
def test_interval_ends_reading(context: Context) -> None:
    # ERRATA "P, P*": the interval is (E1, E3]. No tick at E1's own instant; a
    # tick due at the clock reading at which E3 is signalled is inside (timers
    # fire before the events signalled at their instant).
    tl = Timeline()
    seen = tl.watch("r", "P*(E1, [00:00:05], E3)", context)
    tl.run("E1", 5, "E3")
    assert tl.labelled("r") == ["{e1^1, t5, e3^1}"]
    assert seen[0].terminator.event == "E3"


@pytest.mark.parametrize("context", [R, CH, CO, CU, U], ids=str)
def test_periodic_between_absolute_events(context: Context) -> None:
    # A trading session opened and closed by the clock: hourly ticks from 09:00
    # (excluded) to 17:00 (included), every day, in every context.
    from datetime import UTC, datetime

    from sentinel import VirtualClock

    tl = Timeline(clock=VirtualClock(datetime(2024, 3, 4, 8, tzinfo=UTC)))
    seen = tl.watch("day", "P*(<(09:00:00)*/*/*>, [01:00:00], <(17:00:00)*/*/*>)", context)
    tl.clock.advance(2 * 86_400)
    assert [len(o.of("temporal:tick")) for o in seen] == [8, 8]
    assert [o.at.hour for o in seen[0].of("temporal:tick")] == list(range(10, 18))


@pytest.mark.parametrize("context", [CO, U], ids=str)
def test_pstar_closes_its_intervals_with_every_terminator_of_an_instant(context: Context) -> None:
    # At E2 the continuous AND detects {e1^1, e2^1} and {e1^2, e2^1} at once: each
    # closes the interval E3 opened, with its ticks (docs/semantics.md, Batches).
    tl = Timeline()
    tl.watch("r", "P*(E3, [00:00:01], E1 ^ E2)", context)
    tl.run("E1", "E1", "E3", 2.5, "E2")
    assert tl.labelled("r") == [
        "{e1^1, e3^1, t1, t2, e2^1}",
        "{e1^2, e3^1, t1, t2, e2^1}",
    ]
