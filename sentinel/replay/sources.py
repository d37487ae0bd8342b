"""Where replay reads the log from, as Arrow record batches of log rows.

Three sources, one interface (:class:`LogSource`):

:class:`DatabaseSource`
    the log tables through a SQLAlchemy URL or engine, read with
    :class:`~sentinel.log.LogReader` (schema check, keyset pagination in bounded
    chunks); partitioned reads are scope ranges.
:class:`ExportSource`
    a Parquet export written by ``sentinel log export`` (see
    :mod:`sentinel.replay.export`): one file per hash bucket of the scope, each
    sorted by ``(scope, t_occ)``; partitioned reads are groups of buckets.
:class:`TableSource`
    log rows already in memory (a :class:`pyarrow.Table`), sorted on demand.

Every source yields batches with the :data:`~sentinel.replay.batch.LOG_SCHEMA`
columns, parameters as the log's JSON text (``sentinel.params.dumps``: keys
sorted, compact), in the order asked: ``"scope"`` or ``"t_occ"``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sentinel.errors import LogRowError, LogSchemaUnknownError, ReplaySourceError
from sentinel.log import LoggedOccurrence, LogReader
from sentinel.log.records import encode_key
from sentinel.log.schema import sqlite_file
from sentinel.log.tables import DEFAULT_PREFIX, SCHEMA_REVISIONS, SCHEMA_VERSION
from sentinel.occurrence import ObjectRef, Occurrence, params_of
from sentinel.params import dumps
from sentinel.replay.batch import LOG_COLUMNS, LOG_SCHEMA, OPTIONAL_LOG_COLUMNS, Order, conform

__all__ = [
    "EXPORT_SCHEMA",
    "DatabaseSource",
    "ExportSource",
    "LogSource",
    "TableSource",
    "log_batch",
    "log_table",
    "open_source",
    "read_export_files",
    "read_paths",
    "select_events",
]

#: An export's rows: the log columns, plus the row ``id`` and ``at`` (UTC, from ``ts``).
EXPORT_SCHEMA = pa.schema(
    [*LOG_SCHEMA, pa.field("id", pa.int64()), pa.field("at", pa.timestamp("us", tz="UTC"))]
)

BATCH_ROWS = 65_536


class LogSource(Protocol):
    """What the engines read a log through."""

    @property
    def location(self) -> str:
        """Where the log is (for messages; no password)."""

    def check(self) -> None:
        """Raise the source's error now if it cannot be read (unreachable,
        unknown schema revision, not an export)."""

    def count(self) -> int:
        """How many log rows the source holds."""

    def batches(
        self, order: Order = "scope", *, events: Collection[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The log rows in ``order`` (only ``events``, when given)."""


# -- rows from occurrences --------------------------------------------------------------
def _rows_batch(
    occs: Sequence[Occurrence],
    outcomes: Sequence[str | None],
    ids: Sequence[int | None],
    savepoints: Sequence[str | None],
) -> pa.RecordBatch:
    scopes: list[Any] = []
    t_occs: list[int] = []
    events: list[str] = []
    ts: list[float] = []
    dts: list[float] = []
    classes: list[str | None] = []
    keys: list[str | None] = []
    params: list[str] = []
    for occ in occs:
        event, t_occ, at, dat, source, p, scope, _ = occ
        scopes.append(scope)
        t_occs.append(t_occ)
        events.append(event)
        ts.append(at)
        dts.append(dat)
        if source is None:
            classes.append(None)
            keys.append(None)
        elif type(source) is ObjectRef:
            classes.append(source[0])
            keys.append(encode_key(source[1]))
        else:
            raise ReplaySourceError(
                f"occurrence {event}@{t_occ} has source {source!r}; the log stores only "
                "ObjectRef sources",
                source="occurrences",
            )
        params.append(dumps(params_of(occ)) if p else "{}")
    ts_arr = pa.array(ts, pa.float64())
    micros = pc.cast(pc.round(pc.multiply(ts_arr, 1e6)), pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            pa.array(scopes, pa.string()),
            pa.array(t_occs, pa.int64()),
            pa.array(events, pa.string()),
            ts_arr,
            pa.array(dts, pa.float64()),
            pa.array(classes, pa.string()),
            pa.array(keys, pa.string()),
            pa.array(params, pa.string()),
            pa.array(outcomes, pa.string()),
            pa.array(savepoints, pa.string()),
            pa.array(ids, pa.int64()),
            micros.cast(pa.timestamp("us", tz="UTC")),
        ],
        schema=EXPORT_SCHEMA,
    )


def log_batch(rows: Sequence[LoggedOccurrence]) -> pa.RecordBatch:
    """Rows read by :class:`~sentinel.log.LogReader` as one record batch
    (:data:`EXPORT_SCHEMA`)."""
    return _rows_batch(
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
        [r.savepoint for r in rows],
    )


def log_table(
    rows: Iterable[tuple[Occurrence, str | None] | tuple[Occurrence, str | None, str | None]],
) -> pa.Table:
    """Occurrences and their transactions' outcomes (and, as a third item, the
    path of the savepoint whose rollback undid an occurrence) as a table of log
    rows, as the writer would store them (for tests and for logs kept
    elsewhere).

    >>> from sentinel import Occurrence
    >>> log_table([(Occurrence("E1", 1, 0.0, scope="tx"), "committed")]).column("params")[0]
    <pyarrow.StringScalar: '{}'>
    """
    items = list(rows)
    return pa.Table.from_batches(
        [
            _rows_batch(
                [r[0] for r in items],
                [r[1] for r in items],
                [None] * len(items),
                [r[2] if len(r) > 2 else None for r in items],
            )
        ],
        schema=EXPORT_SCHEMA,
    )


def select_events(batch: pa.RecordBatch, events: Collection[str] | None) -> pa.RecordBatch:
    """The rows of ``batch`` whose event is one of ``events`` (all when None)."""
    if events is not None:
        batch = batch.filter(pc.is_in(batch.column("event"), pa.array(sorted(events))))
    return batch


# -- the database -----------------------------------------------------------------------
class DatabaseSource:
    """The log tables of a database (see the module docs).

    ``source`` is a SQLAlchemy URL or engine; ``schema`` and ``prefix`` select
    the tables; ``chunk_size`` bounds the rows of one query. Errors are those of
    :class:`~sentinel.log.LogReader`: :class:`~sentinel.errors.LogConnectionError`
    for an unreachable database, a :class:`~sentinel.errors.LogSchemaError` for
    missing tables or a revision this code does not know; a row that does not
    hold what the writer writes raises :class:`~sentinel.errors.ReplaySourceError`
    naming it when :meth:`batches` reads it (every row read is decoded).
    """

    def __init__(
        self,
        source: str | sa.URL | Engine,
        *,
        schema: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        chunk_size: int = 10_000,
        check: bool = True,
    ) -> None:
        self.schema = schema
        self.prefix = prefix
        self.chunk_size = chunk_size
        self.reader = LogReader(
            source, schema=schema, prefix=prefix, chunk_size=chunk_size, check=check
        )

    @property
    def location(self) -> str:
        return self.reader.location

    @property
    def url(self) -> str:
        """The database URL with its password, for workers that connect themselves."""
        return self.reader.engine.url.render_as_string(hide_password=False)

    def close(self) -> None:
        self.reader.close()

    def check(self) -> None:
        self.reader.check()

    def count(self) -> int:
        return self.reader.count()

    def batches(
        self,
        order: Order = "scope",
        *,
        events: Collection[str] | None = None,
        scope_range: tuple[str | None, str | None] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        chunks = self.reader.chunks(order=order, events=events, scope_range=scope_range)
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except LogRowError as err:  # a row the writer never wrote: say which
                raise ReplaySourceError(str(err), source=self.location) from err
            yield log_batch(chunk)

    def scope_ranges(self, n: int) -> list[tuple[str | None, str | None]]:
        """About ``n`` half-open scope ranges ``[lo, hi)`` holding similar numbers
        of rows (``None``: open end); a scope is never split."""
        total = self.count()
        parts = n
        if n <= 1 or total == 0:
            return [(None, None)]
        c = self.reader.tables.batches.c
        bounds: list[str] = []
        with self.reader._connect() as conn:
            # the scope at each n-th of the occurrences: a running sum of the
            # rows' sizes, read once in scope order (one small row per transaction)
            q = sa.select(c.scope, c.n).order_by(c.scope, c.t_first)
            seen = 0
            i = 1
            for scope, size in conn.execute(q):
                seen += size
                while i < parts and seen > total * i // parts:
                    if not bounds or scope > bounds[-1]:
                        bounds.append(scope)
                    i += 1
                if i >= parts:
                    break
        edges: list[str | None] = [None, *bounds, None]
        return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


# -- an export --------------------------------------------------------------------------
#: The export's manifest file, and the format it names (see :mod:`sentinel.replay.export`).
MANIFEST: Final = "_sentinel_export.json"
FORMAT: Final = "sentinel-log-export"
FORMAT_VERSION: Final = 1


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the export at ``path``, checked: raises
    :class:`~sentinel.errors.ReplaySourceError` when ``path`` is not a complete
    export of a format this code reads, and
    :class:`~sentinel.errors.LogSchemaUnknownError` when the exported log was at
    a schema revision this code does not know."""
    file = path / MANIFEST
    if not path.is_dir() or not file.exists():
        raise ReplaySourceError(
            f"{path} is not a sentinel log export (no {MANIFEST}); write one with "
            "`sentinel log export --url ... --out DIR`",
            source=str(path),
        )
    try:
        manifest = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise ReplaySourceError(f"cannot read {file}: {err}", source=str(path)) from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ReplaySourceError(f"{file} is not a sentinel export manifest", source=str(path))
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ReplaySourceError(
            f"the export at {path} has format version {version!r}; this sentinel reads "
            f"version {FORMAT_VERSION} (upgrade sentinel, or export again)",
            source=str(path),
        )
    found = manifest.get("schema_version")
    if found not in SCHEMA_REVISIONS:
        raise LogSchemaUnknownError(
            f"the export at {path} holds a log at schema revision {found!r}, which this "
            f"version of sentinel does not know (it knows {', '.join(SCHEMA_REVISIONS)}); "
            "upgrade sentinel",
            location=str(path),
            found=found if isinstance(found, str) else None,
            expected=SCHEMA_VERSION,
        )
    files, rows = manifest.get("files"), manifest.get("rows")
    if (
        not isinstance(files, list)
        or not all(isinstance(f, str) and _inside(f) for f in files)
        or type(rows) is not int
        or rows < 0
    ):
        raise ReplaySourceError(
            f"{file} is damaged: its 'files' must list the export's Parquet files by "
            "their paths inside it, and 'rows' count their rows; export the log again",
            source=str(path),
        )
    return manifest


def _inside(name: str) -> bool:
    """Whether ``name`` is a relative path that stays inside its directory."""
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


class ExportSource:
    """A log exported to Parquet by ``sentinel log export`` (see
    :mod:`sentinel.replay.export`). Raises
    :class:`~sentinel.errors.ReplaySourceError` for a path that is not an export,
    :class:`~sentinel.errors.LogSchemaUnknownError` for an export of a log at a
    schema revision this code does not know."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        self.files = [self.path / f for f in self.manifest["files"]]

    @property
    def location(self) -> str:
        return str(self.path)

    def check(self) -> None:
        """Raise :class:`~sentinel.errors.ReplaySourceError` for an export with
        a file missing or unreadable, or whose files hold another number of rows
        than its manifest says (reading the files' footers only)."""
        import pyarrow.parquet as pq

        missing = [str(f) for f in self.files if not f.exists()]
        if missing:
            raise ReplaySourceError(
                f"the export at {self.path} is incomplete: {', '.join(missing[:3])} missing",
                source=str(self.path),
            )
        held = 0
        for f in self.files:
            try:
                held += pq.read_metadata(f).num_rows
            except (OSError, pa.ArrowException) as err:
                raise _damaged(f, err) from err
        if held != self.count():
            raise ReplaySourceError(
                f"the export at {self.path} is damaged: its manifest counts "
                f"{self.count():,} rows, its files hold {held:,}; export the log again",
                source=str(self.path),
            )

    def count(self) -> int:
        return int(self.manifest["rows"])

    def batches(
        self, order: Order = "scope", *, events: Collection[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        if order == "scope":
            for batch in read_export_files(self.files):
                yield select_events(batch, events)
            return
        # Buckets are sorted by scope: the t_occ order needs a sort, in memory,
        # over the selected events only.
        import pyarrow.dataset as ds

        if not self.files:  # an empty log's export (a dataset of no files has no columns)
            return
        try:
            dataset = ds.dataset([str(f) for f in self.files], format="parquet")
            flt = None if events is None else pc.field("event").isin(sorted(events))
            table = dataset.to_table(columns=_present(dataset.schema.names), filter=flt)
        except (OSError, pa.ArrowException) as err:
            raise _damaged(self.path, err) from err
        for batch in _sorted(table, order).to_batches(BATCH_ROWS):
            yield conform(batch)

    def file_groups(self, n: int) -> list[list[str]]:
        """The bucket files dealt into at most ``n`` groups of similar size
        (largest first, each to the lightest group)."""
        sizes = sorted(((f.stat().st_size, str(f)) for f in self.files), reverse=True)
        groups: list[tuple[int, list[str]]] = [(0, []) for _ in range(max(1, min(n, len(sizes))))]
        for size, f in sizes:
            i = min(range(len(groups)), key=lambda k: groups[k][0])
            groups[i] = (groups[i][0] + size, [*groups[i][1], f])
        return [sorted(g) for _, g in groups if g]


def read_export_files(
    files: Iterable[str | os.PathLike[str]], *, batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The log rows of an export's bucket ``files``, file by file: in
    ``(scope, t_occ)`` order within each file, and no scope in two files."""
    import pyarrow.parquet as pq

    for f in files:
        try:
            with pq.ParquetFile(f) as pf:
                columns = _present(pf.schema_arrow.names)
                for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
                    yield conform(batch)
        except (OSError, pa.ArrowException) as err:
            raise _damaged(f, err) from err


def _damaged(file: str | os.PathLike[str], err: BaseException) -> ReplaySourceError:
    return ReplaySourceError(
        f"cannot read {os.fspath(file)} of a log export ({type(err).__name__}: {err}); "
        "the export is damaged: export the log again",
        source=os.fspath(file),
    )


def _present(names: Sequence[str]) -> list[str]:
    """The log columns to read from a file with columns ``names``: all of them,
    but the optional ones it lacks (an export of a log before revision 0004)."""
    return [c for c in LOG_COLUMNS if c in names or c not in OPTIONAL_LOG_COLUMNS]


# -- rows in memory ---------------------------------------------------------------------
class TableSource:
    """Log rows in a :class:`pyarrow.Table` (any order; sorted when read)."""

    def __init__(self, table: pa.Table, *, location: str = "in-memory table") -> None:
        missing = [
            c for c in LOG_COLUMNS if c not in table.schema.names and c not in OPTIONAL_LOG_COLUMNS
        ]
        if missing:
            raise ReplaySourceError(
                f"the table lacks the log column(s) {', '.join(missing)}", source=location
            )
        self.table = table
        self._location = location

    @property
    def location(self) -> str:
        return self._location

    def check(self) -> None:
        pass

    def count(self) -> int:
        return int(self.table.num_rows)

    def batches(
        self, order: Order = "scope", *, events: Collection[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        table = self.table.select(_present(self.table.schema.names))
        if events is not None:
            table = table.filter(pc.is_in(table.column("event"), pa.array(sorted(events))))
        for batch in _sorted(table, order).to_batches(BATCH_ROWS):
            yield conform(batch)


def _sorted(table: pa.Table, order: Order) -> pa.Table:
    keys = ["scope", "t_occ"] if order == "scope" else ["t_occ", "scope"]
    return table.sort_by([(k, "ascending") for k in keys])


def read_paths(source: Any) -> list[Path]:
    """The files of this machine a source reads (a SQLite database file, an
    export directory): what an output directory must not replace."""
    if isinstance(source, ExportSource):
        return [source.path]
    if isinstance(source, DatabaseSource):
        file = sqlite_file(source.reader.engine.url)
        if file is not None:
            return [file]
    return []


def open_source(
    source: Any,
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    chunk_size: int = 10_000,
) -> DatabaseSource | ExportSource | TableSource:
    """The source ``source`` names: a SQLAlchemy URL (text with ``://``, or a
    :class:`sqlalchemy.URL`) or engine, the directory of an export, a
    :class:`pyarrow.Table` of log rows, or a source already opened. Raises
    :class:`~sentinel.errors.ReplaySourceError` for anything else."""
    if isinstance(source, (DatabaseSource, ExportSource, TableSource)):
        return source
    if isinstance(source, (Engine, sa.URL)) or (isinstance(source, str) and "://" in source):
        try:
            return DatabaseSource(source, schema=schema, prefix=prefix, chunk_size=chunk_size)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as err:
            shown = source if isinstance(source, str) else repr(source)
            raise ReplaySourceError(f"bad database URL {shown!r}: {err}", source=shown) from err
    if isinstance(source, pa.Table):
        return TableSource(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise ReplaySourceError(
                f"no log export at {path} (and it is not a database URL: those contain "
                "'://', e.g. sqlite:///app.db)",
                source=str(path),
            )
        return ExportSource(path)
    raise ReplaySourceError(
        f"cannot replay from a {type(source).__name__}: give a database URL, an export "
        "directory or a pyarrow Table",
        source=repr(source),
    )


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
