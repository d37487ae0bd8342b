"""What one transaction's event-log write costs, step by step, and what the
``sqlite3`` module alone needs to insert the same rows into tables of other shapes.

Run: ``python bench/logwrite.py`` (wall clock: median and range of 5 rounds
over the captured transactions) or ``python bench/logwrite.py --instructions``
(CPU instructions under ``valgrind --tool=callgrind``, counted only while each
step runs; minutes). Figures are per transaction of ``bench/orm.py``'s workload:
its transactions are run once with sentinel attached (log only) and the writer's
input captured, then replayed through each step.

Steps: ``event_values`` (checks, policy), the driver rows on SQLite and on
PostgreSQL through psycopg (no server needed), the whole ``write_groups`` on
SQLite (``synchronous=OFF``), and the floors: ``BEGIN``, one ``executemany``,
``COMMIT`` with ``sqlite3`` alone into (a) today's table, without the
``commit_seq`` index, or with it only where not NULL; (b) with ``at`` /
``detected_at`` as generated columns, or without them (``ts`` indexed
instead); (c) with the unique ``(scope, t_occ)`` only; no index at all; and
(d) one row per transaction holding its occurrences as one JSON array.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

COLUMNS = """id INTEGER PRIMARY KEY, scope VARCHAR(128) NOT NULL, t_occ BIGINT NOT NULL,
 event VARCHAR(255) NOT NULL, at DATETIME NOT NULL, detected_at DATETIME NOT NULL,
 ts FLOAT NOT NULL, detected_ts FLOAT NOT NULL, source_class VARCHAR(255), source_key TEXT,
 params JSON NOT NULL, outcome VARCHAR(16), expired_at DATETIME, savepoint TEXT,
 commit_seq BIGINT"""
NO_AT = COLUMNS.replace("at DATETIME NOT NULL, detected_at DATETIME NOT NULL,", "")
INDEX = {
    "uq": "CREATE UNIQUE INDEX uq ON e (scope, t_occ)",
    "t_occ": "CREATE INDEX ix_t_occ ON e (t_occ)",
    "at": "CREATE INDEX ix_at ON e (at)",
    "ts": "CREATE INDEX ix_ts ON e (ts)",
    "seq": "CREATE INDEX ix_seq ON e (commit_seq)",
    "seq where": "CREATE INDEX ix_seq ON e (commit_seq) WHERE commit_seq IS NOT NULL",
}
GENERATED = COLUMNS.replace(
    "at DATETIME NOT NULL, detected_at DATETIME NOT NULL,",
    "at TEXT GENERATED ALWAYS AS (strftime('%Y-%m-%d %H:%M:%f', ts, 'unixepoch')) VIRTUAL, "
    "detected_at TEXT GENERATED ALWAYS AS "
    "(strftime('%Y-%m-%d %H:%M:%f', detected_ts, 'unixepoch')) VIRTUAL,",
)
LEAN = (
    "scope,t_occ,event,ts,detected_ts,source_class,source_key,params,outcome,savepoint,commit_seq"
)
ALL = LEAN.replace("event,", "event,at,detected_at,")
PER_TXN = (
    "id INTEGER PRIMARY KEY, scope VARCHAR(128) NOT NULL, t_occ BIGINT NOT NULL, "
    "last_t_occ BIGINT NOT NULL, at DATETIME NOT NULL, last_at DATETIME NOT NULL, ts FLOAT, "
    "last_ts FLOAT, outcome VARCHAR(16), occurrences JSON NOT NULL, commit_seq BIGINT"
)
PER_TXN_COLS = "scope,t_occ,last_t_occ,at,last_at,ts,last_ts,outcome,occurrences,commit_seq"


def scratch() -> str:
    """A temporary directory, removed when the process ends."""
    path = tempfile.mkdtemp(prefix="sentinel-bench-logwrite-")
    atexit.register(shutil.rmtree, path, True)
    return path


def capture(n: int) -> list[Any]:
    """The writer's input for ``n`` transactions of bench/orm.py's workload."""
    import orm

    import sentinel
    from sentinel.log import writer as w

    orm.TRANSACTIONS = n
    tmp = scratch()
    _, Session = orm.setup(f"sqlite:///{tmp}/orm.db", "off")
    attachment = sentinel.attach(Session, detector=orm.det, workers=0)
    seen: list[Any] = []
    original = w.LogWriter.write_groups

    def spy(self: Any, conn: Any, groups: Any, **kw: Any) -> int:
        groups = [(list(g[0]), *g[1:]) for g in groups]
        seen.append(groups)
        return original(self, conn, groups, **kw)

    w.LogWriter.write_groups = spy  # type: ignore[method-assign]
    try:
        orm.workload(Session, 0)
    finally:
        w.LogWriter.write_groups = original  # type: ignore[method-assign]
        attachment.detach()
    # the transactions' own writes (the late txn:commit batches are smaller)
    return [g for g in seen if sum(len(x[0]) for x in g) == orm.CALLS + orm.ROWS + 2]


#: How many times a step may run (a warm-up, the rounds, one counted run).
RUNS = 16


def renamed(txns: list[Any], k: int) -> list[Any]:
    """The captured write groups with the scopes renamed for run ``k``."""
    from sentinel.occurrence import Occurrence

    new = tuple.__new__
    return [
        [(
            [new(Occurrence, (*o[:6], f"{o[6]}/{k}", o[7])) for o in g[0]], *g[1:]
        ) for g in groups]
        for groups in txns
    ]  # fmt: skip


def steps(txns: list[Any]) -> dict[str, Callable[[], Callable[[], None]]]:
    """Each step: a function that prepares and returns the timed function."""
    import sqlalchemy as sa

    from sentinel.log import LogWriter, log_tables, migrate
    from sentinel.log.writer import _EventsInsert

    tmp = scratch()
    writer = LogWriter(check_schema=False)  # no timer in the counts
    events = log_tables().events
    sqlite_plan = _EventsInsert(events, sa.create_engine("sqlite://").dialect)

    def values(groups: Any) -> list[Any]:
        out: list[Any] = []
        for g in groups:
            out.extend(writer.event_values(*g))
        return out

    vals = [values(g) for g in txns]
    rows = [sqlite_plan.rows(v) for v in vals]
    out: dict[str, Callable[[], Callable[[], None]]] = {}

    out["event_values"] = lambda: lambda: [values(g) for g in txns] and None
    out["rows, SQLite"] = lambda: lambda: [sqlite_plan.rows(v) for v in vals] and None
    try:
        pg_plan = _EventsInsert(events, sa.create_engine("postgresql+psycopg://").dialect)
        out["rows, PostgreSQL (psycopg)"] = lambda: lambda: [pg_plan.rows(v) for v in vals] and None
    except ImportError:  # pragma: no cover - psycopg not installed
        pass

    def write_groups() -> Callable[[], None]:
        engine = sa.create_engine(f"sqlite:///{tmp}/log.db")
        sa.event.listen(engine, "connect", lambda c, _: c.execute("PRAGMA synchronous=OFF"))
        migrate.upgrade(engine)
        conn = engine.connect()
        runs = iter([renamed(txns, k) for k in range(RUNS)])

        def go() -> None:
            for g in next(runs):
                with conn.begin():
                    writer.write_groups(conn, g)

        return go

    out["write_groups, SQLite"] = write_groups

    def floor(ddl: list[str], batches: list[Any], cols: str) -> Callable[[], Callable[[], None]]:
        def make() -> Callable[[], None]:
            fd, path = tempfile.mkstemp(dir=tmp, suffix=".db")
            os.close(fd)
            c = sqlite3.connect(path, isolation_level=None)
            c.execute("PRAGMA synchronous=OFF")
            for statement in ddl:
                c.execute(statement)
            sql = f"INSERT INTO e ({cols}) VALUES ({', '.join('?' * (cols.count(',') + 1))})"
            # each run in scopes of its own: (scope, t_occ) is unique
            runs = iter(
                [[[(f"{r[0]}/{k}", *r[1:]) for r in b] for b in batches] for k in range(RUNS)]
            )

            def go() -> None:
                for batch in next(runs):
                    c.execute("BEGIN")
                    c.executemany(sql, batch)
                    c.execute("COMMIT")

            return go

        return make

    table = f"CREATE TABLE e ({COLUMNS})"
    lean = [[r[:3] + r[5:] for r in batch] for batch in rows]
    out["floor (a) today's table"] = floor(
        [table, INDEX["uq"], INDEX["t_occ"], INDEX["at"], INDEX["seq"]], rows, ALL
    )
    out["floor (a) without the commit_seq index"] = floor(
        [table, INDEX["uq"], INDEX["t_occ"], INDEX["at"]], rows, ALL
    )
    out["floor (a) commit_seq indexed where not NULL"] = floor(
        [table, INDEX["uq"], INDEX["t_occ"], INDEX["at"], INDEX["seq where"]], rows, ALL
    )
    out["floor (b) at/detected_at generated (virtual)"] = floor(
        [f"CREATE TABLE e ({GENERATED})", INDEX["uq"], INDEX["t_occ"], INDEX["at"], INDEX["seq"]],
        lean,
        LEAN,
    )
    out["floor (b) no at/detected_at, ts indexed"] = floor(
        [f"CREATE TABLE e ({NO_AT})", INDEX["uq"], INDEX["t_occ"], INDEX["ts"], INDEX["seq"]],
        lean,
        LEAN,
    )
    out["floor (c) unique (scope, t_occ) only"] = floor([table, INDEX["uq"]], rows, ALL)
    out["floor: no index"] = floor([table], rows, ALL)
    per_txn = [[one_row(batch)] for batch in rows]
    out["floor (d) one row per transaction"] = floor(
        [f"CREATE TABLE e ({PER_TXN})", INDEX["uq"], INDEX["at"], INDEX["seq"]],
        per_txn,
        PER_TXN_COLS,
    )
    return out


def one_row(batch: list[Any]) -> tuple[Any, ...]:
    """A transaction's rows as one row: its occurrences in one JSON array of
    ``[t_occ, event, ts, detected_ts or null, source_class, source_key, params]``
    (the parameters' text spliced in as it is)."""
    dumps = json.dumps
    parts = [
        f"[{r[1]},{dumps(r[2])},{r[5]!r},{'null' if r[6] == r[5] else repr(r[6])},"
        f"{dumps(r[7])},{dumps(r[8])},{r[9]}]"
        for r in batch
    ]
    first, last = batch[0], batch[-1]
    return (
        first[0], first[1], last[1], first[3], last[4], first[5], last[6], first[10],
        "[" + ",".join(parts) + "]", None,
    )  # fmt: skip


def wall(n: int, rounds: int) -> None:
    txns = capture(n)
    print(f"per transaction ({len(txns)} transactions of bench/orm.py, 62 rows each): "
          f"median (range) of {rounds} rounds, ms")  # fmt: skip
    for name, make in steps(txns).items():
        go = make()
        go()  # warm (and fills the floors' tables once)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            go()
            times.append((time.perf_counter() - start) / len(txns) * 1e3)
        med = statistics.median(times)
        print(f"  {name:<46} {med:7.3f} ({min(times):.3f} - {max(times):.3f})")


def instructions(n: int) -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import logwrite as b\n"
        f"txns = b.capture({n}); print(len(txns), flush=True)\n"
        "for make in b.steps(txns).values():\n"
        "    go = make(); go(); sys.call_tracing(go, ())\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--toggle-collect=sys_call_tracing",
             "--dump-after=sys_call_tracing", f"--callgrind-out-file={out}",
             sys.executable, "-c", code],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
            check=False,
        )  # fmt: skip
        if proc.returncode:
            sys.exit(f"callgrind failed\n{proc.stderr[-3000:]}")
        count = int(proc.stdout.split()[0])
        names = list(steps([]).keys())
        print(f"CPU instructions per transaction ({count} transactions of bench/orm.py)")
        for i, name in enumerate(names, 1):
            m = re.search(r"^totals: (\d+)", Path(f"{out}.{i}").read_text(), re.M)
            total = int(m.group(1)) if m else 0
            print(f"  {name:<46} {total / count:>12,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instructions", action="store_true", help="count with callgrind")
    parser.add_argument("--quick", action="store_true", help="10 transactions, 3 rounds")
    args = parser.parse_args()
    n = 10 if args.quick else 30
    if args.instructions:
        instructions(n)
    else:
        wall(n, 3 if args.quick else 5)


if __name__ == "__main__":
    main()
