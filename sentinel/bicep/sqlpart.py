"""The SQL of a complex class: read it, check it, rewrite it.

A complex class is defined by ``SELECT ... OCCURRING AT <time>``. The query is
read with sqlglot (in the target database's dialect) after its BiCEPL time
literals (``5d``) have been replaced by seconds; positions in sqlglot's errors
are mapped back to the program text. sqlglot's own time arithmetic is never used:
``OCCURRING AT``, time literals and ``NOW`` are rendered here, as integer
seconds since the epoch.

Two renderings:

- the *logical* query, as the thesis writes it (Listing 2.3): class names as
  tables, ``NOW`` as ``NOW``, the occurrence time and the detection time first:
  ``SELECT ResourceEmpty.occTime + 600 AS occTime, NOW AS detTime, resource
  FROM ResourceEmpty``;
- the *physical* query the processor runs: classes replaced by their as-of-now
  tables (aliased to the names the query used), ``NOW`` a bound parameter, and
  *lineage* columns: for every class row a result row was built from, that
  row's event id, so purging knows which events a complex event depends on.
  Lineage is found for select-project-join queries, unions of them and derived
  tables built from them; a query with aggregates, ``DISTINCT``, ``GROUP BY`` or
  window functions has none (its results follow its constituents as they
  expire: the sliding window of the thesis's 2.5).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from sentinel.bicep import model as m
from sentinel.bicep.parser import UNIT_SECONDS, error_at
from sentinel.bicep.sqlcheck import check_names
from sentinel.errors import BicepProgramError, BicepSyntaxError

__all__ = [
    "EID",
    "ParsedQuery",
    "RenderedQuery",
    "locate_database_error",
    "parse_query",
    "render_query",
    "sqlglot_dialect",
]

#: The event-id column of every class's tables.
EID = "bicep_eid"

_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql"}

# A time literal inside SQL: digits and a unit letter, not part of a longer word
# or number (strings, quoted identifiers and comments are skipped separately).
_TIME_LITERAL = re.compile(r"(?<![\w.])([0-9]+)([dhmsDHMS])(?!\w)")
_SKIP = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|--[^\n]*|/\*.*?\*/", re.S)


#: What a complex class's query may not do: change data or tables, lock rows.
_WRITES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Into,
    exp.Lock,
    exp.Command,
)


def sqlglot_dialect(name: str) -> str:
    """sqlglot's name for a SQLAlchemy dialect name."""
    try:
        return _DIALECTS[name]
    except KeyError:
        raise BicepProgramError(
            f"BiCEPL runs on SQLite, PostgreSQL and MariaDB/MySQL, not {name!r}"
        ) from None


@dataclass(frozen=True, slots=True)
class _Edit:
    new_start: int
    new_end: int
    old_start: int
    old_end: int


def _replace_time_literals(sql: str) -> tuple[str, list[_Edit]]:
    out: list[str] = []
    edits: list[_Edit] = []
    pos = 0
    shift = 0

    def literals(segment: str, base: int) -> None:
        nonlocal shift
        last = 0
        for mt in _TIME_LITERAL.finditer(segment):
            out.append(segment[last : mt.start()])
            seconds = str(int(mt.group(1)) * UNIT_SECONDS[mt.group(2).lower()])
            old_start = base + mt.start()
            new_start = old_start + shift
            edits.append(_Edit(new_start, new_start + len(seconds), old_start, base + mt.end()))
            shift += len(seconds) - (mt.end() - mt.start())
            out.append(seconds)
            last = mt.end()
        out.append(segment[last:])

    for skip in _SKIP.finditer(sql):
        literals(sql[pos : skip.start()], pos)
        out.append(skip.group(0))
        pos = skip.end()
    literals(sql[pos:], pos)
    return "".join(out), edits


def _to_old(edits: list[_Edit], offset: int) -> int:
    shift = 0
    for e in edits:
        if offset < e.new_start:
            break
        if offset < e.new_end:
            return e.old_start
        shift = e.old_end - e.new_end
    return offset + shift


@dataclass
class ParsedQuery:
    """A complex class's query, read and checked (no database needed)."""

    cls: m.ComplexClass
    tree: exp.Query
    dialect: str
    #: Classes the query reads (identifiers, lower case), in order of first use.
    classes: tuple[str, ...]
    #: Other tables it reads (application tables).
    tables: tuple[str, ...]
    uses_now: bool
    #: Offsets in the program text of identifiers, by lower-case name.
    identifiers: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class RenderedQuery:
    sql: str
    #: For each lineage column (named ``bicep_dep_<i>``), the class it points into.
    lineage: tuple[str, ...] | None


def parse_query(
    text: str, cls: m.ComplexClass, known: Mapping[str, m.ClassDef], dialect: str
) -> ParsedQuery:
    """Read ``cls``'s query (``text`` is the whole program) and check what can be
    checked without a database: SQL syntax, a column list that matches the
    class's attributes, ``OCCURRING AT`` columns naming tables of the query.

    Raises :class:`~sentinel.errors.BicepSyntaxError` at the offending place.
    """
    base = cls.query_pos.offset
    sql, edits = _replace_time_literals(cls.query)

    def fail(new_offset: int, message: str, expected: Iterable[str] = ()) -> BicepSyntaxError:
        return error_at(text, base + _to_old(edits, new_offset), message, expected)

    read = sqlglot_dialect(dialect)
    try:
        trees = sqlglot.parse(sql, read=read)
    except ParseError as err:
        first = err.errors[0] if err.errors else {}
        offset = _offset_of(sql, first.get("line") or 1, first.get("col") or 1)
        highlight = first.get("highlight") or ""
        if highlight and sql.find(highlight, max(0, offset - len(highlight))) >= 0:
            offset = sql.find(highlight, max(0, offset - len(highlight)))
        desc = _describe(first.get("description") or str(err))
        if desc.startswith("Expecting") and highlight:
            offset += len(highlight)  # what is missing comes after the last token read
        offset = min(offset, len(sql.rstrip()))
        raise fail(offset, f"in the query of {cls.name}: {desc}") from None
    except TokenError as err:
        raise fail(
            _token_error_offset(sql, str(err)), f"in the query of {cls.name}: {err}"
        ) from None
    except RecursionError:
        raise fail(
            0, f"the query of {cls.name} nests too deeply for the SQL parser; simplify it"
        ) from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1 or not isinstance(trees[0], exp.Query):
        raise fail(0, f"the query of {cls.name} must be one SELECT statement")
    tree = trees[0]
    _check_commas(sql, fail)
    for node in tree.walk():
        if isinstance(node, _WRITES):
            start = node.meta.get("start")
            offset = start if start is not None else 0
            if start is None:  # its keyword, before its first token that has a place
                head = next((n for n in node.walk() if n.meta.get("start") is not None), None)
                offset = head.meta["start"] if head is not None else 0
                keyword = sql.lower().rfind(node.key.lower(), 0, offset)
                offset = keyword if keyword >= 0 else offset
            raise fail(
                offset,
                f"the query of {cls.name} may only read: it must not change or lock rows or "
                f"tables ({node.key.upper()})",
            )

    identifiers: dict[str, list[int]] = {}
    for ident in tree.find_all(exp.Identifier):
        start = ident.meta.get("start")
        if start is not None:
            identifiers.setdefault(ident.name.lower(), []).append(base + _to_old(edits, start))

    classes: list[str] = []
    tables: list[str] = []
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if table.args.get("db") or table.args.get("catalog"):
            tables.append(table.sql(dialect=read))
        elif name in known:
            if name not in classes:
                classes.append(name)
        elif name not in ctes and name not in tables:
            tables.append(name)

    uses_now = any(_is_now(node) for node in tree.walk())
    for leaf in _leaves(tree):
        projections = leaf.expressions
        if not projections:
            raise fail(_start_of(leaf), f"the query of {cls.name} selects no columns")
        if any(
            isinstance(p, exp.Star) or (isinstance(p, exp.Column) and p.is_star)
            for p in projections
        ):
            star = _SKIP.sub(lambda mt: " " * len(mt.group(0)), sql).find("*")
            raise fail(
                max(star, 0),
                f"the query of {cls.name} must list its columns (one per attribute of the "
                "class, in order), not *",
            )
        if len(projections) != len(cls.attributes):
            raise fail(
                _start_of(projections[0]),
                f"the query of {cls.name} selects {len(projections)} column(s) but the class has "
                f"{len(cls.attributes)} attribute(s) ({', '.join(a.name for a in cls.attributes)})",
            )
        _check_time_refs(text, cls, leaf, cls.occurring)

    def refuse(new_offset: int, message: str) -> BicepProgramError:
        return error_at(text, base + _to_old(edits, new_offset), message, cls=BicepProgramError)

    check_names(tree, cls, known, refuse)
    return ParsedQuery(cls, tree, dialect, tuple(classes), tuple(tables), uses_now, identifiers)


def _describe(desc: str) -> str:
    if desc.startswith("Required keyword"):
        return "incomplete SQL (something is missing here)"
    if "Invalid expression / Unexpected token" in desc:
        return "unexpected SQL here"
    return desc.rstrip(".")


def _offset_of(sql: str, line: int, col: int) -> int:
    lines = sql.split("\n")
    line = max(1, min(line, len(lines)))
    return sum(len(x) + 1 for x in lines[: line - 1]) + max(0, col - 1)


def _token_error_offset(sql: str, message: str) -> int:
    mt = re.search(r"Error tokenizing '(.*)'", message, re.S)
    if mt:
        found = sql.find(mt.group(1)[-20:])
        if found >= 0:
            # sqlglot quotes the text up to where it gave up: an unterminated
            # quote is the last quote character before that point.
            end = found + len(mt.group(1)[-20:])
            quote = max(sql.rfind("'", 0, end), sql.rfind('"', 0, end))
            return quote if quote >= 0 else found
    return 0


_BEFORE_CLAUSE = re.compile(
    r",\s*(?=(?:FROM|WHERE|GROUP|ORDER|HAVING|LIMIT|UNION|EXCEPT|INTERSECT)\b|\))", re.I
)


def _check_commas(sql: str, fail: Callable[..., BicepSyntaxError]) -> None:
    # sqlglot accepts "SELECT a, FROM t"; the databases do not. A quoted string
    # or name is a column ("SELECT k, 'x' FROM t"): it stays something, only
    # comments become spaces.
    stripped = _SKIP.sub(
        lambda mt: ("_" if mt.group(0)[0] in "'\"`" else " ") * len(mt.group(0)), sql
    )
    mt = _BEFORE_CLAUSE.search(stripped)
    if mt:
        raise fail(mt.start(), "a comma with nothing after it", ["a column"])


def _start_of(node: exp.Expression) -> int:
    for ident in node.find_all(exp.Identifier):
        start = ident.meta.get("start")
        if start is not None:
            return max(0, int(start))
    return 0


def _leaves(query: exp.Expr) -> list[exp.Select]:
    """The SELECTs whose rows the query returns (the branches of a top-level
    UNION)."""
    if isinstance(query, exp.Union):
        return _leaves(query.this) + _leaves(query.expression)
    if isinstance(query, exp.Subquery):
        return _leaves(query.this)
    if isinstance(query, exp.Select):
        return [query]
    return []


def _sources(select: exp.Select) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    frm = select.args.get("from_") or select.args.get("from")
    if frm is not None:
        out.append(frm.this)
        out.extend(frm.expressions or [])
    for join in select.args.get("joins") or []:
        out.append(join.this)
    return out


def _alias(source: exp.Expression) -> str:
    return source.alias_or_name


def _check_time_refs(
    text: str, cls: m.ComplexClass, leaf: exp.Select, time: m.TimeExpr | None
) -> None:
    if time is None:
        return
    names = {_alias(s).lower() for s in _sources(leaf)}
    for ref in _time_columns(time):
        if len(ref.parts) > 2:
            raise error_at(text, ref.pos.offset, "OCCURRING AT names a column as table.column")
        if len(ref.parts) == 2 and ref.parts[0].lower() not in names:
            shown = sorted(_alias(s) for s in _sources(leaf))
            close = difflib.get_close_matches(ref.parts[0].lower(), names, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise error_at(
                text,
                ref.pos.offset,
                f"OCCURRING AT of {cls.name} names {ref.parts[0]!r}, which is not a table of "
                f"its query (it reads {', '.join(shown) or 'nothing'}){hint}",
            )


def _time_columns(time: m.TimeExpr) -> list[m.ColumnTime]:
    if isinstance(time, m.ColumnTime):
        return [time]
    if isinstance(time, m.Shift):
        return _time_columns(time.time)
    out: list[m.ColumnTime] = []
    for t in time.times:
        out.extend(_time_columns(t))
    return out


def _is_now(node: exp.Expr) -> bool:
    if isinstance(node, exp.CurrentTimestamp):
        return True
    if isinstance(node, exp.Anonymous) and str(node.this).upper() == "NOW":
        return True
    return (
        isinstance(node, exp.Column)
        and not node.table
        and not node.this.quoted
        and node.name.upper() == "NOW"
    )


# -- rendering ------------------------------------------------------------------------------
def now_sql(dialect: str) -> str:
    """The processor's clock tick as a bound parameter (``:bicep_now``)."""
    return "CAST(:bicep_now AS BIGINT)" if dialect == "postgresql" else ":bicep_now"


def extreme_sql(fn: str, args: list[str], dialect: str) -> str:
    """``MAX``/``MIN`` over several values, per dialect: missing (NULL) when one
    of them is missing, as SQLite's ``MAX`` and MariaDB's ``GREATEST`` are.
    PostgreSQL's ``GREATEST`` skips NULLs, so there it is an aggregate over
    the values (each written once: the values may nest)."""
    if len(args) == 1:
        return args[0]
    if dialect == "postgresql":
        rows = ", ".join(f"({a})" for a in args)
        return (
            f"(SELECT CASE WHEN COUNT(bicep_x.v) = COUNT(*) THEN {fn}(bicep_x.v) END "
            f"FROM (VALUES {rows}) AS bicep_x(v))"
        )
    name = fn if dialect == "sqlite" else "GREATEST" if fn == "MAX" else "LEAST"
    return f"{name}({', '.join(args)})"


def time_sql(time: m.TimeExpr, dialect: str) -> str:
    """``OCCURRING AT <time>`` as SQL over integer seconds."""
    if isinstance(time, m.ColumnTime):
        return ".".join(time.parts)
    if isinstance(time, m.Shift):
        op = "+" if time.seconds >= 0 else "-"
        return f"{time_sql(time.time, dialect)} {op} {abs(time.seconds)}"
    return extreme_sql(time.fn, [time_sql(t, dialect) for t in time.times], dialect)


def render_query(
    parsed: ParsedQuery,
    *,
    physical: bool,
    table_of: Callable[[str], str] | None = None,
    schema: str | None = None,
) -> RenderedQuery:
    """Render ``parsed`` for its dialect.

    ``physical=False``: the logical query (the thesis's Listing 2.3).
    ``physical=True``: the query the processor runs; ``table_of(class_ident)``
    gives a class's as-of-now table.
    """
    dialect = parsed.dialect
    write = sqlglot_dialect(dialect)
    tree = parsed.tree.copy()
    cls = parsed.cls
    assert cls.occurring is not None
    now = exp.Var(this=now_sql(dialect) if physical else "NOW")
    for node in list(tree.walk()):
        if _is_now(node) and node is not tree:
            node.replace(now.copy())
    tables: dict[str, str] = {}
    if physical:
        assert table_of is not None
        known = set(parsed.classes)
        tables = {table_of(c).lower(): c for c in known}
        for table in list(tree.find_all(exp.Table)):
            name = table.name.lower()
            if name in known and not table.args.get("db"):
                alias = table.alias or table.name
                table.set("this", exp.to_identifier(table_of(name)))
                if schema:
                    table.set("db", exp.to_identifier(schema))
                table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    lineage = _add_lineage(tree, tables) if physical else None
    occ = exp.Var(this=time_sql(cls.occurring, dialect))
    width = len(cls.attributes)
    for leaf in _leaves(tree):
        front: list[exp.Expr] = [exp.alias_(occ.copy(), "occtime" if physical else "occTime")]
        if not physical:
            front.append(exp.alias_(now.copy(), "detTime"))
        columns = list(leaf.expressions)
        if physical:
            # The user's columns are the class's attributes, in order: name them so.
            named: list[exp.Expr] = []
            for i, c in enumerate(columns):
                if i < width:
                    inner = c.unalias() if isinstance(c, exp.Alias) else c
                    c = exp.alias_(inner, cls.attributes[i].ident)
                named.append(c)
            columns = named
        leaf.set("expressions", front + columns)
    return RenderedQuery(tree.sql(dialect=write), lineage)


# -- lineage -----------------------------------------------------------------------------------
_NO_LINEAGE = (exp.AggFunc, exp.Window)


def _own_nodes(select: exp.Select) -> Iterable[exp.Expression]:
    """Nodes of ``select`` outside its nested queries."""
    stack: list[exp.Expression] = list(select.expressions)
    for key in ("where", "having"):
        if select.args.get(key) is not None:
            stack.append(select.args[key])
    while stack:
        node = stack.pop()
        yield node
        for child in node.iter_expressions():
            if not isinstance(child, (exp.Select, exp.Subquery, exp.Union)):
                stack.append(child)


def _leaf_lineage(
    select: exp.Select, physical: Mapping[str, str]
) -> list[tuple[str, exp.Expression]] | None:
    if select.args.get("group") or select.args.get("distinct"):
        return None
    if any(isinstance(n, _NO_LINEAGE) for n in _own_nodes(select)):
        return None
    deps: list[tuple[str, exp.Expression]] = []
    for source in _sources(select):
        if isinstance(source, exp.Table):
            # Classes were renamed to their as-of-now tables, aliased to the name
            # the query used.
            cls = physical.get(source.name.lower())
            if cls is not None:
                deps.append((cls, exp.column(EID, table=source.alias_or_name)))
        elif isinstance(source, exp.Subquery):
            inner = _query_lineage(source.this, physical)
            if inner is None:
                return None
            for cls_name, column in inner:
                deps.append((cls_name, exp.column(column, table=source.alias_or_name)))
        else:
            return None
    return deps


def _query_lineage(query: exp.Expr, physical: Mapping[str, str]) -> list[tuple[str, str]] | None:
    """Add lineage columns to every SELECT whose rows ``query`` returns; return
    (class, column name) per column."""
    leaves = _leaves(query)
    if not leaves or not _only_unions(query):
        return None
    per_leaf: list[list[tuple[str, exp.Expression]]] = []
    for leaf in leaves:
        deps = _leaf_lineage(leaf, physical)
        if deps is None:
            return None
        per_leaf.append(deps)
    slots: list[tuple[str, str]] = []
    for i, deps in enumerate(per_leaf):
        for j, (cls_name, _) in enumerate(deps):
            slots.append((cls_name, f"bicep_dep_{len(slots)}"))
            per_leaf[i][j] = (slots[-1][1], per_leaf[i][j][1])
    for i, leaf in enumerate(leaves):
        own = {name: expr for name, expr in per_leaf[i]}
        extra = [exp.alias_(own[name] if name in own else exp.Null(), name) for _, name in slots]
        leaf.set("expressions", list(leaf.expressions) + extra)
    return slots


def _only_unions(query: exp.Expr) -> bool:
    if isinstance(query, exp.Union):
        return (
            type(query) is exp.Union and _only_unions(query.this) and _only_unions(query.expression)
        )
    if isinstance(query, exp.Subquery):
        return _only_unions(query.this)
    return isinstance(query, exp.Select)


def _add_lineage(tree: exp.Expr, physical: Mapping[str, str]) -> tuple[str, ...] | None:
    slots = _query_lineage(tree, physical)
    return None if slots is None else tuple(c for c, _ in slots)


# -- database errors ---------------------------------------------------------------------------
_NAME_IN_MESSAGE = [
    re.compile(r"no such (?:column|table): ([\w.]+)"),
    re.compile(r"ambiguous column name: ([\w.]+)"),
    re.compile(r'column "?([\w.]+)"? does not exist'),
    re.compile(r'relation "([\w.]+)" does not exist'),
    re.compile(r'missing FROM-clause entry for table "([\w.]+)"'),
    re.compile(r'column reference "([\w.]+)" is ambiguous'),
    re.compile(r"Unknown column '([\w.]+)'"),
    re.compile(r"Table '([\w.]+)' doesn't exist"),
    re.compile(r"Column '([\w.]+)' in [\w ]+ is ambiguous"),
    re.compile(r"function ([\w.]+)\(.*\) does not exist"),
    re.compile(r"no such function: ([\w.]+)"),
    re.compile(r"FUNCTION ([\w.]+) does not exist"),
]


def locate_database_error(parsed: ParsedQuery, message: str) -> tuple[int, str | None]:
    """The program offset a database error message points at (the first use of
    the name it complains about; else the query's start), and the name."""
    for pattern in _NAME_IN_MESSAGE:
        mt = pattern.search(message)
        if mt:
            name = mt.group(1).split(".")[-1].lower()
            offsets = parsed.identifiers.get(name)
            if offsets:
                return min(offsets), mt.group(1)
            return parsed.cls.query_pos.offset, mt.group(1)
    return parsed.cls.query_pos.offset, None
