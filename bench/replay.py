"""Replay throughput: the local engine against Spark ``local[2]``, end to end.

Run: ``python bench/replay.py`` (``--sizes 1M,4M,10M`` by default; ``--quick``
for 200k, 3 rounds). For each size it generates (once, cached under ``--data``) a
log export of that many occurrences, then replays it in a fresh process per
engine and round (the engines interleaved, their order rotating each round; 5
rounds, ``--rounds``) and prints the median and range of events/s, peak memory,
and the ratios (taken within each round).

The log is a shop's: thousands of transactions of about 150 occurrences each
(``txn:begin`` .. ``txn:pre_commit``, ``txn:commit``; 5% end in ``txn:abort``),
orders, their payments (80%, later in the same transaction), page views (no rule
listens to them), refunds. The rules (:func:`rules`): "an order then its
payment" partitioned by ``order_id`` in the chronicle context (the keyed
sequence pattern), big orders (a condition on the amount), a deferred audit of
payments, a detached rule on refunds after payment.

Figures, each end to end in its own process:

hand
    the baseline, measured in the same run: a hand-written loop over the same
    export (pyarrow, ``orjson.loads``, a dict of deques per transaction) for the
    two rules that detect most (:func:`run_hand`); its detections are checked
    against sentinel's for those rules, and ``local/hand`` is printed.
hand-json
    an extra row: the same loop decoding with the standard library's ``json``
    (the softer baseline earlier versions of this benchmark used).
local
    ``replay(export, rules)``: from process start (imports included) to the
    detections written to Parquet.
spark
    the same through ``engine="spark"`` on ``local[2]``, SparkSession start-up
    included; detections written to Parquet by Spark. ``JVM start`` says how
    :func:`sentinel.replay.spark.session` started the JVM
    (:mod:`sentinel.replay.jvm`): ``archive`` (the usual case: classes mapped
    from the class archive), ``dump`` (the first run on a machine: no archive
    yet, this run writes it at exit, after its time is taken) or ``c1 only``.

Memory: peak resident set (``VmHWM`` from /proc) of the local process; for Spark,
of the Python driver, of the driver JVM, and of the largest Python worker.
This is a benchmark, not a test: nothing asserts on its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

START = time.perf_counter()
HERE = Path(__file__).resolve().parent
RULES = "replay:rules"  # this file, importable by Spark's workers through PYTHONPATH


def rules() -> Any:
    """The benchmark's rules (a zero-argument factory, as replay references allow)."""
    from sentinel import LocalEventDetector

    det = LocalEventDetector()
    for name in ("order", "payment", "view", "refund"):
        det.explicit(name)
    det.rule("paid", "(order ; payment) by order_id", action=_noop, context="chronicle")
    det.rule("big_order", "order", lambda o: o.params["amount"] > 900, action=_noop)
    det.rule("audit", "payment", action=_noop, coupling="deferred", context="cumulative")
    det.rule("refund", "(payment ; refund) by order_id", action=_noop, coupling="detached")
    return det


def _noop(occ: Any) -> None:
    pass


# -- the log ---------------------------------------------------------------------------
def generate(out: Path, events: int, *, seed: int = 42, buckets: int = 16) -> None:
    """An export of about ``events`` occurrences (see the module docs)."""
    import pyarrow as pa

    from sentinel.replay.export import ExportWriter
    from sentinel.replay.sources import EXPORT_SCHEMA

    rng = random.Random(seed)
    per_txn = 150
    n_txn = max(1, events // per_txn)
    scopes = sorted(uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(n_txn))
    writer = ExportWriter(out, buckets=buckets, row_group_rows=100_000, overwrite=True)
    t_occ = 0
    order_id = 0
    cols: dict[str, list[Any]] = {name: [] for name in EXPORT_SCHEMA.names}
    written = 0
    ts0 = 1_700_000_000.0

    def row(scope: str, event: str, params: str, outcome: str) -> None:
        nonlocal t_occ
        t_occ += 1
        ts = ts0 + t_occ * 0.001
        cols["scope"].append(scope)
        cols["t_occ"].append(t_occ)
        cols["event"].append(event)
        cols["ts"].append(ts)
        cols["detected_ts"].append(ts)
        cols["source_class"].append(None)
        cols["source_key"].append(None)
        cols["params"].append(params)
        cols["outcome"].append(outcome)
        cols["savepoint"].append(None)
        cols["id"].append(t_occ)
        cols["at"].append(int(ts * 1e6))

    for i, scope in enumerate(scopes):
        remaining = events - written
        size = min(remaining, per_txn) if i == n_txn - 1 else per_txn
        aborted = rng.random() < 0.05
        outcome = "aborted" if aborted else "committed"
        body = size - (3 if not aborted else 2)
        pending: list[tuple[int, int]] = []
        row(scope, "txn:begin", "{}", outcome)
        customer = rng.randrange(100_000)
        for _ in range(max(0, body)):
            r = rng.random()
            if r < 0.25:
                order_id += 1
                amount = rng.randrange(1, 1000)
                row(
                    scope,
                    "order",
                    f'{{"amount":{amount},"customer":{customer},"order_id":{order_id}}}',
                    outcome,
                )
                if rng.random() < 0.8:
                    pending.append((order_id, amount))
            elif r < 0.45 and pending:
                oid, amount = pending.pop(rng.randrange(len(pending)))
                row(
                    scope,
                    "payment",
                    f'{{"amount":{amount},"method":"card","order_id":{oid}}}',
                    outcome,
                )
            elif r < 0.47:
                row(scope, "refund", f'{{"order_id":{order_id}}}', outcome)
            else:
                row(
                    scope,
                    "view",
                    f'{{"customer":{customer},"page":"/p/{rng.randrange(500)}"}}',
                    outcome,
                )
        if aborted:
            row(scope, "txn:abort", "{}", outcome)
        else:
            row(scope, "txn:pre_commit", "{}", outcome)
            row(scope, "txn:commit", "{}", outcome)
        written += size
        if len(cols["scope"]) >= 200_000 or i == n_txn - 1:
            arrays = [pa.array(cols[f.name], f.type) for f in EXPORT_SCHEMA]
            writer.write(pa.RecordBatch.from_arrays(arrays, schema=EXPORT_SCHEMA))
            for v in cols.values():
                v.clear()
    writer.close(source=f"bench/replay.py generate {events} seed={seed}")


# -- measuring -------------------------------------------------------------------------
def _hwm(pid: int | str = "self") -> int:
    """Peak resident set of a process in bytes (0 where /proc is unavailable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children of any of their threads)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                found = [int(c) for c in children.read_text().split()]
            except OSError:
                continue
            out.extend(found)
            todo.extend(found)
    return out


def _parent(pid: int) -> int:
    try:  # /proc/<pid>/stat: "pid (comm) state ppid ...", comm may hold spaces
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def run_local(log: Path) -> dict[str, Any]:
    from sentinel.replay import replay

    with tempfile.TemporaryDirectory() as tmp:
        result = replay(log, RULES, out=Path(tmp) / "d")
    per_rule = result.per_rule or {}
    return {
        "events": result.events,
        "detections": result.detections,
        "seconds": time.perf_counter() - START,
        "rss": _hwm(),
        "baseline_rules": per_rule.get("paid", 0) + per_rule.get("big_order", 0),
    }


def run_hand_json(log: Path) -> dict[str, Any]:
    """:func:`run_hand` decoding with the standard ``json`` module."""
    import json as js

    return run_hand(log, js.loads)


def run_hand(log: Path, loads: Any = None) -> dict[str, Any]:
    """The baseline: a hand-written single-process loop over the same export for
    the two rules that detect most (each order then its payment, by ``order_id``,
    oldest unpaid order first, per transaction; each order, with whether it is
    over 900: replay reports a rule's detections with its condition's result). pyarrow reads
    the bucket files (sorted by scope, then ``t_occ``), ``json.loads`` decodes
    the parameters of the events it needs, a dict of deques per transaction
    holds the open orders. No deferred or detached rule, no detection output:
    it counts."""
    import json as js
    from collections import defaultdict, deque

    import orjson
    import pyarrow.parquet as pq

    manifest = js.loads((log / "_sentinel_export.json").read_text())
    events = detections = big = 0
    loads = loads or orjson.loads
    for name in manifest["files"]:
        table = pq.read_table(log / name, columns=["scope", "event", "params"])
        scope = None  # a bucket file holds whole scopes
        open_orders: defaultdict[Any, deque[Any]] = defaultdict(deque)
        for batch in table.to_batches(max_chunksize=65_536):
            scope_col, event_col, params_col = (c.to_pylist() for c in batch.columns)
            for sc, ev, params in zip(scope_col, event_col, params_col, strict=True):
                events += 1
                if sc != scope:
                    scope = sc
                    open_orders = defaultdict(deque)
                if ev == "order":
                    p = loads(params)
                    open_orders[p["order_id"]].append(p)
                    big += p["amount"] > 900  # a detection, with its condition's result
                    detections += 1
                elif ev == "payment":
                    p = loads(params)
                    waiting = open_orders.get(p["order_id"])
                    if waiting:
                        waiting.popleft()
                        detections += 1
    return {
        "events": events,
        "detections": detections,
        "big": big,
        "seconds": time.perf_counter() - START,
        "rss": _hwm(),
    }


def run_spark(log: Path) -> dict[str, Any]:
    from sentinel.replay import replay
    from sentinel.replay.jvm import plan_start
    from sentinel.replay.spark import session

    planned = plan_start()  # what session() will do: the JVM's class archive
    start = "c1 only" if planned.archive is None else "archive" if planned.dump is None else "dump"
    spark = session(
        "local[2]",
        **{"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        result = replay(log, RULES, engine="spark", spark=spark, out=Path(tmp) / "d")
        seconds = time.perf_counter() - START
        jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        # The JVM starts pyspark.daemon, which forks the Python workers (same
        # command line): the workers are the daemons' descendants.
        python = {p for p in _descendants(jvm) if "pyspark" in _cmdline(p)}
        workers = [p for p in python if _parent(p) in python]
        figures = {
            "events": result.events,
            "detections": result.detections,
            "seconds": seconds,
            "rss": _hwm(),
            "jvm": _hwm(jvm),
            "worker": max((_hwm(p) for p in workers), default=0),
            "start": start,
        }
    spark.stop()
    return figures


def measure(engine: str, log: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
    }
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), "--worker", engine, "--log", str(log)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        sys.exit(f"{engine} replay failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * scale)


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB" if n else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M,4M,10M")
    parser.add_argument("--quick", action="store_true", help="size 200K, 3 rounds")
    parser.add_argument("--rounds", type=int, help="rounds per size (5; 3 with --quick)")
    parser.add_argument("--engines", default="hand,local,spark,hand-json")
    parser.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "sentinel-bench"))
    parser.add_argument(
        "--worker", choices=["local", "spark", "hand", "hand-json"], help=argparse.SUPPRESS
    )
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run = {"local": run_local, "spark": run_spark, "hand": run_hand, "hand-json": run_hand_json}
        print(json.dumps(run[args.worker](Path(args.log))))
        return
    sizes = [_size(s) for s in ("200K" if args.quick else args.sizes).split(",")]
    rounds = args.rounds or (3 if args.quick else 5)
    engines = args.engines.split(",")
    from _common import machine, median_range, ratios

    print(f"{machine()}; rules: {RULES}")
    print(f"{rounds} rounds, engines interleaved: median (range)")
    header = (
        f"{'events':>10}  {'engine':<9} {'seconds':>20} {'events/s':>28} "
        f"{'detections':>11}  memory (peak RSS, last round)"
    )
    print(header)
    print("-" * len(header))
    for n in sizes:
        log = Path(args.data) / f"log-{n}"
        if not (log / "_sentinel_export.json").exists():
            shutil.rmtree(log, ignore_errors=True)
            t = time.perf_counter()
            generate(log, n)
            print(f"{n:>10,}  (generated in {time.perf_counter() - t:.0f} s: {log})")
        rates: dict[str, list[float]] = {e: [] for e in engines}
        seconds: dict[str, list[float]] = {e: [] for e in engines}
        found: dict[str, dict[str, Any]] = {}
        for r in range(rounds):
            k = r % len(engines)
            for engine in engines[k:] + engines[:k]:
                f = found[engine] = measure(engine, log)
                rates[engine].append(f["events"] / f["seconds"])
                seconds[engine].append(f["seconds"])
        for engine in engines:
            f = found[engine]
            mem = (
                f"{_mb(f['rss'])}"
                if engine != "spark"
                else f"driver {_mb(f['rss'])} + JVM {_mb(f['jvm'])}; worker {_mb(f['worker'])}"
                f"; JVM start: {f['start']}"
            )
            print(
                f"{f['events']:>10,}  {engine:<9} {median_range(seconds[engine], '.1f'):>20} "
                f"{median_range(rates[engine]):>28} {f['detections']:>11,}  {mem}"
            )
        if "local" in rates and "hand" in rates:
            lh = ratios(rates["local"], rates["hand"])
            print(f"{'':>10}  local/hand:       {median_range(lh, '.2f')}")
            if found["local"]["baseline_rules"] != found["hand"]["detections"]:
                print(f"{'':>10}  WARNING: the baseline's detections differ from paid + big_order")
        if "local" in rates and "hand-json" in rates:
            soft = ratios(rates["local"], rates["hand-json"])
            print(f"{'':>10}  local/hand-json:  {median_range(soft, '.2f')}  (the softer baseline)")
        if "local" in rates and "spark" in rates:
            sl = ratios(rates["spark"], rates["local"])
            print(f"{'':>10}  spark/local:      {median_range(sl, '.2f')}")


if __name__ == "__main__":
    main()
