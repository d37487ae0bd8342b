"""A BiCEPL program as values: what the parser builds and the compiler reads.

Every node keeps its position in the program text (``pos``: line, column and
offset), so later stages can point at it. Names of classes, attributes and
actions keep the spelling the program used (``name``) and compare
case-insensitively through ``ident`` (lower case), as SQL identifiers do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "TIMING_PRIMITIVES",
    "ActionSpec",
    "And",
    "Attribute",
    "BinOp",
    "ClassDef",
    "ColumnTime",
    "Compare",
    "ComplexClass",
    "Condition",
    "Extreme",
    "ExtremeValue",
    "Fired",
    "Literal_",
    "Neg",
    "Not",
    "Now",
    "Or",
    "Pos",
    "Program",
    "Ref",
    "Shift",
    "SqlType",
    "Statement",
    "SubscribedClass",
    "TimeExpr",
    "Timing",
    "Value",
]

#: The timing primitives of Figure 2.1 (and Grammar 3.2), plus FUTURE.
TIMING_PRIMITIVES = (
    "ANNOUNCEMENT",
    "CANCELLATION",
    "CHANGE",
    "ONTIME",
    "LATE",
    "FUTURE",
    "RETROACTIVECHANGE",
    "REVOCATION",
    "POSTPONE",
)


@dataclass(frozen=True, slots=True)
class Pos:
    """A position in the program text: 1-based line and column, 0-based offset."""

    line: int
    column: int
    offset: int

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}"


# -- types and attributes ---------------------------------------------------------------
TypeKind = Literal["integer", "numeric", "real", "text", "boolean"]


@dataclass(frozen=True, slots=True)
class SqlType:
    """An attribute's type: one of the kinds the processor stores, with the
    length (text) or precision and scale (numeric) the program gave."""

    kind: TypeKind
    text: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None


@dataclass(frozen=True, slots=True)
class Attribute:
    name: str
    type: SqlType
    pos: Pos

    @property
    def ident(self) -> str:
        return self.name.lower()


# -- OCCURRING AT ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ColumnTime:
    """A column of the query's tables: ``ResourceEmpty.occTime``, ``tab.occTime``."""

    parts: tuple[str, ...]
    pos: Pos


@dataclass(frozen=True, slots=True)
class Shift:
    """``time + 10m`` (``seconds`` > 0) or ``time - 10m`` (< 0)."""

    time: TimeExpr
    seconds: int
    pos: Pos


@dataclass(frozen=True, slots=True)
class Extreme:
    """``MAX(t1, t2, ...)`` or ``MIN(...)`` over times."""

    fn: Literal["MAX", "MIN"]
    times: tuple[TimeExpr, ...]
    pos: Pos


TimeExpr = ColumnTime | Shift | Extreme


# -- condition-action statements -----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Now:
    pos: Pos


@dataclass(frozen=True, slots=True)
class Ref:
    """``NEW.column`` or ``OLD.column``."""

    side: Literal["new", "old"]
    column: str
    pos: Pos

    @property
    def ident(self) -> str:
        return self.column.lower()


@dataclass(frozen=True, slots=True)
class Literal_:
    """A number, a string, or a duration (``5d``: ``value`` is in seconds)."""

    kind: Literal["number", "string", "duration"]
    value: int | float | str
    pos: Pos


@dataclass(frozen=True, slots=True)
class BinOp:
    op: Literal["+", "-"]
    left: Value
    right: Value
    pos: Pos


@dataclass(frozen=True, slots=True)
class Neg:
    value: Value
    pos: Pos


@dataclass(frozen=True, slots=True)
class ExtremeValue:
    fn: Literal["MAX", "MIN"]
    values: tuple[Value, ...]
    pos: Pos


Value = Now | Ref | Literal_ | BinOp | Neg | ExtremeValue


@dataclass(frozen=True, slots=True)
class Timing:
    """A timing primitive; ``LATE(lo, hi)`` carries its bounds in seconds."""

    primitive: str
    pos: Pos
    low: int | None = None
    high: int | None = None


@dataclass(frozen=True, slots=True)
class Fired:
    pos: Pos


@dataclass(frozen=True, slots=True)
class Compare:
    op: str
    left: Value
    right: Value
    pos: Pos


@dataclass(frozen=True, slots=True)
class Not:
    condition: Condition
    pos: Pos


@dataclass(frozen=True, slots=True)
class And:
    left: Condition
    right: Condition
    pos: Pos


@dataclass(frozen=True, slots=True)
class Or:
    left: Condition
    right: Condition
    pos: Pos


Condition = Timing | Fired | Compare | Not | And | Or


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """``informOwner('delayed', new.resource, new.occTime)``."""

    name: str
    params: tuple[Value, ...]
    pos: Pos

    @property
    def ident(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Statement:
    """``ON condition DO action``; ``text`` is the statement as written."""

    condition: Condition
    action: ActionSpec
    pos: Pos
    text: str


# -- classes -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClassDef:
    name: str
    attributes: tuple[Attribute, ...]
    keys: tuple[str, ...]
    lifespan: int | None  # seconds; None: unbounded (LIFESPAN(-1) or none given)
    statements: tuple[Statement, ...]
    pos: Pos
    key_positions: tuple[Pos, ...] = ()

    @property
    def ident(self) -> str:
        return self.name.lower()

    def attribute(self, ident: str) -> Attribute | None:
        for a in self.attributes:
            if a.ident == ident:
                return a
        return None


@dataclass(frozen=True, slots=True)
class SubscribedClass(ClassDef):
    mutable: bool = True


@dataclass(frozen=True, slots=True)
class ComplexClass(ClassDef):
    query: str = ""
    query_pos: Pos = field(default_factory=lambda: Pos(1, 1, 0))
    occurring: TimeExpr | None = None


@dataclass(frozen=True, slots=True)
class Program:
    """A parsed BiCEPL program: its classes in the order written."""

    text: str
    classes: tuple[ClassDef, ...]
