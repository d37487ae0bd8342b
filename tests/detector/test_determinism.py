"""The event graph is the same in every process: node ids (and so the order in
which nodes of one height see an instant, and ``sentinel graph``'s output) do
not depend on Python's hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
from sentinel import LocalEventDetector
det = LocalEventDetector()
for name in ("E1", "E2", "E3", "E4"):
    det.explicit(name)
det.rule("x", "(E1 ^ E2) ; (E3 | E4)", action=print)
det.rule("y", "A*(E1, E2 ^ E3, E4)", action=print, context="cumulative")
det.rule("z", "NOT(E2)[E1 ^ E4, E3] ; (E1 ; E2)", action=print, context="chronicle")
det.signal("E1")
print("\\n".join(det.graph.describe()))
from sentinel.cli.graph import _dot
print(_dot(det))
"""


def describe(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, cwd=ROOT,
        check=True,
    )  # fmt: skip
    return out.stdout


def test_node_ids_do_not_depend_on_the_hash_seed() -> None:
    # Node ids used to follow a set's order, and these seeds numbered the
    # nodes differently.
    outputs = {describe(str(seed)) for seed in range(8)}
    assert len(outputs) == 1, "\n---\n".join(sorted(outputs))
    (shown,) = outputs
    assert shown.count("\n#") >= 8  # the rules' nodes, one line each
    assert "digraph" in shown and "-> r2" in shown  # sentinel graph --dot's output too
