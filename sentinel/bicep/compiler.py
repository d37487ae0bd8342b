"""Compile a BiCEPL program: names, keys, dependencies, actions, SQL.

:func:`compile_program` parses the text, reads each complex class's query with
sqlglot, and checks everything that needs no database: duplicate names, keys
that are attributes, ``NEW.``/``OLD.`` columns that exist, complex classes that
do not depend on each other in a cycle, actions used with one signature, timing
primitives that can hold for the class. The result orders the classes by
dependency (strata: subscribed classes first, then each complex class after the
classes it reads), which is the order a clock tick derives and expires them in.
The limits on names, types and sizes, and their checks, are in
:mod:`sentinel.bicep.limits`.

Checking the queries against the real tables (unknown columns, application tables
that do not exist) happens when the program is installed
(:meth:`sentinel.bicep.Processor.install`): each complex class's rewritten query
runs with ``LIMIT 0`` in a savepoint.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from sentinel.bicep import model as m
from sentinel.bicep.limits import (
    SYSTEM_COLUMNS,
    _check_length,
    _check_schema,
    check_storage,
    name_limit,
    name_offset,
)
from sentinel.bicep.parser import error_at, parse_program
from sentinel.bicep.sqlpart import ParsedQuery, parse_query, render_query
from sentinel.bicep.timing import never_holds
from sentinel.errors import BicepCycleError, BicepProgramError, shortened
from sentinel.log.tables import DEFAULT_PREFIX, MAX_PREFIX

__all__ = [
    "ActionSignature",
    "CompiledClass",
    "CompiledProgram",
    "check_storage",
    "compile_program",
    "name_limit",
    "value_kind",
]

#: How deeply MAX and MIN may nest in a value.
MAX_EXTREME_DEPTH = 8

#: A program's name (matched in full: ``$`` would let a trailing newline in).
_NAME = re.compile(r"[a-z][a-z0-9_]{0,23}")
#: A table-name prefix: ASCII only, so that a character is a byte in every
#: database's limit on names (``sentinel.log.tables.log_tables`` checks the same).
_PREFIX = re.compile(rf"[A-Za-z0-9_]{{1,{MAX_PREFIX}}}")
#: What no installed program's text may hold: NUL (PostgreSQL's text cannot
#: Primitives that never hold for an event that cannot change.
_CHANGE_ONLY = ("CHANGE", "CANCELLATION", "RETROACTIVECHANGE", "REVOCATION", "POSTPONE")

Kind = Literal["integer", "numeric", "real", "text", "boolean"]


@dataclass(frozen=True)
class ActionSignature:
    """An action as the program uses it: its name (as first written), the kind of
    each parameter, and where it is used."""

    name: str
    kinds: tuple[Kind, ...]
    uses: tuple[tuple[str, int], ...]  # (class ident, statement index)
    #: Which parameters are times (seconds in the tables, datetimes for callables).
    times: tuple[bool, ...] = ()
    #: Which parameters are exact decimals: a ``NUMERIC(p, s)`` attribute
    #: (``NEW.x``, ``OLD.x``, negated or not) at every use.
    decimals: tuple[bool, ...] = ()

    @property
    def ident(self) -> str:
        return self.name.lower()


@dataclass
class CompiledClass:
    """One event class, checked, with its place in the dependency order."""

    definition: m.ClassDef
    stratum: int
    depends_on: tuple[str, ...]
    query: ParsedQuery | None = None
    #: Classes that read this one (filled by the compiler).
    dependents: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def ident(self) -> str:
        return self.definition.ident

    @property
    def complex(self) -> bool:
        return isinstance(self.definition, m.ComplexClass)

    @property
    def mutable(self) -> bool:
        d = self.definition
        return not isinstance(d, m.SubscribedClass) or d.mutable

    def column_kind(self, ident: str) -> Kind | None:
        if ident in SYSTEM_COLUMNS:
            return "integer"
        a = self.definition.attribute(ident)
        return None if a is None else a.type.kind


@dataclass
class CompiledProgram:
    """A checked BiCEPL program for one SQL dialect."""

    name: str
    program: m.Program
    dialect: str
    #: Classes by identifier, in dependency order.
    classes: dict[str, CompiledClass]
    actions: dict[str, ActionSignature]
    digest: str
    statements: list[tuple[str, int, m.Statement]] = field(default_factory=list)
    #: The table-name prefix the program's names were checked for.
    prefix: str = DEFAULT_PREFIX

    @property
    def text(self) -> str:
        return self.program.text

    def __iter__(self) -> Iterator[CompiledClass]:
        return iter(self.classes.values())

    def logical_sql(self, name: str) -> str:
        """The rewritten query of complex class ``name`` as the thesis writes it
        (Listing 2.3): ``SELECT <time> AS occTime, NOW AS detTime, ...``."""
        cls = self.classes[name.lower()]
        if cls.query is None:
            raise KeyError(f"{name} is not a complex class")
        return render_query(cls.query, physical=False).sql

    def with_dialect(self, dialect: str, *, storage: bool = True) -> CompiledProgram:
        """The same program compiled for another dialect (``storage``: as
        :func:`compile_program`'s)."""
        if dialect == self.dialect:
            return self
        return compile_program(
            self.text, name=self.name, dialect=dialect, prefix=self.prefix, storage=storage
        )


def compile_program(
    text: str,
    *,
    name: str = "bicep",
    dialect: str = "sqlite",
    prefix: str = DEFAULT_PREFIX,
    storage: bool = True,
) -> CompiledProgram:
    """Parse and check a BiCEPL program.

    ``name`` names the program in the database (its tables start with it): a
    lower-case identifier of at most 24 characters. ``dialect`` is the database's
    SQLAlchemy dialect name (``sqlite``, ``postgresql``, ``mysql``, ``mariadb``);
    the queries are read in it. ``prefix`` is the table-name prefix the program
    will be installed with: class and action names must fit in its table names
    (:func:`name_limit`). ``storage``: also refuse what the dialect's database
    could not hold (:func:`check_storage`); ``False`` for a program installed
    there already, which its database holds, however an older sentinel let it
    be defined (installing a new program or version checks it anyway).

    Raises :class:`~sentinel.errors.BicepSyntaxError` for malformed text (also
    inside a query), :class:`~sentinel.errors.BicepCycleError` for classes that
    depend on each other, and :class:`~sentinel.errors.BicepProgramError` for
    other mistakes, each with its line and column.

    >>> p = compile_program('''CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery
    ...   (resource VARCHAR(30), amount NUMERIC) ID (resource) LIFESPAN(14d)
    ...   ON CHANGE AND new.occTime > old.occTime DO informOwner(new.resource);''')
    >>> [c.name for c in p], list(p.actions)
    (['Delivery'], ['informowner'])
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BicepProgramError(
            f"a program's name is a lower-case identifier of at most 24 characters "
            f"(ASCII letters, digits, '_'), not {shortened(repr(name))}"
        )
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise BicepProgramError(
            f"a table-name prefix is 1 to {MAX_PREFIX} ASCII letters, digits and '_', "
            f"not {shortened(repr(prefix))}"
        )
    program = parse_program(text)
    if not program.classes:
        raise BicepProgramError("the program defines no event class")
    limit = name_limit(name, prefix)
    defs: dict[str, m.ClassDef] = {}
    for cls in program.classes:
        _check_length(text, "class", cls.name, name_offset(text, cls), limit, name, prefix)
        if cls.ident in defs:
            first = defs[cls.ident]
            raise error_at(
                text,
                cls.pos.offset,
                f"class {cls.name} is defined twice (first at {first.pos})",
                cls=BicepProgramError,
            )
        _check_schema(text, cls, dialect)
        defs[cls.ident] = cls

    queries: dict[str, ParsedQuery] = {}
    for cls in program.classes:
        if isinstance(cls, m.ComplexClass):
            queries[cls.ident] = parse_query(text, cls, defs, dialect)
    order, strata = _stratify(text, defs, queries)
    classes: dict[str, CompiledClass] = {}
    for ident in order:
        q = queries.get(ident)
        classes[ident] = CompiledClass(
            definition=defs[ident],
            stratum=strata[ident],
            depends_on=q.classes if q else (),
            query=q,
        )
    for c in classes.values():
        c.dependents = tuple(d.ident for d in classes.values() if c.ident in d.depends_on)

    actions: dict[str, ActionSignature] = {}
    statements: list[tuple[str, int, m.Statement]] = []
    for c in classes.values():
        for i, st in enumerate(c.definition.statements):
            a = st.action
            _check_length(text, "action", a.name, a.pos.offset, limit, name, prefix)
            _check_condition(text, c, st.condition)
            _check_holds(text, st.condition)
            kinds = tuple(value_kind(text, c, v) for v in st.action.params)
            _record_action(text, actions, c, i, st, kinds)
            statements.append((c.ident, i, st))
    compiled = CompiledProgram(
        name=name,
        program=program,
        dialect=dialect,
        classes=classes,
        actions=actions,
        digest=_digest(program),
        statements=statements,
        prefix=prefix,
    )
    if storage:
        check_storage(compiled)
    return compiled


def _stratify(
    text: str, defs: dict[str, m.ClassDef], queries: dict[str, ParsedQuery]
) -> tuple[list[str], dict[str, int]]:
    strata: dict[str, int] = {}
    state: dict[str, int] = {}  # 1: visiting, 2: done
    order: list[str] = []

    def cycle_error(stack: list[str], ident: str) -> BicepCycleError:
        cycle = [*stack[stack.index(ident) :], ident]
        names = [defs[c].name for c in cycle]
        first = defs[cycle[0]]
        return BicepCycleError(
            f"complex classes {' -> '.join(names)} are defined through each other; "
            "a complex class may only read classes defined without it",
            cycle=names,
            line=first.pos.line,
            column=first.pos.column,
            context=error_at(text, first.pos.offset, "").context,
        )

    # depth first, without recursion (a chain of classes may be long)
    for root in defs:
        if state.get(root) == 2:
            continue
        stack: list[str] = [root]
        pending: list[list[str]] = [list(queries[root].classes) if root in queries else []]
        state[root] = 1
        while stack:
            deps = pending[-1]
            if deps:
                dep = deps.pop(0)
                if state.get(dep) == 1:
                    raise cycle_error(stack, dep)
                if state.get(dep) != 2:
                    state[dep] = 1
                    stack.append(dep)
                    pending.append(list(queries[dep].classes) if dep in queries else [])
                continue
            ident = stack.pop()
            pending.pop()
            q = queries.get(ident)
            strata[ident] = max((strata[d] + 1 for d in q.classes), default=0) if q else 0
            state[ident] = 2
            order.append(ident)
    order.sort(key=lambda c: strata[c])  # stable: program order within a stratum
    return order, strata


def _refs(node: object) -> Iterator[m.Ref]:
    if isinstance(node, m.Ref):
        yield node
    elif isinstance(node, (m.BinOp, m.Compare)):
        yield from _refs(node.left)
        yield from _refs(node.right)
    elif isinstance(node, m.Neg):
        yield from _refs(node.value)
    elif isinstance(node, m.ExtremeValue):
        for v in node.values:
            yield from _refs(v)


def _primitives(cond: m.Condition) -> list[str]:
    if isinstance(cond, m.Timing):
        return [cond.primitive if cond.low is None else f"LATE({cond.low}, {cond.high})"]
    if isinstance(cond, (m.And, m.Or)):
        return _primitives(cond.left) + _primitives(cond.right)
    if isinstance(cond, m.Not):
        return _primitives(cond.condition)
    return []


def _check_holds(text: str, cond: m.Condition) -> None:
    """Refuse a condition whose timing primitives exclude each other."""
    if never_holds(cond):
        names = ", ".join(dict.fromkeys(_primitives(cond)))
        raise error_at(
            text,
            cond.pos.offset,
            f"this condition never holds: its timing primitives ({names}) exclude each "
            "other for every event at every tick",
            cls=BicepProgramError,
        )


def _check_condition(text: str, cls: CompiledClass, cond: m.Condition) -> None:
    if isinstance(cond, (m.And, m.Or)):
        _check_condition(text, cls, cond.left)
        _check_condition(text, cls, cond.right)
    elif isinstance(cond, m.Not):
        _check_condition(text, cls, cond.condition)
    elif isinstance(cond, m.Timing):
        if not cls.mutable and cond.primitive in _CHANGE_ONLY:
            raise error_at(
                text,
                cond.pos.offset,
                f"{cond.primitive} never holds for {cls.name}: an IMMUTABLE class's events "
                "cannot change",
                cls=BicepProgramError,
            )
    elif isinstance(cond, m.Compare):
        left = value_kind(text, cls, cond.left)
        right = value_kind(text, cls, cond.right)
        if (left == "text") != (right == "text") or (left == "boolean") != (right == "boolean"):
            raise error_at(
                text,
                cond.pos.offset,
                f"this comparison compares a {left} value with a {right} value",
                cls=BicepProgramError,
            )


def value_kind(text: str, cls: CompiledClass, v: m.Value) -> Kind:
    """The kind of a condition or action value (checking its column names)."""
    if isinstance(v, m.Now):
        return "integer"
    if isinstance(v, m.Ref):
        kind = cls.column_kind(v.ident)
        if kind is None:
            columns = ["occTime", "detTime", *(a.name for a in cls.definition.attributes)]
            close = difflib.get_close_matches(v.ident, [c.lower() for c in columns], n=1)
            hint = ""
            if close:
                spelled = columns[[c.lower() for c in columns].index(close[0])]
                hint = f"; did you mean {v.side.upper()}.{spelled}?"
            raise error_at(
                text,
                v.pos.offset,
                f"{cls.name} has no column {v.column} (it has {', '.join(columns)}){hint}",
                cls=BicepProgramError,
            )
        return kind
    if isinstance(v, m.Literal_):
        if v.kind == "string":
            return "text"
        if v.kind == "duration" or isinstance(v.value, int):
            return "integer"
        return "real"
    if isinstance(v, m.Neg):
        kind = value_kind(text, cls, v.value)
        if kind in ("text", "boolean"):
            raise error_at(
                text, v.pos.offset, f"cannot negate a {kind} value", cls=BicepProgramError
            )
        return kind
    if isinstance(v, m.BinOp):
        kinds = {value_kind(text, cls, v.left), value_kind(text, cls, v.right)}
        if kinds & {"text", "boolean"}:
            raise error_at(
                text,
                v.pos.offset,
                f"cannot add or subtract {' and '.join(sorted(kinds))} values",
                cls=BicepProgramError,
            )
        return _widest(kinds)
    if _extreme_depth(v) > MAX_EXTREME_DEPTH:
        raise error_at(
            text,
            v.pos.offset,
            f"{v.fn} nests more than {MAX_EXTREME_DEPTH} levels of MAX and MIN; use fewer",
            cls=BicepProgramError,
        )
    kinds = {value_kind(text, cls, x) for x in v.values}
    if len(kinds) > 1 and kinds & {"text", "boolean"}:
        raise error_at(
            text, v.pos.offset, f"{v.fn} over values of different kinds", cls=BicepProgramError
        )
    return _widest(kinds)


def _extreme_depth(v: m.Value) -> int:
    """How many ``MAX``/``MIN`` nest in ``v`` (on SQLite each level's sums are
    checked for overflow, which repeats them: see ``conditions.checked_sql``)."""
    if isinstance(v, m.ExtremeValue):
        return 1 + max(_extreme_depth(x) for x in v.values)
    if isinstance(v, m.BinOp):
        return max(_extreme_depth(v.left), _extreme_depth(v.right))
    if isinstance(v, m.Neg):
        return _extreme_depth(v.value)
    return 0


def is_time(v: m.Value) -> bool:
    """Whether a value is a point in time: NOW, an occurrence or detection time,
    such a time plus or minus a duration, MIN/MAX of times."""
    if isinstance(v, m.Now):
        return True
    if isinstance(v, m.Ref):
        return v.ident in SYSTEM_COLUMNS
    if isinstance(v, m.BinOp):
        return is_time(v.left) and not is_time(v.right)
    if isinstance(v, m.ExtremeValue):
        return all(is_time(x) for x in v.values)
    return False


def _widest(kinds: set[Kind]) -> Kind:
    for k in ("text", "boolean", "real", "numeric", "integer"):
        if k in kinds:
            return k
    return "integer"  # pragma: no cover


def _record_action(
    text: str,
    actions: dict[str, ActionSignature],
    cls: CompiledClass,
    index: int,
    st: m.Statement,
    kinds: tuple[Kind, ...],
) -> None:
    a = st.action
    known = actions.get(a.ident)
    times = tuple(is_time(v) for v in a.params)
    decimals = tuple(_is_decimal(cls, v) for v in a.params)
    if known is None:
        actions[a.ident] = ActionSignature(a.name, kinds, ((cls.ident, index),), times, decimals)
        return
    if len(known.kinds) != len(kinds):
        raise error_at(
            text,
            a.pos.offset,
            f"action {a.name} takes {len(known.kinds)} parameter(s) elsewhere in the program "
            f"but {len(kinds)} here; one action has one list of parameters",
            cls=BicepProgramError,
        )
    merged: list[Kind] = []
    for i, (k1, k2) in enumerate(zip(known.kinds, kinds, strict=True)):
        if k1 == k2:
            merged.append(k1)
        elif {k1, k2} <= {"integer", "numeric", "real"}:
            merged.append(_widest({k1, k2}))
        else:
            raise error_at(
                text,
                a.params[i].pos.offset,
                f"parameter {i + 1} of action {a.name} is {k2} here but {k1} elsewhere in the "
                "program",
                cls=BicepProgramError,
            )
    actions[a.ident] = ActionSignature(
        known.name,
        tuple(merged),
        (*known.uses, (cls.ident, index)),
        tuple(x and y for x, y in zip(known.times, times, strict=True)),
        tuple(x and y for x, y in zip(known.decimals, decimals, strict=True)),
    )


def _is_decimal(cls: CompiledClass, v: m.Value) -> bool:
    if isinstance(v, m.Neg):
        return _is_decimal(cls, v.value)
    if not isinstance(v, m.Ref):
        return False
    a = cls.definition.attribute(v.ident)
    return a is not None and a.type.kind == "numeric" and a.type.precision is not None


def _digest(program: m.Program) -> str:
    """A digest of what the program means (not how it is laid out)."""

    def norm(s: str) -> str:
        return " ".join(s.split())

    described = []
    for c in program.classes:
        described.append(
            {
                "kind": type(c).__name__,
                "name": c.name,
                "mutable": getattr(c, "mutable", None),
                "attributes": [(a.name, a.type.text.upper()) for a in c.attributes],
                "keys": list(c.keys),
                "lifespan": c.lifespan,
                "query": norm(getattr(c, "query", "")),
                "occurring": repr(_strip(getattr(c, "occurring", None))),
                "statements": [norm(s.text) for s in c.statements],
            }
        )
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def _strip(time: m.TimeExpr | None) -> object:
    if time is None:
        return None
    if isinstance(time, m.ColumnTime):
        return tuple(p.lower() for p in time.parts)
    if isinstance(time, m.Shift):
        return ("shift", _strip(time.time), time.seconds)
    return (time.fn, tuple(_strip(t) for t in time.times))
