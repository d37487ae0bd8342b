"""What a BiCEPL processor costs on a database: announcements per second, the
latency of a tick with 10,000 live keyed events, and how a tick's cost grows with
the number of live events.

Run: ``python bench/bicepl.py`` (``--quick`` for a short run; ``--pg URL`` for
another PostgreSQL server, ``--pg skip`` for SQLite only). SQLite runs on a file
with ``synchronous=OFF`` (the CPU side, as an application tuning for throughput
would), PostgreSQL on the server at ``--pg`` in a fresh database.

The program: a mutable keyed class ``Reading`` (10,000 sensors) with a CHANGE
statement and an ONTIME statement, and a complex class ``Alarm`` over it (a
filter; re-derived at every tick at which readings change).

- **load**: 10,000 announcements written into the inbox (``announce_many``) and
  read by one tick; announcements per second, beside the baseline of the same
  rows written with one ``executemany`` into a plain table (the database's own
  write rate), the two interleaved over 5 rounds (3 with ``--quick``): median
  and range, the ratio taken within each round.
- **tick**: with the 10,000 events live, ticks that each read 100 revisions;
  median seconds per tick.
- **growth**: the same tick with 1,000 to 20,000 live events.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median_range, ratios

from sentinel.bicep import Processor
from sentinel.log import migrate
from sentinel.rules import LocalEventDetector

PROGRAM = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS Reading (sensor INTEGER, reading INTEGER)
  ID (sensor) LIFESPAN(30d)
  ON CHANGE AND NEW.reading > OLD.reading + 50 DO jump(NEW.sensor, NEW.reading)
  ON ONTIME AND NEW.reading > 98 DO high(NEW.sensor);
CREATE COMPLEX EVENT CLASS Alarm (sensor INTEGER, reading INTEGER) ID (sensor) LIFESPAN(30d)
  AS SELECT r.sensor, r.reading FROM Reading r WHERE r.reading > 95 OCCURRING AT r.occTime
  ON ANNOUNCEMENT DO alarm(NEW.sensor);
"""
CHRONON = 60
T0 = 1_400_000_400


def processor(engine: sa.Engine, name: str) -> Processor:
    proc = Processor(
        PROGRAM,
        engine,
        name=name,
        chronon=CHRONON,
        detector=LocalEventDetector(),
        require_actions=False,
        signal_events=False,
    )
    proc.install()
    return proc


def rows(n: int, t: int, rng: random.Random, sensors: int) -> list[dict[str, Any]]:
    return [
        {
            "sensor": rng.randrange(sensors) if sensors else i,
            "reading": rng.randrange(100),
            "occ": t - rng.randrange(2 * CHRONON),
            "det": t - 1,
        }
        for i in range(n)
    ]


def load(engine: sa.Engine, n: int) -> tuple[float, float]:
    """Announcements per second through the processor, and the baseline."""
    rng = random.Random(1)
    proc = processor(engine, f"load{uuid.uuid4().hex[:6]}")
    batch = [dict(r, sensor=i) for i, r in enumerate(rows(n, T0, rng, 0))]
    started = time.perf_counter()
    proc.announce_many("Reading", batch)
    proc.run_until(T0)
    through = n / (time.perf_counter() - started)
    table = sa.Table(
        f"plain_{uuid.uuid4().hex[:6]}",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("sensor", sa.BigInteger),
        sa.Column("reading", sa.BigInteger),
        sa.Column("occtime", sa.BigInteger),
        sa.Column("dettime", sa.BigInteger),
    )
    table.create(engine)
    plain = [
        {"sensor": r["sensor"], "reading": r["reading"], "occtime": r["occ"], "dettime": r["det"]}
        for r in batch
    ]
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(table.insert(), plain)
    baseline = n / (time.perf_counter() - started)
    return through, baseline


def tick_latency(engine: sa.Engine, live: int, ticks: int, per_tick: int = 100) -> float:
    """Median seconds of a tick reading ``per_tick`` revisions with ``live`` events."""
    rng = random.Random(2)
    proc = processor(engine, f"tick{uuid.uuid4().hex[:6]}")
    proc.announce_many("Reading", [dict(r, sensor=i) for i, r in enumerate(rows(live, T0, rng, 0))])
    proc.run_until(T0)
    times = []
    t = T0
    for _ in range(ticks):
        t += CHRONON
        proc.announce_many("Reading", rows(per_tick, t, rng, live))
        started = time.perf_counter()
        proc.run_until(t)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(label: str, engine: sa.Engine, quick: bool) -> None:
    migrate.upgrade(engine)
    n = 10_000
    rounds = [load(engine, n) for _ in range(3 if quick else 5)]
    through = [t for t, _ in rounds]
    baseline = [b for _, b in rounds]
    print(
        f"{label}: load {n:,} announcements: {median_range(through)}/s; plain executemany "
        f"into one table: {median_range(baseline)}/s, "
        f"{median_range(ratios(baseline, through), '.1f')}x"
    )
    ticks = 5 if quick else 15
    print(
        f"{label}: tick with {n:,} live events, 100 revisions: "
        f"{tick_latency(engine, n, ticks) * 1000:.1f} ms (median of {ticks})"
    )
    sizes = [1_000, 5_000, 10_000] if quick else [1_000, 2_500, 5_000, 10_000, 20_000]
    figures = []
    for live in sizes:
        figures.append((live, tick_latency(engine, live, 3 if quick else 7)))
    print(
        f"{label}: tick cost by live events: "
        + ", ".join(f"{live:,}: {s * 1000:.1f} ms" for live, s in figures)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer ticks and sizes")
    parser.add_argument(
        "--pg",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="PostgreSQL server URL, or 'skip'",
    )
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.create_engine(f"sqlite:///{Path(tmp) / 'bench.db'}")

        @sa.event.listens_for(engine, "connect")
        def _fast(dbapi_conn: Any, _: Any) -> None:
            dbapi_conn.execute("PRAGMA synchronous=OFF")

        try:
            run("SQLite", engine, args.quick)
        finally:
            engine.dispose()
    if args.pg == "skip":
        return
    server = sa.create_engine(args.pg, isolation_level="AUTOCOMMIT")
    db = f"sentinel_bench_bicepl_{uuid.uuid4().hex[:8]}"
    try:
        with server.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {db}")
    except sa.exc.OperationalError as err:
        print(f"PostgreSQL: skipped ({err.orig})")
        return
    engine = sa.create_engine(sa.make_url(args.pg).set(database=db))
    try:
        run("PostgreSQL", engine, args.quick)
    finally:
        engine.dispose()
        with server.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {db}")
        server.dispose()


if __name__ == "__main__":
    main()
