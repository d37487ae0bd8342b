"""What each page of ``sentinel ui`` costs on a large log.

Run: ``python bench/ui.py`` (a log of 1,000,000 occurrences in 100,000
transactions, 100,000 rule firings, 1,000 outbox entries; a few minutes to
build, kept in ``--db`` for the next run) or ``python bench/ui.py --quick``
(a tenth of it). The log is written by :class:`~sentinel.log.LogWriter` into
SQLite (``synchronous=OFF`` while building); each page is then fetched through
Starlette's test client (the whole application: routing, queries, templates;
no network), ``--rounds`` times, and its median and slowest time printed.

Pages: the worst cases of each filter too (a status that only the oldest
firings have, an event in one transaction of a thousand, a time range at the
log's beginning, the last page of firings). The live JSON twice: as most polls
get it (from the reading shared by every open page, :mod:`sentinel.ui.live`)
and when it reads the log afresh (once a second at most).

With ``--browser`` (needs Debian's ``chromium`` and ``chromium-driver``, and
selenium), each page is also loaded in headless Chromium from the view served
by uvicorn on the loopback, with actions allowed (their forms on the pages),
and the browser's own Navigation Timing printed: the time to the response's
last byte and to the ``load`` event (the page parsed, its CSS and script
loaded), median and slowest of ``--rounds`` (after one untimed load: the
browser's own start).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sentinel import LocalEventDetector  # noqa: E402
from sentinel.log import Firing, LogWriter, OutboxEntry, migrate  # noqa: E402
from sentinel.occurrence import Occurrence  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
PER_TXN = 10
#: Partition keys of the firings: each customer's are every CUSTOMERS-th.
CUSTOMERS = 1000
EVENTS = ("order", "pay", "ship", "note", "check")


def rules() -> LocalEventDetector:
    det = LocalEventDetector()
    for e in (*EVENTS, "rare"):
        det.explicit(e)
    det.rule("paid", "order ; pay", action=print, context="chronicle")
    det.rule("shipped", "order ; pay ; ship", action=print, context="chronicle")
    det.rule("rare", "rare", action=print)
    return det


def build(url: str, transactions: int) -> None:
    """``transactions`` transactions of :data:`PER_TXN` occurrences, one a
    second, each with a firing of ``paid`` logged with the partition key
    ``i % CUSTOMERS`` (every 1,000th ``failed`` in the first tenth of the log
    only); one in a thousand has a ``rare`` event;
    an outbox entry for every 100th."""
    engine = sa.create_engine(url)
    migrate.upgrade(engine)

    @sa.event.listens_for(engine, "connect")
    def fast(dbapi: object, _record: object) -> None:
        dbapi.execute("PRAGMA synchronous=OFF")  # type: ignore[attr-defined]

    engine.dispose()
    writer = LogWriter()
    chunk = 1000
    t = 0
    for start in range(0, transactions, chunk):
        occs = []
        firings = []
        outbox = []
        for i in range(start, min(start + chunk, transactions)):
            scope = f"tx-{i:07d}"
            at = T0 + i
            first = t + 1
            for k in range(PER_TXN):
                t += 1
                event = "rare" if (k == 5 and i % 1000 == 7) else EVENTS[k % len(EVENTS)]
                occs.append(
                    Occurrence(event, t, at + k / 100, at + k / 100, None, {"i": i, "k": k}, scope)
                )
            failed = i % 1000 == 3 and i < transactions // 10
            firings.append(
                Firing(
                    rule="paid",
                    scope=scope,
                    t_occ=first + 1,
                    constituents=((scope, first), (scope, first + 1)),
                    coupling="immediate",
                    status="failed" if failed else "fired",
                    error="ValueError: no stock" if failed else None,
                    fired_at=datetime.fromtimestamp(at + 0.01, UTC),
                    partition=(("pay", "customer", i % CUSTOMERS),),
                )
            )
            if i % 100 == 0:
                outbox.append(OutboxEntry.of("shipped", occs[-1], key=f"k{i}"))
        with engine.begin() as conn:
            writer.write(conn, occs, firings=firings, outbox=outbox)
        print(f"\r  built {min(start + chunk, transactions):,} transactions", end="", flush=True)
    print()
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the log")
    parser.add_argument("--db", default=None, help="SQLite file (default: bench/.ui-LOG.db)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--browser", action="store_true", help="also load each page in headless Chromium"
    )
    args = parser.parse_args()
    transactions = 10_000 if args.quick else 100_000
    path = Path(args.db or HERE / f".ui-{transactions}.db")
    url = f"sqlite:///{path}"
    if not path.exists():
        print(f"building {path} ...")
        started = time.perf_counter()
        build(url, transactions)
        print(f"  in {time.perf_counter() - started:.0f} s")

    from starlette.testclient import TestClient

    from sentinel.ui import create_app

    engine = sa.create_engine(url)
    with engine.connect() as conn:
        n_occ = conn.exec_driver_sql("SELECT sum(n) FROM sentinel_event_batches").scalar()
        n_fir = conn.exec_driver_sql("SELECT count(*) FROM sentinel_rule_firings").scalar()
    engine.dispose()
    print(f"log: {n_occ:,} occurrences, {n_fir:,} firings ({path.stat().st_size / 1e6:.0f} MB)")
    middle = n_fir // 2
    pages = {
        "rules (graph of 3 rules)": "/rules",
        "firings, newest 50": "/firings",
        "firings, page in the middle": f"/firings?before={middle}",
        "firings, last page": "/firings?before=30",
        "firings, rule=paid": "/firings?rule=paid",
        "firings, scope (one transaction)": f"/firings?scope=tx-{middle:07d}",
        "firings, scope and outcome=failed": f"/firings?scope=tx-{middle:07d}&status=failed",
        "firings, partition key=7 (1 in 1,000)": "/firings?key=7",
        "firings, rule=paid and key=7": "/firings?rule=paid&key=7",
        "firings, key=7, older page": f"/firings?key=7&before={middle}",
        "firings, key=7 and outcome=failed": "/firings?key=7&status=failed",
        "firings, status=failed (oldest tenth only)": "/firings?status=failed",
        "firings, time range at the beginning": "/firings?since=2026-01-01T00:00:10"
        "&until=2026-01-01T00:01:00",
        "one firing and its why-tree": f"/firings/{middle}",
        "outbox and cursors": "/outbox",
        "log, newest 20 transactions": "/log",
        "log, one scope": f"/log?scope=tx-{middle:07d}",
        "log, event=rare (1 in 1,000 transactions)": "/log?event=rare",
        "log, time range at the beginning": "/log?since=2026-01-01T00:00:10"
        "&until=2026-01-01T00:01:00",
        "live JSON, from the shared reading": "/api/live",
    }
    with TestClient(create_app(url, detector=rules())) as client:
        print(f"{'page':45} {'median ms':>10} {'slowest ms':>11}")
        live = client.app.state.live  # type: ignore[attr-defined]
        for name, page in [*pages.items(), ("live JSON, reading the log afresh", "/api/live")]:
            times = []
            for _ in range(args.rounds):
                if name.endswith("afresh"):
                    live._at = None  # as if the last reading were a second old
                started = time.perf_counter()
                r = client.get(page)
                times.append((time.perf_counter() - started) * 1000)
                assert r.status_code == 200, (page, r.status_code, r.text[:300])
            print(f"{name:45} {statistics.median(times):10.1f} {max(times):11.1f}")
    if args.browser:
        in_browser(url, pages, args.rounds)


def in_browser(url: str, pages: dict[str, str], rounds: int) -> None:
    """Each page loaded in headless Chromium from uvicorn: Navigation Timing."""
    import socket
    import threading

    import uvicorn
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from sentinel.ui import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(url, detector=rules(), actions_token="bench-token-0123456789")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    timing = (
        "const n = performance.getEntriesByType('navigation')[0];"
        "return [n.responseEnd - n.startTime, n.loadEventEnd - n.startTime];"
    )
    try:
        driver.get(f"http://127.0.0.1:{port}/rules")  # the browser's own start, not timed
        print(f"\nin Chromium: {'page':34} {'response ms':>12} {'load ms':>8} {'slowest load':>13}")
        for name, page in pages.items():
            if page.startswith("/api/"):
                continue
            got = []
            for _ in range(rounds):
                driver.get(f"http://127.0.0.1:{port}{page}")
                got.append(driver.execute_script(timing))
            response = statistics.median(g[0] for g in got)
            load = [g[1] for g in got]
            print(f"{name:47} {response:12.1f} {statistics.median(load):8.1f} {max(load):13.1f}")
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(10)


if __name__ == "__main__":
    main()
