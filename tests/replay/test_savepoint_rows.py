"""Replay of rows of rolled-back savepoints (the ``savepoint`` column), without
a database: detection state and detached detections roll back where the
savepoint did, in both input orders; rows without the column (older logs and
exports) replay as before."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sentinel import LocalEventDetector, Occurrence
from sentinel.replay import log_table, replay, replay_batches
from sentinel.replay.sources import read_export_files


def _detector(*, flush: bool = True) -> LocalEventDetector:
    det = LocalEventDetector()
    for name in ("E1", "E2", "E3", "E4"):
        det.explicit(name)
    det.rule("inside", "E1 ; E3", action=print, flush=flush)
    det.rule("undone", "E3 ; E4", action=print, flush=flush)  # E3 was rolled back
    det.rule("kept", "E1 ; E4", action=print, flush=flush)
    det.rule("two_deep", "E2 ; E3", action=print, flush=flush)
    if flush:
        det.rule("gone", "E1 ; E3", action=print, coupling="detached")
        det.rule("stays", "E1 ; E4", action=print, coupling="detached")
    return det


#: Transaction S (committed): E1@1; savepoint sp1 (rolled back) holding E2@2
#: and, in sp1/sp2 (rolled back too), E3@3; then E4@4.
ROWS: list[tuple[Any, ...]] = [
    (Occurrence("txn:begin", 0, 0.0, scope="S"), "committed", None),
    (Occurrence("E1", 1, 0.0, scope="S"), "committed", None),
    (Occurrence("E2", 2, 0.0, scope="S"), "aborted", "sp1"),
    (Occurrence("E3", 3, 0.0, scope="S"), "aborted", "sp1/sp2"),
    (Occurrence("E4", 4, 0.0, scope="S"), "committed", None),
    (Occurrence("txn:commit", 5, 0.0, scope="S"), "committed", None),
]


def _found(batches: Any) -> list[tuple[str, int, list[int]]]:
    table = pa.Table.from_batches(list(batches))
    return sorted((d["rule"], d["t_occ"], d["constituent_t_occs"]) for d in table.to_pylist())


def test_savepoint_rows_roll_back_where_they_did_online() -> None:
    table = log_table(ROWS)
    expected = [
        ("inside", 3, [1, 3]),
        ("kept", 4, [1, 4]),
        ("stays", 4, [1, 4]),
        ("two_deep", 3, [2, 3]),
    ]
    assert _found(replay_batches(table.to_batches(), _detector())) == expected
    # the same rows first of all (the outcome of the scope comes from the others)
    first = log_table([ROWS[2], ROWS[3], ROWS[1], ROWS[4]])
    sorted_rows = first.sort_by([("t_occ", "ascending")])
    assert _found(replay_batches(sorted_rows.to_batches(), _detector())) == expected


def test_rules_spanning_transactions_see_savepoint_rows_in_t_occ_order() -> None:
    det = _detector(flush=False)
    later = [
        (Occurrence("E4", 6, 0.0, scope="T"), "committed", None),
        (Occurrence("txn:commit", 7, 0.0, scope="T"), "committed", None),
    ]
    table = log_table(ROWS + later)
    # flush=False state is process-wide: a rollback does not undo it (online
    # neither), so E3 of the rolled-back savepoint still initiates E3 ; E4
    assert _found(replay_batches(table.to_batches(), det, order="t_occ")) == [
        ("inside", 3, [1, 3]),
        ("kept", 4, [1, 4]),
        ("kept", 6, [1, 6]),
        ("two_deep", 3, [2, 3]),
        ("undone", 4, [3, 4]),
        ("undone", 6, [3, 6]),
    ]


def test_rows_without_the_column_replay_as_before(tmp_path: Any) -> None:
    old = log_table([(o, oc) for o, oc, _ in ROWS]).drop_columns(["savepoint"])
    assert "savepoint" not in old.schema.names
    got = replay(old, _detector()).rows()
    # no savepoint known: every row counts
    assert ("undone", 4) in {(d["rule"], d["t_occ"]) for d in got}
    pq.write_table(old, tmp_path / "part.parquet")
    [batch] = list(read_export_files([tmp_path / "part.parquet"]))
    assert batch.column("savepoint").null_count == batch.num_rows


def test_an_export_made_before_the_column_replays_on_spark(spark: Any, tmp_path: Any) -> None:
    """An export of a log before revision 0004 has no ``savepoint`` column: the
    Spark engine reads it as nulls (and replays as before)."""
    import json

    from sentinel.replay.export import MANIFEST, ExportWriter

    old = log_table([(o, oc) for o, oc, _ in ROWS])
    writer = ExportWriter(tmp_path / "x", buckets=2)
    for batch in old.to_batches():
        writer.write(batch)
    writer.close(schema_version="0003")
    for f in (tmp_path / "x").glob("bucket=*/*.parquet"):
        pq.write_table(pq.read_table(f).drop_columns(["savepoint"]), f)
    manifest = json.loads((tmp_path / "x" / MANIFEST).read_text())
    assert manifest["schema_version"] == "0003"
    local = replay(tmp_path / "x", _detector()).rows()
    on_spark = replay(
        tmp_path / "x", "tests.replay.test_savepoint_rows:_detector", engine="spark", spark=spark
    ).rows()
    key = sorted((d["rule"], d["t_occ"]) for d in local)
    assert key == sorted((d["rule"], d["t_occ"]) for d in on_spark)
    assert ("undone", 4) in key  # no savepoint known: every row counts
