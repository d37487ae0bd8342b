"""kill -9 of the global detector service at random points, 30 times, while
four processes keep committing: after a restart every detection is acted on
exactly once (no miss, no duplicate), in commit order; with the actions in
the service's thread (``--workers 0``), and 10 times with them in a worker
thread (``--workers 1``: a read batch's claims are handed to the thread)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from sentinel.global_detector import GlobalDetector
from sentinel.log import migrate
from sentinel.orm import global_actions

from . import rules
from .model import expected_details
from .test_global import ROOT, _children, _effects, _env, _url, _wait

pytestmark = pytest.mark.slow

KILLS = 30


def _service(engine: sa.Engine, workers: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from sentinel.cli import main; main()",
            "global",
            "--rules",
            "tests.global_detector.rules:detector",
            "--url",
            _url(engine),
            "--lease",
            "0.5",
            "--poll",
            "0.05",
            "--workers",
            str(workers),
            "--action-lease",
            "0.5",
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("workers", "kills_wanted"), [(0, KILLS), (1, 10)], ids=["workers0-30", "workers1-10"]
)
def test_kill_9_many_times_acts_exactly_once(
    engine: sa.Engine, workers: int, kills_wanted: int
) -> None:
    migrate.upgrade(engine)
    rules.make_effects(engine)
    rnd = random.Random(19)
    children = _children(engine, 4, 60, seed=3)
    kills = 0
    while kills < kills_wanted:
        service = _service(engine, workers)
        time.sleep(rnd.uniform(0.3, 1.5))
        service.send_signal(signal.SIGKILL)
        service.wait()
        kills += 1
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM gd_effects")).scalar() is not None
    _wait(children)
    # the survivor: takes the lease once the last killed one's ends, reads to the
    # end, runs what killed instances left pending or running
    time.sleep(0.6)
    with GlobalDetector(
        rules.detector,
        engine,
        lease=0.5,
        min_wait=0.01,
        max_wait=0.05,
        action_lease=0.5,
        actions=global_actions,
    ) as survivor:
        survivor.run(until_idle=True)
        deadline = time.monotonic() + 60
        while survivor.pending_keys() and time.monotonic() < deadline:
            time.sleep(0.6)  # claims of actions killed mid-way expire
            survivor.run_pending()
    expected = expected_details(engine)
    effects = _effects(engine)
    keys = [k for k, _ in effects]
    assert len(keys) == len(set(keys)), "an action ran twice"
    assert sorted(d for _, d in effects) == sorted(expected)
    with engine.connect() as conn:
        status = dict(
            conn.execute(
                sa.text("SELECT status, count(*) FROM sentinel_outbox GROUP BY status")
            ).all()
        )
    assert status == {"done": len(expected)}
