"""What sentinel costs an ORM application: the same workload with and without it.

Run: ``python bench/orm.py`` (``--quick`` for a short run, ``--sync off`` to take
SQLite's fsync out and see the CPU side alone, ``--db postgresql`` for the
PostgreSQL server at ``--pg``, ``--db mysql`` for the MariaDB server at
``--mysql``, each in a fresh database). Prints the wall time of the
workload with sentinel attached (rules defined, every occurrence logged in the
transactions), without (no detector hooks, plain methods, no log), and with the
hand-written audit an application writes today instead (a plain SQLAlchemy
``after_flush`` listener writing one audit row per changed object: its table,
primary key, operation, time and the changed columns' new values as JSON, one
``executemany`` per flush), all measured in the same run, and the ratios.
Targets: at most 1.3 times the bare workload and 1.0 times the audit.

The workload (per round): 200 transactions on a SQLite file; each loads 10
accounts, makes 50 calls of decorated methods on them (``deposit`` and
``withdraw``, ``@event`` methods that change the balance) and so updates the 10
rows (2,000 row updates per round). With sentinel: an immediate rule whose
condition is almost always false (an overdraft check), a deferred rule on the
transaction's deposits (cumulative, fires once per transaction), every method
call's occurrence plus every row update's ``Account:update`` event logged (one
``executemany`` per transaction, in the transaction), rule firings logged.

Rounds alternate (the order of the variants rotates by one each round) so that
all see the same machine; the figure per variant is the median of its rounds, with
their range, and each ratio is taken within a round. The "log only" variant
(sentinel attached and logging, no rules) shows what the log costs on its own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

import sentinel
from sentinel import LocalEventDetector, Reactive, event
from sentinel.log import LogReader, migrate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median_range, ratios

ACCOUNTS = 100
TRANSACTIONS = 200
CALLS = 50  # per transaction: 10,000 per round
ROWS = 10  # per transaction: 2,000 row updates per round

det = LocalEventDetector()


class Base(Reactive, DeclarativeBase, detector=det):
    pass


class Account(Base):
    __tablename__ = "account"
    id: Mapped[int] = mapped_column(primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(40))
    balance: Mapped[float] = mapped_column(default=0.0)
    ops: Mapped[int] = mapped_column(default=0)

    @event
    def deposit(self, amount: float) -> float:
        self.balance += amount
        self.ops += 1
        return self.balance

    @event
    def withdraw(self, amount: float) -> float:
        self.balance -= amount
        self.ops += 1
        return self.balance


def workload(Session: Any, round_no: int) -> None:
    for i in range(TRANSACTIONS):
        first = 1 + (i * ROWS) % ACCOUNTS
        with Session.begin() as s:
            accounts = s.scalars(
                sa.select(Account)
                .where(Account.id.between(first, first + ROWS - 1))
                .order_by(Account.id)
            ).all()
            for k in range(CALLS):
                a = accounts[k % ROWS]
                if k % 5 == 4:
                    a.withdraw(1.0)
                else:
                    a.deposit(2.0 + round_no)


audit = sa.Table(
    "audit_log",
    Base.metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("tablename", sa.String(64), nullable=False),
    sa.Column("row_id", sa.String(64), nullable=False),
    sa.Column("op", sa.String(8), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("changes", sa.Text, nullable=False),
    sa.Index("ix_audit_row", "tablename", "row_id"),
)


def audit_listener(session: Any, _flush_context: Any) -> None:
    """The hand-written audit: one row per changed object, in the flush's
    transaction, one ``executemany``."""
    now = dt.datetime.now(dt.UTC)
    rows = []
    for op, objs in (
        ("insert", session.new),
        ("update", session.dirty),
        ("delete", session.deleted),
    ):
        for obj in objs:
            state = sa.inspect(obj)
            changes = {}
            for attr in state.mapper.column_attrs:
                hist = state.attrs[attr.key].history
                if hist.added:
                    changes[attr.key] = hist.added[0]
            if op == "update" and not changes:
                continue
            rows.append({
                "tablename": obj.__tablename__, "row_id": str(state.identity or ""),
                "op": op, "at": now, "changes": json.dumps(changes),
            })  # fmt: skip
    if rows:
        session.connection().execute(audit.insert(), rows)


def setup(url: str, sync: str) -> Any:
    engine = sa.create_engine(url)
    if sync != "default" and engine.dialect.name == "sqlite":

        @sa.event.listens_for(engine, "connect")
        def _pragma(conn: Any, _: Any) -> None:
            conn.execute(f"PRAGMA synchronous={sync.upper()}")

    Base.metadata.create_all(engine)
    migrate.upgrade(engine)
    Session = sessionmaker(engine)
    with Session.begin() as s:
        s.add_all(Account(owner=f"owner {n}") for n in range(ACCOUNTS))
    return engine, Session


def server_database(server_url: str) -> tuple[str, Any]:
    """A fresh database on the server (its URL, and a function dropping it)."""
    server = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"sentinel_bench_orm_{uuid.uuid4().hex[:8]}"
    with server.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")

    def drop() -> None:
        with server.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name}")
        server.dispose()

    return sa.make_url(server_url).set(database=name).render_as_string(False), drop


def overdraft(occ: Any) -> bool:
    return bool(occ.params["result"] < -1_000_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of each")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each variant")
    parser.add_argument("--db", choices=["sqlite", "postgresql", "mysql"], default="sqlite")
    parser.add_argument(
        "--pg",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="PostgreSQL server URL (with --db postgresql)",
    )
    parser.add_argument(
        "--mysql",
        default="mysql+pymysql://root@127.0.0.1:3306/test",
        help="MariaDB/MySQL server URL (with --db mysql)",
    )
    parser.add_argument(
        "--sync",
        choices=["default", "normal", "off"],
        default="default",
        help="SQLite's synchronous pragma (default: SQLite's own, FULL)",
    )
    args = parser.parse_args()
    rounds = 3 if args.quick else args.rounds

    with tempfile.TemporaryDirectory(prefix="sentinel-bench-orm-") as tmp:
        drop = None
        if args.db == "postgresql":
            url, drop = server_database(args.pg)
            where = "PostgreSQL " + sa.make_url(args.pg).render_as_string(True)
        elif args.db == "mysql":
            url, drop = server_database(args.mysql)
            where = "MariaDB " + sa.make_url(args.mysql).render_as_string(True)
        else:
            url = f"sqlite:///{Path(tmp) / 'bench.db'}"
            where = f"SQLite file (synchronous={args.sync})"
        try:
            engine, Session = setup(url, args.sync)
            times, logged, firings, deferred, audited = run(Session, engine, rounds)
            engine.dispose()
            floor = log_floor(Path(tmp) / "bench.db", args.sync) if drop is None else None
        finally:
            if drop is not None:
                drop()

    calls = TRANSACTIONS * CALLS
    updates = TRANSACTIONS * ROWS
    print(f"ORM workload per round: {TRANSACTIONS} transactions, {calls:,} decorated method calls,")
    print(f"{updates:,} row updates; {where}; {machine()}")
    print(f"{rounds} interleaved rounds: median (range)\n")
    for label, key in (
        ("without sentinel", "without"),
        ("hand-written audit", "audit"),
        ("with sentinel", "with"),
        ("log only, no rules", "log only"),
    ):
        print(f"  {label:<20} {median_range(times[key], '.3f')} s")
    with_bare = ratios(times["with"], times["without"])
    with_audit = ratios(times["with"], times["audit"])
    audit_bare = ratios(times["audit"], times["without"])
    log_bare = ratios(times["log only"], times["without"])
    med = statistics.median
    print(f"  with / without       {median_range(with_bare, '.3f')}   target <= 1.3: "
          f"{'met' if med(with_bare) <= 1.3 else 'MISSED'}")  # fmt: skip
    print(f"  with / audit         {median_range(with_audit, '.3f')}   target <= 1.0: "
          f"{'met' if med(with_audit) <= 1.0 else 'MISSED'}")  # fmt: skip
    print(f"  audit / without      {median_range(audit_bare, '.3f')}")
    print(f"  log only / without   {median_range(log_bare, '.3f')}")
    per_txn = (med(times["with"]) - med(times["without"])) / TRANSACTIONS * 1e3
    print(f"  sentinel's cost      {per_txn:8.3f} ms per transaction")
    allowed = 0.3 * med(times["without"]) / TRANSACTIONS * 1e3
    print(f"  the target allows    {allowed:8.3f} ms per transaction")
    if floor is not None:
        print(f"  the log's floor      {floor * 1e3:8.3f} ms per transaction (sqlite3 alone "
              f"inserting the rows of one transaction's {ROWS_PER_TXN} logged "
              "occurrences into a copy of the log)")  # fmt: skip
    print()
    print(f"  logged: {logged:,} occurrences, {firings:,} rule firings; deferred rule fired "
          f"{deferred:,} times; {audited:,} audit rows")  # fmt: skip
    expected = 2 * rounds * (calls + updates + 3 * TRANSACTIONS)
    if logged != expected:
        print(f"  WARNING: expected {expected:,} logged occurrences")
    if audited != rounds * updates:
        print(f"  WARNING: expected {rounds * updates:,} audit rows")


def run(
    Session: Any, engine: Any, rounds: int
) -> tuple[dict[str, list[float]], int, int, int, int]:
    deposits: list[int] = []
    rules = [
        det.rule("overdraft", "Account.deposit:end | Account.withdraw:end", overdraft,
                 action=lambda occ: None),
        det.rule("deposits", "Account.deposit:end", action=lambda occ: deposits.append(
            len(occ.parts)), coupling="deferred", context="cumulative"),
    ]  # fmt: skip
    times: dict[str, list[float]] = {"with": [], "without": [], "log only": [], "audit": []}
    order = list(times)
    for r in range(rounds):
        k = r % len(order)
        for variant in order[k:] + order[:k]:
            attachment = None
            for rule in rules:
                if variant == "with":
                    rule.enable()
                else:
                    rule.disable()
            if variant in ("with", "log only"):
                attachment = sentinel.attach(Session, detector=det, workers=0)
            elif variant == "audit":
                sa.event.listen(Session, "after_flush", audit_listener)
            gc.collect()
            start = time.perf_counter()
            workload(Session, r)
            elapsed = time.perf_counter() - start
            if attachment is not None:
                attachment.detach()
            if variant == "audit":
                sa.event.remove(Session, "after_flush", audit_listener)
            times[variant].append(elapsed)
    with LogReader(engine) as log:
        logged = log.count()
    with engine.connect() as conn:
        firings = conn.execute(sa.text("SELECT count(*) FROM sentinel_rule_firings")).scalar()
        audited = conn.execute(sa.select(sa.func.count()).select_from(audit)).scalar()
    for rule in rules:
        rule.delete()
    return times, logged, firings or 0, len(deposits), audited or 0


ROWS_PER_TXN = CALLS + ROWS + 3  # method events, row updates, begin/pre_commit/commit


def log_floor(path: Path, sync: str) -> float:  # SQLite only
    """The baseline for the log's share: seconds per transaction to insert, with
    the sqlite3 module alone (no sentinel, no SQLAlchemy), the rows sentinel
    logged for one transaction (its row, and the row its ``txn:commit`` went
    in later) into a table made by the same DDL (columns, indexes, unique
    constraint), one ``executemany`` per transaction (timed without the
    commit, whose extra pages the logged run also writes); the median over the
    logged transactions."""
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if sync != "default":
            conn.execute(f"PRAGMA synchronous={sync.upper()}")
        table = "sentinel_event_batches"
        ddl = [
            sql.replace(table, "floor_events")
            for (sql,) in conn.execute(
                f"SELECT sql FROM sqlite_master WHERE tbl_name = '{table}' "
                "AND sql IS NOT NULL ORDER BY type DESC"
            )
        ]
        for statement in ddl:  # the table first (type 'table' > 'index')
            conn.execute(statement)
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] != "id"]
        names = ", ".join(cols)
        insert = f"INSERT INTO floor_events ({names}) VALUES ({', '.join('?' * len(cols))})"
        by_scope: dict[str, list[tuple[Any, ...]]] = {}
        for row in conn.execute(f"SELECT {names}, n FROM {table} ORDER BY id"):
            by_scope.setdefault(row[0], []).append(row[:-1])
        sizes = dict(conn.execute(f"SELECT scope, sum(n) FROM {table} GROUP BY scope").fetchall())
        times = []
        for scope, rows in by_scope.items():
            if sizes[scope] != ROWS_PER_TXN:
                continue  # the set-up's transaction
            conn.execute("BEGIN")
            start = time.perf_counter()
            conn.executemany(insert, rows)
            times.append(time.perf_counter() - start)
            conn.execute("COMMIT")
        return statistics.median(times)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
