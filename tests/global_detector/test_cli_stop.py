"""``sentinel global`` and ``sentinel worker`` on Ctrl-C (SIGINT) and SIGTERM:
the first signal stops them after the action running (the entries not started
are handed back to the outbox), saying so; a second aborts at once (exit
status 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from sentinel.log import LogWriter, migrate
from sentinel.occurrence import Occurrence

RULES = "tests.global_detector.slow_rules:detector"
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from sentinel.cli import main; main()"]


def _log_of_detections(path: Path, n: int) -> str:
    """A SQLite log holding ``n`` orders and their payments (``n`` detections
    of ``slow_rules``); its URL."""
    url = f"sqlite:///{path}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    with engine.begin() as conn:
        for i in range(n):
            for event in ("order", "payment"):
                occ = Occurrence(event, 1, 1.0 + i, scope=f"{event}{i}", params={"customer": i})
                writer.write(conn, [occ])
    engine.dispose()
    return url


def _start(args: list[str], started: Path, seconds: float) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "SENTINEL_TEST_STARTED": str(started),
        "SENTINEL_TEST_ACTION_SECONDS": str(seconds),
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.Popen(
        [*CLI, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a child of a non-interactive shell may ignore SIGINT: not this one
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _when_started(proc: subprocess.Popen[str], started: Path, count: int = 1) -> None:
    deadline = time.monotonic() + 60
    while not (started.exists() and len(started.read_text().splitlines()) >= count):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no action started"
        time.sleep(0.05)


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def _started(started: Path) -> int:
    return len(started.read_text().splitlines())


def _outbox(url: str) -> list[tuple[str, int]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT status, attempts FROM sentinel_outbox ORDER BY id"))
        out = [(str(s), int(a)) for s, a in rows]
    engine.dispose()
    return out


COMMANDS = {
    "global": ["global", "--rules", RULES, "--workers", "0", "--poll", "0.05"],
    "worker": ["worker", "--rules", RULES, "--poll", "0.05"],
}


def _prepared(tmp_path: Path, command: str, n: int) -> str:
    url = _log_of_detections(tmp_path / "log.db", n)
    if command == "worker":  # the entries, enqueued by a global detector that does not act
        done = subprocess.run(
            [*CLI, "global", "--rules", RULES, "--url", url,
             "--until-idle", "--no-actions"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert len(_outbox(url)) == n
    return url


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["global", "worker"])
def test_a_signal_stops_after_the_current_action_not_after_every_due_one(
    tmp_path: Path, command: str, sig: signal.Signals
) -> None:
    url = _prepared(tmp_path, command, 10)
    started = tmp_path / "started"
    proc = _start([*COMMANDS[command], "--url", url], started, 1.0)
    _when_started(proc, started)
    proc.send_signal(sig)
    t0 = time.monotonic()
    _, err = _finish(proc, 30)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, err
    assert elapsed < 5, f"stopped after {elapsed:.1f} s"  # 10 actions of 1 s: 10 s before
    assert "stopping after the current action; Ctrl-C again to abort" in err
    assert "Traceback" not in err
    ran = _started(started)
    assert ran <= 2
    rows = _outbox(url)
    # the one that ran is done; the rest are pending, with no attempt counted
    assert (rows.count(("done", 1)), rows.count(("pending", 0))) == (ran, len(rows) - ran)


@pytest.mark.parametrize("command", ["global", "worker"])
def test_a_second_signal_aborts_the_running_action_at_once(tmp_path: Path, command: str) -> None:
    url = _prepared(tmp_path, command, 3)
    started = tmp_path / "started"
    proc = _start([*COMMANDS[command], "--url", url], started, 30.0)
    _when_started(proc, started)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None  # the action still runs (30 s)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, err = _finish(proc, 30)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 130, err
    assert "aborted; the interrupted action runs again later" in err
    assert "Traceback" not in err
    assert ("done", 1) not in _outbox(url)
