"""What a complex class's query may name: columns, functions, tables.

:func:`check_names` runs on the query sqlglot read (:func:`sentinel.bicep.
sqlpart.parse_query`), before any database sees it:

- every column is resolved against the tables of its query: a class's
  attributes (with ``occTime`` and ``detTime``), a derived table's or
  ``WITH`` query's columns, the aliases of its own select list. A column of an
  application table is the database's to know, so a column that could be one
  is left to the check at install (:mod:`sentinel.bicep.install`);
- every function is one of :data:`ALLOWED_FUNCTIONS` (by sqlglot's reading of
  it) or :data:`ALLOWED_NAMES` (by name): functions that compute a value
  from their arguments and nothing else. Everything sqlglot does not know
  (``setval``, ``pg_try_advisory_lock``, ``GET_LOCK``, ``LOAD_FILE``, a
  function of your own) is refused, as is what reads the server's state
  (``CURRENT_USER``, ``VERSION()``, variables);
- no table is one of the database's catalogues (``pg_catalog``, ``pg_shadow``,
  ``information_schema``, ``mysql.user``, ``sqlite_master``, ...);
- no ``WITH RECURSIVE``: a recursive query need not end, and a tick would wait
  for it for ever (the way ``SLEEP`` is refused).

Each refusal is a :class:`~sentinel.errors.BicepProgramError` at its place.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.scope import Scope, traverse_scope

from sentinel.bicep import model as m
from sentinel.errors import BicepProgramError

__all__ = ["ALLOWED_FUNCTIONS", "ALLOWED_NAMES", "check_names"]

#: The functions a query may call, as sqlglot reads them (its expression
#: classes; ``IFNULL`` is read as ``COALESCE``, ``SUBSTR`` as ``SUBSTRING``):
#: values computed from their arguments, nothing read from or written to the
#: server's state.
# fmt: off
ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    {
        # aggregates
        "Count", "Sum", "Avg", "Min", "Max", "GroupConcat", "Stddev", "StddevPop",
        "StddevSamp", "Variance", "VariancePop",
        # window functions
        "RowNumber", "Rank", "DenseRank", "PercentRank", "CumeDist", "Ntile", "Lag",
        "Lead", "FirstValue", "LastValue", "NthValue",
        # conditions
        "Case", "If", "Coalesce", "Nullif", "Greatest", "Least", "Exists",
        # conversions
        "Cast", "TryCast",
        # numbers
        "Abs", "Round", "Floor", "Ceil", "Sign", "Sqrt", "Pow", "Exp", "Ln", "Log",
        # text
        "Lower", "Upper", "Length", "Substring", "Trim", "Concat", "ConcatWs",
        "StrPosition", "Left", "Right", "Pad", "Replace",
        # NOW: the tick (replaced by it)
        "CurrentTimestamp",
    }
)
# fmt: on

#: Functions sqlglot does not know (it reads them as ``Anonymous``) that a
#: query may call: pure functions of their arguments, by lower-case name.
ALLOWED_NAMES: frozenset[str] = frozenset({"now", "instr", "printf", "format", "typeof", "iif"})

#: Schemas (MariaDB: databases) that hold the database's catalogues.
_CATALOG_SCHEMAS = frozenset(
    {"pg_catalog", "pg_toast", "information_schema", "mysql", "performance_schema", "sys"}
)
#: Prefixes of the names of catalogue tables reachable without a schema.
_CATALOG_PREFIXES = ("pg_", "sqlite_", "pragma_")

Fail = Callable[[int, str], BicepProgramError]


def check_names(
    tree: exp.Query, cls: m.ComplexClass, known: Mapping[str, m.ClassDef], fail: Fail
) -> None:
    """Refuse, at its place (``fail(offset_in_query, message)``), a function
    outside the allow-list, a catalogue table, and a column that no table of
    the query has."""
    _check_functions(tree, cls, fail)
    _check_tables(tree, cls, fail)
    _check_columns(tree, cls, known, fail)


# -- functions and tables ------------------------------------------------------------------------
def _check_functions(tree: exp.Query, cls: m.ComplexClass, fail: Fail) -> None:
    for node in tree.walk():
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise fail(
                _start(node),
                f"the query of {cls.name} is recursive (WITH RECURSIVE), and a recursive "
                "query need not end: a tick would wait for it for ever; derive the rows "
                "step by step with classes instead",
            )
        if isinstance(node, (exp.Parameter, exp.SessionParameter, exp.Placeholder)):
            raise fail(
                _start(node),
                f"the query of {cls.name} reads a variable ({node.sql()}): it may only read "
                "classes and tables",
            )
        if not isinstance(node, exp.Func) or isinstance(node, (exp.Binary, exp.Unary)):
            continue  # (AND, OR, ||, % and their like are operators sqlglot also calls functions)
        if isinstance(node, exp.Anonymous):
            name = str(node.name)
            if name.lower() in ALLOWED_NAMES:
                continue
        elif type(node).__name__ in ALLOWED_FUNCTIONS:
            continue
        else:
            name = node.sql_name()
        raise fail(
            _start(node),
            f"the query of {cls.name} calls {name}, which is not one of the functions a "
            "query may call (it may only read; see ALLOWED_FUNCTIONS in docs/bicepl.md)",
        )


def _check_tables(tree: exp.Query, cls: m.ComplexClass, fail: Fail) -> None:
    for table in tree.find_all(exp.Table):
        schema = table.db.lower() if table.args.get("db") else ""
        catalog = table.catalog.lower() if table.args.get("catalog") else ""
        name = table.name.lower()
        if (
            schema in _CATALOG_SCHEMAS
            or catalog in _CATALOG_SCHEMAS
            or name.startswith(_CATALOG_PREFIXES)
            or (not table.name and table.this is not None)  # a function as a table
        ):
            raise fail(
                _start(table),
                f"the query of {cls.name} reads {table.sql()}, a table of the database's "
                "catalogue: it may read classes and the application's tables",
            )


# -- columns ---------------------------------------------------------------------------------
#: The columns of a source; ``None``: not known before the database is asked.
_Columns = frozenset[str] | None


def _check_columns(
    tree: exp.Query, cls: m.ComplexClass, known: Mapping[str, m.ClassDef], fail: Fail
) -> None:
    try:
        scopes = traverse_scope(tree)
    except OptimizeError:  # pragma: no cover - a shape sqlglot cannot scope: install checks it
        return
    for scope in scopes:
        for column in scope.columns:
            _resolve(scope, column, cls, known, fail)


def _resolve(
    scope: Scope,
    column: exp.Column,
    cls: m.ComplexClass,
    known: Mapping[str, m.ClassDef],
    fail: Fail,
) -> None:
    name = column.name.lower()
    if not name or column.args.get("db") or column.args.get("catalog"):
        return
    if not column.table:
        if name == "now" and not column.this.quoted:
            return  # the tick
        if name in _aliases(scope):
            return
        seen: list[str] = []
        for s in _chain(scope):
            for alias, source in s.sources.items():
                cols = _columns_of(source, known)
                if cols is None or name in cols:
                    return
                seen.append(alias)
        tables = ", ".join(seen) or "no table"
        raise fail(
            _start(column),
            f"the query of {cls.name} names a column {column.name} that none of its tables "
            f"has (it reads {tables}){_hint(name, _all_columns(scope, known))}",
        )
    table = column.table.lower()
    for s in _chain(scope):
        for alias, source in s.sources.items():
            if alias.lower() != table:
                continue
            cols = _columns_of(source, known)
            if cols is None or name in cols:
                return
            shown = _shown(source, known)
            raise fail(
                _start(column),
                f"the query of {cls.name} names {column.table}.{column.name}, which is not a "
                f"column of {alias} (its columns: {shown}){_hint(name, cols)}",
            )
    names = [alias for s in _chain(scope) for alias in s.sources]
    raise fail(
        _start_of_table(column),
        f"the query of {cls.name} names a table {column.table} that is not one of its query "
        f"(it reads {', '.join(names) or 'nothing'}){_hint(table, {n.lower() for n in names})}",
    )


def _start_of_table(column: exp.Column) -> int:
    table = column.args["table"]
    return int(table.meta.get("start", _start(column)))


def _chain(scope: Scope) -> list[Scope]:
    out: list[Scope] = []
    s: Scope | None = scope
    while s is not None:
        out.append(s)
        s = s.parent
    return out


def _aliases(scope: Scope) -> set[str]:
    select = scope.expression
    if not isinstance(select, exp.Select):
        return set()
    return {p.alias.lower() for p in select.expressions if isinstance(p, exp.Alias)}


def _columns_of(source: object, known: Mapping[str, m.ClassDef]) -> _Columns:
    if isinstance(source, exp.Table):
        if source.args.get("db") or source.args.get("catalog"):
            return None
        definition = known.get(source.name.lower())
        if definition is None:
            return None  # an application table
        return frozenset(["occtime", "dettime", *(a.ident for a in definition.attributes)])
    if isinstance(source, Scope) and isinstance(source.expression, (exp.Select, exp.SetOperation)):
        selects = source.expression.selects
        if any(p.is_star for p in selects):
            return None
        names = source.expression.named_selects
        if len(names) != len(selects) or not all(names):
            return None  # an unnamed expression: the database names it
        return frozenset(n.lower() for n in names)
    return None


def _shown(source: object, known: Mapping[str, m.ClassDef]) -> str:
    if isinstance(source, exp.Table):
        definition = known[source.name.lower()]
        return ", ".join(["occTime", "detTime", *(a.name for a in definition.attributes)])
    assert isinstance(source, Scope) and isinstance(source.expression, exp.Query)
    return ", ".join(source.expression.named_selects)


def _all_columns(scope: Scope, known: Mapping[str, m.ClassDef]) -> set[str]:
    out: set[str] = set()
    for s in _chain(scope):
        for source in s.sources.values():
            out |= _columns_of(source, known) or set()
    return out


def _hint(name: str, candidates: frozenset[str] | set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=1)
    return f"; did you mean {close[0]}?" if close else ""


def _start(node: exp.Expr) -> int:
    """Where ``node`` is written in the query (its first token that has a place;
    a column: its name)."""
    if isinstance(node, exp.Column):
        node = node.this
    starts = [n.meta["start"] for n in node.walk() if n.meta.get("start") is not None]
    return int(min(starts)) if starts else 0
