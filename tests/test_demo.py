"""``make demo`` (``python -m examples.demo``): it says what the example is in
plain words, replay agrees with the live run, and Spark's own chatter stays off
the terminal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def demo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.demo", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_the_demo_explains_its_example_and_replays_it() -> None:
    done = demo("--no-spark")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # What the example is, before the paper's names for its parts are used.
    assert out.index("a stock-trading example") < out.index("e4 = e1 ^ e2")
    assert "a sale and a price change, in either order" in out
    assert "R2 fired during the transaction: {DEC 100, MS 200, IBM 75.95}" in out
    assert "R1 fired at commit: {IBM 115, DEC 100, MS 200}" in out
    assert "local engine: 13 events read, 2 detections (R1: 1, R2: 1), which match" in out
    assert done.stderr == ""


@pytest.mark.spark
@pytest.mark.slow
def test_spark_writes_nothing_to_the_terminals_stderr() -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17 on PATH")
    done = demo()
    assert done.returncode == 0, done.stderr
    assert "Spark local[2]: 13 events read, 2 detections (R1: 1, R2: 1), which match" in (
        done.stdout
    )
    # Only sentinel's own one-time note about the JVM class archive may appear.
    noise = [
        line
        for line in done.stderr.splitlines()
        if line and "saving the Spark JVM's class archive" not in line
    ]
    assert noise == []


def test_without_java_the_demo_says_spark_needs_it_and_stops_cleanly(tmp_path: Path) -> None:
    """Without Java the Spark step ended the demo in a 36-line traceback."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # nothing on it: no java
    done = demo(env=env)
    assert done.returncode == 0, done.stderr
    assert "local engine: 13 events read" in done.stdout
    assert "Spark skipped: it needs Java 17" in done.stdout
    assert done.stderr == ""
