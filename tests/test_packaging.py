"""The distribution as the package index would get it: its name, metadata,
license, extras, entry points and the files an installed sentinel needs, built
with ``python -m build`` and checked with ``twine check`` as a release is."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
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
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An sdist and a wheel built from the sources by ``python -m build`` (the
    wheel from the sdist, as the package index's users would build it)."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> zipfile.ZipFile:
    (path,) = dist.glob("*.whl")
    return zipfile.ZipFile(path)


def test_twine_accepts_both_files(dist: Path) -> None:
    files = sorted(str(p) for p in dist.iterdir())
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_the_wheel_is_pure_python(wheel: zipfile.ZipFile) -> None:
    """One build: no extension module, and the tag the package index accepts
    from any platform."""
    tags = [line for line in dist_info(wheel, "WHEEL").splitlines() if line.startswith("Tag:")]
    assert tags == ["Tag: py3-none-any"]
    assert [n for n in wheel.namelist() if n.endswith((".so", ".pyd", ".c"))] == []
    assert Path(wheel.filename).name.endswith("-py3-none-any.whl")


def test_the_sdist_holds_the_sources_and_tests_but_no_tooling(dist: Path) -> None:
    (path,) = dist.glob("*.tar.gz")
    with tarfile.open(path) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in (
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "sentinel/__init__.py",
        "migrations/env.py",
        "tests/conftest.py",
        "docs/guide.md",
    ):
        assert needed in names, needed
    noise = sorted(
        n for n in names if n.split("/")[0] in {".ci", "bench", ".github", ".venv", "build"}
    )
    assert noise == []


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
    # the Pythons noxfile.py runs the suite on, and no other
    assert sorted(
        c for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ) == [f"Programming Language :: Python :: 3.{minor}" for minor in (11, 12, 13)]
    for wanted in (
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

    assert of("replay") == {"pyarrow"}
    assert of("spark") == {"pyarrow", "pyspark", "pandas"}
    # the log writer encodes with orjson: a base install has it
    assert any(re.match(r"orjson\b", r) and "extra ==" not in r for r in requires)


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
        # sentinel ui's templates and static files (read at run time)
        "sentinel/ui/templates/base.html",
        "sentinel/ui/templates/firing.html",
        "sentinel/ui/static/ui.js",
        "sentinel/ui/static/ui.css",
    ):
        assert needed in names
