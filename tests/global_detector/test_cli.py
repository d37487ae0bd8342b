"""``sentinel global``: the service from the command line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sentinel.cli import main
from sentinel.log import LogWriter, migrate
from sentinel.occurrence import Occurrence

from . import rules


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sentinel_global_until_idle(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    rules.make_effects(engine)
    writer = LogWriter(commit_order=True)
    for i, (event, scope) in enumerate([("order", "a"), ("payment", "b"), ("payment", "c")]):
        with engine.begin() as conn:
            occ = Occurrence(event, 1, 1.0 + i, scope=scope, params={"customer": 5})
            writer.write(conn, [occ])
    url = engine.url.render_as_string(hide_password=False)
    args = ["global", "--rules", "tests.global_detector.rules:detector", "--url", url]
    result = CliRunner().invoke(main, [*args, "--until-idle", "--workers", "0"])
    assert result.exit_code == 0, result.output
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM gd_effects")).scalar() == 1
    # the 3 rows, and those of the action's own transaction (also in the log)
    assert re.fullmatch(
        r"sentinel global 'global': \d+ rows read, 1 detections", result.output.strip()
    )
    again = CliRunner().invoke(main, [*args, "--until-idle"])  # the cursor is durable
    assert again.output.strip().endswith(" rows read, 0 detections")


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("attempts", [1, 5])
def test_sentinel_global_until_idle_reports_failed_actions(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch, attempts: int
) -> None:
    """An action that fails is reported on stderr; one that failed for good
    (its last attempt) makes ``--until-idle`` exit 1, as ``worker --once``:
    cron sees it."""
    import sentinel.orm as orm

    real = orm.global_actions

    def actions(*args: object, **kwargs: object) -> object:
        return real(*args, **{**kwargs, "max_attempts": attempts})  # type: ignore[arg-type]

    monkeypatch.setattr(orm, "global_actions", actions)
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    for i, (event, scope) in enumerate([("order", "a"), ("payment", "b")]):
        with engine.begin() as conn:
            occ = Occurrence(event, 1, 1.0 + i, scope=scope, params={"customer": 5})
            writer.write(conn, [occ])
    url = engine.url.render_as_string(hide_password=False)
    args = ["global", "--rules", "tests.global_detector.rules:failing", "--url", url]
    result = CliRunner().invoke(main, [*args, "--until-idle", "--workers", "0"])
    failed, retried = (1, 0) if attempts == 1 else (0, 1)
    assert result.exit_code == (1 if failed else 0), result.output
    assert f"actions failed: {failed} for good, {retried} attempt(s) to retry" in result.stderr


def test_sentinel_global_refuses_rules_that_are_not_detached(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    migrate.upgrade(url)
    result = CliRunner().invoke(
        main, ["global", "--rules", "tests.global_detector.rules:nothing", "--url", url]
    )
    assert result.exit_code == 1
    assert "has no attribute 'nothing'" in result.output


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sentinel_global_says_it_left_rows_numbered_ahead_of_the_counter(
    engine: sa.Engine,
) -> None:
    migrate.upgrade(engine)
    rules.make_effects(engine)
    writer = LogWriter(commit_order=True)
    for i, event in enumerate(["order", "payment"]):
        with engine.begin() as conn:
            # two occurrences in one log row
            occs = [
                Occurrence(event, t, 1.0 + i, scope=f"s{i}", params={"customer": 5}) for t in (1, 2)
            ]
            writer.write(conn, occs)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE sentinel_event_batches SET commit_seq = 1000000 WHERE scope = 's1'")
        )
    url = engine.url.render_as_string(hide_password=False)
    args = ["global", "--rules", "tests.global_detector.rules:detector", "--url", url]
    result = CliRunner().invoke(main, [*args, "--until-idle", "--workers", "0"])
    assert result.exit_code == 0, result.output
    assert "1 log row(s) numbered ahead of the last commit number handed out were not read" in (
        result.stderr
    )


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sentinel_global_passes_its_busy_timeout_and_retry_delay(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--busy-timeout`` and ``--retry-delay`` reach the service; without
    them it waits 30 s for SQLite's lock and retries a claim after 1 s."""
    import sentinel.global_detector as gd

    migrate.upgrade(engine)
    made: list[gd.GlobalDetector] = []
    real = gd.GlobalDetector

    def recorded(*args: object, **kwargs: object) -> gd.GlobalDetector:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(gd, "GlobalDetector", recorded)
    url = engine.url.render_as_string(hide_password=False)
    args = ["global", "--rules", "tests.global_detector.rules:detector", "--url", url]
    for extra, timeout_ms, retry in [
        ([], 30_000, 1.0),
        (["--busy-timeout", "2.5", "--retry-delay", "0.25"], 2_500, 0.25),
    ]:
        result = CliRunner().invoke(main, [*args, "--until-idle", *extra])
        assert result.exit_code == 0, result.output
        service = made[-1]
        with service.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == timeout_ms
        service.engine.dispose()  # the run closed it; the look above pooled a connection
        assert service.attachment.runner.claim_retry == retry
    help_text = CliRunner().invoke(main, ["global", "--help"]).output
    assert "--busy-timeout" in help_text and "--retry-delay" in help_text
