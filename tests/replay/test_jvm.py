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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, "17.0.15")))
    first = plan_start(tmp_path / "cache")
    assert first.archive is not None and first.dump is not None
    assert first.archive.parent == first.dump.parent == tmp_path / "cache"
    assert first.options.split()[:2] == [C1_ONLY, f"-XX:ArchiveClassesAtExit={first.dump}"]
    assert not first.archive.exists()
    first.archive.write_bytes(b"archive")
    later = plan_start(tmp_path / "cache")
    assert later.dump is None and later.archive == first.archive
    assert later.options.split()[:2] == [C1_ONLY, f"-XX:SharedArchiveFile={first.archive}"]


def test_another_java_installation_has_its_own_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, "17.0.15")))
    a = plan_start(tmp_path).archive
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, "21.0.2")))
    b = plan_start(tmp_path).archive
    assert a is not None and b is not None and a != b


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


def test_an_unwritable_cache_directory_means_no_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, "17.0.15")))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert plan_start(blocker / "cache") == JvmStart(C1_ONLY)


def test_dumps_of_processes_that_died_long_ago_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, "17.0.15")))
    cache = tmp_path / "cache"
    cache.mkdir()
    old, recent = cache / "spark-classes-x.1.dump", cache / "spark-classes-x.2.dump"
    old.write_bytes(b"partial")
    recent.write_bytes(b"in progress")
    stale = time.time() - jvm.STALE_DUMP_SECONDS - 60
    os.utime(old, (stale, stale))
    plan_start(cache)
    assert not old.exists() and recent.exists()


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


def test_the_dump_of_a_jvm_that_failed_is_discarded(tmp_path: Path) -> None:
    dump, archive = tmp_path / "a.1.dump", tmp_path / "a.jsa"
    jvm._finish(dump, archive, _jvm_like(dump, 1), lambda: None)
    assert not archive.exists() and not dump.exists()


# -- with a real JVM ---------------------------------------------------------------------
_RUN = textwrap.dedent(
    """
    import sys
    from sentinel.replay.spark import session
    spark = session("local[1]", cache_dir=sys.argv[1])
    spark.sparkContext.setLogLevel("ERROR")
    print("options:", spark.sparkContext.getConf().get("spark.driver.extraJavaOptions"))
    print("rows:", spark.range(3).count())
    """
)


def _session_process(cache: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
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
    return proc.stdout


@pytest.mark.spark
@pytest.mark.slow
def test_a_local_session_writes_uses_and_replaces_its_class_archive(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    if plan_start(cache).dump is None:
        pytest.skip("this Java cannot write class archives (see sentinel.replay.jvm)")
    out = _session_process(cache)
    assert "-XX:ArchiveClassesAtExit=" in out
    (archive,) = cache.glob("*.jsa")
    assert not list(cache.glob("*.dump"))

    assert f"-XX:SharedArchiveFile={archive}" in _session_process(cache)

    good = archive.read_bytes()
    archive.chmod(0o644)
    archive.write_bytes(good[: len(good) // 100])  # damaged: the JVM would not start
    _session_process(cache)  # started without it
    assert not archive.exists() or archive.read_bytes() == good
