"""Sessions in different threads have separate detection scopes: no detection
combines occurrences of two transactions (issue 4, "Concurrency"; Sentinel 4.4,
"Events crossing transaction boundaries")."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import sqlalchemy as sa

import sentinel

from .conftest import ORM

THREADS = 8
TRANSACTIONS = 200


def test_no_detection_crosses_transactions(orm: ORM) -> None:
    if orm.backend == "sqlite":
        # 1,600 commits: skip the fsync (the fixture begins transactions with
        # BEGIN IMMEDIATE, so the eight writers queue for the lock)
        assert orm.sqlite_begin["sql"] == "BEGIN IMMEDIATE"

        @sa.event.listens_for(orm.engine, "connect")
        def _fast(dbapi_connection: Any, _: Any) -> None:
            dbapi_connection.execute("PRAGMA synchronous=OFF")

        orm.engine.dispose()
    orm.attach()
    detections: list[Any] = []
    lock = threading.Lock()

    def found(occ: Any) -> None:
        with lock:
            detections.append(occ)

    # a price change followed by a sale in the same transaction
    orm.det.rule("pair", "Stock.e2 ; Stock.e1", action=found)
    ids = orm.add_stocks(*(f"T{i}" for i in range(THREADS)))
    plans: list[list[str]] = []
    rng = random.Random(4)
    for _ in range(THREADS):
        plans.append([rng.choice(["price", "sale", "both", "both-rollback"])
                      for _ in range(TRANSACTIONS)])  # fmt: skip
    scopes: list[dict[str, str]] = [{} for _ in range(THREADS)]
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(i: int) -> None:
        try:
            start.wait()
            for n, plan in enumerate(plans[i]):
                with orm.Session() as s:
                    stock = s.get(orm.model.Stock, ids[i])
                    if plan != "sale":
                        stock.set_price(float(n + 1))
                    if plan != "price":
                        stock.sell_stock(1)
                    scope = sentinel.scope_of(s)
                    assert scope is not None
                    scopes[i][scope.id] = plan
                    if plan == "both-rollback":
                        s.rollback()
                    else:
                        s.commit()
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    plan_of = {sid: plan for per_thread in scopes for sid, plan in per_thread.items()}
    assert len(plan_of) == THREADS * TRANSACTIONS  # a scope per transaction
    # every detection: both constituents from one transaction that did both
    for occ in detections:
        (scope,) = {c.scope for c in occ.constituents}
        assert plan_of[scope] in ("both", "both-rollback")
        assert len({c.source for c in occ.constituents}) == 1
    got = Counter(occ.scope for occ in detections)
    expected = {sid for sid, plan in plan_of.items() if plan.startswith("both")}
    assert set(got) == expected and set(got.values()) == {1}
    # and the log has every transaction, each with its own outcome
    outcomes: dict[str, set[Any]] = {}
    for row in orm.log():
        outcomes.setdefault(row.occurrence.scope, set()).add(row.outcome)
    for sid, plan in plan_of.items():
        assert outcomes[sid] == {"aborted" if plan == "both-rollback" else "committed"}
