"""The Spark engine's sources and plans: the log tables read by Python workers
(no JDBC driver), any DataFrame of log rows (shuffle and sort), the data sources,
and rules that span transactions with and without a partition key."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.errors import ReplayError, RuleReferenceError
from sentinel.log import migrate
from sentinel.replay import export_log, log_table, replay
from sentinel.replay.spark import DETECTION_STRUCT, read_log, replay_dataframe
from tests.replay.workload import (
    Online,
    RuleSpec,
    build,
    matrix_detector,
    random_steps,
    replayed,
    run_steps,
    write_specs,
)

pytestmark = pytest.mark.spark

MATRIX = "tests.replay.workload:matrix_detector"


@pytest.fixture
def logged(engine: sa.Engine) -> tuple[sa.Engine, Online]:
    migrate.upgrade(engine)
    online = Online(matrix_detector(), engine)
    run_steps(online, random_steps(random.Random(11), 40, size=12, noise=0.3))
    return engine, online


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_log_tables_are_read_by_python_workers(
    logged: tuple[sa.Engine, Online], spark: Any
) -> None:
    engine, online = logged
    url = engine.url.render_as_string(hide_password=False)
    result = replay(url, MATRIX, engine="spark", spark=spark, partitions=3)
    assert result.events == len(online.rows)
    assert replayed(result.rows()) == sorted(online.detections)
    rows = read_log(spark, url, partitions=4)
    assert rows.rdd.getNumPartitions() >= 2
    assert rows.count() == len(online.rows)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_any_dataframe_of_log_rows_replays(
    logged: tuple[sa.Engine, Online], spark: Any, tmp_path: Path
) -> None:
    engine, online = logged
    export_log(engine, tmp_path / "x", buckets=3)
    rows = spark.read.parquet(str(tmp_path / "x"))  # hive layout: a bucket column too
    detections = replay_dataframe(rows, MATRIX, partitions=2)
    assert detections.schema == DETECTION_STRUCT
    assert replayed(r.asDict(recursive=True) for r in detections.collect()) == sorted(
        online.detections
    )
    scoped = read_log(spark, tmp_path / "x")
    assert scoped.rdd.getNumPartitions() == 3 and scoped.count() == len(online.rows)


def test_rules_spanning_transactions_by_key_and_in_one_partition(
    spark: Any, rules_file: Path
) -> None:
    specs = [
        RuleSpec("paid", "(E1 ; E2) by k", "chronicle", flush=False),
        RuleSpec("det", "(E3 ; E4) by k", "recent", "detached", "even", flush=False),
        RuleSpec("local", "E1 ; E3", "continuous"),
    ]
    online = Online(build(specs))
    run_steps(online, random_steps(random.Random(5), 150, size=10))
    write_specs(rules_file, specs)
    table = log_table(online.rows)
    expected = sorted(online.detections)
    ref = "tests.replay.workload:spec_detector"
    assert any(d[0] == "paid" and d[4][0][0] != d[4][1][0] for d in expected)  # spans scopes
    for key in (None, "k"):
        result = replay(table, ref, engine="spark", spark=spark, partition_key=key, partitions=3)
        assert replayed(result.rows()) == expected
    assert replayed(replay(table, build(specs)).rows()) == expected


def test_the_spark_engine_wants_an_importable_reference(spark: Any) -> None:
    with pytest.raises(RuleReferenceError, match="importable reference"):
        replay(log_table([]), matrix_detector(), engine="spark", spark=spark)
    with pytest.raises(ReplayError, match="local engine"):
        replay(log_table([]), MATRIX, engine="spark", spark=spark, run_actions=True)
    with pytest.raises(ReplayError, match="partition_key"):
        replay(log_table([]), MATRIX, engine="spark", spark=spark, partition_key="a.b")


def test_an_empty_log_has_no_detections(spark: Any, tmp_path: Path) -> None:
    result = replay(log_table([]), MATRIX, engine="spark", spark=spark, out=tmp_path / "o")
    assert result.detections == 0 and result.events == 0
    assert set(result.per_rule or {}) == set(matrix_detector().rules)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_empty_export_has_no_detections_even_for_rules_spanning_transactions(
    engine: sa.Engine, spark: Any, tmp_path: Path
) -> None:
    migrate.upgrade(engine)
    export_log(engine, tmp_path / "export")
    result = replay(tmp_path / "export", MATRIX, engine="spark", spark=spark, out=tmp_path / "o")
    assert "t_occ" in result.passes  # the matrix has rules with flush=False
    assert result.detections == 0 and result.events == 0
    assert read_log(spark, tmp_path / "export", order="t_occ").count() == 0


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_small_log_replays_in_few_partitions_whatever_the_shuffle_setting(
    logged: tuple[sa.Engine, Online], spark: Any
) -> None:
    """A log of a few hundred rows in a database is one planned partition per
    pass (one Spark task reading it), not ``spark.sql.shuffle.partitions``."""
    engine, online = logged
    url = engine.url.render_as_string(hide_password=False)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "200")  # Spark's own default
    try:
        result = replay(url, MATRIX, engine="spark", spark=spark)
        assert result.passes  # one or two passes, each in one partition
        assert 1 <= result.dataframe.rdd.getNumPartitions() <= len(result.passes)
        assert replayed(result.rows()) == sorted(online.detections)
        assert read_log(spark, url).rdd.getNumPartitions() == 1
        # The user's count still wins.
        forced = replay(url, MATRIX, engine="spark", spark=spark, partitions=3)
        assert forced.dataframe.rdd.getNumPartitions() >= 3
        assert replayed(forced.rows()) == sorted(online.detections)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)


class _Context:
    def __init__(self, cores: int) -> None:
        self.defaultParallelism = cores


class _Session:
    def __init__(self, cores: int) -> None:
        self.sparkContext = _Context(cores)


@pytest.mark.parametrize(
    ("rows", "cores", "most", "expected"),
    [
        (0, 2, None, 1),
        (3_000, 2, None, 1),
        (3_000, 200, None, 1),
        (50_000, 2, None, 1),
        (50_001, 2, None, 2),
        (1_000_000, 2, None, 8),  # four per core
        (10_000_000, 2, 16, 8),
        (10_000_000, 200, None, 200),  # one per 50,000 rows
        (10_000_000, 200, 16, 16),  # an export's bucket files
    ],
)
def test_the_partition_count_follows_the_rows_and_the_cores(
    rows: int, cores: int, most: int | None, expected: int
) -> None:
    from sentinel.replay.spark import partitions_for

    assert partitions_for(_Session(cores), rows, most) == expected  # type: ignore[arg-type]


def _unread_rules() -> Any:
    from sentinel import LocalEventDetector

    det = LocalEventDetector()
    det.explicit("order")
    det.explicit("payment")
    det.rule("paid", "order ; payment", action=print)  # reads no parameter
    return det


#: A rule that reads no parameter: its detections' parameters are the rows' texts.
UNREAD = _unread_rules()


def test_a_corrupt_row_no_rule_reads_fails_both_engines_alike(spark: Any, tmp_path: Path) -> None:
    """A payment whose parameter text is not one JSON object (here two: it would
    add a value no row holds to the detection's JSON array) went into the output
    as stored when no rule read it. Both engines now refuse it, naming the row,
    as they refuse such a row where a rule reads it."""
    import pyarrow as pa
    from pyspark.errors import PySparkException

    from sentinel import Occurrence
    from sentinel.errors import ReplaySourceError

    rows = log_table(
        (Occurrence(e, t, float(t), scope="a", params={"id": 1}), "committed")
        for e, t in [("order", 1), ("payment", 2)]
    )
    params = rows.schema.get_field_index("params")
    rows = rows.set_column(
        params,
        "params",
        pa.array(['{"id":1}', '{"id":1},{"id":2}'], rows.schema.field(params).type),
    )
    message = "log row payment@2 in scope 'a': its params are not"
    with pytest.raises(ReplaySourceError, match=message):
        replay(rows, UNREAD)
    df = spark.createDataFrame(rows.to_pandas())
    with pytest.raises(PySparkException) as err:
        replay_dataframe(df, "tests.replay.test_spark:UNREAD", partitions=1).collect()
    assert "ReplaySourceError" in str(err.value) and message in str(err.value)
    # with out=, the detections counted on the driver: one ReplayError saying
    # what the worker raised, not Spark's exception with both tracebacks
    with pytest.raises(
        ReplayError, match="a Spark task failed: ReplaySourceError: " + message
    ) as failed:
        replay(rows, "tests.replay.test_spark:UNREAD", engine="spark", out=tmp_path / "d")
    assert "Traceback" not in str(failed.value) and "\n" not in str(failed.value)


def test_a_spark_workers_failure_is_read_from_its_traceback() -> None:
    from sentinel.replay.spark import worker_failure

    text = (
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n"
        '  File "/x/sentinel/replay/sources.py", line 3, in check\n'
        "    raise LogTablesMissingError(url)\n"
        "sentinel.errors.LogTablesMissingError: no SQLite database at /tmp/a.db\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "KeyError: 'x'\n"
    )
    assert worker_failure(text) == "LogTablesMissingError: no SQLite database at /tmp/a.db"
    assert worker_failure("ValueError: bad\n  at org.apache.spark.X") == "ValueError: bad"
    assert worker_failure("") == "no message"


def test_the_spark_engine_counts_failed_detections_as_the_local_one(
    spark: Any, tmp_path: Path
) -> None:
    from tests.replay.test_errors import failing_log

    ref = "tests.replay.test_errors:failing_rules"
    local = replay(failing_log(), ref)
    written = replay(failing_log(), ref, engine="spark", spark=spark, out=tmp_path / "d")
    assert written.failed == local.failed == {"half": 5}
    assert written.per_rule == local.per_rule
