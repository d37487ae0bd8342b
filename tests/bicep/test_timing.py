"""A condition whose timing primitives exclude each other is refused: the
check (:func:`sentinel.bicep.timing.never_holds`) against the reference
evaluator's own reading of each primitive (tests/bicep/reference.py, no SQL)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings

from sentinel.bicep import Processor
from sentinel.bicep import model as m
from sentinel.bicep.compiler import compile_program
from sentinel.bicep.parser import parse_program
from sentinel.bicep.timing import never_holds
from sentinel.errors import BicepProgramError

from .reference import Change, Fired, Reference, Version
from .test_properties import conditions

C = 600
T = 1_400_000_400
S = "CREATE MUTABLE SUBSCRIBED EVENT CLASS X (a INT) ID (a) LIFESPAN(1d)"

PRIMITIVES = [
    "ANNOUNCEMENT",
    "CHANGE",
    "REVOCATION",
    "ONTIME",
    "FUTURE",
    "LATE",
    "RETROACTIVECHANGE",
    "POSTPONE",
    "CANCELLATION",
]
FREE = ["LATE(10m, 30m)", "FIRED", "NEW.a > 2"]


def statement(cond: str) -> m.Statement:
    program = parse_program(f"{S} ON {cond} DO f(NEW.a);")
    (cls,) = program.classes
    (st_,) = cls.statements
    return st_


# every kind of change: no version, or one occurring two chronons before the
# tick, at the tick before, inside this chronon, at the tick, inside the next
# chronon, two ahead; attribute a low or high; touched or not; fired before or not
TIMES = [T - 2 * C, T - C, T - C // 2, T, T + C // 2, T + 2 * C]
OLDS = [None, *(Version(t, T - 3 * C, {"a": 1}) for t in TIMES)]
NEWS = [None, *(Version(t, T, {"a": a}) for t in TIMES for a in (1, 3))]


def holds_anywhere(stmt: m.Statement) -> bool:
    ref = Reference.__new__(Reference)
    ref.chronon = C
    ref.actions = {"f": "f"}
    cls: Any = type("Cls", (), {"name": "X"})
    for old, new, touched, fired in itertools.product(OLDS, NEWS, (True, False), (False, True)):
        if not touched and (old is None or new is None):
            continue  # an untouched event has a version, the same before and after
        ref.fired = [Fired(T - C, "f", "X", (1,), (), eid=1)] if fired else []
        ch = Change(1, (1,), old, new, touched)
        if ref._holds(stmt.condition, ch, cls, stmt, T) is True:
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(conditions(PRIMITIVES, "a"))
def test_a_condition_of_primitives_is_refused_exactly_when_nothing_can_satisfy_it(
    cond: str,
) -> None:
    """Over the primitives alone the check is exact: it says "never" for a
    condition the reference finds no change, at any tick, to satisfy, and
    for no other."""
    stmt = statement(cond)
    assert never_holds(stmt.condition) == (not holds_anywhere(stmt)), cond


@settings(max_examples=300, deadline=None)
@given(conditions(PRIMITIVES + FREE, "a"))
def test_a_condition_refused_never_holds_even_with_comparisons_and_fired(cond: str) -> None:
    """With comparisons, FIRED and LATE's bounds (taken as free) the check may
    let a condition that never holds through, but never refuses one that can."""
    stmt = statement(cond)
    if never_holds(stmt.condition):
        assert not holds_anywhere(stmt), cond


@pytest.mark.parametrize(
    ("cond", "names"),
    [
        ("FUTURE AND LATE", "FUTURE, LATE"),
        ("ANNOUNCEMENT AND (REVOCATION OR CHANGE)", "ANNOUNCEMENT, REVOCATION, CHANGE"),
        ("ONTIME AND NEW.a > 2 AND REVOCATION", "ONTIME, REVOCATION"),
        ("LATE(10m, 30m) AND NOT LATE", "LATE(600, 1800), LATE"),
        ("LATE AND RETROACTIVECHANGE", "LATE, RETROACTIVECHANGE"),
    ],
)
def test_the_compiler_names_the_primitives_that_exclude_each_other(cond: str, names: str) -> None:
    text = f"{S} ON {cond} DO f(NEW.a);"
    with pytest.raises(BicepProgramError, match="never holds") as info:
        compile_program(text, name="p")
    message = str(info.value)
    assert f"({names})" in message
    assert "line 1" in message


@pytest.mark.parametrize(
    "cond",
    [
        "FUTURE AND CHANGE",  # a future delivery moved later (Example 2.2)
        "POSTPONE AND CANCELLATION",
        "ONTIME AND NOT ANNOUNCEMENT",
        "LATE(10m, 30m) AND NOT LATE(40m, 50m)",
        "FUTURE AND NEW.a > 2 AND NOT NEW.a > 2",  # comparisons are not judged
    ],
)
def test_conditions_that_can_hold_are_compiled(cond: str) -> None:
    compile_program(f"{S} ON {cond} DO f(NEW.a);", name="p")


def test_a_processor_refuses_the_program_before_touching_the_database(tmp_path: Any) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'b.db'}")
    with pytest.raises(BicepProgramError, match="never holds"):
        Processor(f"{S} ON FUTURE AND LATE DO f(NEW.a);", engine, name="p")
    assert sa.inspect(engine).get_table_names() == []
