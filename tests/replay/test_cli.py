"""``sentinel log export`` and ``sentinel replay``."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sentinel.cli import main
from sentinel.log import migrate
from tests.replay.workload import Online, matrix_detector, random_steps, replayed, run_steps

RULES = "tests.replay.workload:matrix_detector"


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Online]:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    online = Online(matrix_detector(), engine)
    run_steps(online, random_steps(random.Random(3), 25, size=10))
    engine.dispose()
    return url, online


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_export_then_replay_locally(logged: tuple[str, Online], tmp_path: Path) -> None:
    url, online = logged
    res = _run("log", "export", "--url", url, "--out", str(tmp_path / "x"), "--buckets", "4")
    assert res.exit_code == 0, res.output
    assert f"exported {len(online.rows):,} occurrences into" in res.output
    res = _run(
        "replay", "--rules", RULES, "--url", str(tmp_path / "x"), "--out", str(tmp_path / "d")
    )
    assert res.exit_code == 0, res.output
    # Not a terminal: plain tab-separated lines, no box-drawn table.
    lines = res.output.splitlines()
    at = lines.index("sentinel replay (local)")
    assert lines[at + 1] == "rule\tdetections"
    assert any(line.startswith("commit_after_e2\t") for line in lines)
    assert f"total\t{len(online.detections)}" in lines
    assert not any(c in res.output for c in "┃│┏━")
    assert f"{len(online.rows):,} events read from" in res.output
    got = replayed(pq.read_table(tmp_path / "d").to_pylist())
    assert got == sorted(online.detections)


def test_replay_straight_from_the_database(logged: tuple[str, Online]) -> None:
    url, online = logged
    res = _run("replay", "--rules", RULES, "--source", url)
    assert res.exit_code == 0, res.output
    assert f"{len(online.rows):,} events read from {url}" in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rules", "tests.replay.nowhere:x"], "cannot import module 'tests.replay.nowhere'"),
        (["--rules", "tests.replay.workload"], "looks like 'package.module:attribute'"),
        (["--source", "postgresql+psycopg://u@127.0.0.1:9/x"], "cannot connect"),
        (["--source", "/no/such/export"], "no log export at /no/such/export"),
    ],
)
def test_clear_errors(logged: tuple[str, Online], args: list[str], message: str) -> None:
    url, _ = logged
    opts = {"--rules": RULES, "--source": url}
    opts.update(dict(zip(args[::2], args[1::2], strict=True)))
    res = _run("replay", *[x for kv in opts.items() for x in kv])
    assert res.exit_code == 1
    assert message in res.output and "Traceback" not in res.output


def test_an_unknown_schema_revision_is_a_clear_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_alembic_version SET version_num = '0042'"))
    engine.dispose()
    res = _run("replay", "--rules", RULES, "--source", url)
    assert res.exit_code == 1 and "schema revision '0042'" in res.output
    res = _run("log", "export", "--url", url, "--out", str(tmp_path / "x"))
    assert res.exit_code == 1 and "schema revision '0042'" in res.output


@pytest.mark.spark
def test_replay_on_spark(logged: tuple[str, Online], spark: Any, tmp_path: Path) -> None:
    url, online = logged
    res = _run(
        "replay",
        "--rules",
        RULES,
        "--source",
        url,
        "--engine",
        "spark",
        "--partitions",
        "2",
        "--out",
        str(tmp_path / "d"),
    )
    assert res.exit_code == 0, res.output
    assert "sentinel replay (spark)" in res.output
    assert replayed(pq.read_table(tmp_path / "d").to_pylist()) == sorted(online.detections)


@pytest.mark.spark
@pytest.mark.parametrize(("flag", "fast"), [([], True), (["--no-fast-start"], False)])
def test_the_spark_session_starts_fast_unless_told_not_to(
    logged: tuple[str, Online],
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    flag: list[str],
    fast: bool,
) -> None:
    import sentinel.replay.spark as engine

    asked: list[dict[str, Any]] = []
    real = engine.session

    def session(master: str, **kw: Any) -> Any:
        asked.append(kw)
        return real(master, **kw)  # the test session's, already active

    monkeypatch.setattr(engine, "session", session)
    url, _ = logged
    res = _run("replay", "--rules", RULES, "--source", url, "--engine", "spark", *flag)
    assert res.exit_code == 0, res.output
    assert [kw["fast_start"] for kw in asked] == [fast]


def test_the_replay_table_prints_rule_names_as_text_not_rich_markup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal a rule named ``alert[high]`` showed as ``alert``, and one
    named ``[/x]paid`` made rich fail with a MarkupError traceback."""
    import re

    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence

    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    writer = LogWriter()
    with engine.begin() as conn:
        occs = [Occurrence("order", 1, 1.0, scope="s"), Occurrence("payment", 2, 2.0, scope="s")]
        writer.write(conn, occs)
    engine.dispose()
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws its table, as on a terminal
    res = CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["replay", "--url", url, "--rules", "tests.replay.markup_rules:detector"]
    )
    assert res.exit_code == 0, res.output
    text = re.sub(r"\x1b\[[0-9;]*m", "", res.output)
    assert "alert[high]" in text
    assert "[/x]paid" in text
    assert re.search(r"total\s*│\s*2", text), text


@pytest.mark.parametrize("source", ["missing_dir", "no_log_db"])
def test_spark_replay_checks_the_source_before_starting_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """``replay --engine spark`` started Spark (seconds to minutes) before it
    found that the source is missing or holds no log; the local engine looks
    first. Now both do."""
    import sys
    import types

    started: list[str] = []
    fake = types.ModuleType("sentinel.replay.spark")
    fake.session = lambda *a, **kw: started.append("spark")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentinel.replay.spark", fake)
    if source == "missing_dir":
        where = str(tmp_path / "nowhere")
    else:
        db = tmp_path / "empty.db"
        sa.create_engine(f"sqlite:///{db}").connect().close()
        where = f"sqlite:///{db}"
    res = CliRunner().invoke(
        main, ["replay", "--rules", RULES, "--source", where, "--engine", "spark"]
    )
    assert res.exit_code == 1, res.output
    assert "Error:" in res.output
    assert started == []
