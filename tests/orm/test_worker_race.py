"""Workers racing for slow entries (issue 11, item 5): two worker processes,
an action slower than the lease. Every entry runs at most once at a time, no
entry runs more often than ``max_attempts``, every entry ends ``done`` (its
effect committed exactly once) or ``failed`` (with its last error).

Measured by counting, never by timing: each run of the action appends
``start``/``end`` lines to a shared file, and the file's order is the order in
which the runs happened."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import sqlalchemy as sa

from . import actions
from .conftest import ORM

ROOT = Path(__file__).resolve().parents[2]
LEASE = 0.4
SLEEP = 1.0  # the action: more than two leases
MAX_ATTEMPTS = 3
PRICES = [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0]  # odd ones always fail
WORKERS = 2


@pytest.mark.slow
def test_two_workers_and_an_action_slower_than_the_lease(
    orm: ORM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    orm.attach(workers=0)  # the application: it enqueues, the worker processes run
    orm.det.rule("Slow", "Stock.e2", action=actions.slow, coupling="detached")
    ids = orm.add_stocks(*(f"S{i}" for i in range(len(PRICES))))
    for i, price in zip(ids, PRICES, strict=True):
        with orm.Session.begin() as s:
            s.get(orm.model.Stock, i).set_price(price)
    runlog = tmp_path / "runs.txt"
    runlog.touch()
    env = {
        **os.environ,
        "SENTINEL_TEST_RUNLOG": str(runlog),
        "SENTINEL_TEST_SLEEP": str(SLEEP),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    url = orm.engine.url.render_as_string(hide_password=False)
    args = [str(tmp_path), str(LEASE), str(MAX_ATTEMPTS)]
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.orm.slow_worker", url, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(WORKERS)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("ready.*"))) < WORKERS and time.monotonic() < deadline:
            assert all(c.poll() is None for c in children), [c.communicate() for c in children]
            time.sleep(0.05)
        (tmp_path / "go").touch()
        outputs = [c.communicate(timeout=300) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
    assert [c.returncode for c in children] == [0] * WORKERS, outputs

    runs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for line in runlog.read_text().splitlines():
        what, key, who, _attempt = line.split()
        runs[key].append((what, who))
    entries = {e.idempotency_key: e for e in orm.outbox()}
    assert set(runs) == set(entries)
    for key, marks in runs.items():
        # at most once at a time: each start is followed by the end of the same run
        assert [m[0] for m in marks] == ["start", "end"] * (len(marks) // 2), marks
        assert all(a[1] == b[1] for a, b in zip(marks[::2], marks[1::2], strict=True)), marks
        # every claim is an attempt and runs the action once; never more than allowed
        assert len(marks) // 2 == entries[key].attempts <= MAX_ATTEMPTS, (marks, entries[key])
    price_of = {e.idempotency_key: e.constituents[0].params["price"] for e in entries.values()}
    effects = Counter(e[1] for e in orm.effects())
    for key, entry in entries.items():
        if int(price_of[key]) % 2:
            assert (entry.status, entry.attempts) == ("failed", MAX_ATTEMPTS)
            assert "odd prices always fail" in str(entry.last_error)
            assert effects[key] == 0
        else:
            assert entry.status == "done"
            assert effects[key] == 1  # committed exactly once
    # the race was run: both processes ran actions
    assert len({who.split("/")[0] for marks in runs.values() for _, who in marks}) == WORKERS
    with orm.engine.connect() as conn:
        left = conn.execute(
            sa.text("SELECT count(*) FROM sentinel_outbox WHERE status IN ('pending','running')")
        ).scalar()
    assert left == 0
