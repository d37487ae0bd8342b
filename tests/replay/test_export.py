"""``sentinel log export``: the Parquet layout replay relies on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from sentinel import ObjectRef, Occurrence
from sentinel.errors import LogSchemaUnknownError, ReplaySourceError
from sentinel.log import LogReader, LogWriter, migrate
from sentinel.replay import export_log, replay
from sentinel.replay.export import MANIFEST, bucket_of
from sentinel.replay.sources import EXPORT_SCHEMA, ExportSource, open_source


@pytest.fixture
def log_db(tmp_path: Path) -> sa.Engine:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'log.db'}")
    migrate.upgrade(engine)
    writer = LogWriter()
    t = 0
    for s in range(40):
        occs = []
        for e in ("txn:begin", "E1", "E2", "E1", "txn:commit"):
            t += 1
            src = ObjectRef("Item", (s % 3, "x")) if e == "E2" else None
            occs.append(
                Occurrence(
                    e,
                    t,
                    1e9 + t / 7,
                    source=src,
                    scope=f"s{s:03d}",
                    params={"n": t, "f": 1e16, "big": 10**20} if e == "E1" else {},
                )
            )
        with engine.begin() as conn:
            writer.write(conn, occs, outcome="committed" if s % 5 else "aborted")
    yield engine
    engine.dispose()


def test_each_bucket_holds_whole_scopes_in_order(log_db: sa.Engine, tmp_path: Path) -> None:
    out = tmp_path / "x"
    manifest = export_log(log_db, out, buckets=4, chunk_size=7, row_group_rows=9)
    assert manifest["rows"] == 200 and manifest["buckets"] == 4
    assert json.loads((out / MANIFEST).read_text()) == manifest
    seen: dict[str, str] = {}
    total = 0
    for name in manifest["files"]:
        f = pq.ParquetFile(out / name)
        assert f.schema_arrow.equals(EXPORT_SCHEMA)
        assert f.metadata.num_row_groups > 1  # written a row group at a time
        rows = f.read().to_pylist()
        total += len(rows)
        keys = [(r["scope"], r["t_occ"]) for r in rows]
        assert keys == sorted(keys)
        for r in rows:
            assert seen.setdefault(r["scope"], name) == name
            assert name.startswith(f"bucket={bucket_of(r['scope'], 4):05d}/")
    assert total == 200 and len(seen) == 40


def test_the_export_holds_what_the_log_holds(log_db: sa.Engine, tmp_path: Path) -> None:
    export_log(log_db, tmp_path / "x", buckets=3)
    exported = {
        (r["scope"], r["t_occ"]): r
        for b in ExportSource(tmp_path / "x").batches()
        for r in b.to_pylist()
    }
    with LogReader(log_db) as reader:
        logged = list(reader.occurrences())
    assert len(exported) == len(logged)
    for occ, outcome, _ in logged:
        row = exported[(occ.scope, occ.t_occ)]
        assert (row["event"], row["ts"], row["outcome"]) == (occ.event, occ.timestamp, outcome)
        assert row["detected_ts"] == occ.detected_timestamp
        if occ.source is not None:
            key = f'[{occ.source.key[0]},"x"]'
            assert (row["source_class"], row["source_key"]) == ("Item", key)
    row = exported[("s001", 7)]
    # the log's tagged form, the same on every backend: ints beyond 64 bits and
    # floats with a positive exponent (which jsonb and JSON readers change) tagged
    assert row["params"] == '{"big":{"$int":"0x56bc75e2d63100000"},"f":{"$float":"1e+16"},"n":7}'


def test_an_export_refuses_a_used_directory(log_db: sa.Engine, tmp_path: Path) -> None:
    """A directory holding something is refused; ``overwrite`` replaces an
    earlier export but never deletes a file sentinel did not write."""
    out = tmp_path / "x"
    export_log(log_db, out)
    with pytest.raises(ReplaySourceError, match="not empty"):
        export_log(log_db, out)
    export_log(log_db, out, overwrite=True, buckets=2)
    assert sum(b.num_rows for b in ExportSource(out).batches()) == 200
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ReplaySourceError, match=r"holds 'keep\.txt', which sentinel did not write"):
        export_log(log_db, out, overwrite=True)
    assert (out / "keep.txt").read_text() == "mine"
    assert sum(b.num_rows for b in ExportSource(out).batches()) == 200


def test_an_export_never_overwrites_the_database_it_reads(tmp_path: Path) -> None:
    """``--out`` naming the directory that holds the SQLite log (``.``, say)
    is refused with ``overwrite`` too, and the database is left whole."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        LogWriter().write(conn, [Occurrence("E1", 1, 1e9, scope="s1")], outcome="committed")
    engine.dispose()
    before = (tmp_path / "log.db").read_bytes()
    with pytest.raises(ReplaySourceError, match=r"holds .*log\.db, which this run reads"):
        export_log(url, tmp_path, overwrite=True)
    assert (tmp_path / "log.db").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["log.db"]


#: What the export says of the row of ``_set_first_params``.
BAD_ROW = r"row \d+ of sentinel_event_batches \(scope 's030'\): its occurrence #0 .* is not one"


def _set_first_params(engine: sa.Engine, params: str) -> None:
    """Set the params of scope s030's first occurrence (``txn:begin``, written
    with ``{}``) to the JSON ``params``, by hand."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE sentinel_event_batches SET occurrences = "
                "json_replace(occurrences, '$[0][6]', json(:p)) WHERE scope = 's030'"
            ),
            {"p": params},
        )


def test_a_failed_export_leaves_what_was_there(log_db: sa.Engine, tmp_path: Path) -> None:
    """An export that fails midway (here at a row changed by hand, late in the
    log) leaves neither a partial export nor a missing one: a new directory is
    not created, and an export it was to overwrite is still there, whole."""
    _set_first_params(log_db, "[1]")
    out = tmp_path / "x"
    with pytest.raises(ReplaySourceError, match=BAD_ROW):
        export_log(log_db, out, chunk_size=7, row_group_rows=9)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["log.db"]

    out.mkdir()
    with pytest.raises(ReplaySourceError, match=BAD_ROW):
        export_log(log_db, out, chunk_size=7, row_group_rows=9)
    assert out.is_dir() and not any(out.iterdir())

    _set_first_params(log_db, "{}")  # as written
    before = export_log(log_db, out, buckets=3)
    _set_first_params(log_db, "[1]")
    with pytest.raises(ReplaySourceError, match=BAD_ROW):
        export_log(log_db, out, overwrite=True, chunk_size=7, row_group_rows=9)
    assert json.loads((out / MANIFEST).read_text()) == before
    assert sum(b.num_rows for b in ExportSource(out).batches()) == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.db", "x"]


def test_an_empty_log_exports_to_a_manifest(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'e.db'}")
    migrate.upgrade(engine)
    manifest = export_log(engine, tmp_path / "x")
    engine.dispose()
    assert manifest["rows"] == 0 and manifest["files"] == []
    assert list(ExportSource(tmp_path / "x").batches()) == []


def test_exports_of_unknown_formats_or_revisions_are_refused(
    log_db: sa.Engine, tmp_path: Path
) -> None:
    export_log(log_db, tmp_path / "x")
    manifest_file = tmp_path / "x" / MANIFEST
    manifest = json.loads(manifest_file.read_text())
    manifest_file.write_text(json.dumps({**manifest, "schema_version": "9999"}))
    with pytest.raises(LogSchemaUnknownError, match=r"'9999'.*upgrade sentinel"):
        open_source(tmp_path / "x")
    manifest_file.write_text(json.dumps({**manifest, "format_version": 2}))
    with pytest.raises(ReplaySourceError, match="format version 2"):
        open_source(tmp_path / "x")
    with pytest.raises(ReplaySourceError, match="not a sentinel log export"):
        open_source(tmp_path)
    with pytest.raises(ReplaySourceError, match="no log export at"):
        open_source(tmp_path / "nowhere")


def test_an_export_goes_where_out_points(
    log_db: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``out`` as a symbolic link to a directory (output put on a larger disk),
    as ``.``, or in a directory the run may write only inside ``out``: the
    export is written into ``out`` itself (the staging is inside it), never
    beside it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    link = tmp_path / "link"
    link.symlink_to(disk, target_is_directory=True)
    export_log(log_db, link)
    assert link.is_symlink() and (disk / MANIFEST).exists()
    assert sum(b.num_rows for b in ExportSource(link).batches()) == 200
    export_log(log_db, link, overwrite=True, buckets=2)
    assert link.is_symlink() and sum(b.num_rows for b in ExportSource(disk).batches()) == 200

    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    export_log(log_db, ".")
    assert (here / MANIFEST).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_failed_move_into_place_keeps_the_old_export(
    log_db: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If putting the new files in place fails halfway, the old export is moved
    back, whole, and the error raised; nothing of either is lost."""
    out = tmp_path / "x"
    before = export_log(log_db, out, buckets=3)
    real = Path.rename
    moved: list[str] = []

    def flaky(self: Path, target: Any) -> Any:
        if ".sentinel-stage-export" in str(self):  # a new file going in
            moved.append(self.name)
            if len(moved) == 2:
                raise OSError(16, "Device or resource busy")
        return real(self, target)

    monkeypatch.setattr(Path, "rename", flaky)
    with pytest.raises(OSError, match="busy"):
        export_log(log_db, out, overwrite=True, buckets=2)
    monkeypatch.setattr(Path, "rename", real)
    assert json.loads((out / MANIFEST).read_text()) == before
    assert sum(b.num_rows for b in ExportSource(out).batches()) == 200
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MANIFEST, *{f.split("/")[0] for f in before["files"]}]
    )


def test_a_stage_left_by_a_dead_run_does_not_count_as_content(
    log_db: sa.Engine, tmp_path: Path
) -> None:
    """A run killed while writing leaves its hidden staging directory in
    ``out``: the next run treats ``out`` as empty and removes the leftover."""
    out = tmp_path / "x"
    (out / ".sentinel-stage-export-deadbeef0000" / "bucket=00000").mkdir(parents=True)
    export_log(log_db, out)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate a file", r"cannot read .*bucket=.*: .*the export is damaged"),
        ("files null", r"is damaged: its 'files' must list"),
        ("a file outside", r"is damaged: its 'files' must list"),
        ("rows wrong", r"its manifest counts 999 rows, its files hold 200"),
        ("rows not a number", r"is damaged: its 'files' must list"),
    ],
)
def test_a_damaged_export_is_refused_naming_what_is_wrong(
    log_db: sa.Engine, tmp_path: Path, damage: str, message: str
) -> None:
    """Before any replay: a truncated Parquet file, a manifest whose files or
    row count are not what the export holds (the count was reported as the
    number of rows read), a file path leading outside the export."""
    out = tmp_path / "x"
    export_log(log_db, out, buckets=2)
    manifest = json.loads((out / MANIFEST).read_text())
    if damage == "truncate a file":
        f = out / manifest["files"][0]
        f.write_bytes(f.read_bytes()[:100])
    else:
        manifest.update(
            {
                "files null": {"files": None},
                "a file outside": {"files": ["../elsewhere.parquet"]},
                "rows wrong": {"rows": 999},
                "rows not a number": {"rows": "200"},
            }[damage]
        )
        (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ReplaySourceError, match=message):
        replay(out, "tests.replay.workload:matrix_detector")
