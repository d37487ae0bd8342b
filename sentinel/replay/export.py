"""Exporting the event log to Parquet, in the layout replay reads fastest.

``sentinel log export --url URL --out DIR`` (or :func:`export_log`) streams the
log in ``(scope, t_occ)`` order, in bounded chunks, and deals each row to one of
``buckets`` files by a stable hash of its scope::

    DIR/_sentinel_export.json             the manifest (written last)
    DIR/bucket=00000/part-00000.parquet   rows whose crc32(scope) % buckets == 0
    DIR/bucket=00001/part-00000.parquet   ...

Every scope lies in one file, and each file is sorted by ``(scope, t_occ)``, so a
bucket (or a group of buckets) is a ready-made replay partition: the Spark engine
reads it without a shuffle or a sort. The ``bucket=`` directories also make the
export a Hive-partitioned dataset for any Parquet reader (``spark.read.parquet``
gives a ``bucket`` column).

Columns: those of :data:`~sentinel.replay.sources.EXPORT_SCHEMA` (the log's, with
parameters as compact JSON text, plus ``id`` and ``at``). Memory is bounded by
one chunk plus, per bucket, one row group being filled (``row_group_rows``).
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

import pyarrow as pa

from sentinel.errors import ReplaySourceError
from sentinel.log.tables import DEFAULT_PREFIX, SCHEMA_VERSION
from sentinel.replay.sources import (
    EXPORT_SCHEMA,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    DatabaseSource,
    read_manifest,
    read_paths,
    utc_now,
)
from sentinel.replay.staging import Staging, holds_something, overwrite_refusal

__all__ = [
    "FORMAT",
    "MANIFEST",
    "ExportWriter",
    "bucket_of",
    "export_log",
    "read_manifest",
]


def bucket_of(scope: str, buckets: int) -> int:
    """The bucket of ``scope``: CRC-32 of its UTF-8 bytes modulo ``buckets``
    (stable across processes and machines, unlike ``hash``)."""
    return zlib.crc32(scope.encode()) % buckets


class ExportWriter:
    """Writes log rows arriving in ``(scope, t_occ)`` order into an export.

    ``out`` must not exist or be empty (``overwrite=True``: what it holds is
    replaced, if it is sentinel's own output and holds none of ``reads``, the
    files the export reads: see :func:`~sentinel.replay.staging.overwrite_refusal`).
    :meth:`write` takes record batches with the
    :data:`~sentinel.replay.sources.EXPORT_SCHEMA` columns; :meth:`close` writes
    the manifest, which marks the export complete. Files are written into a
    hidden directory inside ``out`` (:class:`~sentinel.replay.staging.Staging`)
    whose contents :meth:`close` moves into place (only then is what ``out``
    held removed) and which :meth:`abort` deletes, so a failed export leaves
    ``out`` as it was. Not thread-safe.
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        buckets: int = 16,
        row_group_rows: int = 65_536,
        overwrite: bool = False,
        reads: Iterable[Path] = (),
    ) -> None:
        if buckets < 1:
            raise ReplaySourceError(f"buckets must be at least 1, not {buckets}", source=str(out))
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise ReplaySourceError(f"{self.out} is not a directory", source=str(self.out))
        if holds_something(self.out):
            if not overwrite:
                raise ReplaySourceError(
                    f"{self.out} is not empty; choose a new directory or --overwrite",
                    source=str(self.out),
                )
            refusal = overwrite_refusal(self.out, reads)
            if refusal is not None:
                raise ReplaySourceError(refusal, source=str(self.out))
        self._staging = Staging(self.out, "export")
        self._stage = self._staging.path
        self.buckets = buckets
        self.row_group_rows = row_group_rows
        self.rows = 0
        self._writers: dict[int, Any] = {}
        self._pending: dict[int, list[pa.RecordBatch]] = {}
        self._pending_rows: dict[int, int] = {}
        self._last: tuple[str, int] | None = None

    def _file(self, bucket: int) -> str:
        return f"bucket={bucket:05d}/part-00000.parquet"

    def write(self, batch: pa.RecordBatch) -> None:
        """Add rows (in ``(scope, t_occ)`` order, continuing the previous batch)."""
        n = batch.num_rows
        if not n:
            return
        scopes = batch.column("scope").to_pylist()
        t_occs = batch.column("t_occ").to_pylist()
        first = (scopes[0], t_occs[0])
        if self._last is not None and first <= self._last:
            raise ReplaySourceError(
                f"export rows must come in (scope, t_occ) order; {first} after {self._last}",
                source=str(self.out),
            )
        self._last = (scopes[-1], t_occs[-1])
        buckets = self.buckets
        rows_of: dict[int, list[int]] = {}
        cur, b = None, 0
        for i, s in enumerate(scopes):
            if s != cur:
                cur, b = s, bucket_of(s, buckets)
            rows_of.setdefault(b, []).append(i)
        for b, idx in rows_of.items():
            part = batch.take(pa.array(idx, pa.int32())) if len(idx) < n else batch
            self._pending.setdefault(b, []).append(part)
            filled = self._pending_rows.get(b, 0) + len(idx)
            self._pending_rows[b] = filled
            if filled >= self.row_group_rows:
                self._flush(b)
        self.rows += n

    def _flush(self, bucket: int) -> None:
        import pyarrow.parquet as pq

        parts = self._pending.pop(bucket, [])
        self._pending_rows.pop(bucket, None)
        if not parts:
            return
        writer = self._writers.get(bucket)
        if writer is None:
            path = self._stage / self._file(bucket)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = self._writers[bucket] = pq.ParquetWriter(
                path, EXPORT_SCHEMA, compression="snappy"
            )
        writer.write_table(pa.Table.from_batches(parts, schema=EXPORT_SCHEMA))

    def close(self, *, source: str = "", schema_version: str = SCHEMA_VERSION) -> dict[str, Any]:
        """Flush every bucket, close the files, write the manifest and return it."""
        for b in list(self._pending):
            self._flush(b)
        for w in self._writers.values():
            w.close()
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "schema_version": schema_version,
            "buckets": self.buckets,
            "bucketing": "crc32(utf8(scope)) % buckets",
            "order": ["scope", "t_occ"],
            "rows": self.rows,
            "files": [self._file(b) for b in sorted(self._writers)],
            "source": source,
            "created_at": utc_now(),
        }
        (self._stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        self._staging.commit()  # empty, or to be overwritten (checked at the start)
        return manifest

    def abort(self) -> None:
        """Close the files and delete what this writer wrote; ``out`` stays as
        it was."""
        for w in self._writers.values():
            with suppress(Exception):
                w.close()
        self._writers.clear()
        self._staging.abort()


def export_log(
    source: Any,
    out: str | os.PathLike[str],
    *,
    buckets: int = 16,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    chunk_size: int = 10_000,
    row_group_rows: int = 65_536,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Export the log at ``source`` (a SQLAlchemy URL or engine) to ``out`` and
    return the manifest.

    Reads ``chunk_size`` rows per query, in ``(scope, t_occ)`` order; calls
    ``progress(rows)`` after each chunk. Raises what
    :class:`~sentinel.log.LogReader` raises for an unreachable database or a
    log at an unknown schema revision (before anything is written), and
    :class:`~sentinel.errors.ReplaySourceError` when ``out`` is not empty or a
    row is not as the writer wrote it. A failed export leaves ``out`` as it was
    (an export it was to overwrite stays whole).

    >>> export_log("sqlite:///app.db", "log-export")  # doctest: +SKIP
    {'format': 'sentinel-log-export', ..., 'rows': 120345, ...}
    """
    db = DatabaseSource(source, schema=schema, prefix=prefix, chunk_size=chunk_size)
    try:
        revision = db.reader.check()
        writer = ExportWriter(
            out,
            buckets=buckets,
            row_group_rows=row_group_rows,
            overwrite=overwrite,
            reads=read_paths(db),
        )
        try:
            for batch in db.batches("scope"):
                writer.write(batch)
                if progress is not None:
                    progress(batch.num_rows)
            return writer.close(source=db.location, schema_version=revision)
        except BaseException:
            writer.abort()
            raise
    finally:
        db.close()
