"""The global detector as a Spark Structured Streaming job.

The same detection as :class:`~sentinel.global_detector.GlobalDetector` and
:func:`~sentinel.global_detector.replay_committed` (one
:class:`~sentinel.global_detector.detect.CommitFeeder` per bucket of keys, no second
implementation of the operators), scaled out by the rules' key:

the source (``sentinel_commits``, :mod:`.source`)
    a Python streaming data source whose offset is the commit number
    (``event_batches.commit_seq``, see :mod:`.order`): a micro-batch reads the commits
    numbered after the previous batch's end up to the largest number visible
    when it was planned, and not past a hole in the numbers that may still
    fill (PostgreSQL: :meth:`~.order.CommitReader.horizon`), so no commit is
    skipped. Each row carries its rank in its commit
    (its global ``t_occ`` is ``commit_seq * 2**20 + rank``, as in the service).
the detection
    rows are hashed by the value of the rules' key (``key``: a parameter name;
    rows without it hash together; no key: one group for everything) into
    ``buckets`` groups, and each group is detected by ``applyInPandasWithState``
    with one detector (the rules are partitioned by the key: the detector keeps
    one partition per value). Spark's state store holds, per bucket, the
    detector's state (:mod:`.state`: what it remembers, orders waiting for their
    payment; not the rows it read) and the last commit fed; under a lifespan
    that state is bounded. A micro-batch's rows of a bucket are fed in commit
    order in one call, and the detections their commits complete come out. A
    Python worker keeps the detector of a bucket, so the next batch usually
    starts from it; the state store stays the truth (a retried batch, another
    worker or a restart load the detector from it). Rules with timers (only
    with ``key=None``) keep their rows instead: timers cannot be dumped.
the sink
    the detections (:data:`DETECTION_STRUCT`) go to any streaming sink:
    :func:`stream_global` writes Parquet files (exactly once, with Spark's
    checkpoint) or calls a ``foreachBatch`` function.

Executors rebuild the rules from their reference (``package.module:attribute``),
so sentinel and the module holding the rules must be importable there. PySpark
is imported only here (the ``spark`` extra).
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator
from typing import Any, Final

from sentinel.algebra.expressions import Keyed
from sentinel.errors import GlobalDetectorError, MissingExtraError
from sentinel.global_detector.buckets import bucket_labels
from sentinel.global_detector.detect import CommitFeeder, check_rules
from sentinel.global_detector.source import _ROW_FIELDS, COMMIT_STRUCT, CommitSource, read_commits
from sentinel.global_detector.state import dump, dumpable, load, retained
from sentinel.log.tables import DEFAULT_PREFIX
from sentinel.params import to_json
from sentinel.replay.rules import Rules, load_rules, reference_of
from sentinel.rules import LocalEventDetector

try:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )
except ImportError as err:  # pragma: no cover - depends on the installation
    missing = (err.name or "").partition(".")[0] or None  # the package to install
    raise MissingExtraError("the Spark streaming global detector", "spark", missing) from err

log = logging.getLogger("sentinel.global")
_BITEMPORAL = "_sentinel_bitemporal"  # sentinel.bitemporal.service._ATTR

__all__ = [
    "BUCKETS",
    "COMMIT_STRUCT",
    "DETECTION_STRUCT",
    "RULES_KEY",
    "STATE_STRUCT",
    "CommitSource",
    "global_detections",
    "read_commits",
    "read_state",
    "rules_key",
    "stream_global",
]
#: One row per detection: the rule, the commit that completed it, the key's
#: value (JSON text; ``None`` for rows without the key or for no key), the
#: detection's global ``t_occ``, its constituents' events, scopes and global
#: ``t_occ`` s, and their parameters (a JSON array of objects).
DETECTION_STRUCT = StructType(
    [
        StructField("rule", StringType(), True),
        StructField("commit_seq", LongType(), True),
        StructField("key", StringType(), True),
        StructField("t_occ", LongType(), True),
        StructField("constituent_events", ArrayType(StringType()), True),
        StructField("constituent_scopes", ArrayType(StringType()), True),
        StructField("constituent_t_occs", ArrayType(LongType()), True),
        StructField("params", StringType(), True),
    ]
)
#: A bucket's state: the last commit fed, the number of buckets the query was
#: started with, how many occurrence entries its detector holds, and the
#: detector's state (:func:`.state.dump`), or, for rules whose timers cannot
#: be dumped, the bucket's rows so far (JSON: ``[[field..., rank], ...]``).
STATE_STRUCT = StructType(
    [
        StructField("position", LongType(), False),
        StructField("buckets", IntegerType(), False),
        StructField("retained", LongType(), False),
        StructField("detector", BinaryType(), True),
        StructField("rows", StringType(), True),
    ]
)

# -- detection per bucket of keys -------------------------------------------------------
#: How many buckets the keys are hashed into by default: each is one detector
#: and one group of Spark's state; fixed for the life of a checkpoint.
BUCKETS = 64
#: Detectors the Python worker holds, by (query run, bucket): reused by the
#: bucket's next micro-batch when they stand where its state says.
_FEEDERS: OrderedDict[tuple[str, int], tuple[CommitFeeder, int]] = OrderedDict()
#: How many buckets' detectors a worker keeps, least recently used first out.
FEEDER_CACHE = 256


_LOADED: dict[str, LocalEventDetector] = {}


def _rules(ref: str) -> LocalEventDetector:
    """The rule set ``ref`` names, loaded once per worker (each bucket's detector
    is a replica of it: the rule set itself is not changed)."""
    det = _LOADED.get(ref)
    if det is None:
        det = _LOADED[ref] = load_rules(ref)
    return det


def _key_text(value: Any) -> str | None:
    """A key's value as JSON text, as the log writes it (``"abc"``, ``1.5``,
    ``{"$decimal":"1.50"}``)."""
    if value is None:
        return None
    try:
        return _SORTED_TEXT(to_json(value))
    except (TypeError, ValueError):
        return repr(value)


def _occ_row(rule: str, seq: int, key: str | None, occ: Any) -> tuple[Any, ...]:
    """A detection as a :data:`DETECTION_STRUCT` row (the key's value taken
    from its first constituent)."""
    cons = occ.constituents
    value = None if key is None or not cons else _key_text(cons[0].params.get(key))
    return (
        rule,
        seq,
        value,
        occ.t_occ,
        [c.event for c in cons],
        [str(c.scope) for c in cons],
        [c.t_occ for c in cons],
        "[" + ",".join(_detection_params(c.params) for c in cons) + "]",
    )


def _detection_params(params: Any) -> str:
    """:func:`sentinel.params.dumps` with its encoder made once, not per call."""
    return _SORTED_TEXT({k: to_json(v) for k, v in params.items()})


_SORTED_TEXT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode


def _detect_bucket(
    group: tuple[Any, ...],
    frames: Iterator[pd.DataFrame],
    state: GroupState,
    *,
    rules: str,
    query: str,
    key: str | None,
    buckets: int,
) -> Iterator[pd.DataFrame]:
    """``applyInPandasWithState`` step: one bucket's new rows in (every key
    hashed to it, one detector for them all: the rules are partitioned by the
    key), the detections their commits complete out; the state is the
    detector's (:mod:`.state`), not the rows."""
    (bucket,) = group
    det = _rules(rules)
    dumped = dumpable(det)
    blob: bytes | None = None
    text: str | None = None
    if state.exists:
        position, started, _retained, blob, text = state.get
        if started != buckets:
            raise GlobalDetectorError(
                f"this checkpoint's query hashed the keys into {started} buckets, not "
                f"{buckets}: restart it with buckets={started} (or a new checkpoint)"
            )
    else:
        position = 0
    # a replayed batch's rows: once
    fresh, ranks, hints, ends = _fresh_rows(list(frames), position)
    cache_key = (query, int(bucket))
    cached = _FEEDERS.pop(cache_key, None)
    if cached is not None and cached[1] == position:
        feeder = cached[0]
    elif dumped:
        feeder = load(det, blob) if blob else CommitFeeder(det)
    else:
        feeder = CommitFeeder(det)
        stored = json.loads(text) if text else []
        clock = stored.pop()[0] if stored and len(stored[-1]) == 1 else None
        if stored:
            feeder.feed(
                [_Row(*r[:_N]) for r in stored],
                [r[_N] for r in stored],
                [r[_N + 1] if len(r) > _N + 1 else None for r in stored],
            )
        if clock is not None:
            feeder.advance(clock)
    before = feeder.log_time
    if ends:
        hints = _log_clock(fresh, hints, ends, before)
    out = []
    if fresh:
        for d in feeder.feed(fresh, ranks, hints if ends else None):
            out.append(_occ_row(d.rule, d.commit_seq, key, d.occurrence))
        feeder.skipped.clear()  # reported on the worker's log
        position = int(fresh[-1].commit_seq)
    if ends:  # where the log's clock stands after the batch's commits
        feeder.advance(max(clock for _, clock in ends))
    if fresh or feeder.log_time != before:
        if dumped:
            blob, text = dump(feeder), None
        else:
            rows = json.loads(text) if text else []
            if rows and len(rows[-1]) == 1:
                rows.pop()  # the log's clock after the last batch, replaced
            rows.extend([*r, k, h] for r, k, h in zip(fresh, ranks, hints, strict=True))
            if ends:
                rows.append([feeder.log_time])
            blob, text = None, json.dumps(rows, separators=(",", ":"))
        state.update((position, buckets, retained(feeder), blob, text))
    _FEEDERS[cache_key] = (feeder, position)
    while len(_FEEDERS) > FEEDER_CACHE:
        _FEEDERS.popitem(last=False)
    if out:
        yield pd.DataFrame(dict(zip(_OUT, zip(*out, strict=True), strict=True)), columns=_OUT)


_COLUMNS = [*_ROW_FIELDS, "rank", "clock"]
_N = len(_ROW_FIELDS)
_OUT = DETECTION_STRUCT.fieldNames()
_NULLABLE = [i for i, c in enumerate(_COLUMNS) if COMMIT_STRUCT[c].nullable]
#: A log row as the detector reads it (:class:`~.order.LogRow`'s fields),
#: cheaper to make than one.
_Row = namedtuple("_Row", _ROW_FIELDS)  # type: ignore[misc]


def _fresh_rows(
    frames: list[pd.DataFrame], position: int
) -> tuple[list[Any], list[int], list[float | None], list[tuple[int, float]]]:
    """The rows of ``frames`` numbered after ``position``, in commit order,
    their ranks in their commits and their ``clock`` s, and the ranges' ends
    (``(last commit, clock)``: the rows of rank -1, see :data:`COMMIT_STRUCT`)."""
    if not frames:
        return [], [], [], []
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    ends: list[tuple[int, float]] = []
    closing = frame["rank"] < 0
    if closing.any():
        last, clock = frame["commit_seq"][closing].tolist(), frame["clock"][closing].tolist()
        ends = list(zip(last, clock, strict=True))
        frame = frame[~closing]
    if position:
        frame = frame[frame["commit_seq"] > position]
    frame = frame.sort_values(["commit_seq", "rank"], kind="stable")
    columns = [frame[c].tolist() for c in _COLUMNS]
    for i in _NULLABLE:  # a column of nulls only may come as floats (NaN)
        if frame[_COLUMNS[i]].dtype != object:
            columns[i] = [None if v != v else v for v in columns[i]]
    return list(map(_Row, *columns[:_N])), columns[_N], columns[_N + 1], ends


def _log_clock(
    rows: list[Any],
    hints: list[float | None],
    ends: list[tuple[int, float]],
    before: float | None,
) -> list[float | None]:
    """Where the log's clock stood before each of a bucket's ``rows``: the
    largest of the clock before the batch (``before``), the ends of the source's
    ranges before the row's commit, and the row's ``clock`` in its range."""
    ends = sorted(ends)
    out: list[float | None] = []
    clock = -math.inf if before is None else before
    i = 0
    for r, hint in zip(rows, hints, strict=True):
        while i < len(ends) and ends[i][0] < r.commit_seq:
            clock = max(clock, ends[i][1])
            i += 1
        at = clock if hint is None else max(clock, hint)
        out.append(None if at == -math.inf else at)
    return out


#: ``key=RULES_KEY``: partition by the key the rules share (see :func:`rules_key`).
RULES_KEY: Final = "rules"


def _temporal(expr: Any) -> bool:
    from sentinel.algebra.temporal import Absolute, P, Pstar, Relative

    return any(isinstance(e, (Absolute, Relative, P, Pstar)) for e in expr.walk())


def rules_key(det: LocalEventDetector) -> str | None:
    """The parameter the enabled rules of ``det`` are all partitioned by (each
    rule's event is ``... by key``, the same key, and no rule is temporal), or
    ``None`` when there is no such parameter."""
    keys = set()
    for rule in det.rules.values():
        if not rule.enabled:
            continue
        expr = rule.event
        if not isinstance(expr, Keyed) or not isinstance(expr.key, str) or _temporal(expr):
            return None
        keys.add(expr.key)
    return keys.pop() if len(keys) == 1 else None


def _check_key(det: LocalEventDetector, key: str | None) -> None:
    """Refuse a key the rules are not all partitioned by: their detections
    would depend on how the rows were split."""
    if key is None:
        return
    if not (isinstance(key, str) and key.isidentifier() and key.isascii()):
        raise GlobalDetectorError(f"key must be a parameter name, not {key!r}")
    for rule in det.rules.values():
        if not rule.enabled:
            continue
        expr = rule.event
        if _temporal(expr):
            raise GlobalDetectorError(
                f"rule {rule.name!r} has temporal events: its timers run on a clock that "
                "every committed row moves, so it cannot be split by key; use key=None"
            )
        if not isinstance(expr, Keyed) or expr.key != key:
            raise GlobalDetectorError(
                f"rule {rule.name!r} is not partitioned by {key!r} (its event is not "
                f"'... by {key}'): split by that key, it could miss occurrences combining "
                "different values; use key=None"
            )


def global_detections(
    spark: SparkSession,
    rules: Rules,
    source: Any,
    *,
    key: str | None = RULES_KEY,
    partitions: int | None = None,
    buckets: int = BUCKETS,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> DataFrame:
    """The streaming DataFrame of the detections (:data:`DETECTION_STRUCT`) of
    ``rules`` (an importable reference to a global rule set: every rule
    detached) over the committed log at ``source`` (a database URL or
    engine), partitioned by the value of the parameter ``key``.

    ``key``: by default (:data:`RULES_KEY`) the parameter every rule is
    partitioned by (each rule's event is ``... by customer``: ``"customer"``,
    see :func:`rules_key`), or one group when they share none. A parameter
    name given must be that one. The key's values are hashed into ``buckets``
    groups, each detected by one detector (holding one partition per value)
    whose state Spark keeps; rows without the key are in one of them.
    ``buckets`` is fixed for the life of a checkpoint (a restart with another
    number is refused). ``key=None`` detects everything in one group: any
    rule set (temporal rules included), no scale-out. ``partitions``: the
    Spark tasks that read each micro-batch (default: Spark's default
    parallelism). Write it with ``writeStream`` (output mode ``append``) and a
    checkpoint location, or use :func:`stream_global`.

    Raises :class:`~sentinel.errors.GlobalDetectorError` (a rule that is not
    detached, a bad key, an unreadable log) and
    :class:`~sentinel.errors.RuleReferenceError` on the driver, before Spark
    runs anything.
    """
    ref = reference_of(rules)
    det = load_rules(ref)
    check_rules(det)
    if key == RULES_KEY:
        key = rules_key(det)
    _check_key(det, key)
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1:
        raise GlobalDetectorError(f"buckets must be a whole number at least 1, not {buckets!r}")
    # a bucket needs only what its rules listen to (without timers, the other
    # rows move no clock that matters)
    wanted = None if key is None else _wanted(det)
    # split by key, a bucket's detector sees its rows only; under a lifespan
    # its clock must still move with every row, as one fed them all
    clocks = key is not None and _clocked(det)
    rows = read_commits(
        spark,
        source,
        partitions=partitions,
        schema=schema,
        prefix=prefix,
        events=wanted,
        clocks=clocks,
        key=key,
    )
    if key is None:
        keyed = rows.withColumn("bucket", F.lit(0))
        buckets = 1
    else:
        # by the hash of the key's value (made as the detector compares values:
        # 1, 1.0 and True in one bucket); rows without it together
        hashed = F.coalesce(F.col("key_hash"), F.lit(0))
        labels = F.array(*[F.lit(b) for b in bucket_labels(buckets)])
        one = F.element_at(labels, F.pmod(hashed, F.lit(buckets)) + 1)
        if clocks:  # a range's end goes to every bucket
            one = F.explode(F.when(F.col("rank") < 0, labels).otherwise(F.array(one)))
        keyed = rows.withColumn("bucket", one)
    step: Callable[..., Iterator[pd.DataFrame]] = _bind(ref, key, buckets)
    return keyed.groupBy("bucket").applyInPandasWithState(
        step,
        outputStructType=DETECTION_STRUCT,
        stateStructType=STATE_STRUCT,
        outputMode="append",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )


def _clocked(det: LocalEventDetector) -> bool:
    """Whether the log's clock changes what the rules of ``det`` detect beyond
    their timers: a lifespan, or an occurrence-time order (the bitemporal layer)."""
    probe = CommitFeeder(det)._start(0.0)
    probe.graph.ensure()
    return probe.__dict__.get(_BITEMPORAL) is not None


def _wanted(det: LocalEventDetector) -> list[str] | None:
    """The events the enabled rules of ``det`` read (``None``: every one)."""
    from sentinel.bitemporal.service import TICK
    from sentinel.replay.batch import Replayer

    replayer = Replayer(det, order="t_occ", only=[r.name for r in det.rules.values() if r.enabled])
    wanted = replayer.needed_events()
    if wanted is not None:
        return wanted
    # a layer routes logged occurrences by name: under a lifespan, the bitemporal
    # layer (its logged ticks purge); another one's names are not known here
    probe = CommitFeeder(det)._start(0.0)
    svc = probe.__dict__.get(_BITEMPORAL)
    if svc is None or any(getattr(fn, "__self__", None) is not svc for fn in probe.dispatch.route):
        return None
    return sorted({*replayer.listened, "txn:abort", "txn:commit", TICK})


def _bind(ref: str, key: str | None, buckets: int) -> Callable[..., Iterator[pd.DataFrame]]:
    query = uuid.uuid4().hex  # this run of the query: a restart does not reuse detectors

    def step(
        group: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        return _detect_bucket(
            group, frames, state, rules=ref, query=query, key=key, buckets=buckets
        )

    return step


def stream_global(
    spark: SparkSession,
    rules: Rules,
    source: Any,
    *,
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    foreach_batch: Callable[[DataFrame, int], None] | None = None,
    key: str | None = RULES_KEY,
    partitions: int | None = None,
    buckets: int = BUCKETS,
    trigger: dict[str, Any] | None = None,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    query_name: str | None = None,
) -> StreamingQuery:
    """Start the streaming global detector (:func:`global_detections`) and
    return its :class:`~pyspark.sql.streaming.StreamingQuery`.

    The detections go to ``out`` (Parquet files, exactly once with the
    ``checkpoint``) or to ``foreach_batch(df, batch_id)`` (at least once: a
    batch whose function failed or was cut is given again, with the same
    ``batch_id``). Exactly one of the two. ``checkpoint`` is the query's
    checkpoint directory: restarting with the same one continues after the
    last batch committed there, with the keys' state. ``trigger``: keyword
    arguments of ``DataStreamWriter.trigger`` (e.g. ``{"availableNow": True}``
    to read what is committed and stop; default: a micro-batch as soon as
    the previous one ended).
    """
    if (out is None) == (foreach_batch is None):
        raise GlobalDetectorError("stream_global writes to out or to foreach_batch: give one")
    for what, path in (("checkpoint", checkpoint), ("out", out)):
        # a local path that is a file: Spark's error would be a Java stack
        if path is not None and "://" not in os.fspath(path) and os.path.isfile(path):
            raise GlobalDetectorError(
                f"{what} {os.fspath(path)!r} is a file: the streaming global detector "
                f"keeps its {what} in a directory"
            )
    df = global_detections(
        spark,
        rules,
        source,
        key=key,
        partitions=partitions,
        buckets=buckets,
        schema=schema,
        prefix=prefix,
    )
    writer = df.writeStream.outputMode("append").option("checkpointLocation", os.fspath(checkpoint))
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    if out is not None:
        return writer.format("parquet").start(os.fspath(out))
    assert foreach_batch is not None
    return writer.foreachBatch(foreach_batch).start()


def read_state(spark: SparkSession, checkpoint: str | os.PathLike[str]) -> DataFrame:
    """What the query of ``checkpoint`` keeps in Spark's state after its last
    committed micro-batch, one row per bucket: ``bucket``, ``position`` (the
    last commit its detector was fed), ``retained`` (the occurrence entries
    the detector holds: orders waiting for their payment...) and ``bytes``
    (the dumped detector's, or for rules with timers its rows'). Read with
    Spark's state reader (``statestore``), while the query runs or not."""
    df = spark.read.format("statestore").load(os.fspath(checkpoint))
    s = "value.groupState"
    return df.select(
        F.pmod(F.hash(F.col("key.bucket")), F.col(f"{s}.buckets")).alias("bucket"),
        F.col(f"{s}.position").alias("position"),
        F.col(f"{s}.retained").alias("retained"),
        F.coalesce(F.length(f"{s}.detector"), F.length(f"{s}.rows"), F.lit(0)).alias("bytes"),
    )
