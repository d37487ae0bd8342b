"""The global detector as a Spark Structured Streaming job: over a log written
by several writers in commit order, its detections equal batch replay in commit
order (:func:`replay_committed`) and an independent model, across micro-batches
and across a restart from its checkpoint (no duplicate, no miss).

It lives with the replay tests for their session-wide SparkSession."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.errors import GlobalDetectorError
from sentinel.global_detector import replay_committed
from sentinel.log import LogWriter, migrate
from sentinel.occurrence import Occurrence
from sentinel.params import dumps
from tests.global_detector import rules
from tests.global_detector.model import expected_details

pytestmark = pytest.mark.spark

PAID = "tests.global_detector.rules:detector"
TEMPORAL = "tests.global_detector.rules:temporal"
LIVED = "tests.global_detector.rules:lived"


class Log:
    """Several writers (each a ``LogWriter(commit_order=True)`` with a clock
    of its own, as processes have) committing, rolling back and marking
    savepoints aborted, interleaved at random."""

    def __init__(self, engine: sa.Engine, seed: int, writers: int = 3) -> None:
        self.engine = engine
        self.rnd = random.Random(seed)
        self.writers = [LogWriter(commit_order=True) for _ in range(writers)]
        self.clocks = [0] * writers
        self.txns = 0
        self.ts = 1000.0

    #: Seconds each writer's clock is off by (cycled over the writers).
    SKEW: tuple[float, ...] = (0.0,)

    def occ(self, w: int, event: str, scope: str, customer: int) -> Occurrence:
        self.clocks[w] += 1
        self.ts += self.rnd.choice([0.1, 0.3, 0.7, 1.5])
        return Occurrence(
            event,
            self.clocks[w],
            self.ts + self.SKEW[w % len(self.SKEW)],
            scope=scope,
            params={"customer": customer, "w": w, "n": self.txns},
        )

    def txn(self, events: list[tuple[str, int]] | None = None) -> None:
        """One transaction of a random writer: ``events`` (or random ones);
        one in six random ones rolled back, one in five with an aborted
        savepoint."""
        rnd = self.rnd
        explicit = events
        w = rnd.randrange(len(self.writers))
        self.txns += 1
        scope = f"w{w}-t{self.txns}"
        if events is None:
            events = [
                (rnd.choice(["order", "payment", "other"]), rnd.randint(1, 4))
                for _ in range(rnd.randint(1, 4))
            ]
        occs = [self.occ(w, e, scope, c) for e, c in events]
        groups: list[Any] = [(occs, "committed")]
        if rnd.random() < 0.2:
            sp = [self.occ(w, rnd.choice(["order", "payment"]), scope, rnd.randint(1, 4))]
            groups.append((sp, "aborted"))
        conn = self.engine.connect()
        try:
            conn.begin()
            self.writers[w].write_groups(conn, groups)
            if explicit is None and rnd.random() < 1 / 6:
                conn.rollback()
            else:
                conn.commit()
        finally:
            conn.close()

    def many(self, n: int) -> None:
        for _ in range(n):
            self.txn()


def _scope(scope: str) -> str:
    """A scope as compared: a timer's tick is in its detector's process scope,
    whose id is drawn per detector."""
    return "process" if scope.startswith("process:") else scope


def _replayed(ref: str, engine: sa.Engine) -> list[tuple[Any, ...]]:
    out = []
    for d in replay_committed(ref, engine):
        cons = d.occurrence.constituents
        out.append(
            (
                d.rule,
                d.commit_seq,
                d.occurrence.t_occ,
                tuple(c.event for c in cons),
                tuple(_scope(str(c.scope)) for c in cons),
                tuple(c.t_occ for c in cons),
                "[" + ",".join(dumps(c.params) for c in cons) + "]",
            )
        )
    return sorted(out)


def _streamed(spark: Any, out: Path) -> list[tuple[Any, ...]]:
    if not out.exists():
        return []
    rows = spark.read.parquet(str(out)).collect()
    return sorted(
        (
            r["rule"],
            r["commit_seq"],
            r["t_occ"],
            tuple(r["constituent_events"]),
            tuple(_scope(s) for s in r["constituent_scopes"]),
            tuple(r["constituent_t_occs"]),
            r["params"],
        )
        for r in rows
    )


def _details(rows: list[tuple[Any, ...]]) -> list[str]:
    """The streamed detections as the model writes them, in commit order."""
    out = []
    for _rule, _seq, _t, events, scopes, _ts, params in sorted(rows, key=lambda r: (r[1], r[2])):
        out.append(
            json.dumps(
                [[e, s, p] for e, s, p in zip(events, scopes, json.loads(params), strict=True)],
                sort_keys=True,
            )
        )
    return out


@pytest.fixture
def log_db(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    return engine


def _url(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
def test_keyed_stream_equals_replay_across_batches_and_a_restart(
    spark: Any, log_db: sa.Engine, tmp_path: Path
) -> None:
    from sentinel.global_detector.streaming import stream_global

    log = Log(log_db, seed=11)
    log.many(40)
    # orders waiting at the end of the first batch, paid in the second
    log.txn([("order", 1), ("order", 2), ("order", 3)])
    cp, out = tmp_path / "checkpoint", tmp_path / "out"
    query = stream_global(spark, PAID, _url(log_db), checkpoint=cp, out=out, key="customer")
    try:
        query.processAllAvailable()
        first = _streamed(spark, out)
        assert first == _replayed(PAID, log_db)
        batch1_end = max(r[1] for r in first)
        log.txn([("payment", 1), ("payment", 2), ("payment", 3)])  # between two batches
        log.many(30)
        log.txn([("order", 1), ("order", 4)])  # waiting when the job stops
        query.processAllAvailable()
    finally:
        query.stop()
    second = _streamed(spark, out)
    with log_db.connect() as conn:
        stop_seq = conn.execute(
            sa.text("SELECT max(commit_seq) FROM sentinel_occurrences")
        ).scalar()
    assert second == _replayed(PAID, log_db)
    # a pair spanning the two micro-batches: the first batch's order was kept in state
    assert any(r[5][0] >> 20 <= batch1_end < r[1] for r in second)

    log.txn([("payment", 1), ("payment", 4)])  # committed while the job is down
    log.many(30)
    # the key by default: the rules' ("... by customer")
    query = stream_global(spark, PAID, _url(log_db), checkpoint=cp, out=out)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    final = _streamed(spark, out)
    expected = _replayed(PAID, log_db)
    assert final == expected  # no duplicate (a multiset compare), no miss
    assert len(final) > len(second) > len(first) > 5
    # pairs spanning the restart: the state came back from the checkpoint
    assert any(r[5][0] >> 20 <= stop_seq < r[1] for r in final)
    assert _details(final) == expected_details(log_db)  # the independent model
    with log_db.connect() as conn:
        aborted = conn.execute(
            sa.text("SELECT count(*) FROM sentinel_occurrences WHERE outcome = 'aborted'")
        ).scalar()
    assert aborted  # aborted savepoints reached the log, and were not detected


@pytest.mark.parametrize("backend", ["sqlite"])
def test_under_a_lifespan_the_state_holds_the_detectors_recent_orders_only(
    spark: Any, log_db: sa.Engine, tmp_path: Path
) -> None:
    """The state Spark keeps per bucket is the bucket's detector (no rows), and
    under a lifespan (5 s of log time) it holds only what has not expired: far
    fewer entries than the orders left unpaid, which a rule without one keeps.
    Detections still equal batch replay across a restart; a restart with
    another number of buckets is refused."""
    from pyspark.errors import StreamingQueryException

    from sentinel.global_detector.streaming import read_state, stream_global

    log = Log(log_db, seed=21)
    log.many(60)
    cp, out, url = tmp_path / "checkpoint", tmp_path / "out", _url(log_db)
    query = stream_global(spark, LIVED, url, checkpoint=cp, out=out, buckets=4)
    try:
        query.processAllAvailable()
        log.many(60)
        query.processAllAvailable()
    finally:
        query.stop()
    state = spark.read.format("statestore").load(str(cp)).collect()
    assert 1 <= len(state) <= 4  # at most one entry per bucket, whatever the keys
    assert all(r["value"]["groupState"]["rows"] is None for r in state)
    buckets = read_state(spark, cp).collect()
    assert {r["bucket"] for r in buckets} <= {0, 1, 2, 3}  # the numbers, not the labels
    held = sum(r["retained"] for r in buckets)
    with log_db.connect() as conn:
        orders = conn.execute(
            sa.text(
                "SELECT count(*) FROM sentinel_occurrences WHERE event = 'order' "
                "AND commit_seq IS NOT NULL AND (outcome IS NULL OR outcome = 'committed')"
            )
        ).scalar()
    unpaid = orders - len(_replayed(PAID, log_db))  # what the state holds without a lifespan
    assert held <= 12 < unpaid, (held, unpaid)

    log.many(20)
    query = stream_global(
        spark, LIVED, url, checkpoint=cp, out=out, buckets=4, trigger={"availableNow": True}
    )
    query.awaitTermination(300)
    streamed = _streamed(spark, out)
    assert streamed == _replayed(LIVED, log_db)
    assert len(streamed) > 10

    log.many(3)
    query = stream_global(
        spark, LIVED, url, checkpoint=cp, out=out, buckets=5, trigger={"availableNow": True}
    )
    with pytest.raises(StreamingQueryException, match="hashed the keys into 4 buckets"):
        query.awaitTermination(300)


class SkewedLog(Log):
    """A :class:`Log` whose writers' clocks disagree by seconds (as machines'
    do): commit order is not the order of the rows' times, and a writer's rows
    arrive behind the log's clock."""

    SKEW = (0.0, -4.0, 3.0)

    def at(self, w: int, ts: float, events: list[tuple[str, int]]) -> None:
        """One committed transaction of writer ``w``, its rows at ``ts``."""
        self.txns += 1
        scope = f"w{w}-t{self.txns}"
        occs = []
        for event, customer in events:
            self.clocks[w] += 1
            occs.append(
                Occurrence(event, self.clocks[w], ts, scope=scope, params={"customer": customer})
            )
        with self.engine.begin() as conn:
            self.writers[w].write_groups(conn, [(occs, "committed")])


@pytest.mark.parametrize("backend", ["sqlite"])
def test_split_by_key_a_lifespan_runs_on_the_clock_of_every_row(
    spark: Any, log_db: sa.Engine, tmp_path: Path
) -> None:
    """Under a lifespan (5 s of the log's clock: the largest detection time
    committed so far), an order is forgotten once any row, of any key or of an
    event no rule reads, moved the clock past it. A bucket's detector saw its
    own rows only, and paired orders with payments committed late (a writer
    behind the others) that the service and batch replay had forgotten."""
    from sentinel.global_detector.streaming import stream_global

    log = SkewedLog(log_db, seed=3)
    log.at(0, 1000.0, [("order", c) for c in range(1, 9)])
    log.at(1, 1010.0, [("other", 0)])  # moves the clock: every order expires
    log.at(2, 1004.0, [("payment", c) for c in range(1, 9)])  # committed late
    log.at(0, 1011.0, [("order", 1), ("order", 2)])
    log.at(1, 1013.0, [("payment", 1), ("payment", 2)])  # in time
    assert [r[0] for r in _replayed(LIVED, log_db)] == ["paid_soon", "paid_soon"]

    cp, out, url = tmp_path / "checkpoint", tmp_path / "out", _url(log_db)
    query = stream_global(spark, LIVED, url, checkpoint=cp, out=out, buckets=4)
    try:
        query.processAllAvailable()
        assert _streamed(spark, out) == _replayed(LIVED, log_db)
        log.many(40)
        query.processAllAvailable()
    finally:
        query.stop()
    assert _streamed(spark, out) == _replayed(LIVED, log_db)
    log.many(40)  # committed while the job is down: the clock comes back from the state
    query = stream_global(
        spark,
        LIVED,
        url,
        checkpoint=cp,
        out=out,
        buckets=4,
        partitions=3,
        trigger={"availableNow": True},
    )
    query.awaitTermination(300)
    streamed = _streamed(spark, out)
    assert streamed == _replayed(LIVED, log_db)
    assert len(streamed) > 10


@pytest.mark.parametrize("backend", ["sqlite"])
def test_unkeyed_rules_run_in_one_group_with_the_log_clock(
    spark: Any, log_db: sa.Engine, tmp_path: Path
) -> None:
    """``key=None``: one group, so even a temporal rule (its clock moved by
    every row) detects what batch replay in commit order detects."""
    from sentinel.global_detector.streaming import stream_global

    log = Log(log_db, seed=5)
    log.many(25)
    cp, out = tmp_path / "checkpoint", tmp_path / "out"
    query = stream_global(spark, TEMPORAL, _url(log_db), checkpoint=cp, out=out)
    try:
        query.processAllAvailable()
        log.many(25)
        query.processAllAvailable()
    finally:
        query.stop()
    log.many(10)
    query = stream_global(
        spark, TEMPORAL, _url(log_db), checkpoint=cp, out=out, trigger={"availableNow": True}
    )
    query.awaitTermination(300)
    streamed = _streamed(spark, out)
    assert streamed == _replayed(TEMPORAL, log_db)
    assert len(streamed) > 5
    assert {r[0] for r in streamed} == {"unpaid"}


def test_the_driver_refuses_what_it_cannot_run(spark: Any, tmp_path: Path) -> None:
    from sentinel.global_detector.streaming import global_detections, stream_global

    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    with pytest.raises(GlobalDetectorError, match="not detached"):
        global_detections(spark, "tests.replay.workload:compact_detector", url)
    with pytest.raises(GlobalDetectorError, match="parameter name"):
        global_detections(spark, PAID, url, key="customer') OR ('1")
    with pytest.raises(GlobalDetectorError, match="'paid' is not partitioned by 'w'"):
        global_detections(spark, PAID, url, key="w")
    with pytest.raises(GlobalDetectorError, match="'unpaid' has temporal events"):
        global_detections(spark, TEMPORAL, url, key="customer")
    with pytest.raises(GlobalDetectorError, match="is a directory"):
        global_detections(spark, PAID, str(tmp_path))
    with pytest.raises(GlobalDetectorError, match="cannot read the event log"):
        global_detections(spark, PAID, f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(GlobalDetectorError, match="give one"):
        stream_global(spark, PAID, url, checkpoint=tmp_path / "cp")


def test_the_key_comes_from_the_rules() -> None:
    from sentinel.global_detector.streaming import rules_key

    assert rules_key(rules.detector) == "customer"
    assert rules_key(rules.temporal) is None  # temporal: one group
    assert rules_key(rules.daily) is None  # not keyed


@pytest.mark.parametrize("backend", ["sqlite"])
def test_foreach_batch_gets_each_batch_once_with_its_id(
    spark: Any, log_db: sa.Engine, tmp_path: Path
) -> None:
    from sentinel.global_detector.streaming import stream_global

    log = Log(log_db, seed=3)
    log.many(30)
    batches: list[tuple[int, list[tuple[Any, ...]]]] = []

    def keep(df: Any, batch_id: int) -> None:
        rows = [
            (
                r["rule"],
                r["commit_seq"],
                r["t_occ"],
                tuple(r["constituent_events"]),
                tuple(_scope(s) for s in r["constituent_scopes"]),
                tuple(r["constituent_t_occs"]),
                r["params"],
            )
            for r in df.collect()
        ]
        batches.append((batch_id, rows))

    query = stream_global(spark, PAID, _url(log_db), checkpoint=tmp_path / "cp", foreach_batch=keep)
    try:
        query.processAllAvailable()
        log.many(20)
        query.processAllAvailable()
    finally:
        query.stop()
    ids = [b for b, _ in batches]
    assert ids == sorted(set(ids)) and len(ids) >= 2
    assert sorted(r for _, rows in batches for r in rows) == _replayed(PAID, log_db)


@pytest.mark.parametrize("backend", ["postgresql"])
def test_the_source_offset_stops_before_a_number_whose_transaction_runs(log_db: sa.Engine) -> None:
    """PostgreSQL numbers commits without a lock: A takes 1, B takes 2 and
    commits first. A micro-batch planned then ends before 1 (reading 2 and
    moving the offset past 1 would lose A's commit); once A committed, the
    next one ends at 2."""
    pytest.importorskip("pyspark")
    from sentinel.global_detector.source import _URL_OPTION, _CommitStreamReader

    source = _CommitStreamReader({_URL_OPTION: _url(log_db)})
    writer = LogWriter(commit_order=True)
    a = log_db.connect()
    try:
        a.begin()
        writer.write(a, [Occurrence("order", 1, 1000.0, scope="txA", params={"customer": 1})])
        with log_db.begin() as b:
            b.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
            writer.write(b, [Occurrence("payment", 1, 1001.0, scope="txB", params={"customer": 1})])
        assert source.latestOffset({"commit_seq": 0}) == {"commit_seq": 0}
        a.commit()
    finally:
        a.close()
    assert source.latestOffset({"commit_seq": 0}) == {"commit_seq": 2}
    source.stop()


def test_the_buckets_spread_evenly_over_the_state_partitions(spark: Any) -> None:
    """Spark sends a group to the state partition ``pmod(hash(label), n)``: the
    buckets' labels make that ``i mod n`` for bucket ``i`` when ``n`` divides
    the number of buckets, so two partitions hold 32 of 64 buckets each (the
    numbers 0 to 63 would give them 27 and 37: one core detecting 37% more)."""
    from sentinel.global_detector.buckets import bucket_labels, spark_hash

    for buckets in (1, 4, 7, 64, 256):
        labels = bucket_labels(buckets)
        assert len(set(labels)) == buckets and min(labels) >= 0
    labels = bucket_labels(64)
    df = spark.createDataFrame([(b,) for b in labels], "bucket int")
    for n in (2, 4, 8):  # hash partitioning, as the state's
        sizes = df.repartition(n, "bucket").rdd.glom().map(len).collect()
        assert sizes == [64 // n] * n, (n, sizes)
    spread = df.selectExpr("pmod(hash(bucket), 64) AS i").collect()
    assert sorted(r["i"] for r in spread) == list(range(64))
    values = [0, 1, -1, 2**31 - 1, *labels]
    hashed = spark.createDataFrame([(v,) for v in values], "v int").selectExpr("hash(v) AS h")
    assert [r["h"] for r in hashed.collect()] == [spark_hash(v) for v in values]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_source_reads_whole_commits_and_ranks_the_wanted_rows_among_all(
    log_db: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source task reads its range of commits a few log rows at a time
    (here 3), whole commits each time, and sends only the wanted events' rows,
    each with its rank among all its commit's rows: the commit reader's rows."""
    pytest.importorskip("pyspark")
    from pyspark.sql.datasource import InputPartition

    from sentinel.global_detector import source as streaming
    from sentinel.global_detector.buckets import key_hash
    from sentinel.global_detector.order import CommitReader
    from sentinel.log.tables import log_tables

    log = Log(log_db, seed=5)
    log.many(40)
    with log_db.connect() as conn:
        reader = CommitReader(log_tables())
        rows, head = reader.read(conn, 0, limit=10**9), reader.head(conn)
    expected, seq, rank = [], -1, 0
    for r in rows:
        seq, rank = (r.commit_seq, 0) if r.commit_seq != seq else (seq, rank)
        if r.event in ("order", "payment"):
            expected.append((*(getattr(r, f) for f in streaming._ROW_FIELDS), rank))
        rank += 1
    assert len({r[1] for r in expected}) > 10 and len(expected) < len(rows)

    monkeypatch.setattr(streaming, "READ_ROWS", 3)
    source = streaming._CommitStreamReader(
        {
            streaming._URL_OPTION: _url(log_db),
            "events": json.dumps(["order", "payment"]),
            "partitions": "3",
        }
    )
    got = []
    for part in source.partitions({"commit_seq": 0}, {"commit_seq": head}):
        assert isinstance(part, InputPartition)
        for batch in source.read(part):
            got.extend(tuple(r.values()) for r in batch.to_pylist())
    source.stop()
    assert [r[:-2] for r in got] == expected
    assert {r[-2:] for r in got} == {(None, None)}  # no clocks, no key asked for

    # with clocks: each row carries the largest detection time before it in its
    # task's range (any event's), and each range ends with that range's largest
    source = streaming._CommitStreamReader(
        {
            streaming._URL_OPTION: _url(log_db),
            "events": json.dumps(["order", "payment"]),
            "partitions": "3",
            "clocks": "1",
            "key": "customer",
        }
    )
    parts = source.partitions({"commit_seq": 0}, {"commit_seq": head})
    got = []
    for part in parts:
        lo, hi = part.value
        in_range = [r for r in rows if lo < r.commit_seq <= hi]
        clock, want = None, []
        for r in in_range:
            if r.event in ("order", "payment"):
                want.append(clock)
            clock = r.detected_ts if clock is None else max(clock, r.detected_ts)
        batches = list(source.read(part))
        read = [r for b in batches for r in b.to_pylist()]
        assert [r["clock"] for r in read[:-1]] == want
        assert (read[-1]["rank"], read[-1]["commit_seq"], read[-1]["clock"]) == (-1, hi, clock)
        got.extend(tuple(r.values())[:-2] for r in read[:-1])
        assert [r["key_hash"] for r in read[:-1]] == [
            key_hash(json.loads(r["params"])["customer"]) for r in read[:-1]
        ]
    source.stop()
    assert got == expected


@pytest.mark.parametrize("backend", ["sqlite"])
def test_keys_python_finds_equal_meet_in_one_bucket(
    spark: Any, log_db: sa.Engine, tmp_path: Path
) -> None:
    """The detector pairs an order of customer 1 with a payment of customer
    1.0 (Python's ``1 == 1.0 == True``); the buckets were the hash of the key's
    JSON text, so the two went to different detectors and the pair was lost."""
    from decimal import Decimal

    from sentinel.global_detector.streaming import stream_global

    log = Log(log_db, seed=1)
    for order, payment in [(1, 1.0), (0, False), (Decimal("2.50"), 2.5), (7, 7)]:
        log.txn([("order", order)])  # type: ignore[list-item]
        log.txn([("payment", payment)])  # type: ignore[list-item]
    expected = _replayed(PAID, log_db)
    assert len(expected) == 4
    out = tmp_path / "out"
    query = stream_global(
        spark,
        PAID,
        _url(log_db),
        checkpoint=tmp_path / "cp",
        out=out,
        trigger={"availableNow": True},
    )
    query.awaitTermination(300)
    assert _streamed(spark, out) == expected
    keys = sorted(r["key"] for r in spark.read.parquet(str(out)).collect())
    assert keys == ["0", "1", "7", '{"$decimal":"2.50"}']  # the order's value, as logged


def test_a_checkpoint_ahead_of_the_log_is_refused(log_db: sa.Engine) -> None:
    """A checkpoint whose offset is past every commit number the log handed
    out (another database's, or a log restored from a backup) read nothing,
    silently, until the numbers passed it."""
    pytest.importorskip("pyspark")
    from sentinel.global_detector import source as streaming

    log = Log(log_db, seed=2)
    log.many(3)
    source = streaming._CommitStreamReader({streaming._URL_OPTION: _url(log_db)})
    try:
        assert source.latestOffset({"commit_seq": 0})["commit_seq"] >= 1
        with pytest.raises(GlobalDetectorError, match="checkpoint stands at commit 50"):
            source.latestOffset({"commit_seq": 50})
    finally:
        source.stop()


def test_under_available_now_the_source_reads_to_the_numbers_handed_out_at_the_start(
    log_db: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trigger.AvailableNow: the source records the last number handed out
    when the query starts and reads up to it over as many batches as it takes;
    it waits at a hole that may still fill (a batch that reads nothing ends
    such a query) and stops there once the numbers up to it are settled."""
    pytest.importorskip("pyspark")
    from sentinel.global_detector import source as streaming

    log = Log(log_db, seed=2)
    log.many(3)
    source = streaming._CommitStreamReader({streaming._URL_OPTION: _url(log_db)})
    assert isinstance(source, streaming.SupportsTriggerAvailableNow)
    monkeypatch.setattr(streaming, "GAP_WAIT", 0.0)
    # (head, horizon, handed out) as the log answers, one per planning
    answers = iter([(2, 2, 9), (2, 2, 9), (6, 6, 9), (12, 12, 12), (12, 12, 12)])
    monkeypatch.setattr(source, "_latest", lambda start: next(answers))
    monkeypatch.setattr(
        source, "_reader", type("R", (), {"handed_out": staticmethod(lambda conn: 9)})()
    )
    source.prepareForTriggerAvailableNow()
    assert source.latestOffset({"commit_seq": 0}) == {"commit_seq": 2}
    # nothing readable past 2 yet, a hole below 9 that may fill: wait, then go on
    assert source.latestOffset({"commit_seq": 2}) == {"commit_seq": 6}
    # more committed since the start: not beyond what was handed out then
    assert source.latestOffset({"commit_seq": 6}) == {"commit_seq": 9}
    assert source.latestOffset({"commit_seq": 9}) == {"commit_seq": 9}  # done
    source.stop()


def test_stream_global_refuses_a_checkpoint_that_is_a_file_and_an_old_log(
    spark: Any, tmp_path: Path
) -> None:
    from sentinel.global_detector.streaming import global_detections, stream_global

    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    (tmp_path / "cp").write_text("")
    with pytest.raises(GlobalDetectorError, match=r"checkpoint .* is a file"):
        stream_global(spark, PAID, url, checkpoint=tmp_path / "cp", out=tmp_path / "out")
    old = sa.create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migrate.upgrade(old, "0008")
    old.dispose()
    with pytest.raises(GlobalDetectorError, match="revision"):
        global_detections(spark, PAID, f"sqlite:///{tmp_path / 'old.db'}")


def test_a_key_value_that_cannot_be_read_back_goes_to_the_keyless_bucket() -> None:
    """A row written by hand whose key is a malformed tagged value raised in the
    source's task, and the retried batch read the same row: the query stopped
    for good. It goes with the rows without the key, whose feeder skips it."""
    pytest.importorskip("pyspark")
    from sentinel.global_detector.source import _hashed

    assert _hashed({"$datetime": "garbage"}) is None
    assert _hashed({"$decimal": "sNaN"}) is not None
    assert _hashed(7) == _hashed(7.0)
