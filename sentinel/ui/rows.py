"""What the web view's queries share: a page of rows, ids' range, times as
text, and reading rows so that a damaged one is named (:mod:`.queries`,
:mod:`.operations`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from sentinel.log.reader import UNREADABLE, _unreadable

__all__ = ["ID_MAX", "ID_MIN", "MAX_PAGE", "Page"]

#: The most rows one page of any list holds, whatever the request asks.
MAX_PAGE = 200
#: The range of an id, and of a bound computed from one (every backend's ids
#: are signed 64-bit integers: a value outside cannot be sent to the database).
ID_MIN, ID_MAX = -(2**63), 2**63 - 1


def _clamp(n: int) -> int:
    """``n`` within :data:`ID_MIN` and :data:`ID_MAX`."""
    return max(ID_MIN, min(ID_MAX, n))


@dataclass
class Page:
    """One page of a list: its ``rows`` (dicts), and the keys that continue it:
    ``older`` (``None``: nothing older) and ``newer`` (``None``: this is the
    newest page), as the query-string values the next request passes back."""

    rows: list[dict[str, Any]]
    older: str | None = None
    newer: str | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _iso(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _stamp(ts: float | None) -> str:
    return "" if ts is None else _iso(datetime.fromtimestamp(ts, UTC))


def _json_text(value: Any) -> str:
    """A JSON column's value as compact text with sorted keys (SQLite gives
    text, PostgreSQL and MariaDB what the driver decoded)."""
    if value is None:
        return ""
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _read(conn: sa.Connection, table: sa.Table, q: sa.Select[Any], key: Any = None) -> list[Any]:
    """The rows of ``q``, a query of ``table`` whose rows ``key`` (default:
    ``id``) tells apart. A value its column's type cannot read (a time on
    SQLite that is not one) raises the :class:`~sentinel.errors.LogRowError`
    naming its row and column, as the reader does (each of the query's rows,
    then each of its columns, is read alone to find it)."""
    try:
        return list(conn.execute(q))
    except UNREADABLE as err:
        raise _unreadable(conn, table, q.selected_columns, q, err, key) from err
