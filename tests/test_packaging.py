"""The distribution as the package index would get it: its name, metadata,
license, extras, entry points and the files an installed sentinel needs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

import sentinel
from sentinel.extras import DISTRIBUTION

pytestmark = pytest.mark.slow

ROOT = Path(sentinel.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=1800,  # the compiled build compiles the hot path: minutes
    )
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [
        n
        for n in wheel.namelist()
        if n.split("/")[0].endswith(".dist-info") and n.endswith("/" + name)
    ]
    return wheel.read(path).decode()


def metadata(wheel: zipfile.ZipFile) -> Message:
    return Parser().parsestr(dist_info(wheel, "METADATA"))


def test_name_version_and_license(wheel: zipfile.ZipFile) -> None:
    meta = metadata(wheel)
    assert meta["Name"] == DISTRIBUTION == "sqlalchemy-sentinel"
    assert meta["Version"] == sentinel.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    license_text = dist_info(wheel, "licenses/LICENSE")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert license_text == (ROOT / "LICENSE").read_text()


def test_classifiers_and_urls(wheel: zipfile.ZipFile) -> None:
    meta = metadata(wheel)
    classifiers = meta.get_all("Classifier")
    for wanted in (
        "Programming Language :: Python :: 3.11",
        "Framework :: Pytest",
        "Typing :: Typed",
        "Topic :: Database",
    ):
        assert wanted in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls["Homepage"] == f"https://pypi.org/project/{DISTRIBUTION}/"
    assert meta["Requires-Python"] == ">=3.11"


def test_extras_local_replay_apart_from_spark(wheel: zipfile.ZipFile) -> None:
    meta = metadata(wheel)
    assert {"replay", "spark", "postgresql", "mysql", "dev"} <= set(meta.get_all("Provides-Extra"))
    requires = meta.get_all("Requires-Dist")

    def of(extra: str) -> set[str]:
        """The distributions ``extra`` brings (hatchling inlines an extra that
        includes another)."""
        return {
            re.split(r"[<>=\[;]", r)[0].strip().lower()
            for r in requires
            if re.search(rf"extra == [\"']{extra}[\"']", r)
        }

    assert of("replay") == {"pyarrow", "orjson"}
    assert of("spark") == {"pyarrow", "orjson", "pyspark", "pandas"}


def test_entry_points_and_package_files(wheel: zipfile.ZipFile) -> None:
    entry_points = dist_info(wheel, "entry_points.txt")
    assert "[console_scripts]\nsentinel = sentinel.cli:main" in entry_points
    assert "[pytest11]\nsentinel = sentinel.pytest_plugin" in entry_points
    names = set(wheel.namelist())
    for needed in (
        "sentinel/py.typed",
        "sentinel/pytest_plugin.py",
        "sentinel/testing.py",
        "sentinel/cli/__init__.py",
        "sentinel/migrations/env.py",
        "sentinel/algebra/snoop.lark",
    ):
        assert needed in names


def test_the_wheel_is_the_build_the_environment_asks_for(wheel: zipfile.ZipFile) -> None:
    """``SENTINEL_PURE=1`` (the pure pass of ``make test``) builds a pure wheel;
    otherwise the wheel carries the compiled hot path, every module of it, with
    its sources and a platform tag. Its record says which."""
    import json

    from sentinel import _build

    names = set(wheel.namelist())
    record = json.loads(wheel.read("sentinel/_build_record.json"))
    assert record["mode"] == "wheel"
    extensions = {n for n in names if n.endswith(".so") or n.endswith(".pyd")}
    tags = [line for line in dist_info(wheel, "WHEEL").splitlines() if line.startswith("Tag:")]
    if os.environ.get("SENTINEL_PURE", "") not in ("", "0"):
        assert record["compiled"] == [] and "SENTINEL_PURE" in record["note"]
        assert extensions == set()
        assert tags == ["Tag: py3-none-any"]
    elif os.environ.get("SENTINEL_EXPECT_BUILD") == "compiled":
        assert record["compiled"] == list(_build.HOT_PATH)
        for name in _build.HOT_PATH:
            path = name.replace(".", "/")
            assert f"{path}.py" in names
            assert any(e.startswith(path + ".") for e in extensions), name
        assert tags and all("-none-any" not in t for t in tags)
