# ruff: noqa: E501 (the bad programs are data, one per line)
"""The BiCEPL compiler: the thesis's listings compile to what the thesis says
(Listings 2.1-2.4, the errata's readings), and malformed programs get errors at
their place."""

from __future__ import annotations

import re

import pytest

from sentinel.bicep import compile_program
from sentinel.bicep import model as m
from sentinel.bicep.conditions import statement_sql
from sentinel.errors import BicepCycleError, BicepProgramError, BicepSyntaxError

LISTING_2_1 = """CREATE IMMUTABLE SUBSCRIBED EVENT CLASS ResourceLow
      (resource VARCHAR(30), amountLeft NUMERIC) ID
      (resource) LIFESPAN(5d);"""

LISTING_2_4 = """CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery (resource
  VARCHAR(30), amount NUMERIC)
  ID (resource) LIFESPAN(14d)
ON CHANGE AND new.occTime > old.occTime DO
  informOwner('delayed', new.resource,new.occTime),
  ON CHANGE AND new.occTime <= old.occTime DO
  twitterEarlyDelivery('Delivery company delivers %s
  amazingly fast!',new.resource);"""

RESOURCE_EMPTY = """CREATE IMMUTABLE SUBSCRIBED EVENT CLASS ResourceEmpty
  (resource VARCHAR(30)) ID (resource) LIFESPAN(3d);"""


def squash(sql: str) -> str:
    return " ".join(sql.split())


def test_listing_2_1_declares_an_immutable_class() -> None:
    (cls,) = compile_program(LISTING_2_1).program.classes
    assert isinstance(cls, m.SubscribedClass) and not cls.mutable
    assert cls.name == "ResourceLow" and cls.keys == ("resource",)
    assert [(a.name, a.type.kind, a.type.length) for a in cls.attributes] == [
        ("resource", "text", 30),
        ("amountLeft", "numeric", None),
    ]
    assert cls.lifespan == 5 * 86_400


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_listing_2_2_is_rewritten_as_listing_2_3(dialect: str) -> None:
    program = compile_program(
        RESOURCE_EMPTY
        + """
        CREATE COMPLEX EVENT CLASS Delayed (resource VARCHAR(30)) ID (resource) LIFESPAN(1d)
        AS SELECT resource FROM ResourceEmpty WHERE resource = 'Milk'
        OCCURRING AT ResourceEmpty.occTime + 10m;""",
        dialect=dialect,
    )
    # Listing 2.3 (the thesis writes the detection-time column "det"; its tables
    # call it detTime, as here)
    assert squash(program.logical_sql("Delayed")) == (
        "SELECT ResourceEmpty.occTime + 600 AS occTime, NOW AS detTime, resource "
        "FROM ResourceEmpty WHERE resource = 'Milk'"
    )


def test_listing_2_4_statements() -> None:
    program = compile_program(LISTING_2_4)
    cls = program.classes["delivery"]
    first, second = cls.definition.statements
    assert first.action.name == "informOwner" and len(first.action.params) == 3
    assert second.action.name == "twitterEarlyDelivery"
    assert isinstance(first.condition, m.And)
    assert [a.name for a in program.actions.values()] == ["informOwner", "twitterEarlyDelivery"]
    assert program.actions["informowner"].kinds == ("text", "text", "integer")
    sql = statement_sql(cls, 0, "c_delivery", "x_informowner", "sqlite").sql
    assert "(c.n_occtime > c.o_occtime)" in sql
    assert "c.touched = 1 AND c.o_present = 1 AND c.n_present = 1" in sql  # CHANGE


def test_the_errata_readings() -> None:
    # LIFESPAN with or without parentheses, upper-case units, no commas between
    # statements, FUTURE, several timing primitives, MIN/MAX over times.
    program = compile_program(
        """CREATE MUTABLE SUBSCRIBED EVENT CLASS A (k INTEGER) ID (k) LIFESPAN 2D
             ON FUTURE AND CHANGE DO f(new.k) ON (ONTIME OR LATE(1H, 1D)) AND NOT FIRED DO g()
             ON new.occTime > MAX(old.occTime, NOW - 10M) DO h();
           CREATE COMPLEX EVENT CLASS B (k INTEGER) ID (k) LIFESPAN(-1)
             AS SELECT x.k FROM A x JOIN A y ON x.k = y.k
             OCCURRING AT MIN(x.occTime, y.occTime + 1h) - 30s;"""
    )
    a, b = program.program.classes
    assert a.lifespan == 2 * 86_400 and b.lifespan is None
    assert len(a.statements) == 3
    assert squash(program.logical_sql("B")).startswith(
        "SELECT MIN(x.occTime, y.occTime + 3600) - 30 AS occTime, NOW AS detTime, x.k"
    )
    assert (
        compile_program(program.text, dialect="postgresql")
        .logical_sql("B")
        .startswith(
            "SELECT (SELECT CASE WHEN COUNT(bicep_x.v) = COUNT(*) THEN MIN(bicep_x.v) END "
            "FROM (VALUES (x.occTime), (y.occTime + 3600)) AS bicep_x(v)) - 30 AS occTime"
        )
    )


def test_dependency_order_and_strata() -> None:
    program = compile_program(
        """CREATE COMPLEX EVENT CLASS C (k INTEGER) ID (k) AS SELECT k FROM B OCCURRING AT B.occTime;
           CREATE COMPLEX EVENT CLASS B (k INTEGER) ID (k) AS SELECT k FROM A OCCURRING AT A.occTime;
           CREATE MUTABLE SUBSCRIBED EVENT CLASS A (k INTEGER) ID (k) LIFESPAN(1d);"""
    )
    assert [(c.name, c.stratum) for c in program] == [("A", 0), ("B", 1), ("C", 2)]
    assert program.classes["a"].dependents == ("b",)


def test_the_digest_ignores_layout_but_not_meaning() -> None:
    a = compile_program(LISTING_2_4)
    b = compile_program("\n\n" + " ".join(LISTING_2_4.split()))
    c = compile_program(LISTING_2_4.replace("14d", "15d"))
    assert a.digest == b.digest != c.digest


# -- bad input -------------------------------------------------------------------------------
S = "CREATE MUTABLE SUBSCRIBED EVENT CLASS"
SE = RESOURCE_EMPTY + "\n"
CX = "CREATE COMPLEX EVENT CLASS Need (resource VARCHAR(30)) ID (resource) LIFESPAN(5d)\n"

#: (program, what the message says, where it points: the first occurrence of this
#: text, or "$" for the end of the program)
BAD: list[tuple[str, str, str]] = [
    ("CREATE MUTABLE EVENT CLASS X (a INT) ID (a) LIFESPAN(1d);", "unexpected 'EVENT'", "EVENT"),
    (f"{S} X (a INT) ID (a) LIFESPAN(1d)", "unexpected end of program", "$"),
    (f"{S} X (a INT) ID (a) LIFESPAN(5 d);", "unexpected", "5 d"),
    (f"{S} X (a INT) ID (a) LIFESPAN(5w);", "unexpected", "5w"),
    (f"{S} X (a INT) ID (a) LIFESPAN(-2);", "or -1 for none", "-2"),
    (f"{S} X (a INTEGR) ID (a) LIFESPAN(1d);", "unknown type 'INTEGR'", "INTEGR"),
    (f"{S} X (a INT, b INT) ID (c) LIFESPAN(1d);", "key c of X is not one of its attributes", "c)"),
    (f"{S} X (a INT, a TEXT) ID (a) LIFESPAN(1d);", "attribute a of X is declared twice", "a TEXT"),
    (f"{S} X (occTime INT) ID (occTime) LIFESPAN(1d);", "the processor's own", "occTime INT"),
    (
        f"{S} X (a INT, order INT) ID (a) LIFESPAN(1d);",
        "order is a reserved word of SQLite",
        "order INT",
    ),
    (
        f"{S} X (a INT, Key TEXT) ID (a) LIFESPAN(1d);",
        "Key is a reserved word of SQLite",
        "Key TEXT",
    ),
    (f"{S} Select (a INT) ID (a) LIFESPAN(1d);", "Select is a reserved word", "Select ("),
    (f"{S} X (a INT, present INT) ID (a) LIFESPAN(1d);", "the processor's own", "present"),
    (f"{S} X (a INT, id INT) ID (a) LIFESPAN(1d);", "the processor's own", "id INT"),
    (f"{S} X (a INT, {'b' * 61} INT) ID (a) LIFESPAN(1d);", "longer than 60", "bbb"),
    (f"{S} X (a INT) ID (a) LIFESPAN(3650000d);", "at most 9999 years", "3650000d"),
    (f"{S} X (a INT) ID (a) LIFESPAN(1d) ON CHANGE DO f(9223372036854775808);", "64 bits", "922"),
    (f"{S} X (a INT) ID (a) LIFESPAN(1d) ON NEW.a > 1e999 DO f();", "not a finite", "1e999"),
    (
        f"{S} X (a INT) ID (a) LIFESPAN(1d);\n{S} x (a INT) ID (a) LIFESPAN(1d);",
        "defined twice",
        "CREATE MUTABLE SUBSCRIBED EVENT CLASS x",
    ),
    (
        f"{S} X (a INT, amount INT) ID (a) LIFESPAN(1d) ON CHANGE AND NEW.amont > 1 DO f();",
        "did you mean NEW.amount?",
        "NEW.amont",
    ),
    (f"{S} X (a INT) ID (a) LIFESPAN(1d) ON CHANGE DO;", "unexpected ';'", ";"),
    (f"{S} X (a INT) ID (a) LIFESPAN(1d) ON CHANGED DO f();", "unexpected 'CHANGED'", "CHANGED"),
    (f"{S} X (a INT) ID (a) LIFESPAN(1d) ON LATE(2d, 1h) DO f();", "needs min <= max", "2d"),
    (
        "CREATE IMMUTABLE SUBSCRIBED EVENT CLASS X (a INT) ID (a) LIFESPAN(1d) ON REVOCATION DO f();",
        "REVOCATION never holds for X",
        "REVOCATION",
    ),
    (
        f"{S} X (a INT) ID (a) LIFESPAN(1d) ON CHANGE DO f(NEW.a) ON ONTIME DO f(NEW.a, 1);",
        "takes 1 parameter(s) elsewhere",
        "f(NEW.a, 1)",
    ),
    (
        f"{S} X (a INT, b TEXT) ID (a) LIFESPAN(1d) ON CHANGE DO f(NEW.a) ON ONTIME DO f(NEW.b);",
        "parameter 1 of action f is text",
        "NEW.b)",
    ),
    (
        f"{S} X (a INT, b TEXT) ID (a) LIFESPAN(1d) ON NEW.b > 5 DO f();",
        "compares a text value with a integer value",
        "NEW.b >",
    ),
    (
        f"{S} X (a INT) ID (a) LIFESPAN(1d) ON CHANGE DO f(NEW.a + 'x');",
        "cannot add or subtract",
        "NEW.a +",
    ),
    (SE + CX + "AS SELECT resource FROM ResourceEmpty;", "must end with OCCURRING AT", "SELECT"),
    (
        SE + CX + "AS SELECT resource FROM ResourceEmpty WHERE OCCURRING AT ResourceEmpty.occTime;",
        "in the query of Need",
        "WHERE",
    ),
    (
        SE + CX + "AS SELECT resource, FROM ResourceEmpty OCCURRING AT ResourceEmpty.occTime;",
        "a comma with nothing after it",
        ", FROM",
    ),
    (
        SE
        + CX
        + "AS SELECT resource, resource FROM ResourceEmpty OCCURRING AT ResourceEmpty.occTime;",
        "selects 2 column(s) but the class has 1",
        "resource, resource",
    ),
    (
        SE + CX + "AS SELECT * FROM ResourceEmpty OCCURRING AT ResourceEmpty.occTime;",
        "must list its columns",
        "* FROM",
    ),
    (
        SE
        + CX
        + "AS SELECT resource FROM ResourceEmpty WHERE resource = 'milk OCCURRING AT ResourceEmpty.occTime;",
        "in the query of Need",
        "'milk",
    ),
    (
        SE
        + CX
        + "AS SELECT resource FROM ResourceEmpty WHERE (resource = 'x' OCCURRING AT ResourceEmpty.occTime;",
        "in the query of Need",
        " OCCURRING",
    ),
    (
        SE + CX + "AS SELECT resource FROM ResourceEmpty r OCCURRING AT ResourceEmty.occTime;",
        "not a table of its query",
        "ResourceEmty.occTime",
    ),
    (
        SE + CX + "AS SELECT resource FROM ResourceEmpty OCCURRING AT ResourceEmpty.occTime + 10x;",
        "unexpected '10'",
        "10x",
    ),
    (
        SE
        + CX
        + "AS WITH d AS (DELETE FROM ResourceEmpty RETURNING resource) SELECT resource FROM d "
        "OCCURRING AT ResourceEmpty.occTime;",
        "may only read",
        "DELETE",
    ),
    (
        SE
        + CX
        + "AS SELECT resource INTO copy FROM ResourceEmpty OCCURRING AT ResourceEmpty.occTime;",
        "may only read",
        "INTO copy",
    ),
    (
        SE
        + CX
        + "AS SELECT resource FROM ResourceEmpty; SELECT 1 OCCURRING AT ResourceEmpty.occTime;",
        "must be one SELECT statement",
        "SELECT resource",
    ),
    (
        SE
        + CX
        + "AS SELECT resource FROM ResourceEmpty WHERE resource = 'x' GROUP resource OCCURRING AT ResourceEmpty.occTime;",
        "in the query of Need",
        "GROUP",
    ),
]


def _where(program: str, marker: str) -> tuple[int, int]:
    offset = len(program.rstrip()) if marker == "$" else program.index(marker)
    line = program.count("\n", 0, offset) + 1
    return line, offset - (program.rfind("\n", 0, offset) + 1) + 1


@pytest.mark.parametrize(("program", "message", "marker"), BAD)
def test_a_malformed_program_is_reported_at_its_place(
    program: str, message: str, marker: str
) -> None:
    with pytest.raises(BicepProgramError) as info:
        compile_program(program)
    err = info.value
    assert message in str(err)
    assert (err.line, err.column) == _where(program, marker), str(err)
    # the context shows the line with a caret under the column
    _src, caret = err.context.split("\n")
    assert caret.index("^") - 4 == err.column - 1
    assert re.search(rf"at line {err.line}, column {err.column}", str(err))


def test_syntax_errors_say_what_was_expected() -> None:
    with pytest.raises(BicepSyntaxError) as info:
        compile_program("CREATE MUTABLE SUBSCRIBED EVENT CLASS X (a INT) LIFESPAN(1d);")
    assert "LIFESPAN" in str(info.value) and "ID" in info.value.expected


def test_classes_that_read_each_other_are_a_cycle() -> None:
    with pytest.raises(BicepCycleError) as info:
        compile_program(
            """CREATE COMPLEX EVENT CLASS A (k INTEGER) ID (k) AS SELECT k FROM B OCCURRING AT B.occTime;
               CREATE COMPLEX EVENT CLASS B (k INTEGER) ID (k) AS SELECT k FROM C OCCURRING AT C.occTime;
               CREATE COMPLEX EVENT CLASS C (k INTEGER) ID (k) AS SELECT k FROM A OCCURRING AT A.occTime;"""
        )
    assert info.value.cycle == ("A", "B", "C", "A")
    assert "A -> B -> C -> A" in str(info.value) and info.value.line == 1
    with pytest.raises(BicepCycleError, match="S -> S"):
        compile_program(
            "CREATE COMPLEX EVENT CLASS S (k INTEGER) ID (k) AS SELECT k FROM S OCCURRING AT S.occTime;"
        )


def test_bad_program_names_and_empty_programs() -> None:
    with pytest.raises(BicepProgramError, match="lower-case identifier"):
        compile_program(LISTING_2_1, name="Grocery Store")
    with pytest.raises(BicepProgramError, match="defines no event class"):
        compile_program("  -- nothing\n")


def _chain(n: int) -> str:
    """n complex classes, each reading the next, written top first."""
    out = [
        f"CREATE COMPLEX EVENT CLASS C{i} (a INT) ID (a) AS SELECT a FROM C{i + 1} "
        f"OCCURRING AT C{i + 1}.occTime;"
        for i in range(n)
    ]
    return "\n".join(
        [*out, f"CREATE MUTABLE SUBSCRIBED EVENT CLASS C{n} (a INT) ID (a) LIFESPAN(1d);"]
    )


A = "CREATE MUTABLE SUBSCRIBED EVENT CLASS A (a INT) ID (a) LIFESPAN(1d)"
CA = A + ";\nCREATE COMPLEX EVENT CLASS B (a INT) ID (a) AS SELECT a FROM A "

DEEP = {
    "AND": A + " ON " + " AND ".join(["CHANGE"] * 5000) + " DO f();",
    "NOT": A + " ON " + "NOT " * 3000 + "CHANGE DO f();",
    "parentheses": A + " ON " + "(" * 3000 + "CHANGE" + ")" * 3000 + " DO f();",
    "+": A + " ON NEW.a > " + " + ".join(["1"] * 5000) + " DO f();",
    "MAX": A + " ON NEW.a > " + "MAX(" * 2000 + "1" + ")" * 2000 + " DO f();",
    "SQL parentheses": CA
    + "WHERE "
    + "(" * 3000
    + "a > 1"
    + ")" * 3000
    + " OCCURRING AT A.occTime;",
    "SQL AND": CA + "WHERE " + " AND ".join(["a > 1"] * 3000) + " OCCURRING AT A.occTime;",
    "OCCURRING AT +": CA + "OCCURRING AT A.occTime" + " + 1d" * 3000 + ";",
    "OCCURRING AT MAX": CA + "OCCURRING AT " + "MAX(" * 2000 + "A.occTime" + ")" * 2000 + ";",
    "classes": _chain(1200),
}


@pytest.mark.parametrize("program", DEEP.values(), ids=DEEP.keys())
def test_a_program_of_any_depth_compiles_or_says_why_not(program: str) -> None:
    """Deeply nested conditions, values, queries and long chains of classes give
    a positioned BicepProgramError (or compile), never a RecursionError."""
    try:
        compiled = compile_program(program)
    except BicepProgramError as err:
        # A chain of 1200 classes is longer than a program may be; the compiler
        # says so last, after ordering the classes (which would have recursed).
        reason = "too deeply" in str(err) or "more than the 65535" in str(err)
        assert err.line is not None and reason, str(err)
    else:
        assert compiled.classes


@pytest.mark.parametrize(
    ("dialect", "name"), [("postgresql", "user"), ("mysql", "delayed"), ("sqlite", "pragma")]
)
def test_an_attribute_named_by_a_reserved_word_of_the_database_is_refused(
    dialect: str, name: str
) -> None:
    program = f"CREATE MUTABLE SUBSCRIBED EVENT CLASS X (a INT, {name} INT) ID (a) LIFESPAN(1d);"
    with pytest.raises(BicepProgramError, match=f"{name} is a reserved word") as info:
        compile_program(program, dialect=dialect)
    assert info.value.column == program.index(f"{name} INT") + 1
    others = {"sqlite", "postgresql", "mysql"} - {dialect}
    assert any(_compiles(program, d) for d in others)


def _compiles(program: str, dialect: str) -> bool:
    try:
        compile_program(program, dialect=dialect)
    except BicepProgramError:
        return False
    return True


def test_not_binds_tighter_than_and_tighter_than_or() -> None:
    """The precedence the reference evaluator and the SQL both take from the
    parser: NOT, then AND, then OR (as in SQL)."""
    program = compile_program(
        f"{S} X (a INT) ID (a) LIFESPAN(1d) ON NOT CHANGE AND ONTIME OR LATE AND FUTURE DO f();"
    )
    (st,) = program.classes["x"].definition.statements
    cond = st.condition
    assert isinstance(cond, m.Or)
    assert isinstance(cond.left, m.And) and isinstance(cond.right, m.And)
    assert isinstance(cond.left.left, m.Not) and isinstance(cond.left.right, m.Timing)
    assert [cond.right.left.primitive, cond.right.right.primitive] == ["LATE", "FUTURE"]  # type: ignore[union-attr]
    minus = compile_program(f"{S} X (a INT) ID (a) LIFESPAN(1d) ON NEW.a - 1 - 2 > 0 DO f();")
    (st,) = minus.classes["x"].definition.statements
    left = st.condition.left  # type: ignore[union-attr]
    assert isinstance(left, m.BinOp) and isinstance(left.left, m.BinOp)  # (a - 1) - 2


def test_a_no_break_space_is_named_as_the_unexpected_character() -> None:
    """Python's split() takes a no-break space for white space: the error
    quoted the next word ("unexpected 'ID' ...; expected ID")."""
    from sentinel.bicep import compile_program
    from sentinel.errors import BicepSyntaxError

    text = "CREATE MUTABLE SUBSCRIBED EVENT CLASS D (r VARCHAR(5))\u00a0ID (r) LIFESPAN(1d);"
    with pytest.raises(BicepSyntaxError, match=r"unexpected character '\\xa0' at line 1"):
        compile_program(text)
