"""The layers of docs/architecture.md hold: pyproject's import-linter contracts
("Layers as contracts") are kept by the source tree, and the layers below the ORM
load without it."""

from __future__ import annotations

import ast
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


def test_the_global_detector_loads_without_the_orm_layer() -> None:
    """The cursor and its lease use the log layer's server clock, not the ORM's,
    and the service gets its action runner handed in
    (``GlobalDetector(actions=sentinel.orm.global_actions)``)."""
    code = (
        "import sys, sentinel.global_detector\n"
        "assert 'sentinel.orm' not in sys.modules, sorted(m for m in sys.modules "
        "if m.startswith('sentinel.orm'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _module_imports(path: Path, name: str, is_package: bool) -> set[str]:
    """The sentinel modules ``path`` imports when it is imported or runs: its
    imports at module level and inside functions, but not the type-only ones
    (under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    here = name.split(".") if is_package else name.split(".")[:-1]

    def walk(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                walk(node.orelse)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here[: len(here) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(node.body)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, field, []):
                        walk(child.body if isinstance(child, ast.ExceptHandler) else [child])

    walk(tree.body)
    return found


def _package_edges() -> dict[str, set[str]]:
    """module -> the modules of its own package it imports (not the package's
    face, ``__init__``)."""
    src = ROOT / "sentinel"
    modules: dict[str, tuple[Path, bool]] = {}
    for path in src.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    edges: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        home = name if package else name.rsplit(".", 1)[0]
        for target in _module_imports(path, name, package):
            same_package = target.rsplit(".", 1)[0] == home
            if target in modules and target != name and same_package and not modules[target][1]:
                edges.setdefault(name, set()).add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[str]:
    cycles = []
    for start in edges:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path_ = stack.pop()
            for nxt in edges.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join((*path_, nxt)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, (*path_, nxt)))
    return sorted(cycles)


def test_no_import_cycle_inside_a_package() -> None:
    """Counting the imports inside functions too (only type-only ones, under
    ``TYPE_CHECKING``, are left out), the modules of a package import each
    other one way: what a lower module builds of a higher one is installed by
    the package's ``__init__`` from one list, not imported
    (docs/architecture.md, "Layers as contracts")."""
    cycles = _cycles(_package_edges())
    assert not cycles, "an import cycle inside a package:\n" + "\n".join(cycles)


def test_a_lower_module_imported_alone_builds_the_operators_above_it() -> None:
    """``E + [t]``, ``E.where(...)`` and ``term.over(...)`` build classes of the
    modules above their own through ``BUILT_ABOVE``, which the package's
    ``__init__`` fills (importing the lower module alone runs it first)."""
    code = (
        "from sentinel.algebra.expressions import Primitive\n"
        "from sentinel.ode.terms import Letter\n"
        "e = Primitive('E')\n"
        "assert type(e + 5).__name__ == 'Relative', type(e + 5)\n"
        "assert type(e.where(n=1)).__name__ == 'Masked'\n"
        "assert type(Letter(e).over(e)).__name__ == 'OdeEvent'\n"
        "import sentinel.algebra.expressions as x, sentinel.ode.terms as t\n"
        "assert set(x.BUILT_ABOVE) == {'relative', 'masked'}, x.BUILT_ABOVE\n"
        "assert set(t.BUILT_ABOVE) == {'OdeEvent'}, t.BUILT_ABOVE\n"
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
