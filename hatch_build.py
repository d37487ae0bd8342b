"""The build hook that compiles sentinel's hot path with mypyc (hatchling).

The modules named in ``sentinel/_build.py`` (``HOT_PATH``) are compiled from the
same ``.py`` files that the pure build runs: there is one implementation. A wheel
gets the extension modules beside the sources (and a platform tag); an editable
install (``pip install -e``) builds them in place, beside the sources, where the
``.pth`` file of the editable install makes Python load them before the ``.py``
files.

``SENTINEL_PURE=1`` at install time gives the pure-Python build. When mypyc or
the C compiler fails, the build goes on as the pure build and says why, on
stderr (pip shows it with ``-v``) and in ``sentinel/_build_record.json``, which
``sentinel --version`` reports: an install never fails for want of a compiler.
``SENTINEL_COMPILE_REQUIRED=1`` makes such a failure fail the build instead
(``make test`` sets it, so CI never tests a pure build it took for compiled).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: The mypy that compiles (mypyc comes with it). Pinned: mypyc's output and the
#: checks it makes depend on its version.
MYPY = "mypy==2.4.1"
RECORD = "sentinel/_build_record.json"
GROUP = "sentinel"  # the shared library: sentinel__mypyc<suffix> at the top level


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def hot_path(root: str) -> list[str]:
    """``HOT_PATH`` from ``sentinel/_build.py``, read without importing sentinel."""
    tree = ast.parse(Path(root, "sentinel", "_build.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "HOT_PATH"
            and node.value is not None
        ):
            return list(ast.literal_eval(node.value))
    raise RuntimeError("sentinel/_build.py defines no HOT_PATH tuple")


def _in_place_artefacts(root: str) -> list[Path]:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    found = list(Path(root, "sentinel").rglob(f"*{suffix}"))
    found += list(Path(root).glob(f"{GROUP}__mypyc*{suffix}"))
    return found


class MypycBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def dependencies(self) -> list[str]:
        if _flag("SENTINEL_PURE"):
            return []
        return [MYPY, "setuptools>=70"]

    _temporary: list[str]

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        for path in getattr(self, "_temporary", ()):
            shutil.rmtree(path, ignore_errors=True)

    def clean(self, versions: list[str]) -> None:
        for path in _in_place_artefacts(self.root):
            path.unlink()

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        editable = version == "editable"
        self._temporary = []
        record: dict[str, Any] = {"mode": "editable" if editable else "wheel", "compiled": []}
        if editable:
            # A pure editable install must not load what an earlier one compiled.
            for path in _in_place_artefacts(self.root):
                path.unlink()
        if _flag("SENTINEL_PURE"):
            record["note"] = "SENTINEL_PURE=1 at install time"
        else:
            work = tempfile.mkdtemp(prefix="sentinel-mypyc-")
            self._temporary.append(work)
            try:
                built = self._compile(work, in_place=editable)
            except _CompileError as exc:
                if editable:  # nothing half-built may stay beside the sources
                    for path in _in_place_artefacts(self.root):
                        path.unlink()
                if _flag("SENTINEL_COMPILE_REQUIRED"):
                    raise RuntimeError(f"sentinel: compiling the hot path failed:\n{exc}") from None
                tail = str(exc).strip().splitlines()[-1:] or ["no output"]
                reason = tail[0] if len(tail[0]) <= 160 else tail[0][:157] + "..."
                record["note"] = f"compilation failed, installed the pure build: {reason}"
                sys.stderr.write(
                    "WARNING: sentinel: compiling the hot path with mypyc failed; "
                    f"installing the pure-Python build instead.\n{exc}\n"
                )
            else:
                record["compiled"] = hot_path(self.root)
                if not editable:
                    lib = Path(work, "lib")
                    for path in built:
                        build_data["force_include"][str(lib / path)] = path
                    build_data["pure_python"] = False
                    build_data["infer_tag"] = True
        text = json.dumps(record, indent=1) + "\n"
        if editable:
            Path(self.root, RECORD).write_text(text, encoding="utf-8")
        else:
            self._temporary.append(tempfile.mkdtemp(prefix="sentinel-record-"))
            out = Path(self._temporary[-1], "_build_record.json")
            out.write_text(text, encoding="utf-8")
            build_data["force_include"][str(out)] = RECORD

    def _compile(self, work: str, *, in_place: bool) -> list[str]:
        """Compile the hot path in a child process (mypy and the C compiler may
        exit the process); return the built files, relative to ``work/lib``, or
        (in place) to the root."""
        paths = [m.replace(".", "/") + ".py" for m in hot_path(self.root)]
        args = [sys.executable, __file__, "--compile", work, "1" if in_place else "0", *paths]
        try:
            proc = subprocess.run(
                args, cwd=self.root, capture_output=True, text=True, timeout=1800, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise _CompileError(str(exc)) from None
        if proc.returncode != 0:
            raise _CompileError((proc.stdout + proc.stderr)[-4000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


class _CompileError(Exception):
    pass


def _compile_main(work: str, in_place: bool, paths: list[str]) -> None:
    """The child process: mypycify, then setuptools' build_ext. Runs in the
    source tree; prints the built files as JSON on its last line."""
    from mypyc.build import mypycify
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    # Third-party packages are not in the build environment: mypy treats them
    # as Any (sentinel's hot path does not use them). So the checks strict mode
    # makes of code typed against them (subclassing Any, returning Any, an
    # ignore that only a third-party stub makes necessary) are off, and only
    # the compiled modules' own errors count (the rest is checked by `make
    # typecheck`, with the packages installed). A fresh cache: what a local
    # .mypy_cache holds, made with those packages, must not decide the build.
    extensions = mypycify(
        [
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--allow-subclassing-any",
            "--no-warn-return-any",
            "--no-warn-unused-ignores",
            f"--cache-dir={os.path.join(work, 'mypy-cache')}",
            *paths,
        ],
        opt_level="3",
        group_name=GROUP,
        target_dir=os.path.join(work, "c"),
    )
    dist = Distribution({"name": "sentinel-hot-path", "ext_modules": extensions})
    cmd = build_ext(dist)
    cmd.inplace = in_place
    cmd.build_lib = os.path.join(work, "lib")
    cmd.build_temp = os.path.join(work, "tmp")
    cmd.ensure_finalized()
    cmd.run()
    # get_outputs() names the files under build_lib even when built in place;
    # their paths below it are the paths below the root.
    lib = Path(work, "lib").resolve()
    built = [str(Path(p).resolve().relative_to(lib)) for p in cmd.get_outputs()]
    shutil.rmtree(os.path.join(work, "tmp"), ignore_errors=True)
    print(json.dumps(built))


if __name__ == "__main__" and sys.argv[1:2] == ["--compile"]:
    _compile_main(sys.argv[2], sys.argv[3] == "1", sys.argv[4:])
