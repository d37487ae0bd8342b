"""What a BiCEPL program's names, types and sizes may be.

The limits of the databases that hold a program's tables and its text, and the
checks of :func:`~sentinel.bicep.compiler.compile_program` against them: a
class's attributes and keys (:func:`_check_schema`), the length of class and
action names in their tables' names (:func:`name_limit`), and what the
database of the program's dialect could not store (:func:`check_storage`).
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from typing import TYPE_CHECKING

from sentinel.bicep import model as m
from sentinel.bicep.parser import error_at
from sentinel.bicep.sqlpart import render_query
from sentinel.errors import BicepProgramError, shortened
from sentinel.log.tables import DEFAULT_PREFIX

if TYPE_CHECKING:
    from sentinel.bicep.compiler import CompiledProgram

__all__ = [
    "MAX_ATTRIBUTE",
    "MAX_ATTRIBUTES",
    "MAX_ATTRIBUTES_ELSEWHERE",
    "MAX_KEY_BYTES",
    "MAX_LINEAGE",
    "MAX_PARAMETERS",
    "MAX_PRECISION",
    "MAX_SCALE",
    "MAX_TABLE_NAME",
    "MAX_TEXT_BYTES",
    "MAX_VARCHAR",
    "SYSTEM_COLUMNS",
    "check_storage",
    "name_limit",
    "name_offset",
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


#: hold it) and lone surrogates (not text any database stores).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def name_limit(name: str, prefix: str = DEFAULT_PREFIX) -> int:
    """The longest class or action name program ``name`` may use with the
    table-name ``prefix``: its tables are ``<prefix><name>_<kind>_<class>`` (and
    ``..._x_<action>``), at most :data:`MAX_TABLE_NAME` characters."""
    return MAX_TABLE_NAME - len(f"{prefix}{name}_x_")


def check_storage(program: CompiledProgram) -> None:
    """Refuse what the database of ``program.dialect`` could not hold as the
    program's tables and row (:func:`~sentinel.bicep.compiler.compile_program`
    checks it unless told not to; :func:`sentinel.bicep.install.install` checks
    it before creating tables).

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
