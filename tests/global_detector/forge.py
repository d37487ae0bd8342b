"""Log rows written by hand, as anyone with access to the database can: one
row of ``sentinel_event_batches`` (one transaction's occurrences) with the
``occurrences`` JSON and the ``commit_seq`` the test chooses."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

#: The times the row's own columns carry (the global detector reads the
#: occurrences' times, in the JSON).
AT = "2026-01-01 00:00:00"

_INSERT = sa.text(
    "INSERT INTO sentinel_event_batches (scope, t_first, t_last, n, at_min, at_max, "
    "outcome, commit_seq, written_at, process, occurrences) VALUES (:scope, :t_first, "
    ":t_last, :n, :at, :at, :outcome, :seq, :at, 'forger:1', :occurrences)"
)


def element(
    t_occ: int,
    event: str,
    ts: float,
    params: Any,
    *,
    detected_ts: float | None = None,
    source: tuple[str, str] | None = None,
) -> list[Any]:
    """One occurrence as the log lays it out in a row:
    ``[t_occ, event, ts, detected_ts, source_class, source_key, params]``."""
    source_class, source_key = source if source is not None else (None, None)
    return [t_occ, event, ts, detected_ts, source_class, source_key, params]


def forge(
    conn: sa.Connection,
    elements: list[list[Any]] | str,
    *,
    seq: int | None,
    scope: str = "forged",
    outcome: str = "committed",
) -> int:
    """Insert a row of ``elements`` (see :func:`element`) in scope ``scope``,
    numbered ``seq``; return its id. ``elements`` are written as Python's
    :mod:`json` writes them (``Infinity`` and ``NaN`` included), or, given as
    text, stored as they are (a number no float holds, say)."""
    text = elements if isinstance(elements, str) else json.dumps(elements)
    t_occs = [e[0] for e in json.loads(text)]
    conn.execute(
        _INSERT,
        {
            "scope": scope,
            "t_first": min(t_occs),
            "t_last": max(t_occs),
            "n": len(t_occs),
            "at": AT,
            "outcome": outcome,
            "seq": seq,
            "occurrences": text,
        },
    )
    return int(
        conn.execute(
            sa.text("SELECT max(id) FROM sentinel_event_batches WHERE scope = :s"), {"s": scope}
        ).scalar_one()
    )
