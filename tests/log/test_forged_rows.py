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


EVENTS = "UPDATE sentinel_events SET {} WHERE t_occ = 1"

#: (what the row holds, the SQL that makes it so, what the error says)
FORGED_EVENTS = [
    ("params a list", EVENTS.format("params = '[1, 2]'"), "its params are not"),
    ("params not JSON", EVENTS.format("params = '{\"k\": 1'"), "its params are not"),
    ("params a bad tag", EVENTS.format('params = \'{"k": {"$ref": 5}}\''), "its params are not"),
    ("a text ts", EVENTS.format("ts = 'abc'"), "ts"),
    ("a text detected_ts", EVENTS.format("detected_ts = 'abc'"), "detected_ts"),
    ("a text t_occ", EVENTS.format("t_occ = 'one'"), "t_occ"),
    # a text column keeps a number as text, but a blob as a blob
    ("a blob as event", EVENTS.format("event = x'61'"), "event"),
    ("a source key not JSON", EVENTS.format("source_key = '[1'"), "source_key"),
    ("an unknown outcome", EVENTS.format("outcome = 'maybe'"), "outcome"),
    ("a blob as savepoint", EVENTS.format("savepoint = x'7370'"), "savepoint"),
]


@pytest.mark.parametrize(("what", "sql", "says"), FORGED_EVENTS, ids=[f[0] for f in FORGED_EVENTS])
def test_a_forged_event_row_is_named_by_every_reader(
    url: str, what: str, sql: str, says: str
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
            assert err.table == "sentinel_events" and err.row_id == 1
            assert "row 1 of sentinel_events" in str(err) and says in str(err)


@pytest.mark.parametrize(("what", "sql", "says"), FORGED_EVENTS, ids=[f[0] for f in FORGED_EVENTS])
def test_the_commands_name_a_forged_event_row(
    url: str, tmp_path: Path, what: str, sql: str, says: str
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
        assert "row 1 of sentinel_events" in result.output, (args, result.output)


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
