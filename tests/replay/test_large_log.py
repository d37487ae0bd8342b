"""The fixed large log: ≥ 100,000 occurrences over thousands of transactions
(commits, aborts, aborts after pre-commit, events outside transactions), rules in
every context and coupling mode plus cross-transaction rules, written to SQLite
with LogWriter as the online run went. Every engine and source must find exactly
the online detections."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sentinel.replay import export_log, replay
from tests.replay.conftest import BigLog
from tests.replay.workload import replayed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(big_log: BigLog, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "log"
    export_log(big_log.url, out, buckets=6, chunk_size=20_000, row_group_rows=10_000)
    return out


def test_the_log_is_large_and_varied(big_log: BigLog) -> None:
    outcomes = Counter(outcome for _, outcome in big_log.rows)
    assert len(big_log.rows) >= 100_000
    assert len({o.scope for o, _ in big_log.rows}) > 3_000
    assert outcomes["aborted"] > 5_000 and outcomes[None] > 0
    rules = Counter(d[0] for d in big_log.detections)
    couplings = Counter(d[1] for d in big_log.detections)
    assert len(rules) == 25 and min(rules.values()) > 0
    assert set(couplings) == {"immediate", "deferred", "detached", "detached_independent"}


def test_local_replay_of_the_database(big_log: BigLog) -> None:
    result = replay(big_log.url, big_log.rules)
    assert result.events == len(big_log.rows)
    assert result.passes == ["scope", "t_occ"]
    assert replayed(result.rows()) == big_log.detections


def test_local_replay_of_the_export(big_log: BigLog, exported: Path, tmp_path: Path) -> None:
    result = replay(exported, big_log.rules, out=tmp_path / "detections")
    assert result.table is None and result.detections == len(big_log.detections)
    assert replayed(result.rows()) == big_log.detections


@pytest.mark.spark
def test_spark_replay_of_the_export(
    big_log: BigLog, exported: Path, spark: Any, tmp_path: Path
) -> None:
    result = replay(
        exported,
        big_log.rules,
        engine="spark",
        spark=spark,
        out=tmp_path / "d",
        partition_key="k",
    )
    assert result.per_rule == dict(sorted(Counter(d[0] for d in big_log.detections).items()))
    assert replayed(result.rows()) == big_log.detections
