"""Detached rules through the outbox: retries with backoff, failures recorded,
exactly-once database effects across a killed process, the worker (issue 4,
"Coupling modes": detached)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.orm import sessionmaker

from sentinel import LocalEventDetector
from sentinel.cli import main as cli
from sentinel.errors import OutboxError
from sentinel.log.outbox import OutboxStore
from sentinel.orm import attach, detached_context

from . import actions
from .conftest import ORM, make_model

ROOT = Path(__file__).resolve().parents[2]


def _trigger(orm: ORM, price: float = 1.0) -> None:
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(price)


def test_retries_with_backoff_and_records_each_failure(orm: ORM) -> None:
    att = orm.attach(backoff=0.01, max_attempts=5)
    orm.det.rule("R", "Stock.e2", action=actions.flaky, coupling="detached")
    _trigger(orm)
    assert att.wait_detached(60)
    # the first two attempts failed (their rows rolled back), the third committed
    assert [(e[0], e[2]) for e in orm.effects()] == [("R", 3.0)]
    assert [a[2] for a in actions.ATTEMPTS] == [1, 2, 3]
    assert len({a[1] for a in actions.ATTEMPTS}) == 1  # one idempotency key
    (entry,) = orm.outbox()
    assert (entry.status, entry.attempts, entry.last_error) == ("done", 3, None)
    firings = [(f.status, f.error) for f in orm.firings() if f.rule == "R"]
    assert [s for s, _ in firings] == ["pending", "failed", "failed", "done"]
    assert "attempt 1: RuleError" in str(firings[1][1])
    assert "attempt 2 fails" in str(firings[2][1])


def test_gives_up_after_max_attempts(orm: ORM) -> None:
    att = orm.attach(max_attempts=3)
    orm.det.rule("R", "Stock.e2", action=actions.always_fails, coupling="detached")
    _trigger(orm)
    assert att.wait_detached(60)
    (entry,) = orm.outbox()
    assert (entry.status, entry.attempts) == ("failed", 3)
    assert "the remote service is down" in str(entry.last_error)
    assert [f.status for f in orm.firings() if f.rule == "R"] == ["pending"] + ["failed"] * 3
    assert orm.effects() == []
    assert att.drain().total == 0  # failed for good: not run again


def test_a_failed_attempt_waits_for_its_backoff(orm: ORM) -> None:
    att = orm.attach(workers=0, backoff=3600, max_backoff=7200)
    orm.det.rule("R", "Stock.e2", action=actions.always_fails, coupling="detached")
    _trigger(orm)
    before = datetime.now(UTC)
    report = att.drain()
    assert (report.done, report.retried, report.failed) == (0, 1, 0)
    (entry,) = orm.outbox()
    assert entry.status == "pending"
    assert entry.next_attempt_at is not None
    assert (entry.next_attempt_at - before).total_seconds() > 3000  # 1 h, not yet due
    assert att.drain().total == 0


def test_a_detached_condition_runs_in_the_detached_transaction(orm: ORM) -> None:
    att = orm.attach()
    orm.det.rule("R", "Stock.e2", actions.positive, action=actions.record, coupling="detached")
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        stock = s.get(orm.model.Stock, ibm)
        stock.set_price(-1.0)
        stock.set_price(2.0)
    assert att.wait_detached(60)
    assert [e[2] for e in orm.effects()] == [2.0]
    assert sorted(e.status for e in orm.outbox()) == ["done", "done"]


def test_a_worker_runs_the_rule_of_its_own_rule_set(orm: ORM) -> None:
    """Another process's view: a detector of its own that defines the rule by
    name (what ``sentinel worker --rules`` loads)."""
    orm.attach(workers=0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm)
    det = LocalEventDetector()
    make_model(det)
    det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    with attach(sessionmaker(orm.engine), detector=det, workers=0) as other:
        assert other.drain().done == 1
    assert [e[0] for e in orm.effects()] == ["R"]


def test_a_worker_without_the_rule_refuses_the_entry(orm: ORM) -> None:
    """The entry names the action (``extra.action``), but a worker never imports
    code an outbox row names: the entry fails for good, nothing runs."""
    orm.attach(workers=0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm)
    (entry,) = orm.outbox()
    assert entry.extra["action"] == "tests.orm.actions:record"
    with attach(sessionmaker(orm.engine), detector=LocalEventDetector(), workers=0) as other:
        report = other.drain()
    assert (report.done, report.failed) == (0, 1)
    assert orm.effects() == [] and actions.ATTEMPTS == []
    (entry,) = orm.outbox()
    assert (entry.status, entry.attempts) == ("failed", 1)
    assert "defines no rule of that name" in str(entry.last_error)


def test_a_lost_claim_rolls_the_attempt_back(orm: ORM, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose lease expired while its action ran must not commit: another
    worker took the entry, and only one of them may mark it done."""
    att = orm.attach(workers=0, lease=0.0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm)
    (entry,) = orm.outbox()
    store = OutboxStore(att.writer.tables)
    runner = att.runner
    real_run = runner._run_rule

    def run_rule(*args: Any) -> str:
        # while the action starts, its claim (lease 0) expires and another
        # worker claims the entry
        with orm.engine.begin() as other:
            assert store.claim(other, entry.idempotency_key, "someone-else", 60, 5) is not None
        return real_run(*args)

    monkeypatch.setattr(runner, "_run_rule", run_rule)
    assert runner.run_one(entry.idempotency_key) == "skipped"
    assert orm.effects() == []  # the action's write was rolled back
    (entry,) = orm.outbox()
    assert (entry.status, entry.claimed_by, entry.attempts) == ("running", "someone-else", 2)


def test_detached_context_outside_a_detached_rule() -> None:
    with pytest.raises(OutboxError, match="only available inside a detached rule"):
        detached_context()


def test_the_worker_command(orm: ORM, db_url: str) -> None:
    orm.attach(workers=0)  # the application runs no detached rules itself
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm, 7.0)
    result = CliRunner().invoke(
        cli,
        ["worker", "--url", db_url, "--rules", "tests.orm.worker_rules:detector", "--once"],
    )
    assert result.exit_code == 0, result.output
    assert "1 done" in result.output
    assert [e[2] for e in orm.effects()] == [7.0]
    # an entry that failed for good runs again after --retry-failed
    with orm.engine.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_outbox SET status = 'failed', attempts = 5"))
    again = ["worker", "--url", db_url, "--rules", "tests.orm.worker_rules:detector", "--once"]
    result = CliRunner().invoke(cli, again)
    assert result.exit_code == 0 and "0 done" in result.output, result.output
    result = CliRunner().invoke(cli, [*again, "--retry-failed"])
    assert result.exit_code == 0, result.output
    assert "1 failed entry set back to pending" in result.output
    assert "1 done" in result.output
    assert [e[2] for e in orm.effects()] == [7.0, 7.0]
    assert [(e.status, e.attempts) for e in orm.outbox()] == [("done", 1)]
    bad = CliRunner().invoke(
        cli, ["worker", "--url", db_url, "--rules", "tests.orm.nowhere:x", "--once"]
    )
    assert bad.exit_code == 1
    assert "cannot import module 'tests.orm.nowhere'" in bad.output


def _url(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _drain_until_done(orm: ORM, deadline: float = 60) -> None:
    """Drain with a worker of this process until the entry is done (a claim
    left by the killed process is taken over once its lease expired)."""
    end = time.monotonic() + deadline
    worker_det = LocalEventDetector()
    make_model(worker_det)
    worker_det.rule("R", "Stock.e2", action=actions.external, coupling="detached")
    with attach(sessionmaker(orm.engine), detector=worker_det, workers=0, backoff=0.01) as worker:
        while time.monotonic() < end:
            worker.drain()
            if [e.status for e in orm.outbox()] == ["done"]:
                return
            time.sleep(0.2)
    raise AssertionError(f"outbox not drained: {orm.outbox()}")


@pytest.mark.parametrize("mode", ["after-commit", "in-action"])
def test_exactly_once_across_a_killed_process(
    orm: ORM, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    external = tmp_path / "external.txt"
    monkeypatch.setenv("SENTINEL_TEST_EXTERNAL", str(external))  # for this process's drain
    monkeypatch.delenv("SENTINEL_TEST_CRASH", raising=False)
    env = {
        **os.environ,
        "SENTINEL_TEST_EXTERNAL": str(external),
        "SENTINEL_TEST_CRASH": "action" if mode == "in-action" else "",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    child = subprocess.run(
        [sys.executable, "-m", "tests.orm.crash_child", _url(orm.engine), mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    expected = -signal.SIGKILL if mode == "in-action" else 0
    assert child.returncode == expected, child.stderr
    # the trigger committed with its outbox row; the action's effect did not
    (entry,) = orm.outbox()
    assert entry.status == ("pending" if mode == "after-commit" else "running")
    assert orm.effects() == []
    with orm.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT price FROM stock")).scalar() == 42.0
    _drain_until_done(orm)
    effects = orm.effects()
    assert [(e[0], e[1], e[2]) for e in effects] == [("R", entry.idempotency_key, 42.0)]
    lines = external.read_text().split()
    attempts = list(zip(lines[::2], lines[1::2], strict=True))
    if mode == "in-action":
        # the external effect ran twice, with the same key: the action can tell
        assert attempts == [(entry.idempotency_key, "1"), (entry.idempotency_key, "2")]
    else:
        assert attempts == [(entry.idempotency_key, "1")]


def test_a_detached_rule_triggered_outside_any_transaction(orm: ORM) -> None:
    """No transaction to wait for: the entry is written at once (in a short
    transaction of its own) and run."""
    att = orm.attach()
    orm.det.explicit("Deposit")
    orm.det.rule("R", "Deposit", action=actions.record, coupling="detached")
    orm.det.signal("Deposit", amount=12.5)  # the process scope
    assert att.wait_detached(60)
    assert [(e[0], e[2]) for e in orm.effects()] == [("R", 12.5)]
    (entry,) = orm.outbox()
    assert (entry.status, entry.scope) == ("done", orm.det.process_scope.id)
