"""What a complex class's query may name and do, checked before it runs:
columns resolved against the classes (issue 28.6), functions from an
allow-list, no catalogue tables, and a read-only transaction around it when
it runs (issue 28.7)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sentinel.bicep import Processor, compile_program
from sentinel.cli import main
from sentinel.errors import BicepProgramError, BicepTickError

T = 1_400_000_400  # a tick of 15-minute chronons

DELIVERY = (
    "CREATE MUTABLE SUBSCRIBED EVENT CLASS Delivery (resource VARCHAR(30), amount INTEGER)\n"
    "  ID (resource) LIFESPAN(14d);\n"
)


def _program(query: str, *, columns: str = "resource VARCHAR(30)", key: str = "resource") -> str:
    return DELIVERY + (
        f"CREATE COMPLEX EVENT CLASS Late ({columns}) ID ({key}) LIFESPAN(1d)\n  AS {query};\n"
    )


def _refused(text: str, dialect: str = "sqlite") -> BicepProgramError:
    with pytest.raises(BicepProgramError) as info:
        compile_program(text, dialect=dialect)
    return info.value


def _place(text: str, marker: str) -> tuple[int, int]:
    offset = text.index(marker)
    return text.count("\n", 0, offset) + 1, offset - text.rfind("\n", 0, offset)


# -- 28.6: columns ---------------------------------------------------------------------------
@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
@pytest.mark.parametrize(
    ("query", "marker", "says"),
    [
        (
            "SELECT Delivery.resourc FROM Delivery OCCURRING AT Delivery.occTime",
            "resourc FROM",
            "Delivery.resourc, which is not a column of Delivery (its columns: occTime, "
            "detTime, resource, amount); did you mean resource?",
        ),
        (
            "SELECT resourc FROM Delivery OCCURRING AT Delivery.occTime",
            "resourc FROM",
            "a column resourc that none of its tables has (it reads Delivery); "
            "did you mean resource?",
        ),
        (
            "SELECT d.resource FROM Delivery d WHERE d.amont > 1 OCCURRING AT d.occTime",
            "amont",
            "d.amont, which is not a column of d",
        ),
        (
            "SELECT x.resource FROM Delivery d OCCURRING AT d.occTime",
            "x.resource",
            "a table x that is not one of its query (it reads d)",
        ),
        (
            "SELECT t.resource FROM (SELECT resource AS r, occTime FROM Delivery) t "
            "OCCURRING AT t.occTime",
            "resource FROM (",
            "t.resource, which is not a column of t (its columns: r, occTime)",
        ),
        (
            "SELECT d.resource FROM Delivery d WHERE EXISTS (SELECT 1 FROM Delivery e "
            "WHERE e.resource = d.resource AND e.amonut > 1) OCCURRING AT d.occTime",
            "amonut",
            "e.amonut, which is not a column of e",
        ),
        (
            "WITH w AS (SELECT resource, occTime FROM Delivery) SELECT w.resource FROM w "
            "WHERE w.detTime > 0 OCCURRING AT w.occTime",
            "detTime > 0",
            "w.detTime, which is not a column of w (its columns: resource, occTime)",
        ),
    ],
)
def test_a_column_no_table_of_the_query_has_is_refused_at_its_place(
    dialect: str, query: str, marker: str, says: str
) -> None:
    text = _program(query)
    err = _refused(text, dialect)
    assert says in str(err)
    assert (err.line, err.column) == _place(text, marker)


@pytest.mark.parametrize(
    "query",
    [
        # an alias of the select list, in ORDER BY
        "SELECT resource AS r FROM Delivery ORDER BY r OCCURRING AT Delivery.occTime",
        # a column of an application table: the database knows it (checked at install)
        "SELECT d.resource FROM Delivery d JOIN suppliers s ON s.name = d.resource "
        "WHERE s.active = 1 AND active = 1 OCCURRING AT d.occTime",
        # NOW, time literals, occTime and detTime, names in any case
        "SELECT RESOURCE FROM delivery WHERE occtime - NOW < 5d AND DETTIME > 0 "
        "OCCURRING AT Delivery.occTime",
        # a correlated subquery reads the outer query's tables
        "SELECT d.resource FROM Delivery d WHERE d.amount = (SELECT MAX(e.amount) FROM "
        "Delivery e WHERE e.resource = d.resource) OCCURRING AT d.occTime",
        # the grocery example's union in a derived table
        "SELECT tab.resource FROM (SELECT resource, occTime FROM Delivery UNION SELECT "
        "resource, occTime FROM Delivery WHERE occTime - NOW < 5d) tab OCCURRING AT tab.occTime",
    ],
)
def test_columns_the_query_can_have_are_accepted(query: str) -> None:
    for dialect in ("sqlite", "postgresql", "mysql"):
        compile_program(_program(query), dialect=dialect)


def test_sentinel_bicep_check_refuses_an_unknown_column_with_its_place(tmp_path: Path) -> None:
    """The issue's reproducer: `check` showed `Delivery.resourc AS resource`."""
    text = _program("SELECT Delivery.resourc FROM Delivery OCCURRING AT Delivery.occTime")
    (tmp_path / "p.bicepl").write_text(text)
    result = CliRunner().invoke(main, ["bicep", "check", str(tmp_path / "p.bicepl")])
    assert result.exit_code == 1, result.output
    line, column = _place(text, "resourc FROM")
    assert (
        f"Delivery.resourc, which is not a column of Delivery (its columns: occTime, detTime, "
        f"resource, amount); did you mean resource? at line {line}, column {column}"
    ) in result.output
    assert "AS resource" not in result.output


def test_installing_refuses_an_unknown_column_before_creating_tables(
    migrated: sa.Engine, tmp_path: Path
) -> None:
    text = _program("SELECT Delivery.resourc FROM Delivery OCCURRING AT Delivery.occTime")
    (tmp_path / "p.bicepl").write_text(text)
    before = set(sa.inspect(migrated).get_table_names())
    url = migrated.url.render_as_string(hide_password=False)
    program = str(tmp_path / "p.bicepl")
    result = CliRunner().invoke(main, ["bicep", "install", program, "--url", url])
    assert result.exit_code == 1, result.output
    assert "Delivery.resourc, which is not a column of Delivery" in result.output
    assert set(sa.inspect(migrated).get_table_names()) == before


# -- 28.7: functions and tables ----------------------------------------------------------------
# Each is what the issue saw pass: a query that changes the application's
# sequence, takes a session lock outliving the tick, reads a file or the
# catalogue of passwords, on the backend it applies to.
_UNSAFE = [
    ("postgresql", "SELECT setval('app_seq', 1000) FROM Delivery", "setval(", "calls setval"),
    (
        "postgresql",
        "SELECT pg_try_advisory_lock(42) FROM Delivery",
        "pg_try_advisory_lock(",
        "calls pg_try_advisory_lock",
    ),
    (
        "postgresql",
        "SELECT Delivery.resource FROM Delivery, pg_shadow WHERE pg_shadow.usename <> ''",
        "pg_shadow WHERE",
        "reads pg_shadow, a table of the database's catalogue",
    ),
    (
        "postgresql",
        "SELECT Delivery.resource FROM Delivery, pg_catalog.pg_authid a",
        "pg_catalog.",
        "reads pg_catalog.pg_authid AS a, a table of the database's catalogue",
    ),
    ("mysql", "SELECT GET_LOCK('tick', 0) FROM Delivery", "GET_LOCK(", "calls GET_LOCK"),
    (
        "mysql",
        "SELECT LOAD_FILE('/etc/hostname') FROM Delivery",
        "LOAD_FILE(",
        "calls LOAD_FILE",
    ),
    (
        "mysql",
        "SELECT Delivery.resource FROM Delivery, mysql.user u",
        "mysql.user",
        "reads mysql.user AS u, a table of the database's catalogue",
    ),
    (
        "sqlite",
        "SELECT Delivery.resource FROM Delivery, sqlite_master m",
        "sqlite_master",
        "reads sqlite_master AS m, a table of the database's catalogue",
    ),
]


@pytest.mark.parametrize(
    ("backend", "query", "marker", "says"), _UNSAFE, ids=[u[2].strip("(. ") for u in _UNSAFE]
)
def test_a_query_that_would_do_more_than_read_is_refused_at_install(
    make: Callable[..., Processor], migrated: sa.Engine, query: str, marker: str, says: str
) -> None:
    if "setval" in query:
        with migrated.begin() as conn:
            conn.exec_driver_sql("CREATE SEQUENCE app_seq")
    text = _program(f"{query} OCCURRING AT Delivery.occTime")
    with pytest.raises(BicepProgramError) as info:
        make(text, name="p")
    err = info.value
    assert says in str(err), str(err)
    assert (err.line, err.column) == _place(text, marker)
    if "setval" in query:
        with migrated.begin() as conn:
            assert conn.exec_driver_sql("SELECT nextval('app_seq')").scalar() == 1


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("SELECT nextval('s') FROM Delivery", "calls nextval"),
        ("SELECT pg_read_file('/etc/passwd') FROM Delivery", "calls pg_read_file"),
        ("SELECT SLEEP(10) FROM Delivery", "calls SLEEP"),
        ("SELECT my_function(resource) FROM Delivery", "calls my_function"),
        ("SELECT CURRENT_USER FROM Delivery", "calls CURRENT_USER"),
        ("SELECT resource FROM Delivery WHERE amount > @limit", "reads a variable (@limit)"),
        ("SELECT resource FROM Delivery, information_schema.tables t", "catalogue"),
    ],
)
def test_functions_outside_the_allow_list_are_refused_on_every_dialect(
    dialect: str, query: str, says: str
) -> None:
    if "@" in query and dialect != "mysql":
        pytest.skip("@name is a variable in MariaDB's SQL")
    err = _refused(_program(f"{query} OCCURRING AT Delivery.occTime"), dialect)
    assert says in str(err), str(err)


def test_the_allowed_functions_compile_on_every_dialect() -> None:
    query = (
        "SELECT t.resource, t.n, t.total, ROUND(t.mean, 2), COALESCE(t.most, 0), ABS(t.least), "
        "LOWER(t.resource), CASE WHEN t.n > 1 THEN 1 ELSE 0 END, CAST(t.most AS INTEGER), "
        "NULLIF(t.most, 0), LENGTH(t.resource) FROM (SELECT d.resource, MAX(d.occTime) AS "
        "occTime, COUNT(*) AS n, SUM(d.amount) AS total, AVG(d.amount) AS mean, MAX(d.amount) "
        "AS most, MIN(d.amount) AS least FROM Delivery d WHERE EXISTS (SELECT 1 FROM Delivery "
        "e WHERE e.resource = d.resource) AND d.amount % 2 = 0 OR d.resource LIKE 'M%' "
        "GROUP BY d.resource) t OCCURRING AT t.occTime"
    )
    columns = "resource VARCHAR(30), " + ", ".join(f"c{i} INTEGER" for i in range(10))
    for dialect in ("sqlite", "postgresql", "mysql"):
        compile_program(_program(query, columns=columns), dialect=dialect)


# -- 28.7: a read-only transaction around the query ----------------------------------------------
# The allow-list is the first guard; the database is the second, for a function
# the list lets through by mistake. These tests let one through on purpose.
_TOUCHING = _program(
    "SELECT resource FROM Delivery WHERE app_touch() = 1 OCCURRING AT Delivery.occTime"
)


def _let_through(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    from sentinel.bicep import sqlcheck

    monkeypatch.setattr(sqlcheck, "ALLOWED_NAMES", sqlcheck.ALLOWED_NAMES | {name})


@pytest.mark.parametrize("backend", ["postgresql"])
def test_the_query_runs_read_only_on_postgresql(
    make: Callable[..., Processor], migrated: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's setval(): the application's next INSERT would have failed."""
    _let_through(monkeypatch, "setval")
    with migrated.begin() as conn:
        conn.exec_driver_sql("CREATE SEQUENCE app_seq")
    proc = make(
        _program(
            "SELECT resource FROM Delivery WHERE setval('app_seq', 1000) > 0 "
            "OCCURRING AT Delivery.occTime"
        ),
        name="p",
    )
    proc.announce("Delivery", resource="Milk", amount=1, occ=T, det=T)
    with pytest.raises(BicepTickError) as info:
        proc.run_until(T)
    assert "read-only transaction" in str(info.value.__cause__)
    assert info.value.event_class == "Late"
    with migrated.begin() as conn:
        assert conn.exec_driver_sql("SELECT nextval('app_seq')").scalar() == 1


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_query_runs_with_query_only_on_sqlite(
    make: Callable[..., Processor], migrated: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function of the connection's that writes fails inside the query, and
    the connection can write again after it."""
    _let_through(monkeypatch, "app_touch")
    refused: list[str] = []

    @sa.event.listens_for(migrated, "connect")
    def _register(dbapi_conn: Any, _record: Any) -> None:
        def touch() -> int:
            try:
                dbapi_conn.execute("INSERT INTO app_log (n) VALUES (1)")
            except Exception as err:
                refused.append(str(err))
                raise
            return 1

        dbapi_conn.create_function("app_touch", 0, touch)

    migrated.dispose()
    with migrated.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE app_log (n INTEGER)")
    proc = make(_TOUCHING, name="p")
    proc.announce("Delivery", resource="Milk", amount=1, occ=T, det=T)
    with pytest.raises(BicepTickError) as info:
        proc.run_until(T)
    assert "user-defined function raised exception" in str(info.value.__cause__)
    assert refused == ["attempt to write a readonly database"]
    with migrated.begin() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM app_log").scalar() == 0
        assert conn.exec_driver_sql("PRAGMA query_only").scalar() == 0
        conn.exec_driver_sql("INSERT INTO app_log (n) VALUES (2)")  # it may write again


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_a_recursive_query_is_refused(dialect: str) -> None:
    """``WITH RECURSIVE`` without an end passed the checks (install runs the
    query with LIMIT 0) and the first tick waited for it for ever."""
    text = _program(
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) "
        "SELECT Delivery.resource FROM Delivery, t OCCURRING AT Delivery.occTime"
    )
    err = _refused(text, dialect)
    assert "is recursive (WITH RECURSIVE), and a recursive query need not end" in str(err)
    # a plain WITH is a query like any other
    compile_program(
        _program(
            "WITH d AS (SELECT resource, occTime FROM Delivery) "
            "SELECT d.resource FROM d OCCURRING AT d.occTime"
        ),
        dialect=dialect,
    )
