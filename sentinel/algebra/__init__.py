"""The event algebra: expressions, their Python operators, and Snoop text."""

from sentinel.algebra.expressions import (
    SOURCE,
    A,
    And,
    Any,
    Astar,
    Expression,
    Keyed,
    KeySpec,
    Not,
    Or,
    Primitive,
    Seq,
)
from sentinel.algebra.syntax import parse, to_text
from sentinel.algebra.temporal import Absolute, AbsoluteTime, Duration, P, Pstar, Relative

__all__ = [
    "SOURCE",
    "A",
    "Absolute",
    "AbsoluteTime",
    "And",
    "Any",
    "Astar",
    "Duration",
    "Expression",
    "KeySpec",
    "Keyed",
    "Not",
    "Or",
    "P",
    "Primitive",
    "Pstar",
    "Relative",
    "Seq",
    "parse",
    "to_text",
]
