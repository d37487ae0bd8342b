"""BiCEPL programs a database could not install, refused by sentinel before
any table is created: text no database stores, types, widths and names beyond
a database's limits, text values beyond what a column holds. Each used to be
the database's (or Python's) own error, or a half-installed program; now each
is a :class:`BicepProgramError` (an announcement: :class:`BicepAnnouncementError`)
saying what and where, on every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest
import sqlalchemy as sa

from sentinel.bicep import Processor, compile_program
from sentinel.bicep import limits as bicep_limits
from sentinel.errors import BicepAnnouncementError, BicepProgramError, LogConfigError
from sentinel.log import migrate
from sentinel.rules import LocalEventDetector

T = 1_400_000_400  # a tick of 15-minute chronons


def _processor(engine: sa.Engine, text: str, **kwargs: object) -> Processor:
    kwargs.setdefault("name", "p")
    kwargs.setdefault("detector", LocalEventDetector())
    kwargs.setdefault("require_actions", False)
    return Processor(text, engine, **kwargs)  # type: ignore[arg-type]


def _names(engine: sa.Engine) -> set[str]:
    insp = sa.inspect(engine)
    return set(insp.get_table_names()) | set(insp.get_view_names())


@pytest.fixture
def refused(migrated: sa.Engine) -> Iterator[Callable[..., BicepProgramError]]:
    """Install a program (``Processor(text, ...).install()``), expecting it
    refused with :class:`BicepProgramError`; return the error. After the
    test, the database has no table or view it did not have before."""
    before = _names(migrated)

    def install(text: str, **kwargs: object) -> BicepProgramError:
        with pytest.raises(BicepProgramError) as e:
            proc = _processor(migrated, text, **kwargs)
            try:
                proc.install()
            finally:
                proc.close()
        assert _names(migrated) == before
        with migrated.connect() as conn:
            rows = conn.exec_driver_sql("SELECT name FROM sentinel_bicep_programs").all()
        assert rows == []
        return e.value

    yield install
    assert _names(migrated) == before


def _at(text: str, err: BicepProgramError, piece: str, nth: int = 0) -> None:
    """``err`` is at the ``nth`` occurrence of ``piece`` in ``text``."""
    offset = -1
    for _ in range(nth + 1):
        offset = text.index(piece, offset + 1)
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    assert (err.line, err.column) == (line, column), str(err)


def _class(attrs: str = "k INTEGER", statements: str = "ON ANNOUNCEMENT DO f(new.k)") -> str:
    return f"CREATE MUTABLE SUBSCRIBED EVENT CLASS C ({attrs}) ID (k) LIFESPAN(1d)\n  {statements};"


# -- the program's text -------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("\x00", id="nul"),
        pytest.param("\udc80", id="lone-surrogate"),
        pytest.param("\ud83d", id="lone-high-surrogate"),
    ],
)
@pytest.mark.parametrize("where", ["literal", "comment"])
def test_text_no_database_stores_is_refused_at_its_place_on_every_backend(
    refused: Callable[..., BicepProgramError], bad: str, where: str
) -> None:
    """The installed program's text is stored: PostgreSQL's text holds no NUL,
    and no driver encodes a lone surrogate. In a string literal or in a
    comment, either was the driver's or the database's error."""
    if where == "literal":
        text = _class(statements=f"ON ANNOUNCEMENT AND new.k <> 0 DO f(new.k, 'a{bad}b')")
    else:
        text = f"-- a comment {bad}\n" + _class()
    err = refused(text)
    _at(text, err, bad)
    kind = "NUL" if bad == "\x00" else "lone surrogate"
    assert kind in str(err)
    str(err).encode("utf-8")  # the message itself prints


# -- names ----------------------------------------------------------------------------------
def test_a_program_name_with_a_trailing_newline_is_refused_on_every_backend(
    refused: Callable[..., BicepProgramError],
) -> None:
    """The name's pattern ended with ``$``, which also matches before a final
    newline: ``"p\\n"`` made tables named ``sentinel_p\\n_...``."""
    for name in ("p\n", "shop\n", "p\r", "Shop", "p-q", "é"):
        err = refused(_class(), name=name)
        assert "a program's name is a lower-case identifier" in str(err)
        assert repr(name) in str(err)


def test_a_prefix_of_non_ascii_letters_is_refused_on_every_backend(
    refused: Callable[..., BicepProgramError],
) -> None:
    """``isalnum()`` let ``é`` in: 23 of them and ``_`` is 24 characters but
    47 bytes, so names over PostgreSQL's 63 bytes were cut short (and clashed)
    and MariaDB's names had 68 bytes."""
    prefix = "é" * 23 + "_"
    err = refused(_class(), prefix=prefix)
    assert "a table-name prefix is 1 to 24 ASCII letters" in str(err)
    with pytest.raises(BicepProgramError, match="ASCII letters"):
        compile_program(_class(), prefix=prefix)
    compile_program(_class(), prefix="A_9_")


def test_sentinel_db_upgrade_refuses_a_prefix_of_non_ascii_letters(engine: sa.Engine) -> None:
    """``sentinel db upgrade --prefix`` (migrate.upgrade) failed on PostgreSQL
    with a raw DuplicateTable: its names were cut at 63 bytes."""
    before = _names(engine)
    for prefix in ("é" * 23 + "_", "日志_", "x\u00b2_"):
        with pytest.raises(LogConfigError, match="ASCII letters, digits and '_'"):
            migrate.upgrade(engine, prefix=prefix)
    assert _names(engine) == before


# -- types ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("type_", "says"),
    [
        ("VARCHAR(100000000000000000000)", "a length from 1 to 65535"),
        ("VARCHAR(0)", "a length from 1 to 65535"),
        ("CHAR(65536)", "a length from 1 to 65535"),
        ("NUMERIC(66)", "a precision from 1 to 65"),
        ("DECIMAL(0)", "a precision from 1 to 65"),
        ("NUMERIC(100000000000000000000, 2)", "a precision from 1 to 65"),
        ("NUMERIC(5, 6)", "a scale from 0 to its precision"),
        ("NUMERIC(65, 31)", "at most 30 decimals"),
    ],
)
def test_a_type_beyond_a_databases_limits_is_refused_at_its_place_on_every_backend(
    refused: Callable[..., BicepProgramError], type_: str, says: str
) -> None:
    """PostgreSQL refuses VARCHAR(0) and a length over 10485760 (and Python
    an int of 20 digits as a C long), MariaDB a DECIMAL of more than 65 digits
    or a scale over the precision, MySQL one of more than 30 decimals."""
    text = _class(f"k INTEGER,\n  x {type_}")
    err = refused(text)
    _at(text, err, type_)
    assert f"attribute x of C: {type_} needs " in str(err) and says in str(err)
    for dialect in ("sqlite", "postgresql", "mysql"):
        with pytest.raises(BicepProgramError, match="needs"):
            compile_program(text, dialect=dialect)


def test_the_widest_types_install_and_hold_their_values_on_every_backend(
    migrated: sa.Engine,
) -> None:
    text = _class("k INTEGER, v VARCHAR(65535), n NUMERIC(65, 30), c CHAR(1)")
    proc = _processor(migrated, text)
    assert proc.install() == 1
    n = Decimal("12345678901234567890123456789012345.123456789012345678901234567891")
    proc.announce("C", k=1, v="é" * 32_767, n=n, c="x", occ=T, det=T)
    proc.run_until(T)
    (row,) = proc.live("C")
    assert row["v"] == "é" * 32_767 and row["n"] == n and row["c"] == "x"
    proc.close()


# -- widths ---------------------------------------------------------------------------------
def _wide(n: int) -> str:
    attrs = ", ".join(f"a{i} INTEGER" for i in range(n))
    return (
        f"CREATE MUTABLE SUBSCRIBED EVENT CLASS C (k INTEGER, {attrs}) ID (k) LIFESPAN(1d)\n"
        f"  ON ANNOUNCEMENT DO f(new.k, new.a{n - 1});"
    )


def test_more_columns_than_a_database_allows_are_refused_on_every_backend(
    refused: Callable[..., BicepProgramError], backend: str
) -> None:
    """A class of 1000 attributes has a change table of 2010 columns: more
    than PostgreSQL (1600) and SQLite (2000) allow, whose own errors these
    were. 400 is the limit there (MariaDB's is 100, as before)."""
    text = _wide(999)
    err = refused(text)
    limit = 100 if backend == "mysql" else 400
    assert f"C has 1000 attributes, more than the {limit}" in str(err)
    _at(text, err, f"a{limit - 1} INTEGER")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_class_of_four_hundred_attributes_runs_with_every_value_given(
    migrated: sa.Engine,
) -> None:
    """The widest class PostgreSQL and SQLite allow: its change table's row of
    810 numbers fits PostgreSQL's 8160 bytes."""
    proc = _processor(migrated, _wide(399))
    assert proc.install() == 1
    proc.announce("C", k=1, occ=T, det=T, **{f"a{i}": 2**62 + i for i in range(399)})
    assert [str(c) for r in proc.run_until(T) for c in r.actions] == [f"f(1, {2**62 + 398})"]
    proc.announce("C", k=1, occ=T, det=T + 900, **{f"a{i}": -(2**62) for i in range(399)})
    assert [str(c) for r in proc.run_until(T + 900) for c in r.actions] == []
    proc.close()


def test_an_action_with_more_parameters_than_its_table_holds_is_refused(
    refused: Callable[..., BicepProgramError],
) -> None:
    """An action's table has a column per parameter: 2000 were more than any
    of the three databases allows in a table (or a row)."""
    args = ", ".join(["new.k"] * 2000)
    text = _class(statements=f"ON ANNOUNCEMENT DO f({args})")
    err = refused(text)
    assert "action f has 2000 parameters, more than the 100" in str(err)
    _at(text, err, "new.k", 100)
    compile_program(_class(statements=f"ON ANNOUNCEMENT DO f({', '.join(['new.k'] * 100)})"))


def test_a_query_reading_more_classes_than_its_result_table_holds_is_refused(
    refused: Callable[..., BicepProgramError],
) -> None:
    """A complex class's result table has a lineage column per class its
    query reads: a join of 2000 was more columns than any of the three
    databases allows in a table."""
    joined = ", ".join(f"C c{i}" for i in range(2000))
    text = (
        _class()
        + "\nCREATE COMPLEX EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(1d)\n"
        + f"  AS SELECT c0.k FROM {joined} OCCURRING AT c0.occTime;"
    )
    err = refused(text)
    assert "the query of D reads classes 2000 times" in str(err)
    assert "more than the 100" in str(err)
    _at(text, err, "SELECT c0.k")
    joined = ", ".join(f"C c{i}" for i in range(100))
    compile_program(
        _class() + "\nCREATE COMPLEX EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(1d)\n"
        f"  AS SELECT c0.k FROM {joined} OCCURRING AT c0.occTime;"
    )


# -- text values ---------------------------------------------------------------------------
def test_text_longer_than_a_text_column_holds_is_refused_when_announced_on_every_backend(
    migrated: sa.Engine,
) -> None:
    """MariaDB's TEXT column (an attribute that is no key) holds 65,535 bytes:
    more was its own "Data too long" error; PostgreSQL and SQLite stored it.
    Every backend now refuses it, counting bytes of UTF-8."""
    proc = _processor(migrated, _class("k INTEGER, s TEXT, v VARCHAR(65535)"))
    proc.install()
    for value in ("x" * 65_536, "é" * 32_768, "\U0001f600" * 16_384):
        for attr in ("s", "v"):
            with pytest.raises(BicepAnnouncementError, match=r"65536 bytes \(UTF-8\), more than"):
                proc.announce("C", k=1, occ=T, det=T, **{attr: value})
    longest = "\U0001f600" * 16_383 + "xyz"  # 65,535 bytes
    proc.announce("C", k=1, s=longest, v=longest, occ=T, det=T)
    proc.run_until(T)
    (row,) = proc.live("C")
    assert row["s"] == longest and row["v"] == longest
    proc.close()


# -- what is installed already -----------------------------------------------------------------
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_program_installed_before_the_type_limits_runs_after_a_restart(
    migrated: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limits bind a new program or version, not one installed already:
    a VARCHAR(100000) an older sentinel installed (PostgreSQL and SQLite hold
    it) runs after the upgrade."""
    text = _class("k INTEGER, v VARCHAR(100000)")
    monkeypatch.setattr(bicep_limits, "MAX_VARCHAR", 10**7)
    before = _processor(migrated, text)
    assert before.install() == 1
    before.close()
    monkeypatch.undo()
    with pytest.raises(BicepProgramError, match="a length from 1 to 65535"):
        compile_program(text)
    after = _processor(migrated, text)
    assert after.install() == 1
    after.announce("C", k=1, v="v", occ=T, det=T)
    assert [str(c) for r in after.run_until(T) for c in r.actions] == ["f(1)"]
    after.close()
