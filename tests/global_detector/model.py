"""An independent model of the test rule over the committed log: the log's
committed rows in commit order (read with plain SQL), and chronicle pairing of
each customer's orders and payments, computed by hand."""

from __future__ import annotations

import json
from collections import defaultdict, deque
from typing import Any

import sqlalchemy as sa

from sentinel.params import loads


def committed_rows(engine: sa.Engine) -> list[tuple[str, str, dict[str, Any]]]:
    """``(event, scope, params)`` of every row of a committed transaction (or of
    the process scope), in commit order."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT event, scope, params FROM sentinel_occurrences "
                "WHERE commit_seq IS NOT NULL AND (outcome IS NULL OR outcome <> 'aborted') "
                "ORDER BY commit_seq, id, t_occ"
            )
        ).all()
    out = []
    for event, scope, params in rows:
        if not isinstance(params, str):
            params = json.dumps(params)
        out.append((event, scope, loads(params)))
    return out


def expected_details(engine: sa.Engine) -> list[str]:
    """What the rule ``paid`` must detect, as :func:`rules.describe` writes it,
    in detection order."""
    unpaid: dict[Any, deque[tuple[str, str, dict[str, Any]]]] = defaultdict(deque)
    out = []
    for event, scope, params in committed_rows(engine):
        if event == "order":
            unpaid[params["customer"]].append((event, scope, params))
        elif event == "payment" and unpaid[params["customer"]]:
            first = unpaid[params["customer"]].popleft()
            out.append(json.dumps([list(first), [event, scope, params]], sort_keys=True))
    return out
