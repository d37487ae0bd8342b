"""BiCEPL against careless and hostile programs: names too long for the tables
they become, SQL that sentinel's own checks misread, failures at a tick. Each
is refused at definition with its place, or works the same on every backend."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from sentinel.bicep import Processor, compile_program
from sentinel.bicep.compiler import name_limit
from sentinel.errors import BicepAnnouncementError, BicepProgramError, BicepTickError

T = 1_400_000_400  # a tick of 15-minute chronons


def _subscribed(cls: str, action: str = "f") -> str:
    return (
        f"CREATE MUTABLE SUBSCRIBED EVENT CLASS {cls} (k INTEGER) ID (k) LIFESPAN(1d)\n"
        f"  ON ANNOUNCEMENT DO {action}(new.k);"
    )


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_a_class_name_too_long_for_its_tables_is_refused_where_it_is_written(
    dialect: str,
) -> None:
    """sentinel_<program>_<kind>_<class> is at most 63 characters (PostgreSQL's
    limit, MariaDB's is 64): the compiler refuses a longer class or action name
    at its place and says how long it may be, without copying a huge name into
    the message."""
    limit = name_limit("p")
    assert limit == 63 - len("sentinel_p_x_") == 50
    compile_program(_subscribed("C" * limit, "a" * limit), name="p", dialect=dialect)
    for cls, action, column in [
        ("C" * (limit + 1), "f", 39),
        ("C" * 100_000, "f", 39),
        ("C", "a" * (limit + 1), 22),
    ]:
        with pytest.raises(BicepProgramError) as e:
            compile_program(_subscribed(cls, action), name="p", dialect=dialect)
        what = "class" if len(cls) > limit else "action"
        assert (e.value.line, e.value.column) == ((1, column) if what == "class" else (2, column))
        assert f"{what} name" in str(e.value) and f"more than the {limit}" in str(e.value)
        assert len(str(e.value)) < 600


def test_the_limit_of_a_name_follows_the_program_name_and_the_table_prefix() -> None:
    """A shorter prefix leaves more room; a longer program name less."""
    assert name_limit("p" * 24) == 63 - len("sentinel_") - 24 - 3 == 27
    assert name_limit("p", "s_") == 63 - len("s_p_x_") == 57
    compile_program(_subscribed("C" * 57), name="p", prefix="s_")
    with pytest.raises(BicepProgramError, match="more than the 50"):
        compile_program(_subscribed("C" * 57), name="p")
    with pytest.raises(BicepProgramError, match="more than the 27"):
        compile_program(_subscribed("C" * 28), name="p" * 24)


def test_a_processor_checks_the_names_for_its_own_prefix(make: Callable[..., Processor]) -> None:
    """A program compiled for one prefix is checked again for the processor's."""
    program = compile_program(_subscribed("C" * 57), name="p", prefix="s_")
    with pytest.raises(BicepProgramError, match="more than the 50"):
        make(program)


def test_the_longest_class_name_installs_and_runs_on_every_backend(
    make: Callable[..., Processor],
) -> None:
    limit = name_limit("p")
    cls, action = "C" * limit, "a" * limit
    proc = make(_subscribed(cls, action), name="p")
    proc.announce(cls, k=1, occ=T, det=T)
    assert [str(c) for r in proc.run_until(T) for c in r.actions] == [f"{action}(1)"]


def test_a_quoted_string_selected_as_a_column_is_a_column(make: Callable[..., Processor]) -> None:
    """``SELECT k, 'x' FROM C`` lists two columns; the check for a dangling comma
    must not take the quoted string for nothing."""
    proc = make(
        "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER) ID (k) LIFESPAN(1d);\n"
        "CREATE COMPLEX EVENT CLASS D (k INTEGER, s VARCHAR(20)) ID (k) LIFESPAN(1d)\n"
        "  AS SELECT k, 'a, FROM b' FROM C OCCURRING AT C.occTime;",
        name="p",
    )
    proc.announce("C", k=1, occ=T, det=T)
    proc.run_until(T)
    assert [(r["k"], r["s"]) for r in proc.live("D")] == [(1, "a, FROM b")]
    with pytest.raises(BicepProgramError, match="a comma with nothing after it"):
        compile_program(
            "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER) ID (k) LIFESPAN(1d);\n"
            "CREATE COMPLEX EVENT CLASS D (k INTEGER, s VARCHAR(20)) ID (k) LIFESPAN(1d)\n"
            "  AS SELECT k, /* 'x' */ FROM C OCCURRING AT C.occTime;"
        )


BIG = 2**63 - 1


@pytest.mark.parametrize(
    ("statement", "args"),
    [
        ("ON ANNOUNCEMENT AND new.n + 1 > new.n DO f(new.k)", (1,)),
        ("ON ANNOUNCEMENT DO f(new.n + 1)", (6,)),
        ("ON ANNOUNCEMENT DO f(MAX(-new.n - 2, 0))", (0,)),
    ],
)
def test_integer_arithmetic_beyond_64_bits_fails_the_tick_with_sentinels_error_everywhere(
    make: Callable[..., Processor], statement: str, args: tuple[int, ...]
) -> None:
    """PostgreSQL and MariaDB refuse ``n + 1`` for the largest BIGINT; SQLite
    would go on in floating point and fire where the others fail. On every
    backend the tick fails with a BicepTickError naming the program, the tick,
    the class and the statement (the driver's error is its cause), and leaves
    nothing; a corrected announcement in the same chronon lets it run."""
    proc = make(
        "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER, n INTEGER) ID (k) LIFESPAN(1d)\n"
        f"  {statement};",
        name="p",
    )
    proc.announce("C", k=1, n=BIG, occ=T, det=T - 60)
    for _ in range(2):  # the same tick, again
        with pytest.raises(BicepTickError) as e:
            proc.run_until(T)
        err = e.value
        assert (err.program, err.event_class, err.statement) == ("p", "C", statement)
        assert err.tick == datetime.fromtimestamp(T, UTC)
        assert (err.line, err.column) == (2, 3)
        assert "program 'p', tick 2014-05-13 17:00:00 UTC" in str(err)
        assert isinstance(err.__cause__, sa.exc.DBAPIError)
        assert proc.live("C") == [] and proc.next_tick() == datetime.fromtimestamp(T, UTC)
    proc.announce("C", k=1, n=5, occ=T, det=T - 30)
    assert [c.args for r in proc.run_until(T) for c in r.actions] == [args]


def test_a_query_that_fails_at_a_tick_is_named_with_its_place(
    make: Callable[..., Processor], migrated: sa.Engine
) -> None:
    """A complex class reading an application table that is gone by the tick."""
    with migrated.begin() as conn:
        conn.execute(sa.text("CREATE TABLE app_limits (k BIGINT)"))
    proc = make(
        "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER) ID (k) LIFESPAN(1d);\n"
        "CREATE COMPLEX EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(1d)\n"
        "  AS SELECT k FROM C WHERE k IN (SELECT k FROM app_limits) OCCURRING AT C.occTime;",
        name="p",
    )
    with migrated.begin() as conn:
        conn.execute(sa.text("DROP TABLE app_limits"))
    proc.announce("C", k=1, occ=T, det=T)
    with pytest.raises(BicepTickError) as e:
        proc.run_until(T)
    assert (e.value.event_class, e.value.statement) == ("D", None)
    assert (e.value.line, e.value.column) == (3, 6)
    assert "the query of D (at line 3, column 6) failed on the database" in str(e.value)
    assert proc.live("C") == []


def test_max_and_min_nest_at_most_eight_levels() -> None:
    """Each level's sums are checked for overflow on SQLite, which repeats
    them; deeper nesting is refused at its place on every backend."""

    def program(depth: int) -> str:
        value = "new.n + 1"
        for _ in range(depth):
            value = f"MAX({value}, 0) + 1"
        return (
            "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER, n INTEGER) ID (k) LIFESPAN(1d)\n"
            f"  ON ANNOUNCEMENT AND {value} > 0 DO f(new.k);"
        )

    for dialect in ("sqlite", "postgresql", "mysql"):
        compile_program(program(8), dialect=dialect)
        with pytest.raises(BicepProgramError, match="more than 8 levels of MAX and MIN") as e:
            compile_program(program(9), dialect=dialect)
        assert (e.value.line, e.value.column) == (2, 23)


def test_max_and_min_of_a_missing_value_are_missing_on_every_backend(
    make: Callable[..., Processor],
) -> None:
    """PostgreSQL's GREATEST and LEAST skip NULLs, SQLite's and MariaDB's do
    not: MAX(new.n, old.n) at an announcement, or the MIN of a missing time,
    would differ. It is missing (unknown) everywhere, like a comparison with a
    missing value."""
    proc = make(
        "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER, n INTEGER) ID (k) LIFESPAN(1d)\n"
        "  ON ANNOUNCEMENT DO f(MAX(new.n, old.n), MIN(new.n, 7), MAX(old.n, 1, 2))\n"
        "  ON ANNOUNCEMENT AND MAX(new.n, old.n) = 3 DO g(new.k)\n"
        "  ON ANNOUNCEMENT AND NOT MAX(new.n, old.n) = 3 DO g(new.k)\n"
        "  ON CHANGE DO h(MAX(new.n, old.n), MIN(new.n, old.n));\n"
        "CREATE MUTABLE SUBSCRIBED EVENT CLASS E (k INTEGER) ID (k) LIFESPAN(1d);\n"
        "CREATE COMPLEX EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(1d)\n"
        "  AS SELECT C.k FROM C LEFT JOIN E ON E.k = C.k\n"
        "  OCCURRING AT MIN(C.occTime, E.occTime);",
        name="p",
    )
    proc.announce("C", k=1, n=3, occ=T, det=T)
    proc.announce("C", k=2, n=3, occ=T, det=T)
    proc.announce("E", k=2, occ=T - 900, det=T)
    calls = [str(c) for r in proc.run_until(T) for c in r.actions]
    assert sorted(calls) == ["f(None, 3, None)", "f(None, 3, None)"]
    assert [r["k"] for r in proc.live("D")] == [2]
    proc.announce("C", k=1, n=5, occ=T, det=T + 900)
    assert [str(c) for r in proc.run_until(T + 900) for c in r.actions] == ["h(5, 3)"]


def test_a_class_of_a_hundred_text_attributes_installs_and_runs_on_every_backend(
    make: Callable[..., Processor],
) -> None:
    """InnoDB counts four bytes a character of every VARCHAR(n) against a row
    of 8126 bytes: the change table of 20 VARCHAR(60) attributes (two columns
    each) did not fit on MariaDB. There the columns that no index needs are
    TEXT; the announcement checks their length on every backend."""
    names = [f"a{i}" for i in range(99)]
    proc = make(
        "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k VARCHAR(768), "
        + ", ".join(f"{n} VARCHAR(60)" for n in names)
        + ") ID (k) LIFESPAN(1d)\n  ON ANNOUNCEMENT DO f(new.a98);",
        name="p",
    )
    values = {n: n * 20 for n in names}  # at most 60 characters
    proc.announce("C", k="K" * 768, occ=T, det=T, **values)
    assert [str(c) for r in proc.run_until(T) for c in r.actions] == [f"f({'a98' * 20!r})"]
    (row,) = proc.live("C")
    assert {n: row[n] for n in names} == values and row["k"] == "K" * 768
    with pytest.raises(BicepAnnouncementError, match="more than VARCHAR"):
        proc.announce("C", k="x", occ=T, det=T, a0="x" * 61)


def test_a_class_has_at_most_a_hundred_attributes_on_mariadb() -> None:
    """(PostgreSQL and SQLite hold more: tests/bicep/test_upgrades.py.)"""

    def program(n: int) -> str:
        attrs = ", ".join(f"a{i} INTEGER" for i in range(n))
        return f"CREATE MUTABLE SUBSCRIBED EVENT CLASS C ({attrs}) ID (a0) LIFESPAN(1d);"

    compile_program(program(100), dialect="mysql")
    with pytest.raises(BicepProgramError, match="101 attributes, more than the 100") as e:
        compile_program(program(101), dialect="mysql")
    assert e.value.column == program(101).index("a100 INTEGER") + 1


def test_a_key_longer_than_mariadb_indexes_is_refused_there() -> None:
    """MariaDB indexes at most 3072 bytes, four a character: VARCHAR(768)."""

    def program(key: str) -> str:
        return f"CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k {key}, j TEXT) ID (j, k) LIFESPAN(1d);"

    compile_program(program("VARCHAR(577)"), dialect="mysql")  # 4 * (191 + 577) = 3072
    for dialect in ("sqlite", "postgresql"):
        compile_program(program("VARCHAR(578)"), dialect=dialect)
    with pytest.raises(BicepProgramError, match="takes 3076 bytes in MariaDB's index") as e:
        compile_program(program("VARCHAR(578)"), dialect="mysql")
    assert e.value.column == program("VARCHAR(578)").index("j, k") + 1


def test_a_program_longer_than_mariadb_stores_is_refused_there(
    make: Callable[..., Processor], backend: str
) -> None:
    """The installed program's text is a TEXT column: 65,535 bytes on MariaDB,
    which refused a longer one with its own error at install. PostgreSQL and
    SQLite install it."""

    head = "CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER, s TEXT) ID (k) LIFESPAN(1d)\n"
    head += "  ON ANNOUNCEMENT AND new.s <> '"
    tail = "' DO f(new.k);"
    fill = 65_535 - len(head) - len(tail)  # two bytes an é
    longest = head + "é" * (fill // 2) + "x" * (fill % 2) + tail
    assert len(longest.encode()) == 65_535
    proc = make(longest, name="p")
    proc.announce("C", k=1, s="x", occ=T, det=T)
    assert [str(c) for r in proc.run_until(T) for c in r.actions] == ["f(1)"]
    longer = longest.replace("f(new.k)", "f(new.k, 1)")
    if backend != "mysql":
        make(longer, name="q")
        return
    with pytest.raises(BicepProgramError, match="has 65538 bytes") as e:
        make(longer, name="q")
    assert e.value.line == 2 and longer.splitlines()[1][e.value.column - 1 :] == "1);"


def test_a_program_whose_tables_another_program_has_is_refused_at_its_place(
    make: Callable[..., Processor],
) -> None:
    """Program p's class i_x and program p_n's class x both have a table named
    sentinel_p_n_i_x: the second install is refused, naming the class, and
    leaves the first program as it was."""
    first = make(_subscribed("i_x"), name="p")
    second = "CREATE MUTABLE SUBSCRIBED EVENT CLASS\n  x (k INTEGER) ID (k) LIFESPAN(1d);"
    with pytest.raises(BicepProgramError, match="sentinel_p_n_i_x of class x exists") as e:
        make(second, name="p_n")
    assert (e.value.line, e.value.column) == (2, 3)
    first.announce("i_x", k=1, occ=T, det=T)
    assert [str(c) for r in first.run_until(T) for c in r.actions] == ["f(1)"]
