"""Rows written or changed by hand with SQL (SQLite keeps a value of any type in
any column): every reader and command says which row is wrong, never a
traceback and never a silently wrong answer."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sentinel.cli import main
from sentinel.errors import LogRowError
from sentinel.log import Firing, LogReader, LogWriter, migrate
from sentinel.occurrence import ObjectRef, Occurrence

T0 = 1_700_000_000.25


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        LogWriter().write(
            conn,
            [
                Occurrence("a", 1, T0, T0, ObjectRef("S", ("x",)), {"k": 1}, "tx1"),
                Occurrence("b", 2, T0 + 1, T0 + 1, None, {"k": 2}, "tx1"),
            ],
            firings=[
                Firing(
                    rule="R",
                    scope="tx1",
                    t_occ=2,
                    constituents=(("tx1", 1), ("tx1", 2)),
                    coupling="immediate",
                    status="fired",
                )
            ],
        )
    engine.dispose()
    return url


def forge(url: str, sql: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(sql))
    engine.dispose()


BATCH = "UPDATE sentinel_event_batches SET {} WHERE scope = 'tx1'"
#: the row's first occurrence, ``[t_occ, event, ts, detected_ts, source_class,
#: source_key, params]``, with element ``i`` replaced by the SQL value ``v``
ELEMENT = BATCH.format("occurrences = json_replace(occurrences, '$[0][{}]', {})")
OCC = "its occurrence #0 "  # then the element as JSON

#: (what the row holds, the SQL that makes it so, the column named, what the error says)
FORGED_EVENTS = [
    ("params a list", ELEMENT.format(6, "json('[1, 2]')"), "occurrences", OCC + '[1, "a", '),
    (
        "params a bad tag",
        ELEMENT.format(6, """json('{"k": {"$ref": 5}}')"""),
        "occurrences",
        '{"$ref": 5}',
    ),
    ("a text ts", ELEMENT.format(2, "'abc'"), "occurrences", OCC + '[1, "a", "abc", '),
    (
        "a text detected_ts",
        ELEMENT.format(3, "'abc'"),
        "occurrences",
        OCC + '[1, "a", 1700000000.25, "abc"',
    ),
    ("a text t_occ", ELEMENT.format(0, "'one'"), "occurrences", OCC + '["one", "a", '),
    # past year 9999 (occ.at, and sentinel log firings, failed with an OverflowError)
    ("a ts past 9999", ELEMENT.format(2, "1e300"), "occurrences", "outside the years 1 to 9999"),
    ("a detected_ts before 1", ELEMENT.format(3, "-1e12"), "occurrences", "outside the years 1"),
    ("a number as event", ELEMENT.format(1, "97"), "occurrences", OCC + "[1, 97, "),
    ("a source key not JSON", ELEMENT.format(5, "'[1'"), "occurrences", '"S", "[1", '),
    (
        "an element not an array",
        BATCH.format("occurrences = json_replace(occurrences, '$[0]', 1)"),
        "occurrences",
        OCC + "1 is not one the log writes",
    ),
    (
        "an element too short",
        BATCH.format("occurrences = json_remove(occurrences, '$[0][6]')"),
        "occurrences",
        OCC + '[1, "a", 1700000000.25, null, "S", "[\\"x\\"]"] is not one the log writes',
    ),
    (
        "occurrences not JSON",
        BATCH.format("occurrences = '[[1, \"a\"'"),
        "occurrences",
        "its occurrences are not the JSON array",
    ),
    (
        "occurrences an object",
        BATCH.format("occurrences = '{\"a\": 1}'"),
        "occurrences",
        "its occurrences are not the JSON array",
    ),
    (
        "an unknown outcome",
        BATCH.format("outcome = 'maybe'"),
        "outcome",
        "its outcome 'maybe' is none of",
    ),
    # a text column keeps a number as text, but a blob as a blob
    (
        "a blob as savepoint",
        BATCH.format("savepoint = x'7370'"),
        "savepoint",
        "its savepoint b'sp' is not a text",
    ),
]

#: a scope that is not a text: the commands that look occurrences up by scope
#: (``log firings``) find none, and say so
FORGED_SCOPE = [
    (
        "a blob as scope",
        BATCH.format("scope = x'747831'"),
        "scope",
        "its scope b'tx1' is not a text",
    ),
]


@pytest.mark.parametrize(
    ("what", "sql", "column", "says"),
    FORGED_EVENTS + FORGED_SCOPE,
    ids=[f[0] for f in FORGED_EVENTS + FORGED_SCOPE],
)
def test_a_forged_event_row_is_named_by_every_reader(
    url: str, what: str, sql: str, column: str, says: str
) -> None:
    forge(url, sql)
    with LogReader(url) as reader:
        for read in (
            lambda: list(reader.occurrences()),
            lambda: list(reader.occurrences(order="t_occ")),
            lambda: reader.latest(),
        ):
            with pytest.raises(LogRowError) as caught:
                read()
            err = caught.value
            assert (err.table, err.row_id, err.column) == ("sentinel_event_batches", 1, column)
            assert "row 1 of sentinel_event_batches (scope " in str(err), str(err)
            assert says in str(err), str(err)


@pytest.mark.parametrize(
    ("what", "sql", "column", "says"), FORGED_EVENTS, ids=[f[0] for f in FORGED_EVENTS]
)
def test_the_commands_name_a_forged_event_row(
    url: str, tmp_path: Path, what: str, sql: str, column: str, says: str
) -> None:
    forge(url, sql)
    run = CliRunner()
    for args in (
        ["log", "show", "--url", url],
        ["log", "firings", "--url", url],
        ["log", "export", "--url", url, "--out", str(tmp_path / "x")],
        ["replay", "--rules", "tests.replay.workload:matrix_detector", "--source", url],
    ):
        result = run.invoke(main, args)
        assert result.exit_code == 1, (args, result.output)
        assert "Traceback" not in result.output and result.exception is not None
        assert type(result.exception) is SystemExit, (args, result.exception)
        assert "row 1 of sentinel_event_batches" in result.output, (args, result.output)


def test_the_documented_row_error_is_what_the_reader_says(tmp_path: Path) -> None:
    """The forged row of ``docs/eventlog.md`` ("Reading") and ``docs/replay.md``
    gives the message those pages show."""
    url = f"sqlite:///{tmp_path / 'doc.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    order = ObjectRef("Order", (7,))
    with engine.begin() as conn:  # rows 1 to 6
        LogWriter().write(conn, [Occurrence("x", 1, 1.0, 1.0, None, {}, f"s{i}") for i in range(6)])
    with engine.begin() as conn:  # row 7
        LogWriter().write(
            conn,
            [
                Occurrence("order", 1, 1735723800.25, 1735723800.25, order, {"total": 30}, "a"),
                Occurrence("payment", 2, 1735723800.5, 1735723800.5, order, {"amount": 30}, "a"),
            ],
        )
    engine.dispose()
    forge(
        url,
        "UPDATE sentinel_event_batches SET occurrences = "
        "json_replace(occurrences, '$[1][6]', json('[30]')) WHERE scope = 'a'",
    )
    with LogReader(url) as reader, pytest.raises(LogRowError) as caught:
        list(reader.occurrences())
    said = str(caught.value)
    root = Path(__file__).resolve().parents[2]
    assert said in (root / "docs" / "eventlog.md").read_text("utf-8").splitlines()
    shown = said.split(", 1735723800.5")[0]
    assert shown + ", ...] is not one the log writes" in " ".join(
        (root / "docs" / "replay.md").read_text("utf-8").split()
    )


FIRINGS = "UPDATE sentinel_rule_firings SET {}"
FORGED_FIRINGS = [
    ("an object", FIRINGS.format("constituents = '{\"a\": 1}'"), "constituents"),
    ("a list of numbers", FIRINGS.format("constituents = '[1, 2]'"), "constituents"),
    ("a triple", FIRINGS.format("constituents = '[[\"tx1\", 1, 3]]'"), "constituents"),
    ("a text t_occ", FIRINGS.format('constituents = \'[["tx1", "1"]]\''), "constituents"),
    ("not JSON", FIRINGS.format("constituents = 'not json'"), "constituents"),
    ("a fired_at not a time", FIRINGS.format("fired_at = 'yesterday'"), "fired_at"),
    ("a finished_at not a time", FIRINGS.format("finished_at = 'soon'"), "finished_at"),
]


@pytest.mark.parametrize(
    ("what", "sql", "column"), FORGED_FIRINGS, ids=[f[0] for f in FORGED_FIRINGS]
)
def test_a_forged_firing_row_is_named(url: str, what: str, sql: str, column: str) -> None:
    forge(url, sql)
    with LogReader(url, chunk_size=3) as reader, pytest.raises(LogRowError) as caught:
        list(reader.firings())
    err = caught.value
    assert (err.table, err.row_id, err.column) == ("sentinel_rule_firings", 1, column)
    assert f"row 1 of sentinel_rule_firings: its {column}" in str(err)
    result = CliRunner().invoke(main, ["log", "firings", "--url", url])
    assert result.exit_code == 1 and type(result.exception) is SystemExit, result.output
    assert "row 1 of sentinel_rule_firings" in result.output


def test_unchanged_rows_read_as_written(url: str) -> None:
    """The checks refuse nothing the writer writes."""
    with LogReader(url) as reader:
        rows = list(reader.occurrences())
        firings = list(reader.firings())
    assert [(o.event, o.t_occ, o.at.timestamp(), dict(o.params)) for o, _, _ in rows] == [
        ("a", 1, T0, {"k": 1}),
        ("b", 2, T0 + 1, {"k": 2}),
    ]
    assert rows[0][0].source == ObjectRef("S", ("x",))
    assert firings[0].constituents == (("tx1", 1), ("tx1", 2))


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_text("not a database at all\n" * 100)
    run = CliRunner()
    for args in (["log", "show"], ["log", "firings"], ["db", "current"], ["db", "upgrade"]):
        result = run.invoke(main, [*args, "--url", f"sqlite:///{path}"])
        assert result.exit_code == 1, (args, result.output)
        assert type(result.exception) is SystemExit, (args, result.exception)
        assert "file is not a database" in result.output
