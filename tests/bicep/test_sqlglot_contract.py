"""What BiCEPL relies on sqlglot for, pinned as behaviour rather than as a
version (``pyproject.toml`` asks for ``sqlglot>=30,<31``).

``sentinel/bicep/sqlpart.py`` reads a complex class's query with sqlglot,
walks the tree (its node classes and argument names), maps sqlglot's error
positions back to the program, and renders the rewritten query per dialect;
``sentinel/bicep/sqlcheck.py`` resolves columns with sqlglot's scopes and
decides which functions a query calls by sqlglot's node classes. A sqlglot
release that changes any of these fails here, with the reason, before it
changes what a program means."""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.scope import Scope, traverse_scope

from sentinel.bicep import compile_program
from sentinel.bicep.sqlcheck import ALLOWED_FUNCTIONS
from sentinel.bicep.sqlpart import _WRITES
from sentinel.bicep.tables import program_tables

DIALECTS = ["sqlite", "postgres", "mysql"]


def _contract(ok: bool, what: str) -> None:
    if not ok:
        pytest.fail(
            f"sqlglot {sqlglot.__version__} no longer behaves as BiCEPL relies on: {what}",
            pytrace=False,
        )


def _one(sql: str, dialect: str) -> Any:
    return sqlglot.parse_one(sql, read=dialect)


# -- the parse tree --------------------------------------------------------------------------
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_select_parses_to_the_shape_sqlpart_walks(dialect: str) -> None:
    tree = _one(
        "SELECT a.k, MAX(a.v) AS m FROM A AS a JOIN B b ON a.k = b.k WHERE a.v > 1", dialect
    )
    _contract(isinstance(tree, exp.Select) and isinstance(tree, exp.Query), "SELECT -> exp.Select")
    frm = tree.args.get("from_")
    _contract(isinstance(frm, exp.From), "a Select's FROM is its 'from_' argument (exp.From)")
    _contract(
        isinstance(frm.this, exp.Table) and frm.this.name == "A" and frm.this.alias == "a",
        "From.this is the first exp.Table, with name and alias",
    )
    joins = tree.args.get("joins") or []
    _contract(
        len(joins) == 1 and joins[0].this.alias_or_name == "b",
        "a Select's joins are its 'joins' argument, each Join.this the table",
    )
    _contract(
        [type(p).__name__ for p in tree.expressions] == ["Column", "Alias"],
        "the select list is Select.expressions: Column, Alias",
    )
    _contract(tree.expressions[0].table == "a", "Column.table is the qualifier's name")
    _contract(isinstance(tree.args.get("where"), exp.Where), "WHERE is the 'where' argument")
    _contract(isinstance(tree.expressions[1].this, exp.Max), "MAX(...) is exp.Max (an AggFunc)")
    _contract(issubclass(exp.Max, exp.AggFunc), "exp.Max is an exp.AggFunc")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_unions_subqueries_and_ctes_parse_as_sqlpart_expects(dialect: str) -> None:
    tree = _one("SELECT t.k FROM (SELECT k FROM A UNION SELECT k FROM B) t", dialect)
    sub = tree.args["from_"].this
    _contract(isinstance(sub, exp.Subquery), "a derived table is exp.Subquery")
    union = sub.this
    _contract(
        type(union) is exp.Union and isinstance(union, exp.SetOperation),
        "UNION is exp.Union (an exp.SetOperation), this/expression its two sides",
    )
    _contract(
        isinstance(union.this, exp.Select) and isinstance(union.expression, exp.Select),
        "Union.this and Union.expression are the two SELECTs",
    )
    _contract(union.named_selects == ["k"], "a Union's named_selects are its first side's")
    cte = _one("WITH w AS (SELECT k FROM A) SELECT k FROM w", dialect)
    _contract(
        [c.alias_or_name for c in cte.find_all(exp.CTE)] == ["w"],
        "WITH queries are exp.CTE nodes named by alias_or_name",
    )
    star = _one("SELECT *, A.* FROM A", dialect)
    _contract(
        [p.is_star for p in star.expressions] == [True, True], "* and A.* are is_star columns"
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_identifiers_and_calls_carry_their_place(dialect: str) -> None:
    sql = "SELECT Delivery.resource, COALESCE(x, 1) FROM Delivery"
    tree = _one(sql, dialect)
    starts = {i.name: i.meta.get("start") for i in tree.find_all(exp.Identifier)}
    _contract(
        starts.get("resource") == sql.index("resource") and starts.get("x") == sql.index("x,"),
        "an exp.Identifier's meta['start'] is its offset in the SQL read",
    )
    call = tree.find(exp.Coalesce)
    _contract(
        call is not None and call.meta.get("start") == sql.index("COALESCE"),
        "a function call's meta['start'] is where its name is written",
    )


@pytest.mark.parametrize(
    ("sql", "dialect", "line", "col", "highlight"),
    [
        ("SELECT k FROM A WHERE", "sqlite", 1, 21, "WHERE"),
        ("SELECT k FROM A WHERE", "postgres", 1, 21, "WHERE"),
        ("SELECT k FROM A WHERE", "mysql", 1, 21, "WHERE"),
    ],
)
def test_parse_errors_say_where(
    sql: str, dialect: str, line: int, col: int, highlight: str
) -> None:
    with pytest.raises(ParseError) as info:
        sqlglot.parse(sql, read=dialect)
    first = info.value.errors[0] if info.value.errors else {}
    _contract(
        (first.get("line"), first.get("col"), first.get("highlight")) == (line, col, highlight),
        f"ParseError.errors[0] has line, col and highlight ({first!r})",
    )
    _contract(bool(first.get("description")), "ParseError.errors[0] has a description")


def test_token_errors_quote_the_text_read() -> None:
    with pytest.raises(TokenError) as info:
        sqlglot.parse("SELECT 'unterminated FROM A", read="sqlite")
    _contract("Error tokenizing '" in str(info.value), 'TokenError says "Error tokenizing \'..."')


@pytest.mark.parametrize(
    ("sql", "dialect", "node"),
    [
        ("SELECT k FROM A FOR UPDATE", "postgres", exp.Lock),
        ("SELECT k FROM A FOR UPDATE", "mysql", exp.Lock),
        ("SELECT k INTO t FROM A", "postgres", exp.Into),
        ("WITH d AS (DELETE FROM A RETURNING k) SELECT k FROM d", "postgres", exp.Delete),
        ("WITH u AS (UPDATE A SET k = 1 RETURNING k) SELECT k FROM u", "postgres", exp.Update),
        (
            "WITH i AS (INSERT INTO A VALUES (1) RETURNING k) SELECT k FROM i",
            "postgres",
            exp.Insert,
        ),
    ],
)
def test_what_writes_is_a_node_sqlpart_refuses(sql: str, dialect: str, node: type) -> None:
    tree = _one(sql, dialect)
    _contract(
        any(isinstance(n, node) for n in tree.walk()) and issubclass(node, _WRITES),
        f"{sql!r} holds an exp.{node.__name__} (refused as a write)",
    )


# -- NOW -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sql", "dialect", "node"),
    [
        ("SELECT NOW() FROM A", "postgres", exp.CurrentTimestamp),
        ("SELECT NOW() FROM A", "mysql", exp.Anonymous),
        ("SELECT NOW() FROM A", "sqlite", exp.Anonymous),
        ("SELECT CURRENT_TIMESTAMP FROM A", "sqlite", exp.CurrentTimestamp),
        ("SELECT NOW FROM A", "sqlite", exp.Column),
        ("SELECT NOW FROM A", "postgres", exp.Column),
        ("SELECT NOW FROM A", "mysql", exp.Column),
    ],
)
def test_now_reads_as_sqlpart_recognises_it(sql: str, dialect: str, node: type) -> None:
    (projection,) = _one(sql, dialect).expressions
    _contract(type(projection) is node, f"{sql!r} in {dialect} is exp.{node.__name__}")


# -- functions and scopes (sqlcheck) ---------------------------------------------------------
def test_every_allowed_function_is_a_function_class_of_sqlglot() -> None:
    missing = sorted(
        n
        for n in ALLOWED_FUNCTIONS
        if not (isinstance(getattr(exp, n, None), type) and issubclass(getattr(exp, n), exp.Func))
    )
    _contract(not missing, f"ALLOWED_FUNCTIONS names no sqlglot Func class: {missing}")


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "call",
    ["setval('s', 1)", "pg_try_advisory_lock(1)", "GET_LOCK('a', 0)", "LOAD_FILE('/x')",
     "nextval('s')", "pg_read_file('x')", "SLEEP(1)", "my_function(1)"],
)  # fmt: skip
def test_unsafe_functions_are_unknown_to_sqlglot(dialect: str, call: str) -> None:
    """sqlcheck refuses what sqlglot reads as exp.Anonymous: these must stay so
    (or become a class that is not in ALLOWED_FUNCTIONS)."""
    (projection,) = _one(f"SELECT {call}", dialect).expressions
    _contract(
        isinstance(projection, exp.Func) and type(projection).__name__ not in ALLOWED_FUNCTIONS,
        f"{call} in {dialect} reads as a function outside the allow-list "
        f"(now {type(projection).__name__})",
    )


@pytest.mark.parametrize(
    ("call", "node"),
    [("IFNULL(a, 1)", "Coalesce"), ("SUBSTR(a, 1, 2)", "Substring"), ("COUNT(*)", "Count")],
)
def test_spellings_read_as_the_allowed_class(call: str, node: str) -> None:
    for dialect in DIALECTS:
        (projection,) = _one(f"SELECT {call}", dialect).expressions
        _contract(type(projection).__name__ == node, f"{call} in {dialect} is exp.{node}")


def test_operators_are_binary_even_where_sqlglot_calls_them_functions() -> None:
    tree = _one("SELECT a FROM t WHERE a > 1 AND b < 2 OR c % 2 = 0", "postgres")
    funcs = [n for n in tree.walk() if isinstance(n, exp.Func)]
    _contract(
        all(isinstance(n, (exp.Binary, exp.Unary)) for n in funcs),
        f"AND, OR and % are exp.Binary ({[type(n).__name__ for n in funcs]})",
    )


def test_variables_read_as_parameters_in_mariadb() -> None:
    tree = _one("SELECT @a, @@datadir", "mysql")
    kinds = [type(p).__name__ for p in tree.expressions]
    _contract(kinds == ["Parameter", "SessionParameter"], f"@a, @@x are {kinds}")


def test_scopes_give_sources_columns_and_parents() -> None:
    tree = _one(
        "SELECT t.k FROM (SELECT k, occTime FROM A) t "
        "WHERE EXISTS (SELECT 1 FROM B b WHERE b.k = t.k)",
        "postgres",
    )
    scopes = traverse_scope(tree)
    root = scopes[-1]
    _contract(root.parent is None and root.expression is tree, "the last scope is the root")
    _contract(
        isinstance(root.sources.get("t"), Scope)
        and root.sources["t"].expression.named_selects == ["k", "occTime"],
        "a derived table is a Scope source, its columns its expression's named_selects",
    )
    exists = next(s for s in scopes if "b" in s.sources)
    _contract(
        isinstance(exists.sources["b"], exp.Table) and exists.parent is root,
        "a subquery's scope has its tables as exp.Table sources and the outer scope as parent",
    )
    _contract(
        sorted(c.sql() for c in exists.columns) == ["b.k", "t.k"],
        "Scope.columns are the columns written in that scope",
    )


# -- the SQL generated -----------------------------------------------------------------------
PROGRAM = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS A (k INTEGER, v INTEGER) ID (k) LIFESPAN(1d);
CREATE COMPLEX EVENT CLASS B (k INTEGER, v INTEGER) ID (k) LIFESPAN(1d)
  AS SELECT a.k, COALESCE(a.v, 0) FROM A a WHERE a.occTime > NOW - 1h
  OCCURRING AT MAX(a.occTime, a.detTime);
CREATE COMPLEX EVENT CLASS C (k INTEGER) ID (k) LIFESPAN(1d)
  AS SELECT t.k FROM (SELECT k, occTime FROM A UNION SELECT k, occTime FROM B WHERE v > 1) t
  OCCURRING AT t.occTime + 10m;
"""
# OCCURRING AT MAX(...) is sentinel's own SQL (sqlpart.extreme_sql), which
# sqlglot must carry verbatim (an exp.Var)
_MAX = {
    "sqlite": "MAX(a.occTime, a.detTime)",
    "postgresql": "(SELECT CASE WHEN COUNT(bicep_x.v) = COUNT(*) THEN MAX(bicep_x.v) END "
    "FROM (VALUES (a.occTime), (a.detTime)) AS bicep_x(v))",
    "mysql": "GREATEST(a.occTime, a.detTime)",
}
_NOW = {"sqlite": ":bicep_now", "postgresql": "CAST(:bicep_now AS BIGINT)", "mysql": ":bicep_now"}


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_the_sql_generated_per_dialect(dialect: str) -> None:
    program = compile_program(PROGRAM, name="p", dialect=dialect)
    tables = program_tables(program)
    expected_logical = {
        "b": f"SELECT {_MAX[dialect]} AS occTime, NOW AS detTime, a.k, COALESCE(a.v, 0) "
        "FROM A AS a WHERE a.occTime > NOW - 3600",
        "c": "SELECT t.occTime + 600 AS occTime, NOW AS detTime, t.k FROM (SELECT k, occTime "
        "FROM A UNION SELECT k, occTime FROM B WHERE v > 1) AS t",
    }
    expected_physical = {
        "b": (
            f"SELECT {_MAX[dialect]} AS occtime, a.k AS k, COALESCE(a.v, 0) AS v, "
            f"a.bicep_eid AS bicep_dep_0 FROM sentinel_p_n_a AS a "
            f"WHERE a.occTime > {_NOW[dialect]} - 3600",
            ("a",),
        ),
        "c": (
            "SELECT t.occTime + 600 AS occtime, t.k AS k, t.bicep_dep_0 AS bicep_dep_0, "
            "t.bicep_dep_1 AS bicep_dep_1 FROM (SELECT k, occTime, A.bicep_eid AS bicep_dep_0, "
            "NULL AS bicep_dep_1 FROM sentinel_p_n_a AS A UNION SELECT k, occTime, NULL AS "
            "bicep_dep_0, B.bicep_eid AS bicep_dep_1 FROM sentinel_p_n_b AS B WHERE v > 1) AS t",
            ("a", "b"),
        ),
    }
    for name in ("b", "c"):
        logical = program.logical_sql(name)
        _contract(
            logical == expected_logical[name],
            f"the logical query of {name} renders as\n  {expected_logical[name]}\nnot\n  {logical}",
        )
        physical = tables.physical_query(program.classes[name])
        _contract(
            physical == expected_physical[name],
            f"the physical query of {name} renders as\n  {expected_physical[name]}\n"
            f"not\n  {physical}",
        )
