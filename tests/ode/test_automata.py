"""Sizes of compiled automata: registers no record reads cost no states, and an
expression that needs too many states is refused naming it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from sentinel import ode
from sentinel.ode import automata as au
from sentinel.ode import compile as compile_module
from sentinel.ode import machines
from sentinel.ode import terms as tm
from sentinel.ode.alphabet import Alphabet
from sentinel.ode.compile import _Compiler
from sentinel.ode.event import _masks
from sentinel.ode.syntax import parse_term
from tests.ode.brute import history
from tests.ode.test_properties import (
    EVENTS,
    NAMES,
    _check_relative,
    detect,
    expected,
    histories,
    terms,
)

UNIVERSE = [EVENTS[n] for n in NAMES]


def automaton(text: str) -> au.Automaton:
    return ode.event(text, over=UNIVERSE).automaton


# The ninth a after a large a, in a history where many a's are small: a point
# where relative(a[x > 1], <3> every <3> a) holds depends on the tenth last a,
# so the minimal automaton remembers the last ten a's' masks (2**10 states).
# Before the dead registers were dropped, the threads of relative multiplied
# them beyond 20,000 states and the expression was refused.
COUNTED = "relative(a[x > 1], <3> every <3> a)"
HISTORY = [
    ("a", 2), ("a", 0), ("b", 0), ("a", 2), ("a", 1), ("c", 0), ("a", 2), ("a", 0),
    ("a", 2), ("a", 0), ("a", 2), ("b", 2), ("a", 2), ("a", 0), ("a", 2), ("a", 2),
    ("a", 0), ("a", 2), ("c", 1), ("a", 1), ("a", 0), ("a", 2), ("a", 0), ("a", 2),
]  # fmt: skip


def test_registers_that_only_feed_dead_registers_cost_no_states() -> None:
    # every <3> a keeps assigning its group's register after <3> has counted its
    # third group, and nothing reads it any more: those assignments must go, and
    # with them the states that differed only by them (13 before, 11 now).
    # As relative(a[x > 1], ...) receives its operand: over the alphabet that
    # tells large a's from small ones.
    alphabet = Alphabet(UNIVERSE, _masks(parse_term(COUNTED), UNIVERSE))
    m = _Compiler(alphabet, None).c(parse_term("<3> every <3> a"), ())
    assert (m.k, m.n, m.plain().n) == (4, 11, 11)


def test_relative_over_a_counter_with_a_mask_compiles_to_its_minimal_size() -> None:
    m = automaton(COUNTED)
    assert m.plain().n == 2**10
    assert m.n == m.plain().n


def test_relative_over_a_counter_with_a_mask_detects_the_definitions() -> None:
    term = parse_term(COUNTED)
    got = detect(term, HISTORY)
    want = expected(term, HISTORY)
    # By hand: the a's at 13, 15, 17, 20, 22 and 23 are each the ninth a after a
    # large one (at 1, 4, 7, 9, 11 and 13).
    assert want == [13, 15, 17, 20, 22, 23]
    assert [d.t_occ for d in got] == want
    h = history([n for n, _ in HISTORY], [{"x": x} for _, x in HISTORY])
    for d in got:
        _check_relative(term, h, d.t_occ - 1, d.parts)


def test_an_expression_that_needs_too_many_states_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The 27th a after a large one: 2**28 states, inherently. With the default
    # MAX_WORK the work limit refuses it first (tests/ode/test_budget.py); lifted,
    # the limit on states does.
    monkeypatch.setattr(au, "MAX_WORK", 10**9)
    monkeypatch.setattr(compile_module, "_CACHE", compile_module.OrderedDict())
    text = "relative(a[x > 1], <3> every <3> every <3> a)"
    with pytest.raises(ode.AutomatonTooLarge) as caught:
        automaton(text)
    assert caught.value.term == parse_term(text)
    assert caught.value.states == au.MAX_STATES
    assert str(parse_term(text)) in str(caught.value)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(terms)
def test_compiled_automata_are_finished(term: tm.Term) -> None:
    """Every construction returns its own fixpoint: dropping unread assignments
    and minimizing again changes nothing (an assignment kept for a register no
    record reads would show here as fewer states or registers)."""
    m = ode.event(term, over=UNIVERSE).automaton
    again = au.minimize(machines._compact(m))
    assert (again.n, again.nregs) == (m.n, m.nregs)


# Threads of relative kept in order, newest first, multiply the states by the
# orders they can come in: relative(c, every <2> a || every <3> b) has 184 sets
# of threads but over 5,000 orders of them. Over the limit in order, a
# construction keeps them as sets and picks the newest thread when the point is
# read; with the limit at 1,000 this one is built that way.
ORDERS = "relative(c, every <2> a || every <3> b)"
ORDER_HISTORY = [
    ("c", 0), ("a", 0), ("b", 0), ("c", 0), ("a", 0), ("b", 0), ("b", 0), ("c", 0),
    ("a", 0), ("a", 0), ("b", 0), ("c", 0), ("b", 0), ("a", 0), ("b", 0), ("a", 0),
]  # fmt: skip


def test_threads_in_too_many_orders_are_kept_as_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(au, "MAX_STATES", 1_000)
    monkeypatch.setattr(compile_module, "_CACHE", type(compile_module._CACHE)())
    real = au._threads
    monkeypatch.setattr(au, "_threads", lambda build: build(True))
    with pytest.raises(au.AutomatonTooLarge):
        automaton(ORDERS)  # in order only
    monkeypatch.setattr(au, "_threads", real)
    m = automaton(ORDERS)
    assert m.plain().n == 40
    term = parse_term(ORDERS)
    got = detect(term, ORDER_HISTORY)
    want = expected(term, ORDER_HISTORY)
    assert len(want) >= 8  # the model sees something
    assert [d.t_occ for d in got] == want
    h = history([n for n, _ in ORDER_HISTORY])
    for d in got:
        _check_relative(term, h, d.t_occ - 1, d.parts)


def _shapes(term: tm.Term, hist: list[tuple[str, int]]) -> list[Any]:
    def shape(part: Any) -> Any:
        if hasattr(part, "parts"):
            return (str(part.event), part.t_occ, [shape(p) for p in part.parts])
        return part.t_occ

    return [shape(d) for d in detect(term, hist)]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(terms, histories)
def test_threads_as_sets_record_what_threads_in_order_record(
    term: tm.Term, hist: list[tuple[str, int]]
) -> None:
    """The newest thread chosen when a point is read (threads as sets) is the one
    the order knew: the same detections with the same records."""
    in_order = _shapes(term, hist)
    saved = dict(compile_module._CACHE)
    compile_module._CACHE.clear()
    real = au._threads
    au._threads = lambda build: build(False)  # type: ignore[assignment]
    try:
        as_sets = _shapes(term, hist)
    finally:
        au._threads = real
        compile_module._CACHE.clear()
        compile_module._CACHE.update(saved)
    assert as_sets == in_order
