"""What a replay returns."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

__all__ = ["ReplayResult", "count_detections"]


@dataclass
class ReplayResult:
    """The outcome of :func:`sentinel.replay.replay`.

    ``engine`` is ``"local"`` or ``"spark"``; ``events`` the number of log rows
    the source holds (every one was read); ``detections`` and ``per_rule``
    (detections by rule name) are ``None`` only for a Spark replay that returned
    a DataFrame without computing it; ``failed`` counts, by rule, the detections
    whose condition (or, with ``run_actions``, action) raised, as they did online
    (their ``error`` column says what; rules without such detections are left
    out); ``seconds`` is the wall time of the call.
    The detections themselves (:data:`~sentinel.replay.batch.DETECTION_SCHEMA`
    rows) are in exactly one of: ``table`` (local, without ``out``),
    ``dataframe`` (Spark, without ``out``; lazy), or Parquet files under ``out``.
    """

    engine: str
    source: str
    events: int
    seconds: float
    detections: int | None = None
    per_rule: dict[str, int] | None = None
    failed: dict[str, int] | None = None
    table: pa.Table | None = None
    dataframe: Any = None
    out: Path | None = None
    passes: list[str] = field(default_factory=list)

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("inf")

    def rows(self) -> list[dict[str, Any]]:
        """The detections as dictionaries (reads ``out`` or collects the
        DataFrame when that is where they are)."""
        if self.table is not None:
            return self.table.to_pylist()  # type: ignore[no-any-return]
        if self.out is not None:
            import pyarrow.parquet as pq

            return pq.read_table(self.out).select(list(_columns())).to_pylist()  # type: ignore[no-any-return]
        if self.dataframe is not None:
            return [r.asDict(recursive=True) for r in self.dataframe.collect()]
        return []


def _columns() -> tuple[str, ...]:
    from sentinel.replay.batch import DETECTION_COLUMNS

    return DETECTION_COLUMNS


def count_detections(rules: pa.ChunkedArray | pa.Array) -> dict[str, int]:
    """Detections per rule name from a ``rule`` column."""
    counts: Counter[str] = Counter()
    for item in rules.value_counts().to_pylist():
        counts[item["values"]] += item["counts"]
    return dict(sorted(counts.items()))
