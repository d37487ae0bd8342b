"""Condition-action statements as SQL over a class's change table.

At a tick the processor writes, for every event that something happened to, one
row into the class's change table (``c``): its version before the tick
(``o_*``, ``o_present``) and after it (``n_*``, ``n_present``), and whether it
changed at this tick (``touched``) or only its occurrence time arrived
(``touched = 0``: the global occurrence-time optimization of 4.1.4 adds those
rows only at potential clock ticks). A statement is an ``INSERT ... SELECT``
from that table into its action's table, its condition the ``WHERE`` clause.

The timing primitives, with ``T`` the tick and ``tick(t)`` the tick of the
chronon holding time ``t`` (``docs/bicepl.md`` discusses each reading):

=====================  ===================================================================
ANNOUNCEMENT           touched, no version before, a version after
CHANGE                 touched, a version before and a different one after
REVOCATION             touched, a version before, none after
ONTIME                 a version after whose tick(occTime) = T
FUTURE                 touched, a version after with tick(occTime) > T, and before it no
                       version or one with tick(occTime) > T (a POSTPONE is not FUTURE,
                       as a RETROACTIVECHANGE is not LATE)
LATE                   touched, a version after with tick(occTime) < T, and before it no
                       version or one with tick(occTime) > T (the event became known
                       only after it happened)
LATE(a, b)             LATE and a <= T - tick(occTime) <= b
RETROACTIVECHANGE      CHANGE of a version with tick(occTime) <= T to one with
                       tick(occTime) <= T
POSTPONE               CHANGE of a version with tick(occTime) <= T to one with
                       tick(occTime) > T
CANCELLATION           REVOCATION or POSTPONE
FIRED                  the statement's action fired for this event at an earlier tick
=====================  ===================================================================

Comparisons follow SQL: a comparison with a missing value (``OLD.x`` at an
announcement, ``NEW.occTime`` at a revocation) is unknown, and ``NOT`` of
unknown is unknown; a statement fires when its condition is true.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sentinel.bicep import model as m
from sentinel.bicep.compiler import CompiledClass, value_kind
from sentinel.bicep.sqlpart import EID, extreme_sql
from sentinel.bicep.timing import primitive_sql

__all__ = ["StatementSQL", "checked_sql", "mentions_ontime", "statement_sql"]

T = ":bicep_tick"


def _tick(dialect: str) -> str:
    return "CAST(:bicep_tick AS BIGINT)" if dialect == "postgresql" else T


def mentions_ontime(cond: m.Condition) -> bool:
    """Whether ``cond`` names ONTIME: such statements also look at events whose
    occurrence time arrives without a change (``touched = 0``)."""
    if isinstance(cond, m.Timing):
        return cond.primitive == "ONTIME"
    if isinstance(cond, (m.And, m.Or)):
        return mentions_ontime(cond.left) or mentions_ontime(cond.right)
    if isinstance(cond, m.Not):
        return mentions_ontime(cond.condition)
    return False


def _string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


class Binds(dict[str, str]):
    """The string literals of a statement, bound as parameters: a quoted
    literal does not mean the same text everywhere (MariaDB reads a backslash
    in it as an escape), a bound value does."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def add(self, value: str) -> str:
        name = f"{self.prefix}{len(self)}"
        self[name] = value
        return f":{name}"


def value_sql(v: m.Value, dialect: str, binds: Binds | None = None) -> str:
    """A condition or action value as SQL over the change table ``c``; string
    literals become parameters in ``binds`` (shown quoted without it)."""
    if isinstance(v, m.Now):
        return _tick(dialect)
    if isinstance(v, m.Ref):
        return f"c.{'n' if v.side == 'new' else 'o'}_{v.ident}"
    if isinstance(v, m.Literal_):
        if v.kind == "string":
            text = str(v.value)
            return _string(text) if binds is None else _text(binds.add(text), dialect)
        return repr(v.value) if isinstance(v.value, float) else str(v.value)
    if isinstance(v, m.BinOp):
        left, right = value_sql(v.left, dialect, binds), value_sql(v.right, dialect, binds)
        return f"({left} {v.op} {right})"
    if isinstance(v, m.Neg):
        return f"(-{value_sql(v.value, dialect, binds)})"
    return extreme_sql(v.fn, [value_sql(x, dialect, binds) for x in v.values], dialect)


#: An expression SQLite cannot compute: the absolute value of the least integer
#: raises "integer overflow" (a constant, so only when the CASE reaches it).
_SQLITE_OVERFLOW = "abs(-9223372036854775807 - 1)"


def checked_sql(v: m.Value, cls: CompiledClass, dialect: str, binds: Binds | None = None) -> str:
    """:func:`value_sql`, failing as PostgreSQL and MariaDB fail when integer
    arithmetic leaves the 64-bit integers: SQLite would go on in floating point
    (``9223372036854775807 + 1`` is ``9.223372036854776e18`` there), and a
    condition would hold, or an action get a value, on SQLite only.

    On SQLite an overflowed sum is a real number, and stays one through ``+``
    and ``-``; ``MAX`` and ``MIN`` may drop it. So the value, and each argument
    of a ``MAX`` or ``MIN`` that is a sum, is checked (each check repeats its
    sum: the compiler bounds how deeply ``MAX`` and ``MIN`` nest)."""
    if dialect != "sqlite":
        return value_sql(v, dialect, binds)
    return _guarded(v, cls, binds)


def _guarded(v: m.Value, cls: CompiledClass, binds: Binds | None) -> str:
    sql = _sqlite_sql(v, cls, binds)
    if not isinstance(v, (m.BinOp, m.Neg)) or value_kind("", cls, v) != "integer":
        return sql
    return f"(CASE WHEN typeof({sql}) = 'real' THEN {_SQLITE_OVERFLOW} ELSE {sql} END)"


def _sqlite_sql(v: m.Value, cls: CompiledClass, binds: Binds | None) -> str:
    if isinstance(v, m.BinOp):
        return f"({_sqlite_sql(v.left, cls, binds)} {v.op} {_sqlite_sql(v.right, cls, binds)})"
    if isinstance(v, m.Neg):
        return f"(-{_sqlite_sql(v.value, cls, binds)})"
    if isinstance(v, m.ExtremeValue):
        return extreme_sql(v.fn, [_guarded(x, cls, binds) for x in v.values], "sqlite")
    return value_sql(v, "sqlite", binds)


def _text(param: str, dialect: str) -> str:
    # PostgreSQL must know a parameter's type where the context does not say it
    # (``INSERT ... SELECT :p``)
    return f"CAST({param} AS TEXT)" if dialect == "postgresql" else param


def condition_sql(
    cond: m.Condition,
    dialect: str,
    fired: str,
    binds: Binds | None = None,
    cls: CompiledClass | None = None,
) -> str:
    """``cond`` as a SQL boolean expression; ``fired`` is the SQL of FIRED;
    string literals become parameters in ``binds`` (shown quoted without it).
    With the class ``cls``, integer arithmetic that overflows fails on every
    database (:func:`checked_sql`)."""
    if isinstance(cond, m.Timing):
        return primitive_sql(cond, _tick(dialect))
    if isinstance(cond, m.Fired):
        return fired
    if isinstance(cond, m.Compare):
        if cls is None:
            left = value_sql(cond.left, dialect, binds)
            right = value_sql(cond.right, dialect, binds)
        else:
            left = checked_sql(cond.left, cls, dialect, binds)
            right = checked_sql(cond.right, cls, dialect, binds)
        return f"({left} {cond.op} {right})"
    if isinstance(cond, m.Not):
        return f"(NOT {condition_sql(cond.condition, dialect, fired, binds, cls)})"
    op = "AND" if isinstance(cond, m.And) else "OR"
    return (
        f"({condition_sql(cond.left, dialect, fired, binds, cls)} {op} "
        f"{condition_sql(cond.right, dialect, fired, binds, cls)})"
    )


@dataclass(frozen=True)
class StatementSQL:
    """One statement's ``INSERT ... SELECT`` (parameters ``bicep_tick`` and
    ``params``, its string literals)."""

    cls: str
    index: int
    action: str
    sql: str
    ontime: bool
    params: dict[str, str] = field(default_factory=dict)


def statement_sql(
    cls: CompiledClass,
    index: int,
    changes: str,
    action_table: str,
    dialect: str,
) -> StatementSQL:
    """The SQL that fires ``cls``'s statement ``index``: rows of the change
    table ``changes`` satisfying the condition go into ``action_table``."""
    st = cls.definition.statements[index]
    tick = _tick(dialect)
    fired = (
        f"(EXISTS (SELECT 1 FROM {action_table} f WHERE f.class_ident = {_string(cls.ident)} "
        f"AND f.{EID} = c.{EID} AND f.bicep_tick < {tick}))"
    )
    binds = Binds(f"bicep_s{index}_")
    where = condition_sql(st.condition, dialect, fired, binds, cls)
    ontime = mentions_ontime(st.condition)
    if not ontime:
        where = f"c.touched = 1 AND {where}"
    params = [checked_sql(v, cls, dialect, binds) for v in st.action.params]
    columns = ["bicep_tick", "class_ident", EID, "stmt", "occtime", "dettime", "published"]
    columns += [f"p{i + 1}" for i in range(len(params))]
    values = [tick, _string(cls.ident), f"c.{EID}", str(index), "c.n_occtime", "c.n_dettime", "0"]
    values += params
    sql = (
        f"INSERT INTO {action_table} ({', '.join(columns)}) "
        f"SELECT {', '.join(values)} FROM {changes} c WHERE {where}"
    )
    return StatementSQL(cls.ident, index, st.action.ident, sql, ontime, dict(binds))
