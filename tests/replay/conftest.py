"""Fixtures for the replay tests: one SparkSession for the whole test session, a
rules file Spark's workers can read, and the fixed large workload (built once).

The SparkSession is ``local[2]`` with two shuffle partitions, no UI and quiet
logging. Its Python workers run this interpreter, import ``tests.replay.workload``
from the repository root, and read hypothesis examples' rules from the file named
by ``SENTINEL_TEST_RULES`` (set before the session starts, so the workers inherit
it).
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.log import migrate
from tests.replay.workload import (
    SPEC_ENV,
    Detection,
    Online,
    compact_detector,
    random_steps,
    run_steps,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file ``tests.replay.workload:spec_detector`` reads its rules from."""
    path = tmp_path_factory.mktemp("rules") / "rules.json"
    path.write_text("[]")
    os.environ[SPEC_ENV] = str(path)
    return path


@pytest.fixture(scope="session")
def spark(rules_file: Path) -> Iterator[Any]:
    """The test session's SparkSession (``local[2]``)."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("sentinel tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "5000")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@dataclass
class BigLog:
    """The fixed workload: ≥ 100,000 occurrences over thousands of transactions,
    its online detections, and the log in a SQLite database."""

    url: str
    rows: list[tuple[Any, str | None]]
    detections: list[Detection]
    rules: str = "tests.replay.workload:compact_detector"


@pytest.fixture(scope="session")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> BigLog:
    path = tmp_path_factory.mktemp("biglog") / "log.db"
    url = f"sqlite:///{path}"
    engine = sa.create_engine(url)

    @sa.event.listens_for(engine, "connect")
    def _fast(dbapi_conn: Any, _: Any) -> None:  # a test database: no fsync per commit
        dbapi_conn.execute("PRAGMA synchronous=OFF")

    migrate.upgrade(engine)
    online = Online(compact_detector(), engine)
    run_steps(online, random_steps(random.Random(20240601), 3500, size=25, noise=0.6))
    engine.dispose()
    return BigLog(url, online.rows, sorted(online.detections))


def pytest_configure(config: pytest.Config) -> None:
    # PySpark 4 warns about pandas 3 on every Arrow UDF; replay does not use pandas.
    config.addinivalue_line(
        "filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning"
    )
