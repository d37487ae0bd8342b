"""The streaming global detector on Spark against ``replay_committed`` in one process.

Run: ``python bench/streaming.py`` (``--quick`` for a short run). One command
per Spark configuration: ``--master local[2]`` (default), ``--partitions N``
(the source's tasks, the shuffle partitions and so the state's partitions; by
default the master's cores), ``--buckets N`` (default 64).

the log
    SQLite, committed through ``LogWriter(commit_order=True)``: transactions of
    an order, two page views and the payment of the order taken ``LAG``
    transactions earlier (so keys wait across micro-batches); one order in ten
    is never paid. The log's clock moves 10 ms per transaction. The rule:
    ``(order ; payment) by order_id``, chronicle, ``flush=False``, and a
    lifespan of ``--lifespan`` seconds of log time (default 30): the unpaid
    orders are forgotten after it, in both engines.
rates (``--rounds`` interleaved rounds, medians)
    log rows per second (all rows, views included) of ``replay_committed``
    (one process, the same detections) and of the streaming job reading the
    whole log from a new checkpoint (``availableNow``, Parquet out; the query's
    start included), in the same round; then of micro-batches of ``--more``
    new transactions each on the running query.
state (``--grow``)
    the running query reads the log as it grows, step after step: after each,
    the occurrence entries its state holds (``retained``, summed over buckets
    from Spark's state reader), the bytes of the buckets' dumped detectors, and
    the resident memory of this process's Python workers (their RSS, summed).

Nothing asserts on the figures; the detections of both engines are counted
and compared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

#: Payments pay the order taken this many transactions earlier.
LAG = 50
LIFESPAN = 30.0


def noop(occ: Any) -> None:
    """The rule's action (never run: the streaming job does not act)."""


def rules() -> Any:
    from sentinel import LocalEventDetector

    det = LocalEventDetector()
    order, payment = det.explicit("order"), det.explicit("payment")
    det.explicit("view")
    life = float(os.environ.get("BENCH_STREAMING_LIFESPAN", LIFESPAN))
    det.rule(
        "paid",
        (order >> payment).by("order_id"),
        action=noop,
        coupling="detached",
        context="chronicle",
        flush=False,
        lifespan=life if life > 0 else None,
    )
    return det


#: The rule set, as the executors import it (``streaming:detector``).
detector = rules()


def engine(url: str) -> sa.Engine:
    eng = sa.create_engine(url, connect_args={"timeout": 60})

    @sa.event.listens_for(eng, "connect")
    def _fast(dbapi: Any, _record: Any) -> None:
        dbapi.execute("PRAGMA journal_mode=WAL")
        dbapi.execute("PRAGMA synchronous=OFF")

    return eng


def fill(eng: sa.Engine, first: int, n: int) -> int:
    """Commit transactions ``first`` .. ``first + n - 1``; return the rows written."""
    from sentinel.log import LogWriter
    from sentinel.occurrence import Occurrence

    writer = LogWriter(commit_order=True)
    rows = 0
    with eng.connect() as conn:
        for i in range(first, first + n):
            t = 1000.0 + i * 0.01
            scope = f"tx{i}"
            occs = [
                Occurrence("order", 1, t, scope=scope, params={"order_id": i}),
                Occurrence("view", 2, t, scope=scope, params={"page": "/"}),
                Occurrence("view", 3, t, scope=scope, params={"page": "/pay"}),
            ]
            paid = i - LAG
            if paid >= 0 and paid % 10 != 7:  # one order in ten is never paid
                occs.append(Occurrence("payment", 4, t, scope=scope, params={"order_id": paid}))
            with conn.begin():
                writer.write(conn, occs)
            rows += len(occs)
    return rows


def workers_rss() -> int:
    """Resident bytes of the Python processes this one started (through the
    JVM: PySpark's daemon and its workers), summed."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pid=,ppid=,rss=,comm="], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return -1
    procs = [line.split(None, 3) for line in out.splitlines() if line.strip()]
    children: dict[str, list[list[str]]] = {}
    for p in procs:
        children.setdefault(p[1], []).append(p)
    total, todo = 0, [str(os.getpid())]
    while todo:
        for p in children.get(todo.pop(), []):
            todo.append(p[0])
            if len(p) == 4 and p[3].startswith("python"):
                total += int(p[2]) * 1024
    return total


def state_size(spark: Any, checkpoint: Path) -> tuple[int, int, int]:
    """Buckets, occurrence entries held and dumped bytes, from the state reader."""
    from pyspark.sql import functions as F

    from sentinel.global_detector.streaming import read_state

    row = read_state(spark, checkpoint).agg(F.count("*"), F.sum("retained"), F.sum("bytes")).first()
    return int(row[0]), int(row[1] or 0), int(row[2] or 0)


def session(master: str, partitions: int, conf: dict[str, str] | None = None) -> Any:
    from sentinel.replay.spark import session as sentinel_session

    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), str(ROOT), os.environ.get("PYTHONPATH")])
    )
    return sentinel_session(
        master,
        **{
            "spark.sql.shuffle.partitions": str(partitions),
            "spark.default.parallelism": str(partitions),
            "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
            **(conf or {}),
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small log")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--buckets", type=int, default=64)
    parser.add_argument("--txns", type=int, default=None, help="transactions in the log")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--more", type=int, default=None, help="transactions per later batch")
    parser.add_argument(
        "--grow", type=int, default=0, help="then grow the log by --txns this many times"
    )
    parser.add_argument("--lifespan", type=float, default=LIFESPAN, help="0: none")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session (repeatable), e.g. "
        "spark.python.udf.pipelined.enabled=true",
    )
    args = parser.parse_args()
    conf = dict(c.split("=", 1) for c in args.conf)
    os.environ["BENCH_STREAMING_LIFESPAN"] = str(args.lifespan)
    global detector
    detector = rules()
    txns = args.txns or (5_000 if args.quick else 100_000)
    more = args.more or max(txns // 20, 100)
    cores = args.master.partition("[")[2].rstrip("]")
    partitions = args.partitions or (int(cores) if cores.isdigit() else os.cpu_count() or 2)

    from sentinel.global_detector import replay_committed
    from sentinel.global_detector.streaming import stream_global

    spark = session(args.master, partitions, conf)
    ref = "streaming:detector"
    work = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    url = f"sqlite:///{work}/log.db"
    eng = engine(url)
    from sentinel.log import migrate

    migrate.upgrade(eng)
    start = time.perf_counter()
    rows = fill(eng, 0, txns)
    print(
        f"{args.master}, {partitions} partitions, {args.buckets} buckets, lifespan "
        f"{args.lifespan:g} s; log of {txns} transactions, {rows} rows "
        f"(written in {time.perf_counter() - start:.0f} s)"
        f"{'; ' + ', '.join(args.conf) if args.conf else ''}"
    )
    replay_rates, stream_rates = [], []
    found = streamed = 0
    for r in range(args.rounds):
        start = time.perf_counter()
        found = len(replay_committed(detector, eng))
        replay_rates.append(rows / (time.perf_counter() - start))
        cp, out = work / f"cp{r}", work / f"out{r}"
        start = time.perf_counter()
        q = stream_global(
            spark,
            ref,
            url,
            checkpoint=cp,
            out=out,
            buckets=args.buckets,
            partitions=partitions,
            trigger={"availableNow": True},
        )
        q.awaitTermination()
        stream_rates.append(rows / (time.perf_counter() - start))
        streamed = spark.read.parquet(str(out)).count()
        print(
            f"  round {r + 1}: replay_committed {replay_rates[-1]:,.0f} rows/s, "
            f"streaming {stream_rates[-1]:,.0f} rows/s ({found} / {streamed} detections)"
        )
    rep, st = statistics.median(replay_rates), statistics.median(stream_rates)
    ratios = [s / r for s, r in zip(stream_rates, replay_rates, strict=True)]
    print(
        f"median: replay_committed {rep:,.0f} rows/s, streaming {st:,.0f} rows/s; "
        f"streaming / replay {statistics.median(ratios):.2f} "
        f"({min(ratios):.2f} - {max(ratios):.2f})"
    )

    # later micro-batches on the running query, then the state as the log grows
    cp, out = work / "cp0", work / "out0"
    q = stream_global(
        spark, ref, url, checkpoint=cp, out=out, buckets=args.buckets, partitions=partitions
    )
    q.processAllAvailable()
    done = txns
    elapsed, added = 0.0, 0
    for _ in range(3):
        added += fill(eng, done, more)
        done += more
        start = time.perf_counter()
        q.processAllAvailable()
        elapsed += time.perf_counter() - start
    print(f"later micro-batches of {more} transactions: {added / elapsed:,.0f} rows/s")
    total = rows + added
    buckets, held, size = state_size(spark, cp)
    print(
        f"{'rows read':>12}{'buckets':>9}{'entries held':>14}{'state bytes':>13}"
        f"{'workers RSS MB':>16}{'rows/s':>10}"
    )
    print(f"{total:>12,}{buckets:>9}{held:>14,}{size:>13,}{workers_rss() / 2**20:>16.0f}{'':>10}")
    for _ in range(args.grow):
        total += fill(eng, done, txns)
        done += txns
        start = time.perf_counter()
        q.processAllAvailable()
        rate = (txns * 4) / (time.perf_counter() - start)
        buckets, held, size = state_size(spark, cp)
        print(
            f"{total:>12,}{buckets:>9}{held:>14,}{size:>13,}"
            f"{workers_rss() / 2**20:>16.0f}{rate:>10,.0f}"
        )
    q.stop()
    final = spark.read.parquet(str(out)).count()
    expected = len(replay_committed(detector, eng))
    print(f"detections: streamed {final}, replay_committed {expected}")
    spark.stop()


if __name__ == "__main__":
    # run as the module ``streaming`` (importable from bench/ by the executors)
    import importlib

    importlib.import_module("streaming").main()
