"""The global event detector: commit-to-action latency, events tailed per second,
and what commit order costs the writers.

Run: ``python bench/global.py`` (``--quick`` for a short run). PostgreSQL and
MariaDB are the test servers (``SENTINEL_TEST_POSTGRES_URL``,
``SENTINEL_TEST_MYSQL_URL``, defaults as in DEVELOPERS.md); a database of its own
is created on each and dropped after; SQLite is a temporary file.

latency
    a writer process commits transactions each signalling an order and its
    payment (``t0``: the time just before the commit, a parameter); the service
    (``GlobalDetector``, actions in its thread, or in ``--workers`` threads)
    runs the detached rule, whose
    action records ``time.time() - t0``. Transactions come every 20 ms, from
    one writer process (and, on PostgreSQL, again from four at once: 200
    commits/s). p50 and p99 over all of them. PostgreSQL wakes up on ``NOTIFY``; SQLite and MariaDB
    poll (back-off from 0.05 s to 1 s). Baseline, in the same run: a hand-written
    tailer of the same log (the plain loop a user would write: ``LISTEN`` on
    PostgreSQL, holding the log's advisory lock so that writers notify, a
    0.05 s poll elsewhere; ``SELECT ... WHERE id > last``; a dict
    pairing orders and payments; it acts by appending to a list, no outbox).
    Also the statements and commits on the service's engine (its own and its
    actions') per detection acted on.
tailing
    a log of N committed transactions (order, payment, two page views each) is
    read from the start by a service that only enqueues (``run_actions=False``):
    log rows per second, end to end (reads, detection, outbox rows, cursor).
    Baselines: ``replay_committed`` (the same detection, no outbox, no cursor) and
    a hand loop over the same rows (one query, a dict).
spark (``--spark``)
    the streaming global detector (``sentinel.global_detector.streaming``) on
    ``local[2]`` over the tailing log (SQLite): rows per second of a first
    micro-batch reading the whole log (``availableNow``, Parquet out, keys
    ``order_id``), then of micro-batches of 500 new commits each on the running
    query (state already holding the earlier keys). Baseline: ``replay_committed``
    over the same log in one process.
commit cost
    4 threads commit transactions of 3 log rows through ``LogWriter`` on one
    database: commits per second with commit numbers (the lock held to the
    commit) and without them (the same writer with numbering switched off: the
    log as it was before the global detector).

This is a benchmark, not a test: nothing asserts on its figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

PG = os.environ.get(
    "SENTINEL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
MY = os.environ.get("SENTINEL_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")

LATENCIES: list[float] = []


def record_latency(occ: Any) -> None:
    """The benchmark rule's action: how long since the payment's commit began."""
    LATENCIES.append(time.time() - occ.constituents[-1].params["t0"])


def rules() -> Any:
    from sentinel import LocalEventDetector

    det = LocalEventDetector()
    order, payment = det.explicit("order"), det.explicit("payment")
    det.explicit("view")
    det.rule(
        "paid",
        (order >> payment).by("order_id"),
        action=record_latency,
        coupling="detached",
        context="chronicle",
        flush=False,
    )
    return det


# -- databases -------------------------------------------------------------------------
class Database:
    """A fresh database (or SQLite file) for one measurement, dropped after."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        name = f"bench_global_{uuid.uuid4().hex[:8]}"
        self.name = name
        if backend == "sqlite":
            self.dir = tempfile.mkdtemp()
            self.url = f"sqlite:///{self.dir}/global.db"
        else:
            admin_url = PG if backend == "postgresql" else MY
            self.admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
            with self.admin.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
            self.url = (
                sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
            )
        # SQLite: writers wait for the file's lock rather than fail after 5 s
        args = {"timeout": 60} if backend == "sqlite" else {}
        self.engine = sa.create_engine(self.url, connect_args=args)
        from sentinel.log import migrate

        migrate.upgrade(self.engine)

    def drop(self) -> None:
        self.engine.dispose()
        if self.backend != "sqlite":
            with self.admin.connect() as conn:
                if self.backend == "postgresql":
                    conn.exec_driver_sql(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        f"WHERE datname = '{self.name}' AND pid <> pg_backend_pid()"
                    )
                conn.exec_driver_sql(f"DROP DATABASE {self.name}")
            self.admin.dispose()


# -- the writer process ----------------------------------------------------------------
def writer_main(url: str, n: int, interval: float, first: int = 0) -> None:
    """Commit ``n`` transactions (order, payment) every ``interval`` seconds,
    order ids from ``first``."""
    from sqlalchemy.orm import sessionmaker

    from sentinel import LocalEventDetector, scope_of
    from sentinel.orm import attach

    det = LocalEventDetector()
    det.explicit("order")
    det.explicit("payment")
    engine = sa.create_engine(url)
    Session = sessionmaker(engine)
    attach(Session, detector=det, workers=0, commit_order=True)
    time.sleep(0.5)  # the service is listening
    for i in range(first, first + n):
        with Session.begin() as s:
            s.execute(sa.text("SELECT 1"))
            with det.use_scope(scope_of(s)):
                det.signal("order", order_id=i)
                det.signal("payment", order_id=i, t0=time.time())
        time.sleep(interval)
    engine.dispose()


def _writer(db: Database, n: int, interval: float, first: int = 0) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "global.py"),
            "--writer",
            db.url,
            str(n),
            str(interval),
            str(first),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))] * 1000


def _writers(db: Database, n: int, writers: int) -> None:
    """``writers`` processes committing ``n`` transactions each, every 20 ms;
    return when they all have."""
    ws = [_writer(db, n, 0.02, k * n) for k in range(writers)]
    for w in ws:
        w.wait()


#: Statements and commits on the service's engine in the last :func:`latency`
#: (the service's and its actions'), and the detections acted on.
COUNTS: dict[str, int] = {}


def latency(
    backend: str, n: int, writers: int = 1, workers: int = 0
) -> tuple[float, float, float, float]:
    """(p50, p99) in ms of the service, then of the hand-written tailer, with
    ``writers`` processes committing ``n`` transactions each; the service's
    actions run in ``workers`` threads (0: in its own thread). Fills
    :data:`COUNTS`."""
    from sentinel.global_detector import GlobalDetector
    from sentinel.orm import global_actions

    db = Database(backend)
    try:
        LATENCIES.clear()
        counts = {"statements": 0, "commits": 0}

        def statement(*_: Any) -> None:
            counts["statements"] += 1

        def commit(*_: Any) -> None:
            counts["commits"] += 1

        sa.event.listen(db.engine, "before_cursor_execute", statement)
        sa.event.listen(db.engine, "commit", commit)
        service = GlobalDetector(
            rules(), db.engine, lease=30, workers=workers, actions=global_actions
        )
        stop = threading.Event()
        t = threading.Thread(target=service.run, kwargs={"stop": stop})
        t.start()
        _writers(db, n, writers)
        deadline = time.monotonic() + 30
        while len(LATENCIES) < n * writers and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        t.join()
        acted = len(LATENCIES)
        COUNTS.clear()
        COUNTS.update(counts, detections=acted)
        service.close()
        ours = list(LATENCIES)
    finally:
        db.drop()
    db = Database(backend)
    try:
        hand: list[float] = []
        stop = threading.Event()
        t = threading.Thread(target=hand_tailer, args=(db, hand, stop))
        t.start()
        _writers(db, n, writers)
        deadline = time.monotonic() + 30
        while len(hand) < n * writers and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        t.join()
    finally:
        db.drop()
    return _pct(ours, 0.5), _pct(ours, 0.99), _pct(hand, 0.5), _pct(hand, 0.99)


def hand_tailer(db: Database, out: list[float], stop: threading.Event) -> None:
    """The plain loop: new rows by id, pair orders and payments, act."""
    import json

    from sentinel.log.commit_order import ADVISORY_SEED, notify_channel
    from sentinel.log.tables import log_tables

    listen: Any = None
    if db.backend == "postgresql":
        raw = db.engine.raw_connection()
        listen = raw.driver_connection
        listen.autocommit = True
        listen.execute(f'LISTEN "{notify_channel(log_tables())}"')
        # sentinel's writers notify only while a reader holds the log's
        # advisory lock (shared): this loop holds it throughout, so every
        # commit notifies
        listen.execute(
            "SELECT pg_advisory_lock_shared(hashtextextended("
            "current_schema() || '.' || %s::text, %s))",
            ("sentinel_", ADVISORY_SEED),
        )
    last = 0
    orders: dict[Any, deque[Any]] = defaultdict(deque)
    q = sa.text(
        # the per-occurrence view; a row id holds a whole transaction, which
        # commits at once
        "SELECT id, event, params FROM sentinel_occurrences WHERE id > :last "
        "AND event IN ('order', 'payment') AND (outcome IS NULL OR outcome <> 'aborted') "
        "ORDER BY id, t_occ"
    )
    with db.engine.connect() as conn:
        while not stop.is_set():
            rows = conn.execute(q, {"last": last}).all()
            conn.commit()
            for i, event, params in rows:
                last = i
                p = json.loads(params) if isinstance(params, str) else params
                if event == "order":
                    orders[p["order_id"]].append(p)
                elif orders[p["order_id"]]:
                    orders[p["order_id"]].popleft()
                    out.append(time.time() - p["t0"])
            if rows:
                continue
            if listen is not None:
                for _ in listen.notifies(timeout=1.0, stop_after=1):
                    break
            else:
                stop.wait(0.05)
    if listen is not None:
        raw.invalidate()


# -- tailing throughput ----------------------------------------------------------------
def fill(db: Database, txns: int) -> int:
    """Commit ``txns`` transactions of 4 rows through the log writer; return rows."""
    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence

    writer = LogWriter(commit_order=True)
    t = 1000.0
    for i in range(txns):
        scope = f"tx{i}"
        occs = [
            Occurrence("order", 1, t, scope=scope, params={"order_id": i}),
            Occurrence("view", 2, t, scope=scope, params={"page": "/"}),
            Occurrence("view", 3, t, scope=scope, params={"page": "/pay"}),
            Occurrence("payment", 4, t, scope=scope, params={"order_id": i, "t0": t}),
        ]
        with db.engine.begin() as conn:
            writer.write(conn, occs)
        t += 0.001
    return txns * 4


def tailing(backend: str, txns: int) -> tuple[float, float, float, int]:
    """Rows per second: service (enqueue only), replay_committed, hand loop."""
    import json

    from sentinel.global_detector import GlobalDetector, replay_committed

    db = Database(backend)
    try:
        rows = fill(db, txns)
        start = time.perf_counter()
        with GlobalDetector(rules(), db.engine, run_actions=False) as service:
            service.run(until_idle=True)
        ours = rows / (time.perf_counter() - start)
        start = time.perf_counter()
        found = len(replay_committed(rules(), db.engine))
        replay_rate = rows / (time.perf_counter() - start)
        start = time.perf_counter()
        orders: dict[Any, deque[Any]] = defaultdict(deque)
        hand = 0
        with db.engine.connect() as conn:
            for event, params in conn.execute(
                sa.text(
                    "SELECT event, params FROM sentinel_occurrences "
                    "WHERE commit_seq IS NOT NULL ORDER BY commit_seq, id, t_occ"
                )
            ):
                p = json.loads(params) if isinstance(params, str) else params
                if event == "order":
                    orders[p["order_id"]].append(p)
                elif event == "payment" and orders[p["order_id"]]:
                    orders[p["order_id"]].popleft()
                    hand += 1
        hand_rate = rows / (time.perf_counter() - start)
        assert found == hand == txns, (found, hand, txns)
    finally:
        db.drop()
    return ours, replay_rate, hand_rate, rows


# -- the streaming job on Spark --------------------------------------------------------
def spark_streaming(txns: int, batches: int, per_batch: int) -> dict[str, float]:
    """Rows per second: the streaming job's first batch over ``txns`` commits,
    its later batches of ``per_batch`` commits, and replay_committed."""
    from pyspark.sql import SparkSession

    from sentinel.global_detector import replay_committed
    from sentinel.global_detector.streaming import stream_global

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), str(ROOT), os.environ.get("PYTHONPATH")])
    )
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ref = "global:rules"
    db = Database("sqlite")
    out: dict[str, float] = {}
    try:
        rows = fill(db, txns)
        start = time.perf_counter()
        found = len(replay_committed(rules(), db.engine))
        out["replay_committed"] = rows / (time.perf_counter() - start)
        work = Path(db.dir)
        start = time.perf_counter()
        q = stream_global(
            spark,
            ref,
            db.url,
            checkpoint=work / "cp",
            out=work / "out",
            trigger={"availableNow": True},
        )
        q.awaitTermination()
        out["first batch"] = rows / (time.perf_counter() - start)
        q = stream_global(spark, ref, db.url, checkpoint=work / "cp", out=work / "out")
        q.processAllAvailable()
        added = 0
        elapsed = 0.0
        for b in range(batches):
            added += _more(db, txns + b * per_batch, per_batch)
            start = time.perf_counter()
            q.processAllAvailable()
            elapsed += time.perf_counter() - start
        q.stop()
        out["later batches"] = added / elapsed
        streamed = spark.read.parquet(str(work / "out")).count()
        assert found == txns and streamed == txns + batches * per_batch, (found, streamed)
    finally:
        db.drop()
        spark.stop()
    return out


def _more(db: Database, first: int, n: int) -> int:
    """Commit ``n`` more transactions like :func:`fill`'s (order ids from ``first``)."""
    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence

    writer = LogWriter(commit_order=True)
    t = 1000.0 + first * 0.001
    for i in range(first, first + n):
        scope = f"tx{i}"
        occs = [
            Occurrence("order", 1, t, scope=scope, params={"order_id": i}),
            Occurrence("view", 2, t, scope=scope, params={"page": "/"}),
            Occurrence("view", 3, t, scope=scope, params={"page": "/pay"}),
            Occurrence("payment", 4, t, scope=scope, params={"order_id": i, "t0": t}),
        ]
        with db.engine.begin() as conn:
            writer.write(conn, occs)
        t += 0.001
    return n * 4


# -- the writers' cost -----------------------------------------------------------------
def commit_cost(
    backend: str, per_thread: int, threads: int = 4, numbered_first: bool = True
) -> tuple[float, float]:
    """Commits per second of ``threads`` writers, with and without commit
    numbers (each in a fresh database; ``numbered_first``: in that order)."""
    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence

    class Unnumbered(LogWriter):
        def write_groups(self, *args: Any, **kwargs: Any) -> int:
            kwargs["sequence"] = False
            return super().write_groups(*args, **kwargs)

    rates: dict[bool, float] = {}
    writers = [(True, LogWriter(commit_order=True)), (False, Unnumbered(commit_order=True))]
    for numbered, writer in writers if numbered_first else writers[::-1]:
        db = Database(backend)
        try:

            def work(k: int, db: Database = db, writer: LogWriter = writer) -> None:
                for i in range(per_thread):
                    scope = f"w{k}-{i}"
                    occs = [Occurrence(e, j, 1.0, scope=scope) for j, e in enumerate("abc")]
                    with db.engine.begin() as conn:
                        writer.write(conn, occs)

            ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
            start = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            rates[numbered] = threads * per_thread / (time.perf_counter() - start)
        finally:
            db.drop()
    return rates[True], rates[False]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer transactions")
    parser.add_argument("--writer", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument(
        "--spark", action="store_true", help="only the streaming job on Spark (local[2])"
    )
    parser.add_argument(
        "--backends", default="postgresql,sqlite,mysql", help="comma-separated backends"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="latency: threads running the service's actions (0, the default: in its "
        "thread, the Python API's default; `sentinel global` runs 1)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="commit: rounds per backend (median printed)"
    )
    parser.add_argument(
        "--only",
        default="latency,tailing,commit",
        help="comma-separated measures to run: latency, tailing, commit",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    if args.writer:
        url, n, interval, first = args.writer
        writer_main(url, int(n), float(interval), int(first))
        return
    if args.spark:
        n = 2000 if args.quick else 20000
        batches, per_batch = (2, 200) if args.quick else (5, 500)
        print(f"streaming global detector on local[2], SQLite log of {n} transactions")
        for name, rate in spark_streaming(n, batches, per_batch).items():
            print(f"{name:<20}{rate:>10.0f} rows/s")
        return
    backends = args.backends.split(",")
    n_latency = 100 if args.quick else 500
    n_tail = 1000 if args.quick else 5000
    n_commit = 100 if args.quick else 500
    if "latency" in only:
        print(
            f"commit-to-action latency, {n_latency} transactions, one every 20 ms (ms); "
            f"actions in {f'{args.workers} worker' if args.workers else 'the service'}'s "
            f"thread{'s' if args.workers > 1 else ''}; statements and commits per detection"
        )
        print(
            f"{'backend':<12}{'wake-up':<10}{'p50':>8}{'p99':>8}{'hand p50':>10}{'hand p99':>10}"
            f"{'stmts':>8}{'commits':>9}"
        )

        def counts() -> str:
            per = max(1, COUNTS["detections"])
            return f"{COUNTS['statements'] / per:>8.2f}{COUNTS['commits'] / per:>9.2f}"

        for b in backends:
            p50, p99, h50, h99 = latency(b, n_latency, workers=args.workers)
            wake = "NOTIFY" if b == "postgresql" else "polling"
            print(f"{b:<12}{wake:<10}{p50:>8.1f}{p99:>8.1f}{h50:>10.1f}{h99:>10.1f}{counts()}")
        if "postgresql" in backends:
            p50, p99, h50, h99 = latency("postgresql", n_latency, writers=4, workers=args.workers)
            print(
                f"{'postgresql':<12}{'4 writers':<10}{p50:>8.1f}{p99:>8.1f}{h50:>10.1f}"
                f"{h99:>10.1f}{counts()}"
            )
    if "tailing" in only:
        print(f"\ntailing a log of {n_tail} transactions (rows/s)")
        print(f"{'backend':<12}{'rows':>8}{'service':>10}{'replay':>10}{'hand':>10}")
        for b in backends:
            ours, rep, hand, rows = tailing(b, n_tail)
            print(f"{b:<12}{rows:>8}{ours:>10.0f}{rep:>10.0f}{hand:>10.0f}")
    if "commit" in only:
        print(
            f"\nlog-writing commits per second, 4 threads x {n_commit}, {args.rounds} "
            "round(s), each variant in a fresh database, which runs first alternating"
        )
        print(f"{'backend':<12}{'numbered':>10}{'unnumbered':>12}{'ratio':>8}")
        for b in backends:
            ratios = []
            for r in range(args.rounds):
                with_, without = commit_cost(b, n_commit, numbered_first=r % 2 == 0)
                ratios.append(with_ / without)
                print(f"{b:<12}{with_:>10.0f}{without:>12.0f}{with_ / without:>8.2f}")
            if args.rounds > 1:
                print(
                    f"{b:<12}{'median':>22}{statistics.median(ratios):>8.2f} "
                    f"({min(ratios):.2f} - {max(ratios):.2f})"
                )


if __name__ == "__main__":
    # run as the module ``global`` (importable from bench/): the rule's action
    # must be importable, which a function of ``__main__`` is not
    import importlib

    importlib.import_module("global").main()
