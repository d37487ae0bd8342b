"""The event algebra: expressions, their Python operators, and Snoop text."""

from sentinel.algebra import expressions as _expressions
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
from sentinel.algebra.masks import masked as _masked
from sentinel.algebra.syntax import parse, to_text
from sentinel.algebra.temporal import Absolute, AbsoluteTime, Duration, P, Pstar, Relative

# The one list of what a module of this package builds of the modules above it
# (which subclass its classes, so it cannot import them): the Python spelling
# E + [t] builds a Relative, E.where(...) a Masked. docs/architecture.md,
# "Layers as contracts".
_expressions.BUILT_ABOVE.update(relative=Relative, masked=_masked)

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
