"""The local engine: replay in this process, streaming the log in bounded batches.

Two passes at most, each one :class:`~sentinel.replay.batch.Replayer`:

1. the rules that flush per transaction (the usual case) over the whole log in
   ``(scope, t_occ)`` order: one scope's detection state at a time;
2. the rules that opted out of flushing (``flush=False``) over the occurrences of
   the events they listen to (and the transaction ends), in ``t_occ`` order.
   From an export this pass sorts those occurrences in memory.

Detections go to a :class:`pyarrow.Table` or, with ``out``, straight to a Parquet
file, so memory stays bounded by a batch (plus pass 2's selection).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import pyarrow as pa

from sentinel.replay.batch import DETECTION_PARQUET, DETECTION_SCHEMA, Replayer
from sentinel.replay.result import ReplayResult
from sentinel.replay.rules import Rules, cross_scope_rules, per_scope_rules, resolve_rules
from sentinel.replay.sources import LogSource
from sentinel.replay.staging import Staging

__all__ = ["replay_local"]


class _Sink:
    """Where detections go: a list of batches, or a Parquet file.

    The file is written in a hidden directory inside ``out``
    (:class:`~sentinel.replay.staging.Staging`), whose contents :meth:`close`
    puts in place (only then is what ``out`` held removed) and which
    :meth:`abort` deletes: a replay that fails leaves ``out`` as it was."""

    def __init__(self, out: Path | None) -> None:
        self.out = out
        self.batches: list[pa.RecordBatch] = []
        self._writer: Any = None
        self._staging: Staging | None = None
        if out is not None:
            import pyarrow.parquet as pq

            self._staging = Staging(out, "replay")
            self._writer = pq.ParquetWriter(
                self._staging.path / "part-00000.parquet", DETECTION_SCHEMA, **DETECTION_PARQUET
            )

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        if self._writer is not None:
            self._writer.write_batch(batch)
        else:
            self.batches.append(batch)

    def close(self) -> pa.Table | None:
        if self._writer is not None:
            self._writer.close()
            assert self._staging is not None
            self._staging.commit()  # empty, or to be overwritten (replay() checked)
            return None
        return pa.Table.from_batches(self.batches, schema=DETECTION_SCHEMA)

    def abort(self) -> None:
        """Delete what was written; ``out`` stays as it was."""
        if self._writer is not None:
            with suppress(Exception):
                self._writer.close()
        if self._staging is not None:
            self._staging.abort()


def replay_local(
    source: LogSource,
    rules: Rules,
    *,
    out: str | os.PathLike[str] | None = None,
    run_actions: bool = False,
    progress: Callable[[int], None] | None = None,
    batch_rows: int = 32_768,
) -> ReplayResult:
    """Replay ``source`` through ``rules`` in this process (see the module docs).

    ``progress(rows)`` is called after each batch of log rows read. Raises the
    source's errors (unreachable database, unknown schema revision) before any
    replay starts, and :class:`~sentinel.errors.RuleReferenceError` for rules
    that cannot be loaded. ``out`` is replaced only when the replay succeeds;
    one that fails leaves it as it was.
    """
    start = time.perf_counter()
    det = resolve_rules(rules)
    source.check()
    events = source.count()
    out_path = None if out is None else Path(out)
    sink = _Sink(out_path)
    passes: list[str] = []
    scoped = [r.name for r in per_scope_rules(det)]
    spanning = [r.name for r in cross_scope_rules(det)]
    per_rule = dict.fromkeys(sorted([*scoped, *spanning]), 0)
    failed: dict[str, int] = {}
    try:
        if scoped:
            passes.append("scope")
            replayer = Replayer(det, order="scope", only=scoped, run_actions=run_actions)
            _run(replayer, source.batches("scope"), sink, progress, batch_rows)
            per_rule.update(replayer.per_rule)
            failed.update(replayer.failed)
        if spanning:
            passes.append("t_occ")
            replayer = Replayer(det, order="t_occ", only=spanning, run_actions=run_actions)
            wanted = replayer.needed_events()
            _run(replayer, source.batches("t_occ", events=wanted), sink, progress, batch_rows)
            per_rule.update(replayer.per_rule)
            failed.update(replayer.failed)
        table = sink.close()
    except BaseException:
        sink.abort()
        raise
    return ReplayResult(
        engine="local",
        source=source.location,
        events=events,
        seconds=time.perf_counter() - start,
        detections=sum(per_rule.values()),
        per_rule=per_rule,
        failed=dict(sorted(failed.items())),
        table=table,
        out=out_path,
        passes=passes,
    )


def _run(
    replayer: Replayer,
    batches: Any,
    sink: _Sink,
    progress: Callable[[int], None] | None,
    batch_rows: int,
) -> None:
    for batch in batches:
        replayer.feed(batch)
        if replayer.pending >= batch_rows:
            sink.add(replayer.take())
        if progress is not None:
            progress(batch.num_rows)
    replayer.finish()
    sink.add(replayer.take())
