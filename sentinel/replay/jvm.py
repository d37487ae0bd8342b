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
    in the Python workers (except for a DataFrame source, which Spark shuffles
    and sorts first). C1 alone compiles sooner and spends less start-up time
    than the two-tier compiler, at a lower peak speed that matters little here.

The options reach the driver JVM through ``SPARK_SUBMIT_OPTS``, before the
user's own (``spark.driver.extraJavaOptions``, ``SPARK_SUBMIT_OPTS``), which win
where they conflict.

An archive is used only when it is complete: the dumping JVM writes a file of
its own, and the process that started it moves it into place only after that
JVM exited normally. That happens at the interpreter's exit, which waits for the
dump once: about 10-15 s, and the dumping session itself starts about 2 s slower.
A process killed before its exit handlers run leaves its dump behind (removed
after a day) and the next session dumps again. An archive no session used for
30 days is removed (one of a Java or Spark since replaced). A JVM that fails to dump (an
unwritable directory, a full disk) leaves a marker, and no session tries again
for a week.

The archive's name covers the Java installation and Spark's jars, so a
reinstalled PySpark or Java gets a new one. A damaged archive that stops the JVM
from starting (the JVM then leaves an ``hs_err_pid*.log`` in the working
directory) is deleted by :func:`sentinel.replay.spark.session`, which starts
without it. The archive is not used on Windows, with a Java without dynamic
archives (before 13, OpenJ9, a JDK without its base archive), or when a
non-empty directory is on the driver's class path (``SPARK_CONF_DIR`` or
``$SPARK_HOME/conf``, ``HADOOP_CONF_DIR``, ``YARN_CONF_DIR``: HotSpot cannot
archive with one); those start with the C1 option only. Nothing here applies to
a remote or cluster session.
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
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["JvmStart", "cache_directory", "finish_at_exit", "plan_start", "submit_options"]

log = logging.getLogger(__name__)

CACHE_ENV = "SENTINEL_CACHE_DIR"
#: Java options for a quick start (HotSpot; every supported Java has them).
C1_ONLY = "-XX:TieredStopAtLevel=1"
#: CDS's own messages (e.g. classes of signed jars it skips) stay off the console.
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: A dump left by a process that died before moving it into place is removed
#: after this long.
STALE_DUMP_SECONDS = 24 * 3600
#: An archive no session used for this long is removed.
UNUSED_ARCHIVE_SECONDS = 30 * 24 * 3600
#: After a JVM failed to write the archive, no other tries for this long.
RETRY_FAILED_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class JvmStart:
    """The driver JVM options of a quick start (``options``) and, when this JVM
    is to write the class archive, the file it writes (``dump``) and where that
    goes once complete (``archive``)."""

    options: str
    archive: Path | None = None
    dump: Path | None = None


def cache_directory(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where the class archive lives (see the module docs). Raises
    :class:`RuntimeError` when no directory is given and there is no home
    directory to default to."""
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


def _spark_home() -> Path:
    env = os.environ.get("SPARK_HOME")
    if env:
        return Path(env)
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _class_path_directories(spark_home: Path) -> list[Path]:
    """The directories Spark's launcher puts on the driver's class path."""
    conf = os.environ.get("SPARK_CONF_DIR")
    dirs = [Path(conf) if conf else spark_home / "conf"]
    dirs += [Path(os.environ[v]) for v in ("HADOOP_CONF_DIR", "YARN_CONF_DIR") if os.environ.get(v)]
    return dirs


def _fingerprint(java: Path, runtime: str, spark_home: Path) -> str:
    """What an archive depends on: the Java installation and its modules, and
    Spark's jars (names, sizes, modification times), so that a reinstalled
    PySpark or Java gets a new archive instead of one the JVM would ignore."""
    import pyspark

    parts = [str(java), runtime, str(spark_home), pyspark.__version__]
    for path in [java / "lib" / "modules", *sorted((spark_home / "jars").glob("*.jar"))]:
        with contextlib.suppress(OSError):
            st = path.stat()
            parts.append(f"{path.name} {st.st_size} {st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _quoted(path: Path) -> str | None:
    """``path`` as one argument of Spark's launcher option strings (single
    quotes keep spaces and backslashes), or ``None`` if it holds a quote."""
    text = str(path)
    return None if "'" in text else f"'{text}'"


def plan_start(cache_dir: str | os.PathLike[str] | None = None) -> JvmStart:
    """The Java options of a quick local start (see the module docs): C1 only,
    and the class archive, to use or to write, where the Java installation
    supports it and the cache directory can be written."""
    if os.name == "nt":
        # The driver JVM does not see its input end there, so it would not exit
        # (and dump) when asked.
        return JvmStart(C1_ONLY)
    home = _java_home()
    release = None if home is None else _java_release(home)
    if home is None or release is None:
        return JvmStart(C1_ONLY)
    major, runtime = release
    if major < 13 or not (home / "lib" / "server" / "classes.jsa").is_file():
        return JvmStart(C1_ONLY)  # no dynamic archives, or no base archive to extend
    spark_home = _spark_home()
    for d in _class_path_directories(spark_home):
        with contextlib.suppress(OSError):
            if d.is_dir() and any(d.iterdir()):
                log.debug("no JVM class archive: %s is a non-empty class path directory", d)
                return JvmStart(C1_ONLY)  # HotSpot archives no class path with one
    try:
        directory = cache_directory(cache_dir)
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(f"{directory} is not writable")
        _remove_stale(directory)
    except (OSError, RuntimeError) as err:
        # A directory the user named and that cannot be used is worth a word.
        asked = cache_dir is not None or bool(os.environ.get(CACHE_ENV))
        log.log(logging.WARNING if asked else logging.DEBUG, "no JVM class archive: %s", err)
        return JvmStart(C1_ONLY)
    digest = _fingerprint(home, runtime, spark_home)
    archive = directory / f"spark-classes-{digest}.jsa"
    quoted = _quoted(archive)
    if quoted is None:
        return JvmStart(C1_ONLY)
    if archive.is_file():
        with contextlib.suppress(OSError):
            os.utime(archive)  # in use: not stale
        return JvmStart(f"{C1_ONLY} -XX:SharedArchiveFile={quoted} {QUIET_CDS}", archive)
    if _failed_recently(archive):
        return JvmStart(C1_ONLY)
    dump = directory / f"spark-classes-{digest}.{uuid.uuid4().hex}.dump"
    return JvmStart(
        f"{C1_ONLY} -XX:ArchiveClassesAtExit={_quoted(dump)} {QUIET_CDS}", archive, dump
    )


def _failed_marker(archive: Path) -> Path:
    return archive.with_suffix(".failed")


def _failed_recently(archive: Path) -> bool:
    """Whether a JVM failed to write this archive lately (then it is not tried
    again for :data:`RETRY_FAILED_SECONDS`: the cause is likely to last)."""
    try:
        return time.time() - _failed_marker(archive).stat().st_mtime < RETRY_FAILED_SECONDS
    except OSError:
        return False


def _remove_stale(directory: Path) -> None:
    """Remove dumps of processes that died, and archives no session used lately
    (those of a Java or Spark since replaced)."""
    now = time.time()
    for pattern, age in (("*.dump", STALE_DUMP_SECONDS), ("*.jsa", UNUSED_ARCHIVE_SECONDS)):
        for old in directory.glob(f"spark-classes-{pattern}"):
            with contextlib.suppress(OSError):
                if old.stat().st_mtime < now - age:
                    old.unlink()


@contextlib.contextmanager
def submit_options(options: str) -> Iterator[None]:
    """Give the driver JVM that Spark's launcher starts inside the block
    ``options`` (through ``SPARK_SUBMIT_OPTS``, before any the user set there or
    in ``spark.driver.extraJavaOptions``, which win where they conflict)."""
    old = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{options} {old}" if old else options
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SPARK_SUBMIT_OPTS", None)
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = old


def finish_at_exit(start: JvmStart, gateway: Any, stop: Callable[[], None]) -> None:
    """When ``start`` writes the archive: at the interpreter's exit, ``stop``
    the session, end its driver JVM (``gateway.proc``, PySpark's launcher
    process) the way PySpark does (closing its standard input), wait for the
    dump, and move a complete one into place."""
    proc = getattr(gateway, "proc", None)
    if start.dump is None or start.archive is None or proc is None:
        return
    atexit.register(_finish, start.dump, start.archive, proc, stop)


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
        else:
            _failed_marker(archive).touch()
            log.warning(
                "sentinel: the Spark JVM could not write its class archive; starts stay "
                "slower (see docs/replay.md, 'Starting Spark quickly')"
            )
    except OSError as err:
        log.debug("no JVM class archive written: %s", err)
    finally:
        with contextlib.suppress(OSError):
            dump.unlink()
