"""The layers of docs/architecture.md hold: pyproject's import-linter contracts
("Layers as contracts") are kept by the source tree, and the layers below the ORM
load without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept() -> None:
    pytest.importorskip("importlinter", reason="import-linter is a dev dependency")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command as c; c()",
            "--no-cache",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_global_detectors_storage_loads_without_the_orm_layer() -> None:
    """The cursor and its lease use the log layer's server clock, not the ORM's."""
    code = (
        "import sys, sentinel.global_detector.cursor\n"
        "assert 'sentinel.orm' not in sys.modules, sorted(m for m in sys.modules "
        "if m.startswith('sentinel.orm'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
