"""Which build runs (compiled with mypyc, or pure Python), and that it is the one
the environment expects: ``make test`` runs the suite once with
``SENTINEL_EXPECT_BUILD=compiled`` and once, on the pure build, with ``pure``, so
neither pass can silently test the other build."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sentinel import _build
from sentinel.cli import main

EXPECTED = os.environ.get("SENTINEL_EXPECT_BUILD")


@pytest.mark.skipif(EXPECTED is None, reason="SENTINEL_EXPECT_BUILD is not set (make test sets it)")
def test_the_running_build_is_the_expected_one() -> None:
    assert EXPECTED in ("compiled", "pure"), EXPECTED
    if EXPECTED == "compiled":
        assert _build.COMPILED, _build.describe()
        # every module of the hot path, not some: a half-compiled build is a bug
        assert _build.MODULES == _build.HOT_PATH
        assert _build.stale() == []
    else:
        assert not _build.COMPILED, _build.describe()
        assert _build.MODULES == ()


def test_modules_are_reported_by_where_they_load_from() -> None:
    for name in _build.HOT_PATH:
        module = importlib.import_module(name)
        compiled = str(module.__file__).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
        assert (name in _build.MODULES) == compiled, name


def test_version_names_the_build() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("sentinel, version ")
    assert _build.describe() in result.output
    assert ("compiled build" in result.output) == _build.COMPILED


def test_build_module_checks_the_expectation() -> None:
    wrong = "pure" if _build.COMPILED else "compiled"
    env = {**os.environ, "SENTINEL_EXPECT_BUILD": wrong}
    run = subprocess.run(
        [sys.executable, "-m", "sentinel._build"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"expected the {wrong} build" in run.stdout


def test_a_changed_source_is_reported_stale(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    if not _build.COMPILED:
        pytest.skip("the pure build has nothing compiled to go stale")
    name = _build.MODULES[0]
    module = importlib.import_module(name)
    origin = str(module.__file__)
    source = os.path.join(os.path.dirname(origin), name.rsplit(".", 1)[1] + ".py")
    monkeypatch.setattr(_build, "_RECORDED", {"mode": "editable"})
    built = os.stat(origin).st_mtime
    real_stat = os.stat

    def newer_source(path: str, *a: object, **kw: object) -> os.stat_result:
        st = real_stat(path)
        if path == source:
            return os.stat_result((*st[:8], built + 10, st[9]))
        return st

    monkeypatch.setattr(_build.os, "stat", newer_source)
    assert _build.stale() == [name]
    assert "STALE" in _build.describe()
