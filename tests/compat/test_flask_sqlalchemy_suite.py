"""Flask-SQLAlchemy's own test suite gives the same outcome, test by test, with
sentinel attached to ``Session`` and the event log on (each engine its fixtures
make is migrated as it is made) as without sentinel.

The tests come from Flask-SQLAlchemy's source distribution for the installed
version (downloaded once and cached); a test that fails on this machine without
sentinel (3.1.1 predates SQLAlchemy 2.1) must fail the same way with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.harness import compare, run_both
from tests.compat.sources import SourceUnavailable, source_tree

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def flask_sqlalchemy_tree() -> Path:
    pytest.importorskip("flask_sqlalchemy")
    try:
        return source_tree("Flask-SQLAlchemy")
    except SourceUnavailable as err:
        pytest.skip(f"Flask-SQLAlchemy's test suite is not available: {err}")


def test_flask_sqlalchemy_suite_with_the_log_on(
    flask_sqlalchemy_tree: Path, tmp_path: Path
) -> None:
    with_run, without_run = run_both(
        flask_sqlalchemy_tree, ["tests"], tmp_path, env={"SENTINEL_COMPAT_LOG": "1"}
    )
    assert len(without_run.outcomes) > 400, f"too few tests ran; see {without_run.output}"
    differences = compare(with_run, without_run)
    assert not differences, "\n".join(differences)
    stats = with_run.stats
    assert stats.get("engines migrated", 0) > 100, stats
    assert stats.get("log rows written", 0) > 100, stats  # the log really was on
    for event in ("txn:begin", "txn:pre_commit", "txn:commit", "txn:abort"):
        assert stats.get(event, 0) > 10, stats
