"""Writing detections to Parquet from where they are found.

The Spark engine writes detections from its Python workers with pyarrow, one
file per partition, instead of handing them to the JVM to write: only a summary
row per rule travels back. :func:`replay_to_parquet` is that replay step (a plain
function over Arrow batches, like :func:`~sentinel.replay.batch.replay_batches`).

``out`` is a local directory (it must be shared by every worker on a cluster) or
a URI pyarrow's file systems understand (``s3://bucket/path``, ``gs://...``,
``hdfs://...``). Each file is written under a hidden temporary name and renamed
when complete, so a retried task replaces its file and readers never see a
partial one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from sentinel.errors import ReplayError
from sentinel.replay.batch import DETECTION_PARQUET, DETECTION_SCHEMA, Order, Replayer
from sentinel.replay.rules import Rules
from sentinel.replay.staging import (
    Staging,
    foreign_entry,
    holds_something,
    overwrite_refusal,
    reading_refusal,
)

__all__ = ["SUMMARY_SCHEMA", "open_output", "prepare_output", "replay_to_parquet", "write_empty"]

#: One row per rule with detections in a partition (how many, and how many of
#: them failed: their condition raised), and one (``rule`` null) with the number
#: of log rows the partition read.
SUMMARY_SCHEMA: Final = pa.schema(
    [
        pa.field("rule", pa.string()),
        pa.field("detections", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("failed", pa.int64()),
    ]
)


def _filesystem(out: str) -> tuple[Any, str]:
    import pyarrow.fs as pafs

    if "://" in out:
        fs, path = pafs.FileSystem.from_uri(out)
        return fs, str(path)
    return pafs.LocalFileSystem(), os.path.abspath(out)


def prepare_output(
    out: str | os.PathLike[str], *, overwrite: bool, reads: Iterable[Path] = ()
) -> None:
    """Make ``out`` an empty directory: refuse one that holds something unless
    ``overwrite``, and even then one that holds anything but sentinel's own
    output, or holds (or lies inside) a path of ``reads``, the log the run reads
    (:func:`~sentinel.replay.staging.overwrite_refusal`). Raises
    :class:`~sentinel.errors.ReplayError`."""
    import pyarrow.fs as pafs

    fs, root = _filesystem(os.fspath(out))
    if isinstance(fs, pafs.LocalFileSystem):
        refusal = reading_refusal(Path(root), reads)
        if refusal is not None:
            raise ReplayError(refusal)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        raise ReplayError(f"{out} is a file; give a directory for the detections")
    if info.type != pafs.FileType.Directory:
        fs.create_dir(root, recursive=True)
        return
    entries = fs.get_file_info(pafs.FileSelector(root, recursive=False))
    if not entries:
        return
    if not overwrite:
        raise ReplayError(f"{out} exists and is not empty; choose another or --overwrite")
    if isinstance(fs, pafs.LocalFileSystem):
        refusal = overwrite_refusal(Path(root), reads)
        if refusal is not None:
            raise ReplayError(refusal)
        shutil.rmtree(root)
        fs.create_dir(root, recursive=True)
        return
    refusal = foreign_entry(
        out, ((e.base_name, e.type == pafs.FileType.Directory) for e in entries)
    )
    if refusal is not None:
        raise ReplayError(refusal)
    fs.delete_dir_contents(root)


def open_output(
    out: str | os.PathLike[str], *, overwrite: bool, reads: Iterable[Path] = ()
) -> tuple[str, Staging | None]:
    """Where a run's tasks write detections bound for ``out``, and the staging
    to commit once every task has succeeded (or abort). On this machine's file
    system (shared by the workers on a cluster) the tasks write into a hidden
    directory inside ``out``, moved into place at the commit: a run that fails
    midway, or is interrupted, leaves ``out`` as it was, and no partial set of
    files ever reads as a complete one. Elsewhere (``s3://`` and the like,
    where a directory cannot be moved) ``out`` is emptied first, as
    :func:`prepare_output` does, and the tasks write there (no staging). The
    checks are :func:`prepare_output`'s."""
    import pyarrow.fs as pafs

    fs, root = _filesystem(os.fspath(out))
    if not isinstance(fs, pafs.LocalFileSystem):
        prepare_output(out, overwrite=overwrite, reads=reads)
        return os.fspath(out), None
    path = Path(root)
    refusal = reading_refusal(path, reads)
    if refusal is None and path.exists() and not path.is_dir():
        refusal = f"{out} is a file; give a directory for the detections"
    if refusal is None and holds_something(path):
        if not overwrite:
            refusal = f"{out} exists and is not empty; choose another or --overwrite"
        else:
            refusal = overwrite_refusal(path, reads)
    if refusal is not None:
        raise ReplayError(refusal)
    stage = Staging(path, "replay")
    return str(stage.path), stage


def write_empty(out: str | os.PathLike[str]) -> None:
    """Write a file with no detections, so ``out`` reads as an empty dataset."""
    import pyarrow.parquet as pq

    fs, root = _filesystem(os.fspath(out))
    pq.write_table(DETECTION_SCHEMA.empty_table(), f"{root}/part-empty.parquet", filesystem=fs)


def replay_to_parquet(
    batches: Iterable[pa.RecordBatch | Any],
    rules: Rules,
    *,
    out: str,
    name: str,
    order: Order = "scope",
    only: Collection[str] | None = None,
    batch_rows: int = 32_768,
) -> Iterator[pa.RecordBatch]:
    """Replay ``batches`` (as :func:`~sentinel.replay.batch.replay_batches`
    does), write the detections to ``out/name.parquet`` (no file when there are
    none) and yield one :data:`SUMMARY_SCHEMA` batch."""
    import pyarrow.parquet as pq

    replayer = Replayer(rules, order=order, only=only)
    fs, root = _filesystem(out)
    tmp, final = f"{root}/.{name}.parquet.tmp", f"{root}/{name}.parquet"
    writer: Any = None

    def write(batch: pa.RecordBatch) -> None:
        nonlocal writer
        if not batch.num_rows:
            return
        if writer is None:
            writer = pq.ParquetWriter(tmp, DETECTION_SCHEMA, filesystem=fs, **DETECTION_PARQUET)
        writer.write_batch(batch)

    for batch in batches:
        replayer.feed(batch)
        if replayer.pending >= batch_rows:
            write(replayer.take())
    replayer.finish()
    write(replayer.take())
    if writer is not None:
        writer.close()
        fs.move(tmp, final)
    counts = replayer.per_rule
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([*counts, None], pa.string()),
            pa.array([*counts.values(), 0], pa.int64()),
            pa.array([0] * len(counts) + [replayer.rows], pa.int64()),
            pa.array([*(replayer.failed[r] for r in counts), 0], pa.int64()),
        ],
        schema=SUMMARY_SCHEMA,
    )
