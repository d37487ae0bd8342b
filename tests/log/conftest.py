"""Fixtures for the event log tests: a migrated database and occurrence builders."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.log import LogReader, LogWriter, migrate
from sentinel.occurrence import ObjectRef, Occurrence
from sentinel.params import normalize

T0 = 1_700_000_000.123456789  # more digits than a microsecond datetime keeps


@pytest.fixture
def migrated(engine: sa.Engine) -> sa.Engine:
    """``engine`` with the log tables at head."""
    migrate.upgrade(engine)
    return engine


@pytest.fixture
def writer() -> LogWriter:
    return LogWriter()


@pytest.fixture
def reader(migrated: sa.Engine) -> Iterator[LogReader]:
    with LogReader(migrated, chunk_size=7) as r:
        yield r


def occ(
    event: str,
    t: int,
    scope: str = "tx-1",
    *,
    ts: float | None = None,
    source: Any = None,
    **params: Any,
) -> Occurrence:
    """An occurrence as the detector makes it (parameters normalized)."""
    stamp = T0 + t / 1000 if ts is None else ts
    return Occurrence(
        event,
        t,
        stamp,
        stamp + 0.000_000_3,
        source,
        {k: normalize(v, event=event, param=k) for k, v in params.items()},
        scope,
    )


def every_loggable_value() -> dict[str, Any]:
    """One parameter of each loggable type (NaN is tested on its own: NaN != NaN)."""
    return {
        "none": None,
        "yes": True,
        "no": False,
        "small": -3,
        "big": 2**62 + 1,
        "huge": 10**30,
        "real": 0.1 + 0.2,
        "inf": float("inf"),
        "text": "ünïcödé ✓ 🙂 'quoted' \"double\"",
        "empty": "",
        "ref": ObjectRef("Stock", ("IBM",)),
        "composite_ref": ObjectRef("Order", (7, "2024-01", uuid.UUID(int=5))),
        "transient": ObjectRef("Draft", ("local", 42)),
        "aware": dt.datetime(
            2024, 3, 1, 12, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=5))
        ),
        "naive": dt.datetime(2024, 3, 1, 12, 30, 15, 1),
        "day": dt.date(1999, 12, 31),
        "clock": dt.time(23, 59, 58, 999999),
        "span": dt.timedelta(days=-1, seconds=5, microseconds=7),
        "money": Decimal("1234567890.123456789"),
        "money_exp": Decimal("1E+3"),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "blob": bytes(range(256)),
        "seq": [1, "two", [3.0, None], ObjectRef("X", (1,))],
        "map": {"a": 1, "nested": {"b": [True]}},
        "dollar_map": {"$ref": "not a reference", "$date": 3},
        "$weird key": 1,
    }
