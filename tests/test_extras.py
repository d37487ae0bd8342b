"""Optional dependencies: each feature that needs an extra says which one to
install when its packages are missing, and the extras declared in pyproject.toml
are the ones the messages name."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from sentinel.extras import DISTRIBUTION, EXTRAS

ROOT = Path(__file__).resolve().parent.parent


def without(modules: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which ``modules`` cannot be imported."""
    block = "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run(
        [sys.executable, "-c", "import sys\n" + block + textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("missing", ["pyarrow"])
def test_replay_without_its_packages_names_the_replay_extra(missing: str) -> None:
    done = without(
        [missing],
        """
        from sentinel.errors import MissingExtraError
        try:
            import sentinel.replay
        except MissingExtraError as err:
            print(err.extra, err.missing, "|", err)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"replay {missing} | replay needs the 'replay' extra ({missing} is not installed): "
        f"pip install '{DISTRIBUTION}[replay]'"
    )


def test_the_spark_engine_without_pyspark_names_the_spark_extra(tmp_path: Path) -> None:
    done = without(
        ["pyspark"],
        f"""
        from sentinel import LocalEventDetector
        from sentinel.errors import MissingExtraError
        from sentinel.replay import replay
        try:
            replay({str(tmp_path)!r}, LocalEventDetector(), engine="spark")
        except MissingExtraError as err:
            print(err)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "the Spark engine needs the 'spark' extra (pyspark is not installed): "
        f"pip install '{DISTRIBUTION}[spark]'"
    )


def test_the_streaming_global_detector_without_pyspark_names_the_spark_extra() -> None:
    done = without(
        ["pyspark"],
        """
        from sentinel.errors import MissingExtraError
        import sentinel.global_detector  # the service needs no Spark
        try:
            import sentinel.global_detector.streaming
        except MissingExtraError as err:
            print(err)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "the Spark streaming global detector needs the 'spark' extra (pyspark is not "
        f"installed): pip install '{DISTRIBUTION}[spark]'"
    )


def test_the_cli_names_the_extra_in_one_line() -> None:
    done = without(
        ["pyarrow"],
        """
        from sentinel.cli import main
        main(["replay", "--rules", "x:y", "--source", "sqlite:///nothing.db"])
        """,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "Error: replay needs the 'replay' extra (pyarrow is not installed): "
        f"pip install '{DISTRIBUTION}[replay]'"
    )


def test_a_missing_database_driver_names_its_extra() -> None:
    done = without(
        ["psycopg"],
        """
        from sentinel.cli import main
        main(["db", "current", "--url", "postgresql+psycopg://nobody@127.0.0.1:1/none"])
        """,
    )
    assert done.returncode == 1
    assert f"pip install '{DISTRIBUTION}[postgresql]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_pyproject_declares_the_extras_the_messages_name() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert project["name"] == DISTRIBUTION
    declared = project["optional-dependencies"]

    def modules(extra: str) -> set[str]:
        found: set[str] = set()
        for requirement in declared[extra]:
            name = re.match(r"[A-Za-z0-9_.-]+", requirement)
            assert name is not None
            included = re.fullmatch(rf"{DISTRIBUTION}\[(\w+)\]", requirement)
            if included:
                found |= modules(included.group(1))
            else:
                found.add(name.group(0).lower())
        return found

    for extra, names in EXTRAS.items():
        assert modules(extra) == set(names), extra
    # The Spark extra includes local replay's; local replay does not need PySpark.
    assert f"{DISTRIBUTION}[replay]" in declared["spark"]
    assert "pyspark" not in modules("replay") and "pandas" not in modules("replay")


def test_log_firings_runs_on_a_base_install_and_names_the_extra_its_trees_need(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    done = without(
        ["pyarrow"],
        f"""
        from click.testing import CliRunner
        from sentinel.cli import main
        from sentinel.log import migrate
        migrate.upgrade({url!r})
        plain = CliRunner().invoke(main, ["log", "firings", "--url", {url!r}])
        print(plain.exit_code, plain.output.strip())
        trees = CliRunner().invoke(
            main, ["log", "firings", "--url", {url!r}, "--rules", "myapp.rules:detector"]
        )
        print(trees.exit_code, trees.output.strip())
        """,
    )
    assert done.returncode == 0, done.stderr
    plain, trees = done.stdout.strip().splitlines()
    assert plain == "0 no rule firings"
    assert trees.startswith("1 Error: sentinel log firings --rules (the trees of operators) ")
    assert f"pip install '{DISTRIBUTION}[replay]'" in trees
