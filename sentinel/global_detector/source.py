"""The source of the streaming global detector (:mod:`.streaming`): the
committed rows of an event log as a Spark streaming DataFrame.

``sentinel_commits`` is a Python streaming data source whose offset is the commit
number (``event_batches.commit_seq``, see :mod:`.order`): a micro-batch reads the
commits numbered after the previous batch's end up to the largest number
visible when it was planned, and not past a hole in the numbers that may still
fill (PostgreSQL: :meth:`~.order.CommitReader.horizon`), so no commit is
skipped; under ``Trigger.AvailableNow`` up to the last number handed out when
the query started, in as many batches as that takes. Each row carries its rank
in its commit (its global ``t_occ`` is ``commit_seq * 2**20 + rank``, as in the
service), and on request the log's clock before it and its key's hash
(:data:`COMMIT_STRUCT`). Source tasks read ranges of commit numbers through
SQLAlchemy (no JDBC driver). PySpark is imported only here and in
:mod:`.streaming` (the ``spark`` extra).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from sentinel.errors import GlobalDetectorError, LogSchemaError, MissingExtraError
from sentinel.global_detector.buckets import key_hash
from sentinel.global_detector.order import CommitReader
from sentinel.log.schema import check_schema
from sentinel.log.tables import DEFAULT_PREFIX, LogTables, Outcome, log_tables
from sentinel.params import from_json

try:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )
except ImportError as err:  # pragma: no cover - depends on the installation
    missing = (err.name or "").partition(".")[0] or None  # the package to install
    raise MissingExtraError("the Spark streaming global detector", "spark", missing) from err
try:  # a Python source that Trigger.AvailableNow can drain in several batches
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older PySpark: AvailableNow reads one batch

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


log = logging.getLogger("sentinel.global")

__all__ = ["COMMIT_STRUCT", "GAP_WAIT", "READ_ROWS", "CommitSource", "read_commits"]

#: The committed log rows the source yields: :class:`~.order.LogRow`'s fields,
#: ``rank``, the row's place in its commit (from 0), and ``clock``: with
#: ``clocks=True`` (:func:`read_commits`), the largest detection time of the
#: rows before it in its task's range of commits (``None``: none), and after
#: each range one row with ``rank`` -1, ``commit_seq`` the range's last
#: commit and ``clock`` the range's largest (the job's buckets rebuild the
#: log's clock from them); else ``None``; and ``key_hash``: with ``key``
#: (:func:`read_commits`), :func:`~.buckets.key_hash` of the row's value of
#: that parameter (``None`` without it).
COMMIT_STRUCT = StructType(
    [
        StructField("id", LongType(), False),
        StructField("commit_seq", LongType(), False),
        StructField("scope", StringType(), False),
        StructField("t_occ", LongType(), False),
        StructField("event", StringType(), False),
        StructField("ts", DoubleType(), False),
        StructField("detected_ts", DoubleType(), False),
        StructField("source_class", StringType(), True),
        StructField("source_key", StringType(), True),
        StructField("params", StringType(), False),
        StructField("outcome", StringType(), True),
        StructField("rank", IntegerType(), False),
        StructField("clock", DoubleType(), True),
        StructField("key_hash", IntegerType(), True),
    ]
)
_ROW_FIELDS = [f.name for f in COMMIT_STRUCT.fields if f.name not in ("rank", "clock", "key_hash")]
_ARROW_SCHEMA = to_arrow_schema(COMMIT_STRUCT)
_ARROW_FIELDS = [(f, _ARROW_SCHEMA.field(f).type) for f in _ROW_FIELDS]
#: PostgreSQL: seconds a micro-batch's planning waits for a commit number
#: handed out and not yet visible, when nothing can be read before it (see
#: :meth:`~.order.CommitReader.horizon`).
GAP_WAIT = 1.0
#: About how many log rows (transactions) a source task reads per query, and
#: sends to Spark as one Arrow batch (whole commits).
READ_ROWS = 2_000
# Spark redacts option values whose key matches spark.redaction.regex ("secret"...).
_URL_OPTION = "url_secret"


# -- the source ------------------------------------------------------------------------
class _CommitStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Any) -> None:
        self.url: str = options[_URL_OPTION]
        self.schema: str | None = options.get("schema") or None
        self.prefix: str = options.get("prefix") or DEFAULT_PREFIX
        self.parts = max(1, int(options.get("partitions") or 1))
        #: Whether rows carry the log's clock (``COMMIT_STRUCT``'s ``clock``).
        self.clocks = options.get("clocks") == "1"
        #: The parameter whose value's hash rows carry (``key_hash``).
        self.key: str | None = options.get("key") or None
        events = options.get("events")
        #: The events the rules read (None: all); the others are not sent to Spark.
        self.events: frozenset[str] | None = None if not events else frozenset(json.loads(events))
        self._engine: sa.Engine | None = None
        self._ahead_at = 0.0
        #: Under Trigger.AvailableNow, the last commit number handed out when
        #: the query started: read up to it, then stop.
        self._target: int | None = None
        #: Remembers the holes in the commit numbers proved never to fill.
        self._reader = CommitReader(log_tables(self.schema, self.prefix))

    def _connect(self) -> sa.Engine:
        if self._engine is None:
            self._engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        return self._engine

    def initialOffset(self) -> dict[str, int]:
        return {"commit_seq": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        with self._connect().connect() as conn:
            self._target = self._reader.handed_out(conn)

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        after = 0 if start is None else int(start["commit_seq"])
        target = self._target
        while True:
            head, upto, handed = self._latest(start)
            if after > handed:
                raise GlobalDetectorError(
                    f"this query's checkpoint stands at commit {after}, ahead of the last "
                    f"commit number the log handed out ({handed}): the checkpoint belongs "
                    "to another database, or the log was restored from a backup or its "
                    "commit counter reset; nothing would be read until the numbers pass "
                    f"{after}. Start the query with a new checkpoint"
                )
            if target is None:
                return {"commit_seq": head}
            head = max(min(head, target), after)
            # under Trigger.AvailableNow a batch that reads nothing ends the
            # query: before a hole that may still fill, wait rather than stop
            if head > after or upto is None or upto >= target or after >= target:
                return {"commit_seq": head}
            time.sleep(GAP_WAIT)

    def _latest(self, start: Any) -> tuple[int, int | None, int]:
        """The offset to read up to from ``start``, the horizon (``None``: no
        hole can fill) and the last number handed out."""
        reader = self._reader
        with self._connect().connect() as conn:
            # PostgreSQL, MariaDB: not past a hole in the numbers (computed before the
            # rows are read, by the tasks: see CommitReader.horizon)
            # (waited for a while when nothing is readable before it: a
            # micro-batch that reads nothing tells Spark the source is drained)
            after = 0 if start is None else int(start["commit_seq"])
            upto = reader.horizon(conn, after, wait=GAP_WAIT)
            # only numbers handed out (read first: a commit numbered after it
            # is left for the next batch): a row numbered ahead of the counter
            # (forged, imported, left by a reset) would move the offset past
            # every genuine commit numbered below it
            handed = reader.handed_out(conn)
            head = reader.head(conn, upto=handed)
            top = reader.head(conn)
            if top > head and top > (handed := reader.handed_out(conn)):
                self._report_ahead(top, handed)
        if upto is not None:
            head = min(head, upto)
        if start is not None:
            head = max(head, int(start["commit_seq"]))
        return head, upto, handed

    def _report_ahead(self, top: int, handed: int) -> None:
        """Say (at most every 30 s) that rows numbered ahead of the counter are not read."""
        now = time.monotonic()
        if now >= self._ahead_at:
            self._ahead_at = now + 30.0
            log.error(
                "sentinel_commits: the log holds rows numbered up to %d, ahead of the "
                "last commit number handed out (%d): written by hand, imported, or "
                "left behind by a reset of the commit counter; they are not read "
                "(docs/global.md, 'Rows it cannot read')",
                top,
                handed,
            )

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        lo, hi = int(start["commit_seq"]), int(end["commit_seq"])
        if hi <= lo:
            return []
        n = min(self.parts, hi - lo)
        bounds = [lo + (hi - lo) * i // n for i in range(n + 1)]
        return [InputPartition((a, b)) for a, b in itertools.pairwise(bounds)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        lo, hi = partition.value
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        whole = _batches_query(log_tables(self.schema, self.prefix))
        some = whole.limit(READ_ROWS + 1)
        clock = [-math.inf] if self.clocks else None
        try:
            with engine.connect() as conn:
                after = lo
                while after < hi:
                    got = conn.execute(some, {"lo": after, "hi": hi}).all()
                    if not got:
                        break
                    if len(got) > READ_ROWS:  # whole commits only
                        last = got[-1].commit_seq
                        if got[0].commit_seq == last:  # one commit: read all of it
                            got = conn.execute(whole, {"lo": last - 1, "hi": last}).all()
                        else:
                            got = [r for r in got if r.commit_seq != last]
                    batch = _arrow(got, self.events, clock, self.key)
                    if batch.num_rows:
                        yield batch
                    after = int(got[-1].commit_seq)
        finally:
            engine.dispose()
        if clock is not None and clock[0] > -math.inf:
            yield _summary(hi, clock[0])

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


class CommitSource(DataSource):
    """``sentinel_commits``: the committed rows of a log, in micro-batches of
    whole commits; the offset is the commit number. Use :func:`read_commits`
    rather than options by hand."""

    @classmethod
    def name(cls) -> str:
        return "sentinel_commits"

    def schema(self) -> Any:
        return COMMIT_STRUCT

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _CommitStreamReader(self.options)


def _batches_query(tables: LogTables) -> sa.Select[Any]:
    """The committed log rows (one per transaction, its occurrences as one JSON
    array) numbered in ``(:lo, :hi]``, in commit order (as
    :meth:`~.order.CommitReader.read` reads them)."""
    b = tables.batches
    return (
        sa.select(
            b.c.id,
            b.c.commit_seq,
            b.c.scope,
            b.c.outcome,
            sa.type_coerce(b.c.occurrences, sa.Text).label("occurrences"),
        )
        .where(
            sa.or_(b.c.outcome.is_(None), b.c.outcome != Outcome.ABORTED.value),
            b.c.commit_seq > sa.bindparam("lo"),
            b.c.commit_seq <= sa.bindparam("hi"),
        )
        .order_by(b.c.commit_seq, b.c.id)
    )


def _arrow(
    got: Sequence[Any],
    wanted: frozenset[str] | None,
    clock: list[float] | None = None,
    key: str | None = None,
) -> pa.RecordBatch:
    """The occurrences of the log rows ``got`` (in commit order) whose event is
    ``wanted`` (``None``: all) as a :data:`COMMIT_STRUCT` batch, column by column:
    the fields of :class:`~.order.LogRow` as :meth:`~.order.CommitReader.read`
    makes them (``params`` as compact JSON text), each with its rank among all
    its commit's occurrences. Only the wanted occurrences' parameters are
    encoded again: the views a keyed rule set ignores cost their JSON decoding.

    ``clock``, when given, is the largest detection time read so far (one
    item, updated): each row gets it as its ``clock``, before its own time
    (every row moves it, wanted or not, as it moves the feeder's: a finite
    occurrence and detection time). ``key``: the parameter whose value's
    :func:`~.buckets.key_hash` each row carries."""
    cols: list[list[Any]] = [[] for _ in range(14)]
    (ids, seqs, scopes, t_occs, events, tss, dtss, classes, keys, params, outcomes, ranks) = (
        c.append for c in cols[:12]
    )
    hints, hashes = cols[12].append, cols[13].append
    encode = _PARAMS_TEXT
    now = -math.inf if clock is None else clock[0]
    seq, rank = -1, 0
    for r in got:
        elems = json.loads(r.occurrences) if isinstance(r.occurrences, str) else r.occurrences
        rid, scope, outcome = int(r.id), r.scope, r.outcome
        if r.commit_seq != seq:
            seq, rank = int(r.commit_seq), 0
        for t_occ, event, ts, dts, source_class, source_key, p in elems:
            if wanted is None or event in wanted:
                ids(rid)
                seqs(seq)
                scopes(scope)
                t_occs(int(t_occ))
                events(event)
                tss(_float(ts))
                dtss(_float(ts if dts is None else dts))
                classes(source_class)
                keys(source_key)
                params(encode(p))
                outcomes(outcome)
                ranks(rank)
                hints(None if now == -math.inf else now)
                if key is not None:
                    value = p.get(key) if type(p) is dict else None
                    hashes(None if value is None else _hashed(value))
                else:
                    hashes(None)
            if clock is not None:
                at, dat = _float(ts), _float(ts if dts is None else dts)
                if dat > now and math.isfinite(at) and math.isfinite(dat):
                    now = dat
            rank += 1
    if clock is not None:
        clock[0] = now
    return _batch(cols)


def _hashed(value: Any) -> int | None:
    """:func:`~.buckets.key_hash` of a key's logged value; ``None`` (the bucket
    of rows without the key) for one that cannot be read back (written by
    hand): its bucket's feeder skips the row and says why, where a raise here
    would fail the source's task, and the query, for good."""
    try:
        return key_hash(from_json(value))
    except Exception:
        return None


def _batch(cols: list[list[Any]]) -> pa.RecordBatch:
    arrays = [pa.array(c, t) for c, (_f, t) in zip(cols, _ARROW_FIELDS, strict=False)]
    arrays.append(pa.array(cols[-3], pa.int32()))
    arrays.append(pa.array(cols[-2], pa.float64()))
    arrays.append(pa.array(cols[-1], pa.int32()))
    return pa.RecordBatch.from_arrays(arrays, schema=_ARROW_SCHEMA)


def _summary(last: int, clock: float) -> pa.RecordBatch:
    """The row closing a task's range of commits (to ``last``) with the
    largest detection time in it (``rank`` -1; see :data:`COMMIT_STRUCT`)."""
    row = [0, last, "", 0, "", 0.0, 0.0, None, None, "{}", None, -1, clock, None]
    return _batch([[v] for v in row])


def _float(value: Any) -> float:
    """A stored time as a float; an integer no float holds (JSONB gives ``1e999``
    written by hand back as one) as the infinity of its sign, which the feeder
    refuses, naming the row (as :meth:`~.order.CommitReader.read` does)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


_PARAMS_TEXT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _url_of(source: Any) -> str:
    if isinstance(source, sa.Engine):
        return source.url.render_as_string(hide_password=False)
    if isinstance(source, str) and "://" in source:
        return source
    if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
        raise GlobalDetectorError(
            f"{os.fspath(source)!r} is a directory: the streaming global detector reads a "
            "database (an export has no commit numbers to tail)"
        )
    raise GlobalDetectorError(
        f"the streaming global detector reads a database URL or engine, not {source!r}"
    )


def read_commits(
    spark: SparkSession,
    source: Any,
    *,
    partitions: int | None = None,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    events: Sequence[str] | None = None,
    clocks: bool = False,
    key: str | None = None,
) -> DataFrame:
    """A streaming DataFrame (:data:`COMMIT_STRUCT`) of the committed rows of
    the log at ``source`` (a database URL or engine), in micro-batches of whole
    commits, each read in about ``partitions`` Spark tasks (ranges of commit
    numbers; default: Spark's default parallelism) by Python workers through
    SQLAlchemy (no JDBC driver). ``events``: only the rows of these events
    (each keeps its rank among all its commit's rows). ``clocks``: the rows
    carry the log's clock, and each task's range ends with a row of its own
    (see :data:`COMMIT_STRUCT`). ``key``: the rows carry the hash of this
    parameter's value (``key_hash``)."""
    url = _url_of(source)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    tables = log_tables(schema, prefix)
    try:  # the log must be there, current and readable: say so here, not in a worker
        with engine.connect() as conn:
            check_schema(conn, tables)
            commits = CommitReader(tables)
            commits.head(conn)
            commits.handed_out(conn)
    except (sa.exc.SQLAlchemyError, LogSchemaError) as err:
        raise GlobalDetectorError(
            f"cannot read the event log's commit numbers at {engine.url!r}: {err}"
        ) from err
    finally:
        engine.dispose()
    if partitions is None:
        try:
            partitions = int(spark.sparkContext.defaultParallelism)
        except Exception:  # Spark Connect has no SparkContext
            partitions = os.cpu_count() or 1
    if spark not in _REGISTERED:  # once: again, Spark warns that it replaced it
        spark.dataSource.register(CommitSource)
        _REGISTERED.add(spark)
    reader = (
        spark.readStream.format("sentinel_commits")
        .option(_URL_OPTION, url)
        .option("prefix", prefix)
        .option("partitions", str(partitions))
    )
    if schema:
        reader = reader.option("schema", schema)
    if events is not None:
        reader = reader.option("events", json.dumps(sorted(events)))
    if clocks:
        reader = reader.option("clocks", "1")
    if key is not None:
        reader = reader.option("key", key)
    return reader.load()


#: The sessions :class:`CommitSource` is registered with.
_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()
