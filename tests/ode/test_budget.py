"""The faster register colouring builds the automata the first one built."""

from __future__ import annotations

import typing as t

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import ode
from sentinel.ode import automata as au
from sentinel.ode import compile as compile_module
from sentinel.ode.automata import Automaton, reads
from tests.ode.test_properties import EVENTS, NAMES, terms

# -- the register colouring, against its first, straightforward form ---------------------


def _members(bits: int) -> set[int]:
    out: set[int] = set()
    r = 0
    while bits:
        if bits & 1:
            out.add(r)
        bits >>= 1
        r += 1
    return out


def reference_compact(m: Automaton) -> Automaton:
    """``_compact`` as first written: a walk over each register's clashes."""
    if not m.nregs:
        return m
    n, k = m.n, m.k
    live = au._live_bits(m)
    ops = [
        [tuple((d, s) for d, s in m.ops[q][a] if live[m.delta[q][a]] >> d & 1) for a in range(k)]
        for q in range(n)
    ]
    used: set[int] = set()
    for q in range(n):
        if m.acc[q]:
            used.update(reads(m.rec[q]))
        for a in range(k):
            for d, src in ops[q][a]:
                used.add(d)
                used.update(reads(src))
    clash: dict[int, int] = {r: 0 for r in used}
    for lq in set(live):
        for r in _members(lq):
            if r in clash:
                clash[r] |= lq
    ren: dict[int, int] = {}
    for r in sorted(used):
        taken = {ren[x] for x in _members(clash[r] & ~(1 << r)) if x in ren}
        c = 0
        while c in taken:
            c += 1
        ren[r] = c
    count = max(ren.values(), default=-1) + 1

    def rn(x: t.Any) -> t.Any:
        if x is None:
            return None
        if x[0] == "r":
            return ("r", ren[x[1]])
        if x[0] == "c":
            return x
        return (x[0], x[1], tuple(rn(c) for c in x[2]))

    ops2 = [
        [
            tuple(
                (ren[d], rn(src))
                for d, src in ops[q][a]
                if not (src[0] == "r" and ren[src[1]] == ren[d])
            )
            for a in range(k)
        ]
        for q in range(n)
    ]
    rec2 = [rn(r) if m.acc[q] else None for q, r in enumerate(m.rec)]
    return Automaton(k, m.delta, m.acc, ops2, rec2, count)


@given(st.sets(st.integers(0, 3000), max_size=40))
def test_members_lists_the_bits_set(registers: set[int]) -> None:
    assert au._members(au._bits(registers)) == registers == _members(au._bits(registers))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(term=terms)
def test_compiled_automata_are_the_ones_the_first_colouring_made(
    term: t.Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same states, transitions, register assignments and records, so the same
    detections (tests/ode/test_properties.py checks those against E[h])."""
    over = [EVENTS[n] for n in NAMES]
    with monkeypatch.context() as patch:
        patch.setattr(compile_module, "_CACHE", compile_module.OrderedDict())
        try:
            new = ode.event(term, over=over).automaton
        except ode.AutomatonTooLarge:
            return
        patch.setattr(compile_module, "_CACHE", compile_module.OrderedDict())
        patch.setattr(au, "_compact", reference_compact)
        old = ode.event(term, over=over).automaton
    assert (new.delta, new.acc, new.ops, new.rec, new.nregs) == (
        old.delta,
        old.acc,
        old.ops,
        old.rec,
        old.nregs,
    )
