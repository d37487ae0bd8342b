"""A faster start for a local Spark driver JVM: class-data sharing and the C1 JIT.

A local Spark replay spends most of its fixed cost starting the JVM and loading
Spark's classes for the first job (about 8 s of a 10M-row replay's 31 s on two
cores). Two HotSpot features cut it by about half:

class-data sharing (CDS)
    The first local session dumps the classes it loaded into an archive
    (``-XX:ArchiveClassesAtExit``) when its JVM exits; later sessions map the
    archive (``-XX:SharedArchiveFile``) instead of loading and verifying those
    classes again. The archive lives in the cache directory (about 150 MB; one
    per Java installation and PySpark installation): ``cache_dir``, else
    ``$SENTINEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/sentinel``, else
    ``~/.cache/sentinel``. Delete it at any time; the next session writes it
    again.
the C1 compiler only (``-XX:TieredStopAtLevel=1``)
    In replay the JVM only schedules tasks and passes Arrow batches; the work is
    in the Python workers. C1 alone compiles sooner and spends less start-up
    time than the two-tier compiler, at a lower peak speed that matters little
    here.

An archive is used only when it is complete: the dumping JVM writes a file of
its own, and the process that started it moves it into place only after that
JVM exited normally. That happens at the interpreter's exit, which waits for the
dump once: about 10-15 s, and the dumping session itself starts about 2 s slower.
A JVM that cannot use an archive (another Java or Spark, a changed class path)
ignores it; a damaged archive that stops the JVM from starting (the JVM then
leaves an ``hs_err_pid*.log`` in the working directory) is deleted by
:func:`sentinel.replay.spark.session`, which then starts without one. Nothing
here applies to a remote or cluster session, to a JVM without CDS (OpenJ9, Java
before 13, a JDK without its base archive), or when the session's configuration
sets ``spark.driver.extraJavaOptions`` itself.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["JvmStart", "cache_directory", "plan_start"]

log = logging.getLogger(__name__)

CACHE_ENV = "SENTINEL_CACHE_DIR"
#: Java options for a quick start (HotSpot; every supported Java has them).
C1_ONLY = "-XX:TieredStopAtLevel=1"
#: CDS's own messages (e.g. classes of signed jars it skips) stay off the console.
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: A dump left by a process that died before moving it into place is removed
#: after this long.
STALE_DUMP_SECONDS = 24 * 3600


@dataclass(frozen=True)
class JvmStart:
    """The driver JVM options of a quick start (``options``) and, when this JVM
    is to write the class archive, the file it writes (``dump``) and where that
    goes once complete (``archive``)."""

    options: str
    archive: Path | None = None
    dump: Path | None = None


def cache_directory(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where the class archive lives (see the module docs)."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sentinel"


def _java_home() -> Path | None:
    """The Java installation PySpark's launcher runs (``JAVA_HOME``, else the
    ``java`` on ``PATH``)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not java or not Path(java).exists():
        return None
    return Path(java).resolve().parent.parent


def _java_release(home: Path) -> tuple[int, str] | None:
    """``(major version, full runtime version)`` from the installation's
    ``release`` file, or ``None`` when it cannot be read."""
    try:
        text = (home / "release").read_text()
    except OSError:
        return None
    version = re.search(r'^JAVA_VERSION="([^"]+)"', text, re.M)
    if version is None:
        return None
    parts = version.group(1).split(".")
    try:
        major = int(parts[1] if parts[0] == "1" else parts[0])
    except (IndexError, ValueError):
        return None
    runtime = re.search(r'^JAVA_RUNTIME_VERSION="([^"]+)"', text, re.M)
    return major, runtime.group(1) if runtime else version.group(1)


def _spark_home() -> str:
    env = os.environ.get("SPARK_HOME")
    if env:
        return env
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent)


def plan_start(cache_dir: str | os.PathLike[str] | None = None) -> JvmStart:
    """The Java options of a quick local start (see the module docs): C1 only,
    and the class archive, to use or to write, where the Java installation
    supports it and the cache directory can be written."""
    home = _java_home()
    release = None if home is None else _java_release(home)
    if home is None or release is None:
        return JvmStart(C1_ONLY)
    major, runtime = release
    if major < 13 or not (home / "lib" / "server" / "classes.jsa").is_file():
        return JvmStart(C1_ONLY)  # no dynamic archives, or no base archive to extend
    import pyspark

    key = "\n".join([str(home), runtime, _spark_home(), pyspark.__version__])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    directory = cache_directory(cache_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _remove_stale_dumps(directory)
    except OSError as err:
        log.debug("no JVM class archive: cannot use %s (%s)", directory, err)
        return JvmStart(C1_ONLY)
    archive = directory / f"spark-classes-{digest}.jsa"
    if archive.is_file():
        return JvmStart(f"{C1_ONLY} -XX:SharedArchiveFile={archive} {QUIET_CDS}", archive)
    dump = directory / f"spark-classes-{digest}.{os.getpid()}.dump"
    return JvmStart(f"{C1_ONLY} -XX:ArchiveClassesAtExit={dump} {QUIET_CDS}", archive, dump)


def _remove_stale_dumps(directory: Path) -> None:
    cutoff = time.time() - STALE_DUMP_SECONDS
    for old in directory.glob("spark-classes-*.dump"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


def finish_at_exit(start: JvmStart, spark: Any) -> None:
    """When ``start`` writes the archive: at the interpreter's exit, stop the
    session ``spark``, end its driver JVM (PySpark's launcher process) the way
    PySpark does (closing its standard input), wait for the dump, and move a
    complete one into place."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    if start.dump is None or start.archive is None or proc is None:
        return
    atexit.register(_finish, start.dump, start.archive, proc, spark.stop)


def _finish(
    dump: Path, archive: Path, proc: subprocess.Popen[bytes], stop: Callable[[], None]
) -> None:
    try:
        with contextlib.suppress(Exception):
            stop()  # PySpark's own servers first: they would report the JVM's exit
        if proc.poll() is None:
            log.warning(
                "sentinel: saving the Spark JVM's class archive for faster starts "
                "(once; about 10 s): %s",
                archive,
            )
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the JVM exits on end of input, dumping its classes
        try:
            code = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            log.warning("the Spark driver JVM did not exit; no class archive written")
            return
        if code == 0 and dump.is_file() and dump.stat().st_size > 0:
            os.replace(dump, archive)
    except OSError as err:
        log.debug("no JVM class archive written: %s", err)
    finally:
        with contextlib.suppress(OSError):
            dump.unlink()
