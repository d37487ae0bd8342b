"""An output directory replaced only when the run that writes it succeeds.

:class:`Staging` gives a run a hidden directory inside ``out`` to write into;
:meth:`Staging.commit` moves what ``out`` held aside, moves the new files in,
then deletes the old ones; :meth:`Staging.abort` deletes the new files, leaving
``out`` as it was. Every move is a rename inside ``out``, so it works wherever
``out`` is: on another file system than its parent, a mount point, a symbolic
link to a directory, ``.``, or in a parent the user cannot write. Hidden
directories a run left behind when its process died are ignored by
:func:`holds_something` and removed by the next commit.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path

__all__ = ["Staging", "foreign_entry", "holds_something", "overwrite_refusal"]

#: Names of the hidden directories a run writes into (and moves old files to).
PREFIX = ".sentinel-stage-"

#: What sentinel writes in an output directory: detections and export buckets
#: as Parquet files (``part-00000.parquet``, a Spark partition's
#: ``<name>.parquet`` and its hidden ``.<name>.parquet.tmp``), an export's
#: manifest and its ``bucket=NNNNN`` directories.
_FILES = re.compile(r"[^/]*\.parquet|\.[^/]*\.parquet\.tmp|_sentinel_export\.json")
_DIRS = re.compile(r"bucket=\d+|" + re.escape(PREFIX) + r".*")


def foreign_entry(out: object, entries: Iterable[tuple[str, bool]]) -> str | None:
    """Why ``overwrite`` must not replace what ``out`` holds, given its entries
    as ``(name, is_dir)``: the first one sentinel does not write there (see
    ``_FILES`` and ``_DIRS``), or ``None``."""
    for name, is_dir in entries:
        if not (_DIRS if is_dir else _FILES).fullmatch(name):
            return (
                f"{out} holds {name!r}, which sentinel did not write; overwriting replaces "
                "only sentinel's own output (detections or a log export): choose another "
                "directory, or empty this one"
            )
    return None


def overwrite_refusal(out: Path, reads: Iterable[Path] = ()) -> str | None:
    """Why replacing what ``out`` holds must not happen, or ``None``.

    ``overwrite`` replaces sentinel's own output only: it is refused when
    ``out`` is a file, when ``out`` is or holds a path in ``reads`` (the log a
    run reads: a SQLite file, an export directory) or lies inside one of them,
    and when ``out`` holds anything sentinel does not write there (see
    :func:`foreign_entry`), so a mistyped ``--out`` never deletes the user's
    files."""
    if not out.exists():
        return None
    if not out.is_dir():
        return f"{out} is a file; give a directory for the output"
    refusal = reading_refusal(out, reads)
    if refusal is not None:
        return refusal
    with os.scandir(out) as entries:
        return foreign_entry(out, ((e.name, e.is_dir()) for e in entries))


def reading_refusal(out: Path, reads: Iterable[Path] = ()) -> str | None:
    """Why ``out`` must not be written at all, existing or not, or ``None``:
    it is, holds or lies inside a path of ``reads``, the log the run reads (new
    files inside an export directory would become part of the export)."""
    here = out.resolve()
    for src in reads:
        try:
            there = src.resolve()
        except OSError:  # pragma: no cover - a path the OS cannot resolve
            continue
        if there == here or here in there.parents:
            return f"{out} holds {src}, which this run reads; choose another directory"
        if there.is_dir() and there in here.parents:
            return f"{out} is inside {src}, which this run reads; choose another directory"
    return None


def holds_something(out: Path) -> bool:
    """Whether ``out`` exists and holds something: a file, or a directory with
    something in it other than what a run that died left behind."""
    if not out.exists():
        return False
    if not out.is_dir():
        return True
    return any(not p.name.startswith(PREFIX) for p in out.iterdir())


class Staging:
    """A run's new contents for ``out``, written in :attr:`path` until
    :meth:`commit` or :meth:`abort`. The caller has checked that replacing what
    ``out`` holds is allowed. Not thread-safe."""

    def __init__(self, out: Path, kind: str) -> None:
        self.out = out
        name = f"{PREFIX}{kind}-{uuid.uuid4().hex[:12]}"
        self._created = not out.exists()
        #: A file stands where the directory goes (``overwrite``): stage beside it.
        self._beside = out.exists() and not out.is_dir()
        if self._beside:
            self.path = out.parent / name
        else:
            out.mkdir(parents=True, exist_ok=True)
            self.path = out / name
        # mkdir, not tempfile.mkdtemp: the output gets the umask's mode, not 0700
        self.path.mkdir()

    def commit(self) -> None:
        """Put the new contents in ``out``'s place; what ``out`` held is deleted
        after they are in place. If a move fails, what was moved is moved back
        and the error raised."""
        if self._beside:
            self.out.unlink()
            self.path.replace(self.out)
            return
        old = self.out / f"{PREFIX}old-{uuid.uuid4().hex[:12]}"
        old.mkdir()
        aside: list[str] = []
        placed: list[str] = []
        try:
            for entry in list(self.out.iterdir()):
                if entry != self.path and entry != old:
                    entry.rename(old / entry.name)
                    aside.append(entry.name)
            for entry in list(self.path.iterdir()):
                entry.rename(self.out / entry.name)
                placed.append(entry.name)
        except BaseException:
            for name in placed:
                with suppress(OSError):
                    (self.out / name).rename(self.path / name)
            for name in aside:
                with suppress(OSError):
                    (old / name).rename(self.out / name)
            with suppress(OSError):
                old.rmdir()
            raise
        self.path.rmdir()
        shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        """Delete the new contents; ``out`` is left as it was (a directory this
        run created is removed again)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._created:
            with suppress(OSError):
                self.out.rmdir()
