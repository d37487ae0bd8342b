"""A small real log for the web view's tests: written by the real
:class:`~sentinel.log.LogWriter`, with firings, outbox entries, a global
cursor, and hostile values (a rule, a parameter and an error holding
``<script>``) that must reach the browser as text."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa

from sentinel import LocalEventDetector
from sentinel.log import Firing, LogPolicy, LogWriter, OutboxEntry, migrate
from sentinel.log.tables import log_tables
from sentinel.occurrence import ObjectRef, Occurrence

if TYPE_CHECKING:
    from starlette.testclient import TestClient

HOSTILE = "<script>alert(1)</script>"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC).timestamp()
#: Firings written by :func:`build_log`: enough for three pages of 25.
N_FIRINGS = 60


def shop_rules() -> LocalEventDetector:
    """Rules of a small shop, one of them named with markup."""
    det = LocalEventDetector()
    for name in ("order", "pay", "ship", "cancel"):
        det.explicit(name)
    # detached: a rule a global detector can run (its entries are in the outbox)
    det.rule("paid", "order ; pay", action=print, context="chronicle", coupling="detached")
    det.rule("shipped", "(order ; pay) ; ship", action=print, context="chronicle", priority=2)
    det.rule(HOSTILE, "order ; cancel", action=print)
    det.rule("idle", "cancel ^ ship", action=print, enabled=False)
    return det


def shop_key(i: int) -> int | str:
    """The partition key logged with firing ``i + 1`` (of transaction ``tx-i``):
    ``i % 5``, an integer, and from transaction 50 on the same as a string."""
    return i % 5 if i < 50 else str(i % 5)


def occ(event: str, t: int, scope: str, *, at: float | None = None, **params: object) -> Occurrence:
    stamp = T0 + t if at is None else at
    return Occurrence(event, t, stamp, stamp, None, params, scope)


def build_log(engine: sa.Engine) -> None:
    """Transactions tx-0 .. tx-59 (order, pay, one minute apart), each with a
    firing of ``paid`` logged with a partition key (:func:`shop_key`); a
    transaction whose parameter and firing hold markup; a redacted parameter;
    outbox entries pending, running and failed; a cursor."""
    migrate.upgrade(engine)
    writer = LogWriter(policy=LogPolicy().redact("pay", "card"))
    with engine.begin() as conn:
        for i in range(N_FIRINGS):
            scope = f"tx-{i}"
            o = occ("order", 2 * i + 1, scope, at=T0 + 60 * i, item=f"book {i}")
            p = occ("pay", 2 * i + 2, scope, at=T0 + 60 * i + 1, amount=10 + i, card="4111")
            writer.write(
                conn,
                [o, p],
                firings=[
                    Firing(
                        rule="paid",
                        scope=scope,
                        t_occ=p.t_occ,
                        constituents=((scope, o.t_occ), (scope, p.t_occ)),
                        coupling="immediate",
                        status="fired" if i % 7 else "failed",
                        error=None if i % 7 else "ValueError: no stock",
                        fired_at=datetime.fromtimestamp(T0 + 60 * i + 1, UTC),
                        partition=(("pay", "shop", shop_key(i)),),
                    )
                ],
            )
        at = T0 + 60 * N_FIRINGS
        bad = Occurrence(
            "order", 1000, at, at, ObjectRef("Shop", (HOSTILE,)), {"note": HOSTILE}, "tx-hostile"
        )
        cancel = occ("cancel", 1001, "tx-hostile", at=T0 + 60 * N_FIRINGS + 1)
        writer.write(
            conn,
            [bad, cancel],
            firings=[
                Firing(
                    rule=HOSTILE,
                    scope="tx-hostile",
                    t_occ=1001,
                    constituents=(("tx-hostile", 1000), ("tx-hostile", 1001), ("tx-gone", 5)),
                    coupling="detached",
                    status="failed",
                    error=f"RuntimeError: {HOSTILE}",
                    fired_at=datetime.fromtimestamp(T0 + 60 * N_FIRINGS + 1, UTC),
                )
            ],
            outbox=[
                OutboxEntry.of("paid", bad, key="k-pending"),
                OutboxEntry.of("shipped", cancel, key="k-running"),
                OutboxEntry.of(HOSTILE, cancel, key="k-failed"),
            ],
        )
        o = log_tables().outbox
        soon = datetime.now(UTC) + timedelta(minutes=5)
        conn.execute(
            sa.update(o)
            .where(o.c.idempotency_key == "k-running")
            .values(status="running", attempts=1, claimed_by="worker-7", next_attempt_at=soon)
        )
        conn.execute(
            sa.update(o)
            .where(o.c.idempotency_key == "k-failed")
            .values(status="failed", attempts=5, last_error=f"KeyError: {HOSTILE}")
        )
        c = log_tables().global_cursors
        conn.execute(
            sa.insert(c).values(
                name="main",
                position=0,
                holder="host:1",
                lease_until=soon,
                log_time=T0,
                updated_at=datetime.now(UTC),
            )
        )


@pytest.fixture(scope="package")
def log_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("ui") / "app.db"
    url = f"sqlite:///{path}"
    engine = sa.create_engine(url)
    build_log(engine)
    engine.dispose()
    return url


@pytest.fixture(scope="package")
def client(log_url: str) -> Iterator[TestClient]:
    pytest.importorskip("starlette", reason="sentinel ui needs the ui extra")
    from starlette.testclient import TestClient

    from sentinel.ui import create_app

    with TestClient(create_app(log_url, detector=shop_rules())) as c:
        yield c
