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

__all__ = [
    "SOURCE",
    "A",
    "And",
    "Any",
    "Astar",
    "Expression",
    "KeySpec",
    "Keyed",
    "Not",
    "Or",
    "Primitive",
    "Seq",
    "parse",
    "to_text",
]
