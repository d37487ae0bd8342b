"""Clear errors before any replay starts: rules references, unreachable or
unmigrated databases, logs at a schema revision this code does not know."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.errors import (
    LogConnectionError,
    LogSchemaUnknownError,
    LogTablesMissingError,
    ReplayError,
    ReplaySourceError,
    RuleReferenceError,
    SentinelError,
)
from sentinel.log import migrate
from sentinel.replay import load_rules, log_table, replay
from sentinel.rules import LocalEventDetector

NOT_A_DETECTOR = 42


def needs_an_argument(x: int) -> LocalEventDetector:
    raise AssertionError("never called")


def returns_something_else() -> object:
    return "rules"


def raises_inside() -> LocalEventDetector:
    raise RuntimeError("boom in the factory")


def type_error_inside() -> LocalEventDetector:
    return LocalEventDetector(len(3))  # type: ignore[arg-type]  # the factory's own bug


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("tests.replay.workload", "looks like 'package.module:attribute'"),
        ("a:b:c", "looks like"),
        (":matrix_detector", "looks like"),
        ("tests.replay.no_such_module:x", "cannot import module 'tests.replay.no_such_module'"),
        ("tests.replay.workload:no_such_rules", "has no attribute 'no_such_rules'"),
        ("tests.replay.test_errors:NOT_A_DETECTOR", "is a int, not a LocalEventDetector"),
        ("tests.replay.test_errors:needs_an_argument", "could not be called without arguments"),
        ("tests.replay.test_errors:returns_something_else", "returned str, not a"),
        (
            "tests.replay.test_errors:raises_inside",
            r"calling it raised RuntimeError: boom in the factory \(.*test_errors.py:\d+\)",
        ),
        (
            "tests.replay.test_errors:type_error_inside",
            r"calling it raised TypeError: object of type 'int' has no len\(\) \(.*test_errors",
        ),
    ],
)
def test_bad_rule_references(reference: str, message: str) -> None:
    with pytest.raises(RuleReferenceError, match=message) as info:
        load_rules(reference)
    assert info.value.reference == reference
    with pytest.raises(RuleReferenceError):
        replay("sqlite:////nonexistent/x.db", reference)  # the rules are checked first


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "raise ValueError('bad config')",
            r"raised ValueError: bad config \(.*broken_rules.py:1\)",
        ),
        ("def f(:\n    pass", r"raised SyntaxError: .* \(.*broken_rules.py:1\)"),
    ],
)
def test_a_rules_module_that_fails_to_import_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, message: str
) -> None:
    """The module's own error, its type and where, in a RuleReferenceError
    (the CLI's one-line message), not a traceback."""
    (tmp_path / "broken_rules.py").write_text(source + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuleReferenceError, match="importing module 'broken_rules' of rules"):
        load_rules("broken_rules:det")
    monkeypatch.delitem(__import__("sys").modules, "broken_rules", raising=False)
    with pytest.raises(RuleReferenceError, match=message):
        load_rules("broken_rules:det")


def test_a_good_reference_names_a_detector_or_a_factory() -> None:
    det = load_rules("tests.replay.workload:matrix_detector")
    assert "commit_after_e2" in det.rules


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_database(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://u:secret@127.0.0.1:{_closed_port()}/log"
    with pytest.raises(LogConnectionError, match="cannot connect") as info:
        replay(url, "tests.replay.workload:matrix_detector")
    assert "secret" not in str(info.value)
    with pytest.raises(LogTablesMissingError, match="no SQLite database"):
        replay(f"sqlite:///{tmp_path / 'missing.db'}", "tests.replay.workload:matrix_detector")


def test_a_log_at_an_unknown_schema_revision(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(LogSchemaUnknownError, match=r"'9999'.*does not know"):
        replay(url, "tests.replay.workload:matrix_detector")


def test_bad_sources_and_options() -> None:
    rules = "tests.replay.workload:matrix_detector"
    with pytest.raises(ReplaySourceError, match="cannot replay from a int"):
        replay(3, rules)
    with pytest.raises(ReplaySourceError, match="bad database URL"):
        replay("nope://", rules)
    with pytest.raises(ReplayError, match="engine must be"):
        replay(log_table([]), rules, engine="flink")  # type: ignore[arg-type]
    with pytest.raises(ReplaySourceError, match="lacks the log column"):
        replay(log_table([]).drop_columns(["params"]), rules)
    assert issubclass(ReplayError, SentinelError)


#: The first occurrence of each batch row gets the params ``[1]`` (not an object).
FORGE_PARAMS = (
    "UPDATE sentinel_event_batches "
    "SET occurrences = json_replace(occurrences, '$[0][6]', json('[1]'))"
)


def test_a_forged_row_read_from_the_database(tmp_path: Path) -> None:
    """A database row holding an occurrence whose params are not the JSON
    object the writer writes stops a replay (and an export) from the database
    with a ReplaySourceError naming the row and the occurrence: reading from a
    database decodes every row it reads."""
    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence
    from sentinel.replay import export_log

    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        LogWriter().write(conn, [Occurrence("e1", 1, 1.0, 1.0, None, {"k": 1}, "tx")])
        conn.execute(sa.text(FORGE_PARAMS))
    engine.dispose()
    says = (
        r"row 1 of sentinel_event_batches \(scope 'tx'\): its occurrence #0 "
        r'\[1, "e1", 1\.0, null, null, null, \[1\]\] is not one the log writes'
    )
    with pytest.raises(ReplaySourceError, match=says):
        replay(url, "tests.replay.workload:matrix_detector")
    with pytest.raises(ReplaySourceError, match=says):
        export_log(url, tmp_path / "x")


def test_a_failed_replay_leaves_its_output_directory_as_it_was(tmp_path: Path) -> None:
    """A local replay that fails midway (a row changed by hand) writes nothing
    to ``out`` and, with ``overwrite``, keeps the detections it was to replace."""
    import pyarrow.parquet as pq

    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence

    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    occs = []
    for s in range(30):
        for t, e in enumerate(("txn:begin", "E1", "E2", "txn:pre_commit", "txn:commit"), 1):
            occs.append(Occurrence(e, s * 10 + t, 1.0, 1.0, None, {"k": s}, f"s{s:03d}"))
    with engine.begin() as conn:
        LogWriter().write(conn, occs)
    rules = "tests.replay.workload:matrix_detector"
    out = tmp_path / "d"
    first = replay(url, rules, out=out, chunk_size=7)
    assert first.detections
    before = pq.read_table(out).to_pylist()
    with engine.begin() as conn:
        conn.execute(sa.text(FORGE_PARAMS + " WHERE scope = 's025'"))
    engine.dispose()
    with pytest.raises(
        ReplaySourceError, match=r"'s025'\): its occurrence #0 .* is not one the log writes"
    ):
        replay(url, rules, out=out, overwrite=True, chunk_size=7)
    assert pq.read_table(out).to_pylist() == before
    with pytest.raises(
        ReplaySourceError, match=r"'s025'\): its occurrence #0 .* is not one the log writes"
    ):
        replay(url, rules, out=tmp_path / "new", chunk_size=7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "log.db"]


def _small_log(path: Path) -> str:
    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence

    url = f"sqlite:///{path}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    occs = [
        Occurrence(e, s * 10 + t, 1.0, 1.0, None, {"k": s}, f"s{s:03d}")
        for s in range(5)
        for t, e in enumerate(("txn:begin", "E1", "E2", "txn:pre_commit", "txn:commit"), 1)
    ]
    with engine.begin() as conn:
        LogWriter().write(conn, occs)
    engine.dispose()
    return url


RULES = "tests.replay.workload:matrix_detector"


def test_overwrite_never_replaces_the_log_a_replay_reads(tmp_path: Path) -> None:
    """``out`` naming the directory of the SQLite log, or the export being
    read, is refused even with ``overwrite``: the log is left whole."""
    from sentinel.replay import export_log

    url = _small_log(tmp_path / "log.db")
    before = (tmp_path / "log.db").read_bytes()
    with pytest.raises(ReplayError, match=r"holds .*log\.db, which this run reads"):
        replay(url, RULES, out=tmp_path, overwrite=True)
    assert (tmp_path / "log.db").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["log.db"]

    export = tmp_path / "export"
    export_log(url, export)
    files = sorted(p.name for p in export.iterdir())
    with pytest.raises(ReplayError, match="which this run reads"):
        replay(export, RULES, out=export, overwrite=True)
    assert sorted(p.name for p in export.iterdir()) == files
    assert replay(export, RULES).detections == replay(url, RULES).detections


def test_overwrite_replaces_only_sentinels_own_output(tmp_path: Path) -> None:
    """``overwrite`` replaces earlier detections; a directory holding anything
    else (a user's file, a subdirectory) is refused, naming the entry, and kept."""
    import pyarrow.parquet as pq

    url = _small_log(tmp_path / "log.db")
    out = tmp_path / "d"
    first = replay(url, RULES, out=out)
    again = replay(url, RULES, out=out, overwrite=True)
    assert again.detections == first.detections == pq.read_table(out).num_rows
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ReplayError, match=r"holds 'notes\.txt', which sentinel did not write"):
        replay(url, RULES, out=out, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    (out / "sub").mkdir()
    with pytest.raises(ReplayError, match="holds 'sub'"):
        replay(url, RULES, out=out, overwrite=True)
    assert (out / "sub").is_dir()
    file = tmp_path / "file.parquet"
    file.write_text("not a directory")
    with pytest.raises(ReplayError, match="is a file"):
        replay(url, RULES, out=file, overwrite=True)
    assert file.read_text() == "not a directory"


def test_the_spark_engines_output_is_emptied_only_when_it_is_sentinels(tmp_path: Path) -> None:
    """``prepare_output`` (the Spark engine empties ``out`` before it starts on
    a remote file system) refuses a foreign entry and the log it reads, and
    empties earlier output."""
    from sentinel.replay.output import prepare_output

    out = tmp_path / "d"
    out.mkdir()
    (out / "part-00000.parquet").write_bytes(b"PAR1")
    (out / ".p1.parquet.tmp").write_bytes(b"PAR1")
    with pytest.raises(ReplayError, match="not empty"):
        prepare_output(out, overwrite=False)
    (out / "app.db").write_bytes(b"data")
    with pytest.raises(ReplayError, match=r"holds .*app\.db, which this run reads"):
        prepare_output(out, overwrite=True, reads=[out / "app.db"])
    with pytest.raises(ReplayError, match=r"holds 'app\.db', which sentinel did not write"):
        prepare_output(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [
        ".p1.parquet.tmp",
        "app.db",
        "part-00000.parquet",
    ]
    (out / "app.db").unlink()
    prepare_output(out, overwrite=True)
    assert out.is_dir() and not list(out.iterdir())


def failing_rules() -> LocalEventDetector:
    """A rule whose condition raises for even ``v`` (replay records it failed)."""
    det = LocalEventDetector()
    det.explicit("E1")
    det.rule("half", "E1", lambda occ: 1 // (occ.params["v"] % 2) == 1, action=print)
    det.rule("all", "E1", action=print)
    return det


def failing_log() -> Any:
    from sentinel.occurrence import Occurrence

    return log_table(
        (Occurrence("E1", t, float(t), scope=f"s{t}", params={"v": t}), "committed")
        for t in range(1, 11)
    )


def test_detections_whose_condition_raised_are_counted_and_shown(tmp_path: Path) -> None:
    """``result.failed`` counts them by rule, and ``sentinel replay`` says so
    (its summary counted them as detections and said nothing)."""
    from click.testing import CliRunner

    from sentinel.cli import main

    result = replay(failing_log(), "tests.replay.test_errors:failing_rules")
    # as online, a condition that raised ends its instant: "all" (same priority,
    # defined later) did not run after "half" failed
    assert result.per_rule == {"all": 5, "half": 10}
    assert result.failed == {"half": 5}
    errors = [r["error"] for r in result.rows() if r["rule"] == "half"]
    assert sum(e is not None and "ZeroDivisionError" in e for e in errors) == 5

    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence

    with engine.begin() as conn:
        LogWriter().write(
            conn, [Occurrence("E1", t, float(t), scope="s", params={"v": t}) for t in range(1, 5)]
        )
    engine.dispose()
    out = CliRunner().invoke(
        main, ["replay", "--url", url, "--rules", "tests.replay.test_errors:failing_rules"]
    )
    assert out.exit_code == 0, out.output
    assert "half\t4\t2" in out.output and "all\t2\t0" in out.output
    assert "total\t6\t2" in out.output
    assert "2 detection(s) of half failed" in out.output


def test_a_new_out_inside_the_export_read_is_refused(tmp_path: Path) -> None:
    """An ``out`` that does not exist yet (or is empty) inside the export being
    read was accepted: the detections' files became part of the export, which
    then read as more log rows. Refused on both engines, nothing written."""
    from sentinel.replay import export_log
    from sentinel.replay.output import open_output

    url = _small_log(tmp_path / "log.db")
    export = tmp_path / "export"
    export_log(url, export)
    files = sorted(p.name for p in export.iterdir())
    for out in (export / "detections", export / "bucket=00000" / "d"):
        with pytest.raises(ReplayError, match=r"is inside .*export, which this run reads"):
            replay(export, RULES, out=out)
        with pytest.raises(ReplayError, match=r"is inside .*export, which this run reads"):
            open_output(out, overwrite=False, reads=[export])  # the Spark engine's
        assert not out.exists()
    (export / "empty").mkdir()
    with pytest.raises(ReplayError, match="which this run reads"):
        replay(export, RULES, out=export / "empty")
    (export / "empty").rmdir()
    assert sorted(p.name for p in export.iterdir()) == files


def keeps_state_across_scopes() -> LocalEventDetector:
    """A rule with ``flush=False`` (replayed in occurrence-time order)."""
    det = LocalEventDetector()
    det.explicit("E1")
    det.explicit("E2")
    det.rule("across", "E1 ; E2", action=print, flush=False)
    return det


def test_the_export_of_an_empty_log_replays_with_a_rule_that_keeps_state(
    tmp_path: Path,
) -> None:
    """Its dataset of no files has no columns: the t_occ pass failed with
    pyarrow's "No match for FieldRef.Name(event)" and a traceback."""
    from sentinel.replay import export_log

    url = f"sqlite:///{tmp_path / 'log.db'}"
    migrate.upgrade(url)
    export_log(url, tmp_path / "export")
    rules = "tests.replay.test_errors:keeps_state_across_scopes"
    result = replay(tmp_path / "export", rules)
    assert result.per_rule == {"across": 0} and result.detections == 0
    assert replay(url, rules).per_rule == {"across": 0}


def test_a_spark_run_that_fails_midway_leaves_out_as_it_was(spark: Any, tmp_path: Path) -> None:
    """The tasks write into a hidden directory moved into place once all have
    succeeded: a failed (or interrupted) run left the files of the partitions
    that had finished, which read as a complete result, and with ``overwrite``
    the earlier detections were gone. Without ``out``, a failing task is a
    one-line ReplayError (it was Py4J's traceback), and every rule is counted,
    those that detect nothing too."""
    import pyarrow.parquet as pq

    from sentinel.replay.spark import count_detections

    url = _small_log(tmp_path / "log.db")
    out = tmp_path / "d"
    first = replay(url, RULES, engine="spark", spark=spark, out=out, partitions=2)
    before = pq.read_table(out).to_pylist()
    assert len(before) == first.detections > 0
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
    lazy = replay(url, RULES, engine="spark", spark=spark)
    count_detections(lazy, RULES)
    assert lazy.per_rule == first.per_rule and 0 in lazy.per_rule.values()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(FORGE_PARAMS + " WHERE scope = 's003'"))
    engine.dispose()
    with pytest.raises(ReplayError, match=r"a Spark task failed: ReplaySourceError: .*'s003'"):
        replay(url, RULES, engine="spark", spark=spark, out=out, overwrite=True, partitions=2)
    assert pq.read_table(out).to_pylist() == before
    assert sorted(p.name for p in out.iterdir()) == sorted(
        p.name for p in out.iterdir() if not p.name.startswith(".")
    )
    with pytest.raises(ReplayError, match=r"a Spark task failed: ReplaySourceError: .*'s003'"):
        replay(url, RULES, engine="spark", spark=spark, out=tmp_path / "new", partitions=2)
    assert not (tmp_path / "new").exists()
    lazy = replay(url, RULES, engine="spark", spark=spark)
    with pytest.raises(ReplayError, match=r"a Spark task failed: ReplaySourceError: .*'s003'"):
        count_detections(lazy, RULES)
