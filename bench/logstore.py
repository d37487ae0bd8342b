"""The event log on disk and read back: bytes per occurrence, write and read rates.

Run: ``python bench/logstore.py`` (1M occurrences on each backend; ``--quick``
for 200k, ``--dbs sqlite`` for one backend, ``--no-spark`` to skip the Spark
replay). The same script measures any version of sentinel: put the code to
measure first on ``PYTHONPATH`` (``PYTHONPATH=/tmp/before python
bench/logstore.py``). It finds the log's layout itself: the per-occurrence
``events`` table of schema 0005 and before, or the per-transaction
``event_batches`` table (with ``expired``) of 0006 (issue 31).

The log: ``-n`` occurrences written through the real
:class:`~sentinel.log.LogWriter` into a fresh database (a SQLite file, a new
database on the PostgreSQL server at ``--pg`` and on the MariaDB server at
``--mysql``), as the ORM layer writes ``bench/orm.py``'s workload: transactions
of 62 occurrences (``txn:begin``, 50 method events ``Account.deposit:end`` /
``Account.withdraw:end`` with their ``amount`` and ``result``, 10
``Account:update`` row events with the row's ``ObjectRef`` and its old and new
values, ``txn:pre_commit``), each written in its own database transaction; the
transactions' ``txn:commit`` occurrences written afterwards, 16 to a write; one
transaction in 20 aborted (its occurrences and ``txn:abort`` written in a
transaction of their own, marked aborted), one in 33 with a rolled-back
savepoint (3 of its method events in a group marked aborted, savepoint
``sp1``). ``--commit-order`` gives the transactions' rows commit numbers.
Commits do not wait for the disk on SQLite (``synchronous=OFF``) and
PostgreSQL (``synchronous_commit=off``), so that the write rate is the log's
format's cost, not the disk's (``--sync`` to wait; MariaDB keeps the server's
settings).

Figures (occurrences per second, each the median and range of ``--rounds``
rounds; the reads interleave, their order rotating each round):

write
    the whole log written once (one figure, no range).
bytes / 1M
    the log's size on disk per million occurrences: the SQLite file
    (``page_count * page_size``), the log's event tables on PostgreSQL
    (``pg_total_relation_size``, after ``VACUUM ANALYZE``) and on MariaDB
    (``data_length + index_length`` of ``information_schema.TABLES``, after
    ``ANALYZE TABLE``).
reader
    :meth:`LogReader.occurrences` over the whole log.
export
    ``sentinel log export`` (the CLI command, in this process: the count and
    the export to Parquet) into a new directory.
replay local
    ``replay(url, rules)`` from the database (:func:`rules`: a keyed sequence
    ``(Account.deposit:end ; Account.withdraw:end) by @source`` in the
    chronicle context and a condition on ``Account.withdraw:end``).
replay spark
    the same with ``engine="spark"`` on ``local[2]``, SQLite only; the
    SparkSession is started before the clock starts.

``--write-only`` skips the reads; ``--cpu`` times the reads by this process's
CPU time instead of the wall clock (steadier on a shared machine, and all of a
SQLite read's work; not the servers' work, and no Spark replay).

This is a benchmark, not a test: nothing asserts on its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine, median_range  # noqa: E402

RULES = "logstore:rules"  # this file, importable by Spark's workers through PYTHONPATH
CALLS = 50  # method events per transaction
ROWS = 10  # row events per transaction
COMMITS_PER_WRITE = 16
ABORT_EVERY = 20
SAVEPOINT_EVERY = 33
START_TS = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def rules() -> Any:
    """The replay's rules (a zero-argument factory, as replay references allow)."""
    from sentinel import LocalEventDetector

    det = LocalEventDetector()
    for name in ("Account.deposit:end", "Account.withdraw:end", "Account:update"):
        det.explicit(name)
    det.rule(
        "paid_then_withdrawn",
        "(Account.deposit:end ; Account.withdraw:end) by @source",
        action=_noop,
        context="chronicle",
    )
    det.rule("overdraft", "Account.withdraw:end", _overdrawn, action=_noop)
    return det


def _noop(occ: Any) -> None:
    pass


def _overdrawn(occ: Any) -> bool:
    return bool(occ.params["result"] < -5.0)


# -- the log ---------------------------------------------------------------------------
class Workload:
    """Makes the writer's input, transaction by transaction, deterministically."""

    def __init__(self) -> None:
        from sentinel.occurrence import ObjectRef

        self.ref = [ObjectRef("Account", (k,)) for k in range(1, 1001)]
        self.balance = [0.0] * 1000
        self.ops = [0] * 1000
        self.t_occ = 0
        self.ts = START_TS
        self.txn = 0

    def _occ(self, event: str, source: Any, params: dict[str, Any], scope: str) -> Any:
        from sentinel.occurrence import Occurrence

        self.t_occ += 1
        self.ts += 0.000_15
        return Occurrence(event, self.t_occ, self.ts, None, source, params, scope)

    def transaction(self) -> tuple[str, list[Any], list[Any], bool]:
        """A transaction's scope, its own occurrences, those of a rolled-back
        savepoint, and whether it aborts (its last occurrence then ``txn:abort``)."""
        i = self.txn
        self.txn += 1
        self.ts += 0.002
        scope = f"{int(self.ts * 1e9):016x}{(i * 2_654_435_761) & 0xFFFF_FFFF_FFFF_FFFF:016x}"
        occ = self._occ
        own = [occ("txn:begin", None, {}, scope)]
        saved: list[Any] = []
        first = (i * ROWS) % 1000
        before = {}
        for k in range(CALLS):
            a = first + k % ROWS
            before.setdefault(a, (self.balance[a], self.ops[a]))
            withdraw = k % 5 == 4
            amount = 1.0 if withdraw else float(2 + i % 7)
            in_savepoint = i % SAVEPOINT_EVERY == 7 and 20 <= k < 23
            result = self.balance[a] + (-amount if withdraw else amount)
            o = occ(
                "Account.withdraw:end" if withdraw else "Account.deposit:end",
                self.ref[a],
                {"amount": amount, "result": result},
                scope,
            )
            if in_savepoint:
                saved.append(o)
            else:
                own.append(o)
                self.balance[a] = result
                self.ops[a] += 1
        for a, (old_balance, old_ops) in before.items():
            own.append(
                occ(
                    "Account:update",
                    self.ref[a],
                    {
                        "old": {"balance": old_balance, "ops": old_ops},
                        "new": {"balance": self.balance[a], "ops": self.ops[a]},
                    },
                    scope,
                )
            )
        aborted = i % ABORT_EVERY == 11
        own.append(occ("txn:abort" if aborted else "txn:pre_commit", None, {}, scope))
        return scope, own, saved, aborted

    def commit(self, scope: str) -> Any:
        return self._occ("txn:commit", None, {}, scope)


def _t_occ(occ: Any) -> int:
    return int(occ[1])


def write_log(engine: sa.Engine, n: int, commit_order: bool) -> tuple[int, float]:
    """Write a log of at least ``n`` occurrences (to the end of a transaction);
    return how many and the seconds."""
    from sentinel.log import LogWriter

    writer = LogWriter(commit_order=commit_order)
    work = Workload()
    written = 0
    pending: list[Any] = []
    start = time.perf_counter()
    with engine.connect() as conn:
        while written < n:
            scope, own, saved, aborted = work.transaction()
            if aborted:
                with conn.begin():
                    written += writer.write(
                        conn, sorted(own + saved, key=_t_occ), outcome="aborted"
                    )
                continue
            groups: list[Any] = [(own, "committed")]
            if saved:
                groups.append((saved, "aborted", "sp1"))
            with conn.begin():
                written += writer.write_groups(conn, groups)
            pending.append(work.commit(scope))
            if len(pending) == COMMITS_PER_WRITE or written + len(pending) >= n:
                with conn.begin():
                    written += writer.write_groups(conn, [(pending, "committed")], sequence=False)
                pending = []
    return written, time.perf_counter() - start


def event_tables() -> list[sa.Table]:
    """The log's event tables in the code under test: ``events`` (schema 0005
    and before) or ``event_batches`` and ``expired`` (0006)."""
    from sentinel.log import log_tables

    t = log_tables()
    return [getattr(t, name) for name in ("events", "batches", "expired") if hasattr(t, name)]


def bytes_on_disk(engine: sa.Engine) -> dict[str, int]:
    """The log's size on disk, in bytes: in all (``"total"``) and per table
    (PostgreSQL, MariaDB)."""
    name = engine.dialect.name
    if name == "sqlite":
        with engine.connect() as conn:
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
            size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        return {"total": int(pages) * int(size)}
    tables = [t.name for t in event_tables()]
    out: dict[str, int] = {}
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in tables:
            if name == "postgresql":
                conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
                out[table] = conn.exec_driver_sql(
                    f"SELECT pg_total_relation_size('{table}')"
                ).scalar_one()
            else:
                conn.exec_driver_sql(f"ANALYZE TABLE {table}").all()
                out[table] = conn.execute(
                    sa.text(
                        "SELECT data_length + index_length FROM information_schema.TABLES "
                        "WHERE table_schema = DATABASE() AND table_name = :t"
                    ),
                    {"t": table},
                ).scalar_one()
    out["total"] = sum(int(v) for v in out.values())
    return out


# -- the reads ---------------------------------------------------------------------------
#: Detections of the last replay of each engine (a check that both detect the same).
DETECTIONS: dict[str, int] = {}
#: What the reads are timed by: wall time, or this process's CPU time (``--cpu``).
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def _clock() -> float:
    return CLOCK[0]()


def read_all(url: str) -> tuple[int, float]:
    from sentinel.log import LogReader

    start = _clock()
    n = 0
    with LogReader(url) as log:
        for _ in log.occurrences():
            n += 1
    return n, _clock() - start


def export(url: str, tmp: str) -> tuple[int, float]:
    from sentinel.cli import main

    out = Path(tempfile.mkdtemp(dir=tmp, prefix="export-"))
    quiet = io.StringIO()
    start = _clock()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        main(["log", "export", "--url", url, "--out", str(out)], standalone_mode=False)
    seconds = _clock() - start
    manifest = json.loads((out / "_sentinel_export.json").read_text())
    shutil.rmtree(out)
    return int(manifest["rows"]), seconds


def replay_local(url: str) -> tuple[int, float]:
    from sentinel.replay import replay

    start = _clock()
    result = replay(url, rules())
    seconds = _clock() - start
    DETECTIONS["local"] = int(result.detections)
    return int(result.events), seconds


def replay_spark(url: str, tmp: str) -> tuple[int, float]:
    from sentinel.replay import replay
    from sentinel.replay.spark import session

    spark = session(
        "local[2]", **{"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    out = Path(tmp) / f"spark-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    result = replay(url, RULES, engine="spark", spark=spark, out=out)
    seconds = time.perf_counter() - start
    DETECTIONS["spark"] = int(result.detections)
    shutil.rmtree(out, ignore_errors=True)
    return int(result.events), seconds


# -- the databases ---------------------------------------------------------------------
def server_database(server_url: str) -> tuple[str, Callable[[], None]]:
    """A fresh database on the server (its URL, and a function dropping it)."""
    server = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"sentinel_bench_logstore_{uuid.uuid4().hex[:8]}"
    with server.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")

    def drop() -> None:
        with server.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name}")
        server.dispose()

    return sa.make_url(server_url).set(database=name).render_as_string(False), drop


def _no_sync(engine: sa.Engine) -> None:
    """Commits that do not wait for the disk (SQLite ``synchronous=OFF``,
    PostgreSQL ``synchronous_commit=off``): the writes then cost what the log's
    format costs, not the machine's fsync."""
    setting = {
        "sqlite": "PRAGMA synchronous=OFF",
        "postgresql": "SET synchronous_commit TO off",
    }.get(engine.dialect.name)
    if setting is not None:
        sa.event.listen(engine, "connect", lambda conn, _: _run(conn, setting))


def _run(dbapi_conn: Any, sql: str) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(sql)
    cur.close()


def measure(db: str, url: str, args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    from sentinel.log import migrate

    engine = sa.create_engine(url)
    if not args.sync:
        _no_sync(engine)  # before the first connection, which the pool keeps
    migrate.upgrade(engine)
    written, seconds = write_log(engine, args.n, args.commit_order)
    size = bytes_on_disk(engine)
    engine.dispose()
    figures: dict[str, Any] = {
        "db": db,
        "occurrences": written,
        "write": written / seconds,
        "bytes": size,
        "bytes_per_1m": size["total"] / written * 1e6,
    }
    reads: dict[str, Callable[[], tuple[int, float]]] = {
        "reader": lambda: read_all(url),
        "export": lambda: export(url, tmp),
        "replay local": lambda: replay_local(url),
    }
    if args.write_only:
        reads = {}
    if db == "sqlite" and args.spark and not (args.write_only or args.cpu):
        reads["replay spark"] = lambda: replay_spark(url, tmp)
    names = list(reads)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds if names else 0):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            gc.collect()
            items, secs = reads[name]()
            if items != written:
                sys.exit(f"{name} read {items:,} occurrences of the {written:,} written")
            rates[name].append(items / secs)
    figures["reads"] = rates
    figures["detections"] = dict(DETECTIONS)
    return figures


def report(f: dict[str, Any]) -> None:
    tables = ", ".join(f"{k} {v / 1e6:,.1f} MB" for k, v in f["bytes"].items() if k != "total")
    print(f"{f['db']}: {f['occurrences']:,} occurrences")
    print(f"  {'write':<14} {f['write']:>12,.0f} occurrences/s")
    print(
        f"  {'bytes / 1M':<14} {f['bytes_per_1m'] / 1e6:>12,.1f} MB"
        + (f"  ({tables})" if tables else "")
    )
    for name, values in f["reads"].items():
        print(f"  {name:<14} {median_range(values):>12} occurrences/s")
    print(f"  detections     {f['detections']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=None, help="occurrences (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="200,000 occurrences, 1 round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the reads (3)")
    parser.add_argument("--dbs", default="sqlite,postgresql,mysql")
    parser.add_argument("--no-spark", dest="spark", action="store_false")
    parser.add_argument(
        "--sync", action="store_true", help="commits wait for the disk (SQLite, PostgreSQL)"
    )
    parser.add_argument("--write-only", action="store_true", help="no reads")
    parser.add_argument(
        "--cpu", action="store_true", help="time the reads by this process's CPU time (no Spark)"
    )
    parser.add_argument("--commit-order", action="store_true", help="commit numbers")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--mysql", default="mysql+pymysql://root@127.0.0.1:3306/test")
    parser.add_argument("--json", help="append the figures to this file, one JSON line")
    args = parser.parse_args()
    args.n = args.n or (200_000 if args.quick else 1_000_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.cpu:
        CLOCK[0] = time.process_time
    import sentinel

    # Spark's Python workers import the rules from this directory and sentinel
    # from where this process did; they put their working directory first on
    # their path, so that must not hold another sentinel (a checkout's root)
    code = str(Path(sentinel.__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), code, os.environ.get("PYTHONPATH")) if p
    )
    layout = "+".join(t.name for t in event_tables())
    print(f"sentinel from {Path(sentinel.__file__).parent} (log tables: {layout})")
    print(machine())
    with tempfile.TemporaryDirectory(prefix="sentinel-bench-logstore-") as tmp:
        os.chdir(tmp)
        for db in args.dbs.split(","):
            if db == "sqlite":
                url, drop = f"sqlite:///{tmp}/log.db", (lambda: None)
            else:
                url, drop = server_database(args.pg if db == "postgresql" else args.mysql)
            try:
                figures = measure(db, url, args, tmp)
            finally:
                drop()
                if db == "sqlite":
                    Path(f"{tmp}/log.db").unlink(missing_ok=True)
            figures.update(layout=layout, machine=machine(), load=os.getloadavg())
            report(figures)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
