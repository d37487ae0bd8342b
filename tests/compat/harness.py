"""Run another project's test suite twice, with and without sentinel, and compare.

Each run is a subprocess pytest in the project's unpacked source distribution
(:mod:`tests.compat.sources`) with the ``sentinel_compat`` plugin
(``tests/compat/plugins``), which records every test's outcome; the run "with"
also attaches sentinel. Both runs go at once (two processes), each on its own
database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Run", "compare", "run_both"]

PLUGINS = Path(__file__).parent / "plugins"
TIMEOUT = 900


@dataclass
class Run:
    """One finished run: every test's outcome, the failures' texts, sentinel's
    counters (empty without it), and where its output went."""

    outcomes: dict[str, str]
    failures: dict[str, str]
    stats: dict[str, int]
    output: Path


def _workdir(tree: Path, out_dir: Path, label: str) -> Path:
    """A directory of its own for one run that looks like ``tree`` (links to its
    top-level entries): the suites write files (SQLite databases) in the
    current directory, and the two runs go at once."""
    work = out_dir / label
    work.mkdir()
    for entry in tree.iterdir():
        (work / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return work


def _start(
    tree: Path, args: list[str], out_dir: Path, label: str, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    results = out_dir / f"{label}.json"
    output = out_dir / f"{label}.out"
    work = _workdir(tree, out_dir, label)
    full_env = dict(os.environ)
    full_env.update(env)
    full_env["SENTINEL_COMPAT_RESULTS"] = str(results)
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PLUGINS), full_env.get("PYTHONPATH", "")) if p
    )
    full_env.pop("PYTEST_ADDOPTS", None)
    full_env.pop("PYTEST_XDIST_WORKER", None)
    # -s (no user site): SQLAlchemy's conftest then leaves the sdist's lib/ off
    # sys.path, so its tests run against the installed SQLAlchemy (same version)
    cmd = [
        sys.executable,
        "-s",
        "-m",
        "pytest",
        "-p",
        "sentinel_compat",
        "-p",
        "no:cacheprovider",
        "-q",
        "--tb=short",
        *args,
    ]
    with output.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    return proc, results, output


def _finish(proc: subprocess.Popen[bytes], results: Path, output: Path) -> Run:
    try:
        proc.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the run timed out after {TIMEOUT} s; see {output}") from None
    if not results.exists():
        tail = output.read_text(errors="replace")[-3000:]
        raise AssertionError(f"the run recorded no results (exit {proc.returncode}):\n{tail}")
    data: dict[str, Any] = json.loads(results.read_text())
    return Run(data["outcomes"], data["failures"], data["_sentinel"], output)


def run_both(
    tree: Path,
    args: list[str],
    out_dir: Path,
    *,
    env: dict[str, str] | None = None,
    args_with: tuple[str, ...] | list[str] = (),
    args_without: tuple[str, ...] | list[str] = (),
) -> tuple[Run, Run]:
    """Run ``pytest args`` in ``tree`` with sentinel (and ``args_with``) and
    without (and ``args_without``), at once."""
    env = env or {}
    started = [
        _start(tree, [*args, *args_with], out_dir, "with", {**env, "SENTINEL_COMPAT_ATTACH": "1"}),
        _start(
            tree,
            [*args, *args_without],
            out_dir,
            "without",
            {**env, "SENTINEL_COMPAT_ATTACH": "0"},
        ),
    ]
    with_run, without_run = (_finish(*s) for s in started)
    return with_run, without_run


def compare(with_run: Run, without_run: Run) -> list[str]:
    """The tests whose outcome differs, one line each (with the failure text of
    the run that failed)."""
    lines = []
    for nodeid in sorted(set(with_run.outcomes) | set(without_run.outcomes)):
        a = with_run.outcomes.get(nodeid, "not run")
        b = without_run.outcomes.get(nodeid, "not run")
        if a != b:
            why = with_run.failures.get(nodeid) or without_run.failures.get(nodeid) or ""
            lines.append(f"{nodeid}: with sentinel {a}, without {b}\n{why[-1500:]}")
    return lines
