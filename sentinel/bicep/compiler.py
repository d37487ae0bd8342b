"""Compile a BiCEPL program: names, keys, dependencies, actions, SQL.

:func:`compile_program` parses the text, reads each complex class's query with
sqlglot, and checks everything that needs no database: duplicate names, keys
that are attributes, ``NEW.``/``OLD.`` columns that exist, complex classes that
do not depend on each other in a cycle, actions used with one signature, timing
primitives that can hold for the class. The result orders the classes by
dependency (strata: subscribed classes first, then each complex class after the
classes it reads), which is the order a clock tick derives and expires them in.

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
from functools import cache
from typing import Literal

from sentinel.bicep import model as m
from sentinel.bicep.parser import error_at, parse_program
from sentinel.bicep.sqlpart import ParsedQuery, parse_query, render_query
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

#: Columns every class has; attributes may not use these names.
SYSTEM_COLUMNS = ("occtime", "dettime")
#: Names of the processor's own columns in a class's tables (the change table
#: has ``o_<attribute>`` and ``n_<attribute>`` next to ``o_present``,
#: ``n_occ_tick``, ...).
_OWN_COLUMNS = ("id", "revoked", "present", "occ_tick", "archived_tick")
#: The longest attribute name (``n_<name>`` fits a column name everywhere).
MAX_ATTRIBUTE = 60
#: The most attributes a class may have on MariaDB and MySQL (:func:`check_storage`):
#: its change table has two columns for each, and InnoDB holds a row of at most 8126 bytes in a
#: page, of which a column may take up to 30 (a DECIMAL(65, s); a TEXT's
#: pointer takes 20).
MAX_ATTRIBUTES = 100
#: The most attributes a class may have on PostgreSQL and SQLite: its change
#: table has ``10 + 2n`` columns, within PostgreSQL's 1600 and, each an 8-byte
#: number, its row of at most 8160 bytes (SQLite's limit is 2000 columns).
MAX_ATTRIBUTES_ELSEWHERE = 400
#: The most parameters an action may have, on every database (its table has a
#: column for each).
MAX_PARAMETERS = 100
#: The most lineage columns a complex class's result table may have, on every
#: database: one per use of a class in its query's FROM clauses (each branch of
#: a UNION counts its own), an 8-byte number each.
MAX_LINEAGE = 100
#: The longest ``VARCHAR(n)`` (and ``CHAR(n)``): no text value has more than
#: :data:`sentinel.bicep.values.MAX_TEXT_VALUE_BYTES` bytes anyway.
MAX_VARCHAR = 65_535
#: The most digits of a ``NUMERIC(p, s)`` (MariaDB's and MySQL's limit; PostgreSQL's is 1000).
MAX_PRECISION = 65
#: The most decimals of a ``NUMERIC(p, s)`` (MySQL's limit; MariaDB's is 38).
MAX_SCALE = 30
#: The most bytes MariaDB and MySQL index for a class's key (InnoDB's limit;
#: text takes four bytes a character, utf8mb4).
MAX_KEY_BYTES = 3072
#: The longest program text on MariaDB and MySQL, in bytes of UTF-8: the system
#: table holds it in a TEXT column, which they fill up to 65,535 bytes.
MAX_TEXT_BYTES = 65_535
#: How deeply MAX and MIN may nest in a value.
MAX_EXTREME_DEPTH = 8
#: The longest table name: PostgreSQL's names have at most 63 bytes, MariaDB's
#: and MySQL's 64 characters (BiCEPL names are ASCII, a byte a character).
MAX_TABLE_NAME = 63


@cache
def _reserved(dialect: str) -> frozenset[str]:
    """Words that name no column unquoted in ``dialect`` (the processor's SQL
    does not quote names): the words SQLAlchemy quotes there."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql.base import RESERVED_WORDS

        return frozenset(RESERVED_WORDS)
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects.mysql.reserved_words import (
            RESERVED_WORDS_MARIADB,
            RESERVED_WORDS_MYSQL,
        )

        return frozenset(RESERVED_WORDS_MARIADB | RESERVED_WORDS_MYSQL)
    from sqlalchemy.dialects.sqlite.base import SQLiteIdentifierPreparer

    return frozenset(SQLiteIdentifierPreparer.reserved_words)


#: A program's name (matched in full: ``$`` would let a trailing newline in).
_NAME = re.compile(r"[a-z][a-z0-9_]{0,23}")
#: A table-name prefix: ASCII only, so that a character is a byte in every
#: database's limit on names (``sentinel.log.tables.log_tables`` checks the same).
_PREFIX = re.compile(rf"[A-Za-z0-9_]{{1,{MAX_PREFIX}}}")
#: What no installed program's text may hold: NUL (PostgreSQL's text cannot
#: hold it) and lone surrogates (not text any database stores).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
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


def name_limit(name: str, prefix: str = DEFAULT_PREFIX) -> int:
    """The longest class or action name program ``name`` may use with the
    table-name ``prefix``: its tables are ``<prefix><name>_<kind>_<class>`` (and
    ``..._x_<action>``), at most :data:`MAX_TABLE_NAME` characters."""
    return MAX_TABLE_NAME - len(f"{prefix}{name}_x_")


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


def check_storage(program: CompiledProgram) -> None:
    """Refuse what the database of ``program.dialect`` could not hold as the
    program's tables and row (:func:`compile_program` checks it unless told
    not to; :func:`sentinel.bicep.install.install` checks it before creating
    tables).

    On every database: a text without NUL characters and lone surrogates,
    ``VARCHAR(n)`` with ``1 <= n <=`` :data:`MAX_VARCHAR`, ``NUMERIC(p, s)``
    with ``1 <= p <=`` :data:`MAX_PRECISION` and ``s <= min(p,``
    :data:`MAX_SCALE```)``, at most :data:`MAX_ATTRIBUTES_ELSEWHERE` attributes a
    class, :data:`MAX_PARAMETERS` parameters an action and
    :data:`MAX_LINEAGE` lineage columns a complex class. On MariaDB and MySQL
    also at most :data:`MAX_ATTRIBUTES` attributes a class, a key of at most
    :data:`MAX_KEY_BYTES` bytes in their index, a program's text of at most
    :data:`MAX_TEXT_BYTES` bytes.

    Raises :class:`~sentinel.errors.BicepProgramError` at the place of the
    first thing too large.
    """
    text = program.text
    _check_storable(text)
    mariadb = program.dialect in ("mysql", "mariadb")
    for cls in program.program.classes:
        _check_types(text, cls)
        _check_width(text, cls, mariadb)
    _check_parameters(program)
    _check_lineage(program)
    if mariadb:
        _check_size(text)


def _check_storable(text: str) -> None:
    found = _UNSTORABLE.search(text)
    if found is None:
        return
    if found.group() == "\x00":
        what = "a NUL character (\\x00), which PostgreSQL cannot store"
    else:
        what = f"a lone surrogate ({found.group()!r}), which is not text a database can store"
    # (shown as U+FFFD: the message must print)
    raise error_at(
        _UNSTORABLE.sub("\ufffd", text),
        found.start(),
        f"the program's text holds {what} (the installed program's text is stored); "
        "remove it, or write it as an SQL expression in a query",
        cls=BicepProgramError,
    )


def _type_offset(text: str, a: m.Attribute) -> int:
    """Where the type of attribute ``a`` is written."""
    at = text.find(a.type.text, a.pos.offset + len(a.name))
    return at if at >= 0 else a.pos.offset


def _check_types(text: str, cls: m.ClassDef) -> None:
    for a in cls.attributes:
        t = a.type
        problem = ""
        if t.kind == "text" and t.length is not None and not 1 <= t.length <= MAX_VARCHAR:
            problem = f"a length from 1 to {MAX_VARCHAR} characters"
        elif t.kind == "numeric" and t.precision is not None:
            scale = t.scale or 0
            if not 1 <= t.precision <= MAX_PRECISION:
                problem = f"a precision from 1 to {MAX_PRECISION} digits (MariaDB's limit)"
            elif scale > min(t.precision, MAX_SCALE):
                problem = (
                    f"a scale from 0 to its precision and at most {MAX_SCALE} decimals "
                    "(MySQL's limit; MariaDB's is 38)"
                )
        if problem:
            raise error_at(
                text,
                _type_offset(text, a),
                f"attribute {a.name} of {cls.name}: {shortened(' '.join(t.text.split()), 40)} "
                f"needs {problem}",
                cls=BicepProgramError,
            )


def _check_width(text: str, cls: m.ClassDef, mariadb: bool) -> None:
    limit = MAX_ATTRIBUTES if mariadb else MAX_ATTRIBUTES_ELSEWHERE
    if len(cls.attributes) > limit:
        extra = cls.attributes[limit]
        where = (
            "on MariaDB and MySQL (its tables would be wider than they store a row)"
            if mariadb
            else "(its change table has two columns for each, within PostgreSQL's 1600 "
            "columns and 8160 bytes a row; MariaDB and MySQL allow 100)"
        )
        raise error_at(
            text,
            extra.pos.offset,
            f"{cls.name} has {len(cls.attributes)} attributes, more than the {limit} a class "
            f"may have {where}",
            cls=BicepProgramError,
        )
    if not mariadb:
        return
    types = {a.ident: a.type for a in cls.attributes}
    size = sum(_key_bytes(types[k.lower()]) for k in cls.keys)  # keys are attributes
    if size > MAX_KEY_BYTES:
        raise error_at(
            text,
            cls.key_positions[0].offset,
            f"the key of {cls.name} takes {size} bytes in MariaDB's index, which holds "
            f"at most {MAX_KEY_BYTES} (a VARCHAR(n) takes 4 bytes a character, a TEXT "
            "key 191 characters); give its text a shorter VARCHAR(n)",
            cls=BicepProgramError,
        )


def _check_parameters(program: CompiledProgram) -> None:
    for sig in program.actions.values():
        if len(sig.kinds) <= MAX_PARAMETERS:
            continue
        cls_ident, index = sig.uses[0]
        action = program.classes[cls_ident].definition.statements[index].action
        raise error_at(
            program.text,
            action.params[MAX_PARAMETERS].pos.offset,
            f"action {action.name} has {len(sig.kinds)} parameters, more than the "
            f"{MAX_PARAMETERS} an action may have (its table has a column for each)",
            cls=BicepProgramError,
        )


def _check_lineage(program: CompiledProgram) -> None:
    for cls in program:
        if cls.query is None:
            continue
        lineage = render_query(cls.query, physical=True, table_of=lambda c: c).lineage
        if lineage is not None and len(lineage) > MAX_LINEAGE:
            raise error_at(
                program.text,
                cls.query.cls.query_pos.offset,
                f"the query of {cls.name} reads classes {len(lineage)} times (in its FROM "
                f"clauses, each branch of a UNION its own), more than the {MAX_LINEAGE} its "
                "result table has lineage columns for; join fewer classes",
                cls=BicepProgramError,
            )


def _check_size(text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= MAX_TEXT_BYTES:
        return
    # the first character past the limit
    offset = len(text.encode("utf-8", "surrogatepass")[:MAX_TEXT_BYTES].decode("utf-8", "ignore"))
    raise error_at(
        text,
        offset,
        f"the program has {size} bytes (UTF-8), more than the {MAX_TEXT_BYTES} an installed "
        "program's text may have on MariaDB and MySQL (their TEXT column holds it); split "
        "it into programs",
        cls=BicepProgramError,
    )


def name_offset(text: str, cls: m.ClassDef) -> int:
    """Where the name of ``cls`` is written (its position is the CREATE's)."""
    found = re.compile(r"\bCLASS\s+", re.IGNORECASE).search(text, cls.pos.offset)
    return found.end() if found else cls.pos.offset


def _check_length(
    text: str, what: str, spelled: str, offset: int, limit: int, program: str, prefix: str
) -> None:
    if len(spelled) <= limit:
        return
    shown = spelled if len(spelled) <= 30 else f"{spelled[:20]}..."
    kind = "x" if what == "action" else "<kind>"
    raise error_at(
        text,
        offset,
        f"{what} name {shown} has {len(spelled)} characters, more than the {limit} its "
        f"tables' names leave it ({prefix}{program}_{kind}_<{what}> has at most "
        f"{MAX_TABLE_NAME}: PostgreSQL's limit; MariaDB's is 64); use a shorter name",
        cls=BicepProgramError,
    )


_SHOWN = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB/MySQL"}


def _reserved_word(text: str, offset: int, what: str, name: str, dialect: str) -> BicepProgramError:
    return error_at(
        text,
        offset,
        f"{what} {name}: {name} is a reserved word of {_SHOWN.get(dialect, dialect)}'s "
        "SQL, which cannot name a column or table there unquoted; choose another name",
        cls=BicepProgramError,
    )


def _check_schema(text: str, cls: m.ClassDef, dialect: str) -> None:
    # (a class name only appears in its queries, which MariaDB's rendering quotes)
    if cls.ident in _reserved(dialect) and dialect not in ("mysql", "mariadb"):
        raise _reserved_word(text, name_offset(text, cls), "class", cls.name, dialect)
    seen: dict[str, m.Attribute] = {}
    for a in cls.attributes:
        if a.ident in SYSTEM_COLUMNS or a.ident in _OWN_COLUMNS or a.ident.startswith("bicep_"):
            raise error_at(
                text,
                a.pos.offset,
                f"attribute {a.name} of {cls.name}: occTime, detTime, "
                f"{', '.join(_OWN_COLUMNS)} and names starting with bicep_ are the "
                "processor's own",
                cls=BicepProgramError,
            )
        if a.ident in _reserved(dialect):
            raise _reserved_word(text, a.pos.offset, f"attribute of {cls.name}", a.name, dialect)
        if len(a.ident) > MAX_ATTRIBUTE:
            raise error_at(
                text,
                a.pos.offset,
                f"attribute {a.name[:20]}... of {cls.name} is longer than {MAX_ATTRIBUTE} "
                "characters",
                cls=BicepProgramError,
            )
        if a.ident in seen:
            raise error_at(
                text,
                a.pos.offset,
                f"attribute {a.name} of {cls.name} is declared twice",
                cls=BicepProgramError,
            )
        seen[a.ident] = a
    keys: set[str] = set()
    for key, pos in zip(cls.keys, cls.key_positions, strict=True):
        k = key.lower()
        if k not in seen:
            close = difflib.get_close_matches(k, list(seen), n=1)
            hint = f"; did you mean {seen[close[0]].name}?" if close else ""
            raise error_at(
                text,
                pos.offset,
                f"key {key} of {cls.name} is not one of its attributes "
                f"({', '.join(a.name for a in cls.attributes)}){hint}",
                cls=BicepProgramError,
            )
        if k in keys:
            raise error_at(
                text, pos.offset, f"key {key} of {cls.name} is listed twice", cls=BicepProgramError
            )
        if seen[k].type.kind in ("real",):
            raise error_at(
                text,
                pos.offset,
                f"key {key} of {cls.name} is a floating-point number; keys must compare exactly",
                cls=BicepProgramError,
            )
        keys.add(k)


def _key_bytes(t: m.SqlType) -> int:
    if t.kind == "text":
        return 4 * (t.length if t.length is not None else 191)
    if t.kind == "numeric" and t.precision is not None:
        return 30  # a DECIMAL(65, s) at most
    return 8


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
