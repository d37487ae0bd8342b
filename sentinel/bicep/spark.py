"""Replaying a BiCEPL program on Spark: thin wiring around :func:`replay_arrow`.

A program's ticks depend on each other (its event classes are global state), so
the replay runs in one partition: Spark reads the log (``sentinel.replay.spark.read_log``,
through Python workers, or from a Parquet export), keeps the program's events,
brings them to one worker in order, and that worker runs :func:`replay_arrow`,
the plain batch function (``Iterator[RecordBatch] -> Iterator[RecordBatch]``),
testable without Spark. What Spark adds is reading a large log in parallel and
writing the actions where Spark writes; the processing is the local replay's.

Needs the ``spark`` extra (PySpark, pyarrow).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from sentinel.bicep.compiler import compile_program
from sentinel.bicep.processor import announcement_event, tick_event
from sentinel.bicep.replay import log_groups, replay_groups
from sentinel.occurrence import Occurrence
from sentinel.params import loads

__all__ = ["ACTION_SCHEMA", "replay_arrow", "replay_spark"]

#: One row per action fired in the replay.
ACTION_SCHEMA = pa.schema(
    [
        ("tick", pa.int64()),
        ("action", pa.string()),
        ("event_class", pa.string()),
        ("key", pa.string()),  # JSON object
        ("args", pa.string()),  # JSON array (times as ISO 8601 text)
        ("occ_time", pa.int64()),
        ("det_time", pa.int64()),
        ("statement", pa.string()),
    ]
)


def _json(value: Any) -> str:
    return json.dumps(value, default=lambda v: v.isoformat(), sort_keys=True)


def replay_arrow(
    batches: Iterator[pa.RecordBatch], *, text: str, name: str, chronon: int | str
) -> Iterator[pa.RecordBatch]:
    """Log rows (columns ``scope``, ``t_occ``, ``event``, ``params`` as the log
    stores them) of one program -> the actions its replay fires."""
    program = compile_program(text, name=name)
    occs: list[Occurrence] = []
    for batch in batches:
        cols = batch.to_pydict()
        for scope, t_occ, event, params in zip(
            cols["scope"], cols["t_occ"], cols["event"], cols["params"], strict=True
        ):
            occs.append(Occurrence(event, t_occ, 0.0, params=loads(params), scope=scope))
    rows: dict[str, list[Any]] = {f.name: [] for f in ACTION_SCHEMA}
    for tick, fired in replay_groups(program, log_groups(occs, program), chronon=chronon):
        for call in fired:
            rows["tick"].append(tick)
            rows["action"].append(call.action)
            rows["event_class"].append(call.event_class)
            rows["key"].append(_json(dict(call.key)))
            rows["args"].append(_json(list(call.args)))
            rows["occ_time"].append(
                None if call.occ_time is None else int(call.occ_time.timestamp())
            )
            rows["det_time"].append(
                None if call.det_time is None else int(call.det_time.timestamp())
            )
            rows["statement"].append(call.statement)
    yield pa.RecordBatch.from_pydict(rows, schema=ACTION_SCHEMA)


def replay_spark(
    spark: Any,
    source: Any,
    text: str,
    *,
    name: str,
    chronon: int | str = "15m",
    schema: str | None = None,
    prefix: str = "sentinel_",
) -> Any:
    """The actions a replay of ``text`` (named ``name``) over the log at
    ``source`` (a database URL or an export directory) fires, as a Spark
    DataFrame of :data:`ACTION_SCHEMA` rows."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from sentinel.replay.spark import read_log

    program = compile_program(text, name=name)
    events = [announcement_event(name, c.name) for c in program if not c.complex]
    events.append(tick_event(name))
    rows = read_log(spark, source, events=events, schema=schema, prefix=prefix)
    rows = rows.filter("outcome IS NULL OR outcome = 'committed'")
    one = rows.repartition(1).sortWithinPartitions("scope", "t_occ")
    step = functools.partial(replay_arrow, text=text, name=name, chronon=chronon)
    return one.select("scope", "t_occ", "event", "params").mapInArrow(
        step, from_arrow_schema(ACTION_SCHEMA)
    )
