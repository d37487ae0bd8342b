"""The Spark engine: the replay step of :mod:`sentinel.replay.batch` in Spark's
Python workers.

How the log reaches the workers decides the plan:

an export or a database (the fast path)
    the driver checks the source and plans partitions that are already whole
    scopes in ``(scope, t_occ)`` order: groups of an export's bucket files, or
    scope ranges of the database's ``(scope, t_occ)`` index. One Spark task
    per planned partition (``spark.range`` numbers them; ``mapInArrow`` runs
    the step) reads it in a Python worker (pyarrow, or SQLAlchemy: no JVM-side
    JDBC driver) and replays it right there; only detections, or with ``out``
    only per-rule counts, cross into the JVM. No shuffle, no sort. (The Python
    data source ``sentinel_log`` reads the same plans as log rows, for
    :func:`read_log`.)
any DataFrame of log rows (:func:`replay_dataframe`)
    ``repartition`` by scope, ``sortWithinPartitions`` by ``(scope, t_occ)``,
    then ``mapInArrow`` with the replay step.

Rules that opted out of flushing (``flush=False``) read only the events they
listen to (plus transaction ends), ``repartition`` them by the parameter the user
names (``partition_key``; every occurrence without it lands in one partition) or
into a single partition, sort by ``(t_occ, scope)``, and replay with
``mapInArrow``. Partitioning by a key is correct only when those rules never
combine occurrences with different key values (their events are partitioned
``by`` that key).

Executors rebuild the rules from their reference (``package.module:attribute``),
so sentinel and the module holding the rules must be importable there.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from sentinel.errors import MissingExtraError, ReplayError
from sentinel.log.tables import DEFAULT_PREFIX
from sentinel.replay.batch import (
    DETECTION_SCHEMA,
    LOG_COLUMNS,
    LOG_SCHEMA,
    OPTIONAL_LOG_COLUMNS,
    Order,
    replay_batches,
)
from sentinel.replay.jvm import C1_ONLY, finish_at_exit, plan_start, submit_options
from sentinel.replay.output import (
    SUMMARY_SCHEMA,
    open_output,
    replay_to_parquet,
    write_empty,
)
from sentinel.replay.result import ReplayResult
from sentinel.replay.rules import (
    Rules,
    cross_scope_rules,
    load_rules,
    per_scope_rules,
    reference_of,
)
from sentinel.replay.sources import (
    DatabaseSource,
    ExportSource,
    TableSource,
    open_source,
    read_export_files,
    read_paths,
    select_events,
)

try:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
except ImportError as err:  # pragma: no cover - depends on the installation
    raise MissingExtraError("the Spark engine", "spark", err.name) from err

__all__ = [
    "DETECTION_STRUCT",
    "LOG_STRUCT",
    "LogDataSource",
    "collect",
    "count_detections",
    "read_log",
    "replay_dataframe",
    "replay_spark",
    "session",
]

log = logging.getLogger(__name__)

#: The detections' Spark schema (the Arrow :data:`DETECTION_SCHEMA`).
DETECTION_STRUCT = from_arrow_schema(DETECTION_SCHEMA)
#: The log rows' Spark schema (the Arrow :data:`LOG_SCHEMA`).
LOG_STRUCT = from_arrow_schema(LOG_SCHEMA)
#: What a partition that wrote its detections itself reports (:data:`SUMMARY_SCHEMA`).
SUMMARY_STRUCT = from_arrow_schema(SUMMARY_SCHEMA)

# Spark redacts option values whose key matches spark.redaction.regex ("secret"...):
# the database URL, which may carry a password, travels under such a key.
_URL_OPTION = "url_secret"


def session(
    master: str = "local[*]",
    *,
    remote: str | None = None,
    fast_start: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    **conf: str,
) -> SparkSession:
    """A SparkSession for replay: ``remote`` (a Spark Connect URL) or ``master``,
    with the console progress bar and the UI off unless ``conf`` says otherwise;
    a local master runs Python workers with this interpreter. Returns the active
    session if there is one.

    With ``fast_start`` (the default), a local master's JVM, when this call
    starts it, starts with the C1 compiler only and from a class-data-sharing
    archive kept in ``cache_dir``, written by the first such session when its
    process exits (see :mod:`sentinel.replay.jvm`: about 4 s less start-up).

    A driver JVM this call starts writes its own output (start-up warnings, log4j)
    to a temporary file (named on ``sentinel.replay.spark`` at INFO, removed at
    exit), not to this process's standard error, and logs at ERROR level; if it
    fails to start, the file's text is written to standard error."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if remote or SparkContext._gateway is not None:  # no JVM of ours to start
        return _session(master, remote=remote, fast_start=fast_start, cache_dir=cache_dir, **conf)
    # This call starts the driver's JVM, which keeps the standard error it starts
    # with for its whole life: start it on a file, so that its start-up warnings
    # and log4j lines stay out of the application's output.
    path = _jvm_log_path()
    try:
        with _stderr_to(path):
            spark = _session(
                master, remote=remote, fast_start=fast_start, cache_dir=cache_dir, **conf
            )
    except BaseException as err:
        sys.stderr.write(path.read_text(errors="replace"))  # why it did not start
        if isinstance(err, Exception) and not isinstance(err, ReplayError):
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ReplayError(
                f"Spark did not start with master {master!r} ({type(err).__name__}: "
                f"{first[:300]}); its own output is above"
            ) from err
        raise
    spark.sparkContext.setLogLevel("ERROR")
    log.info("the Spark driver's own output goes to %s (removed when this process exits)", path)
    atexit.register(_remove, path)  # one a session: kept, they piled up in the temp dir
    return spark


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _jvm_log_path() -> Path:
    fd, name = tempfile.mkstemp(prefix="sentinel-spark-", suffix=".log")
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point this process's standard error (file descriptor 2) at ``path`` for the
    block: a JVM started meanwhile inherits it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as f:
            os.dup2(f.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _session(
    master: str,
    *,
    remote: str | None,
    fast_start: bool,
    cache_dir: str | os.PathLike[str] | None,
    **conf: str,
) -> SparkSession:
    builder = SparkSession.builder.appName("sentinel replay")
    builder = builder.remote(remote) if remote else builder.master(master)
    start = None
    if not remote and master.startswith("local"):
        # Local workers run this interpreter (its virtualenv has sentinel), not
        # whatever "python3" is first on PATH. PySpark reads only the variable.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if fast_start and SparkContext._gateway is None:  # this call starts the JVM
            start = plan_start(cache_dir)
    settings = {"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "false", **conf}
    for key, value in settings.items():
        builder = builder.config(key, value)
    if start is None:
        return builder.getOrCreate()
    try:
        with submit_options(start.options):
            spark = builder.getOrCreate()
    except Exception:
        if start.archive is None or start.dump is not None or SparkContext._gateway is not None:
            raise
        # The JVM did not start with the archive. Without it, it may: then the
        # archive was the cause (a damaged file) and goes; the next session
        # writes a new one. If not, the error is another one, raised as such.
        with submit_options(C1_ONLY):
            spark = builder.getOrCreate()
        log.warning("the Spark driver JVM did not start with %s; deleted it", start.archive)
        start.archive.unlink(missing_ok=True)
        return spark
    finish_at_exit(start, SparkContext._gateway, spark.stop)
    return spark


# -- planned partitions: the replay, and the Python data source of log rows --------------
def _planned_rows(plan: dict[str, Any], url: str | None, spec: Any) -> Iterator[pa.RecordBatch]:
    """The log rows of one planned partition: ``spec`` is a group of export files
    or a ``(low, high)`` scope range of the database at ``url``."""
    events = plan.get("events")
    if plan["kind"] == "export":
        for batch in read_export_files(spec):
            yield select_events(batch, events)
        return
    db = DatabaseSource(
        url or "",
        schema=plan.get("schema"),
        prefix=plan.get("prefix") or DEFAULT_PREFIX,
        chunk_size=int(plan.get("chunk_size") or 10_000),
        check=False,  # the driver checked
    )
    try:
        lo, hi = spec
        yield from db.batches(plan["order"], events=events, scope_range=(lo, hi))
    finally:
        db.close()


def _replay_planned(
    ids: Iterator[pa.RecordBatch], *, plan: dict[str, Any], url: str | None
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` step over ``spark.range`` (one id per Spark partition):
    read planned partition ``id`` and replay it here, yielding its detections
    (or, when the plan names an ``out`` directory, writing them there and
    yielding the summary)."""
    for batch in ids:
        for index in batch.column(0).to_pylist():
            rows = _planned_rows(plan, url, plan["partitions"][index])
            if plan.get("out"):
                yield from replay_to_parquet(
                    rows,
                    plan["rules"],
                    out=plan["out"],
                    name=f"scope-{index:05d}",
                    only=plan["only"],
                )
            else:
                yield from replay_batches(rows, plan["rules"], order="scope", only=plan["only"])


class _LogReader(DataSourceReader):
    """Reads the partitions the driver planned (option ``plan``, JSON)."""

    def __init__(self, options: Any, schema: Any) -> None:
        self.plan: dict[str, Any] = json.loads(options["plan"])
        self.url: str | None = options.get(_URL_OPTION)
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition([i, p]) for i, p in enumerate(self.plan["partitions"])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        expected = to_arrow_schema(self.schema, timezone="UTC")
        for batch in _planned_rows(self.plan, self.url, partition.value[1]):
            yield pa.RecordBatch.from_arrays(
                [batch.column(c) for c in LOG_COLUMNS], schema=expected
            )


class LogDataSource(DataSource):
    """``sentinel_log``: a log's rows (:data:`LOG_STRUCT`), read in the partitions
    the driver planned. Use :func:`read_log` rather than options by hand."""

    @classmethod
    def name(cls) -> str:
        return "sentinel_log"

    def schema(self) -> Any:
        return LOG_STRUCT

    def reader(self, schema: Any) -> DataSourceReader:
        return _LogReader(self.options, schema)


def _register(spark: SparkSession) -> None:
    spark.dataSource.register(LogDataSource)


def _plan(
    src: DatabaseSource | ExportSource, partitions: int, **fields: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """The plan (JSON-able) and the extra options for reading ``src``."""
    options: dict[str, str] = {}
    plan: dict[str, Any]
    if isinstance(src, ExportSource):
        plan = {"kind": "export", "partitions": src.file_groups(partitions)}
    else:
        plan = {
            "kind": "database",
            "partitions": [list(r) for r in src.scope_ranges(partitions)],
            "schema": src.schema,
            "prefix": src.prefix,
            "chunk_size": src.chunk_size,
        }
        options[_URL_OPTION] = src.url
    plan.update(fields)
    return plan, options


def _load(
    spark: SparkSession, fmt: str, plan: dict[str, Any], options: dict[str, str]
) -> DataFrame:
    _register(spark)
    reader = spark.read.format(fmt).option("plan", json.dumps(plan))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def read_log(
    spark: SparkSession,
    source: Any,
    *,
    partitions: int | None = None,
    order: Order = "scope",
    events: Collection[str] | None = None,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    chunk_size: int = 10_000,
) -> DataFrame:
    """The log at ``source`` (a database URL or an export directory) as a
    DataFrame of log rows (:data:`LOG_STRUCT`), read by Python workers through
    SQLAlchemy or pyarrow: no JDBC driver.

    Each of about ``partitions`` partitions (default: one per export bucket;
    for a database, from the number of rows, see :func:`partitions_for`) holds
    whole scopes, each scope's rows
    in ``order``. ``events`` keeps only those events. Raises the source's errors
    on the driver, before Spark runs anything.
    """
    src = open_source(source, schema=schema, prefix=prefix, chunk_size=chunk_size)
    if isinstance(src, TableSource):
        raise ReplayError("read_log reads a database or an export; use createDataFrame")
    src.check()
    if isinstance(src, ExportSource) and order != "scope":
        # Buckets are sorted by scope: another order needs Spark's sort.
        df = _export_rows(spark, src, None if events is None else sorted(events))
        n = partitions or partitions_for(spark, src.count())
        return df.repartition(n, "scope").sortWithinPartitions(order, "scope")
    if partitions is None:
        partitions = (
            len(src.files) if isinstance(src, ExportSource) else partitions_for(spark, src.count())
        )
    plan, options = _plan(
        src,
        partitions,
        order=order,
        events=None if events is None else sorted(events),
    )
    return _load(spark, "sentinel_log", plan, options)


def _export_rows(spark: SparkSession, src: ExportSource, events: list[str] | None) -> DataFrame:
    """An export's log rows read by Spark's Parquet reader (only ``events``,
    when given); an empty export is an empty DataFrame (Spark cannot infer a
    schema from no files)."""
    if not src.files:
        return spark.createDataFrame([], LOG_STRUCT)
    df = _log_columns(spark.read.parquet(*[str(f) for f in src.files]))
    if events is not None:
        df = df.filter(F.col("event").isin(events))
    return df


#: The fewest log rows worth a Spark task of their own when the partition count
#: is taken from the data: below that, a task's fixed cost (scheduling, the
#: Python worker, loading the rules) outweighs its replay.
MIN_ROWS_PER_PARTITION = 50_000
#: Partitions per core of the cluster, at most, when taken from the data (more
#: tasks than cores evens out uneven partitions).
PARTITIONS_PER_CORE = 4


def partitions_for(spark: SparkSession, rows: int, most: int | None = None) -> int:
    """How many partitions to replay ``rows`` log rows in when the caller did not
    say (``partitions=``): one per :data:`MIN_ROWS_PER_PARTITION` rows, at most
    :data:`PARTITIONS_PER_CORE` per core of the cluster (Spark's default
    parallelism), at most ``most`` (an export's bucket files), at least one. A
    3,000-row log is one partition, not ``spark.sql.shuffle.partitions`` (200
    by default, each a task reading a slice of the database)."""
    try:
        cores = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        cores = int(spark.conf.get("spark.default.parallelism", None) or os.cpu_count() or 1)
    n = min(-(-rows // MIN_ROWS_PER_PARTITION), PARTITIONS_PER_CORE * max(cores, 1))
    if most is not None:
        n = min(n, most)
    return max(1, n)


def _log_columns(df: DataFrame) -> DataFrame:
    """``df``'s log columns, the optional ones it lacks (rows of a log before
    revision 0004) as nulls."""
    have = set(df.columns)
    return df.select(
        *[
            F.col(c)
            if c in have or c not in OPTIONAL_LOG_COLUMNS
            else F.lit(None).cast("string").alias(c)
            for c in LOG_COLUMNS
        ]
    )


# -- the replay ------------------------------------------------------------------------
def _replay_rows(
    rows: DataFrame,
    ref: str,
    *,
    order: Order,
    only: Sequence[str],
    partitions: int | None,
    partition_key: str | None = None,
    out: str | None = None,
) -> DataFrame:
    df = _log_columns(rows)
    if order == "scope":
        df = df.repartition(partitions, "scope") if partitions else df.repartition("scope")
        df = df.sortWithinPartitions("scope", "t_occ")
    else:
        if partition_key:
            key = F.get_json_object(F.col("params"), f"$.{partition_key}")
            df = df.repartition(partitions, key) if partitions else df.repartition(key)
        else:
            df = df.repartition(1)
        df = df.sortWithinPartitions("t_occ", "scope")
    if out is None:
        step = functools.partial(replay_batches, rules=ref, order=order, only=list(only))
        return df.mapInArrow(step, DETECTION_STRUCT)
    write = functools.partial(_write_partition, rules=ref, out=out, order=order, only=list(only))
    return df.mapInArrow(write, SUMMARY_STRUCT)


def _write_partition(
    batches: Iterator[pa.RecordBatch], *, rules: str, out: str, order: Order, only: list[str]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` step: replay, write this partition's detections, report."""
    from pyspark import TaskContext

    context = TaskContext.get()
    index = context.partitionId() if context is not None else 0
    yield from replay_to_parquet(
        batches, rules, out=out, name=f"{order}-{index:05d}", order=order, only=only
    )


def replay_dataframe(
    rows: DataFrame,
    rules: Rules,
    *,
    partitions: int | None = None,
    partition_key: str | None = None,
) -> DataFrame:
    """The detections (:data:`DETECTION_STRUCT`) of ``rules`` over a DataFrame of
    log rows in any order (at least the :data:`LOG_STRUCT` columns): a lazy
    DataFrame.

    Rules that flush per transaction are replayed after ``repartition`` by
    scope into ``partitions`` (default: ``spark.sql.shuffle.partitions``) and a
    sort by ``(scope, t_occ)``; rules with ``flush=False`` as the module docs
    say. ``rules`` must be an importable reference.
    """
    ref = reference_of(rules)
    _check_key(partition_key)
    return _replay_frame(rows, ref, load_rules(ref), partitions, partition_key, None)


def _replay_frame(
    rows: DataFrame,
    ref: str,
    det: Any,
    partitions: int | None,
    partition_key: str | None,
    out: str | None,
) -> DataFrame:
    scoped = [r.name for r in per_scope_rules(det)]
    spanning = cross_scope_rules(det)
    parts = []
    if scoped:
        parts.append(
            _replay_rows(rows, ref, order="scope", only=scoped, partitions=partitions, out=out)
        )
    if spanning:
        parts.append(_spanning(rows, ref, det, spanning, partitions, partition_key, out))
    return _union(rows.sparkSession, parts, out)


def _spanning(
    rows: DataFrame,
    ref: str,
    det: Any,
    spanning: Sequence[Any],
    partitions: int | None,
    partition_key: str | None,
    out: str | None,
    *,
    filtered: bool = False,
) -> DataFrame:
    wanted = _wanted(det, spanning)
    if wanted is not None and not filtered:
        rows = rows.filter(F.col("event").isin(wanted))
    return _replay_rows(
        rows,
        ref,
        order="t_occ",
        only=[r.name for r in spanning],
        partitions=partitions,
        partition_key=partition_key,
        out=out,
    )


def _wanted(det: Any, rules: Sequence[Any]) -> list[str] | None:
    """The events replaying ``rules`` reads (None: all)."""
    from sentinel.replay.batch import Replayer

    return Replayer(det, order="t_occ", only=[r.name for r in rules]).needed_events()


def _union(spark: SparkSession, parts: list[DataFrame], out: str | None = None) -> DataFrame:
    if not parts:
        return spark.createDataFrame([], DETECTION_STRUCT if out is None else SUMMARY_STRUCT)
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return df


def _check_key(partition_key: str | None) -> None:
    if partition_key is not None and not (partition_key.isidentifier() and partition_key.isascii()):
        raise ReplayError(f"partition_key must be a parameter name, not {partition_key!r}")


def replay_spark(
    source: Any,
    rules: Rules,
    *,
    spark: SparkSession | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    partitions: int | None = None,
    partition_key: str | None = None,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    chunk_size: int = 10_000,
) -> ReplayResult:
    """Replay ``source`` on Spark (see the module docs); the engine behind
    ``replay(..., engine="spark")``.

    ``source``: a database URL or engine, an export directory, a pyarrow Table
    or a Spark DataFrame of log rows. ``rules``: an importable reference.
    ``spark``: the session (default: the active one, or a new ``local[*]``).
    With ``out`` the detections are written there as Parquet (``overwrite``
    replaces what is there) and counted; without, the result holds the lazy
    DataFrame and no counts. ``partitions``: how many partitions to replay in;
    by default taken from the log's size and the cluster's cores
    (:func:`partitions_for`: one per 50,000 rows, at most four per core, for an
    export at most one per bucket file); for a DataFrame source,
    ``spark.sql.shuffle.partitions``.

    Raises, on the driver and before Spark runs: the source's errors,
    :class:`~sentinel.errors.RuleReferenceError`, and
    :class:`~sentinel.errors.ReplayError` for a bad ``partition_key``.
    """
    start = time.perf_counter()
    ref = reference_of(rules)
    det = load_rules(ref)
    _check_key(partition_key)
    spark = spark or session()
    target = None if out is None else os.fspath(out)
    events: int | None = None
    stage: Any = None
    if isinstance(source, DataFrame):
        location = "DataFrame"
        if target is not None:
            target, stage = open_output(target, overwrite=overwrite)
        try:
            detections = _replay_frame(source, ref, det, partitions, partition_key, target)
        except BaseException:
            if stage is not None:
                stage.abort()
            raise
    else:
        src = open_source(source, schema=schema, prefix=prefix, chunk_size=chunk_size)
        try:
            src.check()
            location, events = src.location, src.count()
            if target is not None:
                target, stage = open_output(target, overwrite=overwrite, reads=read_paths(src))
            if isinstance(src, TableSource):
                names = src.table.schema.names
                rows = spark.createDataFrame(
                    src.table.select([c for c in LOG_COLUMNS if c in names])
                )
                n = partitions or partitions_for(spark, events)
                detections = _replay_frame(rows, ref, det, n, partition_key, target)
            else:
                most = len(src.files) if isinstance(src, ExportSource) else None
                detections = _replay_source(
                    spark,
                    src,
                    ref,
                    det,
                    partitions=partitions or partitions_for(spark, events, most),
                    partition_key=partition_key,
                    out=target,
                )
        except BaseException:
            if stage is not None:
                stage.abort()
            raise
        finally:
            if isinstance(src, DatabaseSource):
                src.close()
    result = ReplayResult(
        engine="spark",
        source=location,
        events=-1 if events is None else events,
        seconds=0.0,
        passes=_passes(det),
    )
    if target is None:
        result.dataframe = detections
    else:
        # The workers wrote the detections; their summaries say how many.
        per_rule = dict.fromkeys(sorted(r.name for r in det.rules.values() if r.enabled), 0)
        failed: dict[str, int] = {}
        scope_rows = 0
        try:
            summary = collect(detections)
            if not any(row["rule"] is not None and row["detections"] for row in summary):
                write_empty(target)
            if stage is not None:
                stage.commit()  # every task succeeded: the files take out's place
        except BaseException:
            if stage is not None:
                stage.abort()  # out as it was
            raise
        for row in summary:
            if row["rule"] is None:
                scope_rows += int(row["rows"])
            else:
                per_rule[row["rule"]] = per_rule.get(row["rule"], 0) + int(row["detections"])
                if row["failed"]:
                    failed[row["rule"]] = failed.get(row["rule"], 0) + int(row["failed"])
        if events is None and "scope" in result.passes:
            result.events = scope_rows
        result.per_rule = per_rule
        result.failed = dict(sorted(failed.items()))
        result.detections = sum(per_rule.values())
        result.out = Path(os.fspath(out))  # type: ignore[arg-type]
    result.seconds = time.perf_counter() - start
    return result


def collect(frame: DataFrame) -> list[Any]:
    """``frame.collect()``, a Python worker's failure raised as a
    :class:`~sentinel.errors.ReplayError` that says what the worker raised
    (Spark's own exception carries the worker's traceback and the JVM's)."""
    from pyspark.errors import PythonException

    try:
        return frame.collect()
    except PythonException as err:
        raise ReplayError(f"a Spark task failed: {worker_failure(str(err))}") from err


def count_detections(result: ReplayResult, rules: Rules) -> None:
    """Fill ``result``'s counts (``per_rule``, every enabled rule with its
    number, ``failed`` and ``detections``) from its lazy DataFrame (a run
    without ``out``), running the job; a worker's failure raises
    :class:`~sentinel.errors.ReplayError` as :func:`collect` says."""
    from pyspark.sql import functions as F

    assert result.dataframe is not None
    det = load_rules(reference_of(rules))
    rows = collect(
        result.dataframe.groupBy("rule").agg(
            F.count("*").alias("n"), F.count("error").alias("failed")
        )
    )
    per_rule = dict.fromkeys(sorted(r.name for r in det.rules.values() if r.enabled), 0)
    per_rule.update((r["rule"], int(r["n"])) for r in rows)
    result.per_rule = dict(sorted(per_rule.items()))
    result.failed = dict(sorted((r["rule"], int(r["failed"])) for r in rows if r["failed"]))
    result.detections = sum(result.per_rule.values())


#: A line of a Python traceback that names the exception raised.
_RAISED = re.compile(r"^([A-Za-z_][\w.]*): (.+)$", re.M)


def worker_failure(text: str) -> str:
    """The exception a Spark Python worker raised, as ``Name: message``, read from
    the text of Spark's ``PythonException`` (the worker's traceback): the last
    sentinel error named there, else the last exception line."""
    found = _RAISED.findall(text)
    ours = [(n, m) for n, m in found if n.startswith("sentinel.errors.")]
    if ours or found:
        name, message = (ours or found)[-1]
        return f"{name.rpartition('.')[2]}: {message.strip()}"
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"


def _replay_plan(spark: SparkSession, plan: dict[str, Any], url: str | None) -> DataFrame:
    """The detections (or, with ``out``, the summaries) of the planned
    partitions, each read and replayed in one Spark task: ``spark.range`` gives
    each task its partition's index. (A Python data source would do the same at
    the price of extra Python planning workers, several seconds of start-up.)"""
    struct = SUMMARY_STRUCT if plan.get("out") else DETECTION_STRUCT
    n = len(plan["partitions"])
    if not n:
        return spark.createDataFrame([], struct)
    step = functools.partial(_replay_planned, plan=plan, url=url)
    return spark.range(0, n, 1, numPartitions=n).mapInArrow(step, struct)


def _passes(det: Any) -> list[str]:
    passes = []
    if per_scope_rules(det):
        passes.append("scope")
    if cross_scope_rules(det):
        passes.append("t_occ")
    return passes


def _replay_source(
    spark: SparkSession,
    src: DatabaseSource | ExportSource,
    ref: str,
    det: Any,
    *,
    partitions: int,
    partition_key: str | None,
    out: str | None,
) -> DataFrame:
    scoped_rules = per_scope_rules(det)
    scoped = [r.name for r in scoped_rules]
    spanning = cross_scope_rules(det)
    parts = []
    n = partitions
    if scoped:
        # Workers read only the events these rules need (a database selects them).
        events = _wanted(det, scoped_rules)
        plan, options = _plan(src, n, order="scope", events=events, rules=ref, only=scoped, out=out)
        parts.append(_replay_plan(spark, plan, options.get(_URL_OPTION)))
    if spanning:
        wanted = _wanted(det, spanning)
        if isinstance(src, ExportSource):
            rows = _export_rows(spark, src, wanted)
        else:
            plan, options = _plan(src, n, order="t_occ", events=wanted)
            rows = _load(spark, "sentinel_log", plan, options)
        parts.append(
            _spanning(rows, ref, det, spanning, partitions, partition_key, out, filtered=True)
        )
    return _union(spark, parts, out)
