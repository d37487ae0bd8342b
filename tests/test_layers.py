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


def test_no_module_is_over_800_lines() -> None:
    """Issue 30's size target: a module over 800 lines is split along its seams."""
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in (ROOT / "sentinel").rglob("*.py")
    }
    assert {p: n for p, n in sizes.items() if n > 800} == {}


def test_the_split_modules_keep_their_import_paths() -> None:
    """What moved out of orm/attach.py, detector/graph.py and detector/detector.py
    is still importable where the other layers, the tests and the docs import it."""
    code = (
        "from sentinel.orm.attach import Attachment, attach, attachments, detach\n"
        "from sentinel.orm.attach import _INTEGRATIONS\n"
        "from sentinel.orm import Attachment as A, attach as a\n"
        "assert A is Attachment and a is attach\n"
        "from sentinel.detector.graph import Channel, EventGraph, Key, Mode, Subscription\n"
        "from sentinel.detector.detector import TXN_BEGIN, EventDetector, t_init\n"
        "from sentinel.detector import EventDetector as D, EventGraph as G\n"
        "assert D is EventDetector and G is EventGraph\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
