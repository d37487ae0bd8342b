"""A local Spark driver's quick start: the Java options planned for each Java
installation and cache state, the class archive moved into place only after a
normal JVM exit, and (with a real JVM) the archive written, used, and a damaged
one replaced."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sentinel.replay import jvm
from sentinel.replay.jvm import C1_ONLY, JvmStart, cache_directory, plan_start

pytest.importorskip("pyspark")


def fake_java(tmp_path: Path, version: str, *, base_archive: bool = True) -> Path:
    """A Java installation's layout (``bin/java``, ``release``, the base archive)."""
    home = tmp_path / f"java-{version}"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "release").write_text(f'JAVA_VERSION="{version}"\nJAVA_RUNTIME_VERSION="{version}+1"\n')
    if base_archive:
        (home / "lib" / "server").mkdir(parents=True)
        (home / "lib" / "server" / "classes.jsa").write_bytes(b"base")
    return home


@pytest.fixture
def java17(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Java 17 with dynamic archives, and a Spark installation with one jar and
    an empty conf directory."""
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, "17.0.15")))
    spark_home = tmp_path / "spark"
    (spark_home / "jars").mkdir(parents=True)
    (spark_home / "conf").mkdir()
    (spark_home / "jars" / "spark-core.jar").write_bytes(b"jar")
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    for var in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        monkeypatch.delenv(var, raising=False)
    return spark_home


def test_the_cache_directory_is_the_argument_then_the_environment_then_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTINEL_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory(tmp_path / "arg") == tmp_path / "arg"
    assert cache_directory() == tmp_path / "env"
    monkeypatch.delenv("SENTINEL_CACHE_DIR")
    assert cache_directory() == tmp_path / "xdg" / "sentinel"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_directory() == Path.home() / ".cache" / "sentinel"


def test_a_first_start_writes_the_archive_and_later_ones_use_it(
    tmp_path: Path, java17: Path
) -> None:
    first = plan_start(tmp_path / "cache")
    assert first.archive is not None and first.dump is not None
    assert first.archive.parent == first.dump.parent == tmp_path / "cache"
    assert first.options.split()[:2] == [C1_ONLY, f"-XX:ArchiveClassesAtExit='{first.dump}'"]
    assert not first.archive.exists()
    assert plan_start(tmp_path / "cache").dump != first.dump  # each process its own dump
    first.archive.write_bytes(b"archive")
    later = plan_start(tmp_path / "cache")
    assert later.dump is None and later.archive == first.archive
    assert later.options.split()[:2] == [C1_ONLY, f"-XX:SharedArchiveFile='{first.archive}'"]


def test_a_cache_path_with_a_quote_gets_no_archive(tmp_path: Path, java17: Path) -> None:
    assert plan_start(tmp_path / "it's") == JvmStart(C1_ONLY)


def test_another_java_or_spark_installation_has_its_own_archive(
    tmp_path: Path, java17: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = plan_start(tmp_path).archive
    (java17 / "jars" / "spark-core.jar").write_bytes(b"reinstalled")
    b = plan_start(tmp_path).archive
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, "21.0.2")))
    c = plan_start(tmp_path).archive
    assert None not in (a, b, c) and len({a, b, c}) == 3


@pytest.mark.parametrize(
    ("version", "base_archive"),
    [("1.8.0_392", True), ("11.0.21", True), ("17.0.15", False), ("garbled", True)],
)
def test_a_java_without_dynamic_archives_gets_the_c1_option_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, base_archive: bool
) -> None:
    home = fake_java(tmp_path, version, base_archive=base_archive)
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert plan_start(tmp_path / "cache") == JvmStart(C1_ONLY)
    assert not (tmp_path / "cache").exists()


def test_no_archive_on_windows(
    tmp_path: Path, java17: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jvm.os, "name", "nt")
    assert plan_start(tmp_path / "cache") == JvmStart(C1_ONLY)


@pytest.mark.parametrize("variable", [None, "SPARK_CONF_DIR", "HADOOP_CONF_DIR"])
def test_a_non_empty_directory_on_the_class_path_means_no_archive(
    tmp_path: Path, java17: Path, monkeypatch: pytest.MonkeyPatch, variable: str | None
) -> None:
    conf = java17 / "conf" if variable is None else tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "log4j2.properties").write_text("rootLogger.level = warn\n")
    if variable is not None:
        monkeypatch.setenv(variable, str(conf))
    assert plan_start(tmp_path / "cache") == JvmStart(C1_ONLY)


def test_an_unusable_cache_directory_means_no_archive(
    tmp_path: Path, java17: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert plan_start(blocker / "cache") == JvmStart(C1_ONLY)
    assert "no JVM class archive" in caplog.text  # the directory named cannot be used
    monkeypatch.setattr(jvm.os, "access", lambda *_: False)  # read-only (root may write anyway)
    assert plan_start(tmp_path / "cache") == JvmStart(C1_ONLY)


def test_no_home_directory_means_no_archive(java17: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SENTINEL_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(jvm.Path, "home", staticmethod(no_home))
    assert plan_start() == JvmStart(C1_ONLY)


def test_old_dumps_and_archives_no_session_used_lately_are_removed(
    tmp_path: Path, java17: Path
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    old, recent = cache / "spark-classes-x.1.dump", cache / "spark-classes-x.2.dump"
    unused, used = cache / "spark-classes-y.jsa", plan_start(cache).archive
    assert used is not None
    for f in (old, recent, unused, used):
        f.write_bytes(b"x")
    for f, age in ((old, jvm.STALE_DUMP_SECONDS), (unused, jvm.UNUSED_ARCHIVE_SECONDS)):
        then = time.time() - age - 60
        os.utime(f, (then, then))
    then = time.time() - jvm.UNUSED_ARCHIVE_SECONDS + 3600
    os.utime(used, (then, then))
    assert plan_start(cache).archive == used  # used now: its clock starts again
    assert not old.exists() and recent.exists() and not unused.exists()
    assert used.stat().st_mtime > time.time() - 60


def test_options_reach_the_launcher_before_the_users_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    with jvm.submit_options("-XX:A"):
        assert os.environ["SPARK_SUBMIT_OPTS"] == "-XX:A"
    assert "SPARK_SUBMIT_OPTS" not in os.environ
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Xmx2g")
    with pytest.raises(ValueError), jvm.submit_options("-XX:A"):
        assert os.environ["SPARK_SUBMIT_OPTS"] == "-XX:A -Xmx2g"
        raise ValueError
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-Xmx2g"


def _jvm_like(dump: Path, code: int) -> subprocess.Popen[bytes]:
    """A process that, like the driver JVM, writes its dump and exits with
    ``code`` when its standard input ends."""
    script = (
        f"import sys; sys.stdin.read(); open({str(dump)!r}, 'w').write('dump'); sys.exit({code})"
    )
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def test_a_dump_is_moved_into_place_after_the_jvm_exits_normally(tmp_path: Path) -> None:
    dump, archive = tmp_path / "a.1.dump", tmp_path / "a.jsa"
    stopped: list[bool] = []
    jvm._finish(dump, archive, _jvm_like(dump, 0), lambda: stopped.append(True))
    assert stopped == [True]
    assert archive.read_text() == "dump" and not dump.exists()


def test_the_dump_of_a_jvm_that_failed_is_discarded_and_not_tried_again_soon(
    tmp_path: Path, java17: Path
) -> None:
    start = plan_start(tmp_path / "cache")
    assert start.dump is not None and start.archive is not None
    jvm._finish(start.dump, start.archive, _jvm_like(start.dump, 1), lambda: None)
    assert not start.archive.exists() and not start.dump.exists()
    assert plan_start(tmp_path / "cache") == JvmStart(C1_ONLY)


# -- with a real JVM ---------------------------------------------------------------------
_RUN = textwrap.dedent(
    """
    import sys
    from sentinel.replay.spark import session
    spark = session("local[1]", cache_dir=sys.argv[1])
    spark.sparkContext.setLogLevel("ERROR")
    bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    print("options:", " ".join(bean.getInputArguments()))
    print("rows:", spark.range(3).count())
    """
)


def _session_process(cache: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cache.parent,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rows: 3" in proc.stdout
    # The driver JVM's start-up warnings and log4j lines (and, with a damaged
    # archive, the failed first start's) go to a file, not to standard error;
    # what is left there is sentinel's own (the archive being saved, or damaged).
    left = [
        line
        for line in proc.stderr.splitlines()
        if not line.startswith("sentinel: ") and "did not start with" not in line
    ]
    assert left == [], proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.spark
@pytest.mark.slow
def test_a_local_session_writes_uses_and_drops_a_damaged_class_archive(tmp_path: Path) -> None:
    cache = tmp_path / "a cache"  # a space: the options quote their paths
    if plan_start(cache).dump is None:
        pytest.skip("this Java or Spark cannot write class archives (see sentinel.replay.jvm)")
    out = _session_process(cache)
    assert f"-XX:ArchiveClassesAtExit={cache}" in out and C1_ONLY in out
    (archive,) = cache.glob("*.jsa")
    assert not list(cache.glob("*.dump"))

    assert f"-XX:SharedArchiveFile={archive}" in _session_process(cache)

    good = archive.read_bytes()
    archive.chmod(0o644)
    archive.write_bytes(good[: len(good) // 100])  # damaged: the JVM would not start
    out = _session_process(cache)  # started without it
    assert "SharedArchiveFile" not in out and not archive.exists()
