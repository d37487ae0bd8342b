"""Replay of the persisted event log: after-the-fact detection, local or on Spark.

:func:`replay` feeds the logged occurrences, in ``t_occ`` order within each
detection scope, to a fresh detector holding the given rules, and returns their
detections: the same ones the online run made (conditions evaluated; actions not
run unless asked, local engine only). Aborted transactions replay their
occurrences and their abort as they happened.

The pieces, each usable on its own:

- :func:`~sentinel.replay.batch.replay_batches`: the replay step, Arrow batches
  of log rows in, Arrow batches of detections out (:data:`DETECTION_SCHEMA`);
- :mod:`~sentinel.replay.sources`: the log as Arrow batches, from the database
  or from a Parquet export;
- :func:`~sentinel.replay.export.export_log`: the Parquet export
  (``sentinel log export``);
- :mod:`~sentinel.replay.local` and :mod:`~sentinel.replay.spark`: the engines.

Replay needs pyarrow and orjson (``pip install 'sqlalchemy-sentinel[replay]'``); the
Spark engine also PySpark (``pip install 'sqlalchemy-sentinel[spark]'``).
See ``docs/replay.md``.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from typing import Any, Literal

from sentinel.errors import MissingExtraError

try:  # before the modules that need it: an error that names the extra
    import pyarrow  # noqa: F401
except ImportError as err:
    raise MissingExtraError("replay", "replay", err.name) from err

from sentinel.errors import ReplayError
from sentinel.extras import require
from sentinel.log.tables import DEFAULT_PREFIX
from sentinel.replay.batch import (
    DETECTION_COLUMNS,
    DETECTION_SCHEMA,
    LOG_COLUMNS,
    LOG_SCHEMA,
    Replayer,
    replay_batches,
)
from sentinel.replay.export import export_log
from sentinel.replay.result import ReplayResult
from sentinel.replay.rules import Rules, load_rules
from sentinel.replay.sources import log_table, open_source

__all__ = [
    "DETECTION_COLUMNS",
    "DETECTION_SCHEMA",
    "LOG_COLUMNS",
    "LOG_SCHEMA",
    "ReplayResult",
    "Replayer",
    "export_log",
    "load_rules",
    "log_table",
    "replay",
    "replay_batches",
]

Engine = Literal["local", "spark"]


def replay(
    source: Any,
    rules: Rules,
    *,
    engine: Engine = "local",
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    spark: Any = None,
    partitions: int | None = None,
    partition_key: str | None = None,
    run_actions: bool = False,
    progress: Callable[[int], None] | None = None,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    chunk_size: int = 10_000,
) -> ReplayResult:
    """Replay the event log at ``source`` through ``rules`` and return the
    detections.

    ``source``
        a SQLAlchemy URL (``"postgresql+psycopg://app@db/app"``) or engine (the
        log tables; ``schema`` and ``prefix`` select them, ``chunk_size`` rows
        per query), the directory of a Parquet export (``sentinel log export``),
        a :class:`pyarrow.Table` of log rows, or (Spark) a DataFrame of them.
    ``rules``
        ``"package.module:attribute"`` naming a
        :class:`~sentinel.LocalEventDetector` or a zero-argument callable
        returning one; the local engine also takes the detector itself.
    ``engine``
        ``"local"`` (this process) or ``"spark"`` (``spark``: the session;
        default the active one or a new ``local[*]`` one; ``partitions``: how
        many to replay in; ``partition_key``: the parameter that splits the rules
        with ``flush=False`` into partitions, which otherwise replay in one).
    ``out``
        a directory to write the detections to as Parquet (``overwrite``
        replaces it); without it they are in ``result.table`` (local) or
        ``result.dataframe`` (Spark, lazy).
    ``run_actions``
        run the actions of rules whose condition holds (local only), with
        signals muted: the log already holds what they signalled online.
    ``progress``
        local only: called with the number of log rows of each batch read.

    Both engines return the same detections (:data:`DETECTION_SCHEMA`): rule,
    coupling, scope and ``t_occ`` of the detection, the constituents' ids, their
    parameters as JSON, the condition's result and any error it raised.

    Raises, before any replay starts:
    :class:`~sentinel.errors.RuleReferenceError` (rules that cannot be loaded),
    :class:`~sentinel.errors.LogConnectionError` (an unreachable database),
    :class:`~sentinel.errors.LogSchemaError` (log tables missing or at a schema
    revision this code does not know), :class:`~sentinel.errors.ReplaySourceError`
    (a source that is not a log), :class:`~sentinel.errors.ReplayError` (bad
    options).

    >>> result = replay("sqlite:///app.db", "myapp.rules:detector")  # doctest: +SKIP
    >>> result.per_rule, result.events_per_second                   # doctest: +SKIP
    ({'paid': 1204, 'restock': 17}, 412000.0)
    """
    if engine == "spark":
        if run_actions:
            raise ReplayError("actions run only in the local engine (run_actions=True)")
        require("spark", "the Spark engine")
        from sentinel.replay.spark import replay_spark

        return replay_spark(
            source,
            rules,
            spark=spark,
            out=out,
            overwrite=overwrite,
            partitions=partitions,
            partition_key=partition_key,
            schema=schema,
            prefix=prefix,
            chunk_size=chunk_size,
        )
    if engine != "local":
        raise ReplayError(f"engine must be 'local' or 'spark', not {engine!r}")
    from sentinel.replay.local import replay_local
    from sentinel.replay.rules import resolve_rules
    from sentinel.replay.sources import DatabaseSource

    det = resolve_rules(rules)  # first, so a bad reference fails before any I/O
    if partition_key is not None and not partition_key.isidentifier():
        raise ReplayError(f"partition_key must be a parameter name, not {partition_key!r}")
    src = open_source(source, schema=schema, prefix=prefix, chunk_size=chunk_size)
    try:
        if out is not None:
            _prepare_out(out, overwrite, src)
        return replay_local(src, det, out=out, run_actions=run_actions, progress=progress)
    finally:
        if isinstance(src, DatabaseSource):
            src.close()


def _prepare_out(out: str | os.PathLike[str], overwrite: bool, src: Any) -> None:
    """Refuse an ``out`` that holds something, unless ``overwrite`` and what it
    holds is sentinel's own output (not the log ``src`` reads, nothing else:
    :func:`~sentinel.replay.staging.overwrite_refusal`); what it holds is
    replaced only when the replay succeeds (see ``replay_local``)."""
    from pathlib import Path

    from sentinel.replay.sources import read_paths
    from sentinel.replay.staging import holds_something, overwrite_refusal, reading_refusal

    path = Path(out)
    refusal = reading_refusal(path, read_paths(src))
    if refusal is not None:
        raise ReplayError(refusal)
    if not holds_something(path):
        return
    if not overwrite:
        raise ReplayError(f"{path} exists and is not empty; choose another --out or --overwrite")
    refusal = overwrite_refusal(path, read_paths(src))
    if refusal is not None:
        raise ReplayError(refusal)


class _ReplayModule(types.ModuleType):
    """This package, callable: ``sentinel.replay(source, rules, ...)`` is
    :func:`replay`, as the issue and the docs spell it, while
    ``sentinel.replay.spark`` and the other modules stay reachable."""

    def __call__(self, *args: Any, **kwargs: Any) -> ReplayResult:
        return replay(*args, **kwargs)


sys.modules[__name__].__class__ = _ReplayModule
