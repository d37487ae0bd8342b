"""Event expressions: constructors, Python operators, structural equality."""

from __future__ import annotations

import pickle

import pytest

from sentinel import SOURCE, A, Any, Astar, ExpressionError, Not, Primitive, parse
from sentinel.algebra import And, Keyed, Or, Seq

E1, E2, E3, E4 = (Primitive(f"E{i}") for i in range(1, 5))


def test_python_operators_build_the_snoop_operators() -> None:
    assert Or(E1, E2) == E1 | E2
    assert And(E1, E2) == E1 & E2
    assert Seq(E1, E2) == E1 >> E2
    assert (E1 >> E2).by("k") == Keyed(Seq(E1, E2), "k")


def test_equal_structure_means_equal_and_same_hash() -> None:
    a = (E1 & E2) >> E3
    b = (Primitive("E1") & Primitive("E2")) >> Primitive("E3")
    assert a == b and hash(a) == hash(b)
    assert len({a, b, parse("(E1 ^ E2) ; E3")}) == 1


def test_different_structure_is_different() -> None:
    assert (E1 >> E2) >> E3 != E1 >> (E2 >> E3)
    assert E1 & E2 != E2 & E1  # operand order is part of the expression
    assert A(E1, E2, E3) != Astar(E1, E2, E3)
    assert Primitive("S", selector=1) != Primitive("S", selector=2)


def test_label_is_not_part_of_equality() -> None:
    assert Primitive("S", 1, label="ibm") == Primitive("S", 1, label="other")


def test_not_takes_middle_first_like_the_text() -> None:
    n = Not(E2, E1, E3)
    assert (n.start, n.middle, n.end) == (E1, E2, E3)
    assert str(n) == "NOT(E2)[E1, E3]"
    assert n.with_children([E1, E4, E3]) == Not(E4, E1, E3)


def test_expressions_are_immutable_and_picklable() -> None:
    e = Any(2, E1, E2 >> E3, Not(E2, E1, E4)).by(SOURCE)
    with pytest.raises(AttributeError):
        e.key = "x"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(e)) == e
    labelled = Primitive("S", 7, label="ibm")
    back = pickle.loads(pickle.dumps(labelled))
    assert back == labelled and back.label == "ibm"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Any(3, E1, E2), "m must be between 1 and 2"),
        (lambda: Any(0, E1, E2), "m must be between 1 and 2"),
        (lambda: Any(1, E1), "at least two events"),
        (lambda: Any(2, E1, E1), "more than once"),
        (lambda: Any("2", E1, E2), "integer count"),
        (lambda: E1 >> "E2", "must be an event expression"),
        (lambda: A(E1, E2, 3), "must be an event expression"),
        (lambda: Primitive(""), "non-empty name"),
        (lambda: E1.by("not a name"), "parameter name or SOURCE"),
    ],
)
def test_invalid_expressions_are_rejected(build: object, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        build()  # type: ignore[operator]


def test_walk_and_primitives() -> None:
    e = (E1 & E2) >> (E2 & E4)
    assert [str(n) for n in e.walk()][-1] == "E1 ^ E2 ; E2 ^ E4"
    assert [p.name for p in e.primitives()] == ["E1", "E2", "E2", "E4"]
