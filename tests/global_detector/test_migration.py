"""Migration 0005 (commit order, global cursors): up and down with data, on the
way to the newest revision (0006, one row per transaction) and back through
0006's downgrade."""

from __future__ import annotations

import sqlalchemy as sa

from sentinel.log import LogWriter, migrate
from sentinel.log.tables import SCHEMA_VERSION
from sentinel.occurrence import Occurrence


def _events(engine: sa.Engine) -> list[tuple[str, int | None]]:
    """``(scope, commit_seq)`` of the per-occurrence table of revision 0005."""
    with engine.connect() as conn:
        return [
            (s, q)
            for s, q in conn.execute(
                sa.text("SELECT scope, commit_seq FROM sentinel_events ORDER BY id")
            )
        ]


def _occurrences(engine: sa.Engine) -> list[tuple[str, int | None]]:
    """``(scope, commit_seq)`` of the newest revision's occurrences."""
    with engine.connect() as conn:
        return [
            (s, q)
            for s, q in conn.execute(
                sa.text("SELECT scope, commit_seq FROM sentinel_occurrences ORDER BY id, t_occ")
            )
        ]


def test_migration_0005_up_and_down_with_data(engine: sa.Engine) -> None:
    migrate.upgrade(engine, "0004")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO sentinel_events (scope, t_occ, event, at, detected_at, ts, "
                "detected_ts, params, outcome) VALUES ('old', 1, 'order', :at, :at, 1.0, 1.0, "
                "'{}', 'committed')"
            ),
            {"at": "2026-01-01 00:00:00"},
        )
    migrate.upgrade(engine, "0005")
    assert _events(engine) == [("old", None)]  # before commit order: not numbered
    migrate.upgrade(engine)
    assert migrate.current(engine) == SCHEMA_VERSION == "0009"
    assert _occurrences(engine) == [("old", None)]  # carried into a row of its own
    writer = LogWriter(commit_order=True)
    for n in range(1, 4):
        with engine.begin() as conn:
            writer.write(conn, [Occurrence("order", 1, 2.0, scope=f"new{n}")])
    numbered = [("old", None), ("new1", 1), ("new2", 2), ("new3", 3)]
    assert _occurrences(engine) == numbered
    migrate.downgrade(engine, "0005")  # 0006's downgrade keeps the numbers
    assert _events(engine) == numbered
    migrate.downgrade(engine, "0004")
    assert migrate.current(engine) == "0004"
    insp = sa.inspect(engine)
    assert "commit_seq" not in {c["name"] for c in insp.get_columns("sentinel_events")}
    assert not insp.has_table("sentinel_global_cursors")
    assert not insp.has_table("sentinel_commit_counter")
    with engine.connect() as conn:
        scopes = conn.execute(sa.text("SELECT scope FROM sentinel_events ORDER BY id")).scalars()
        assert list(scopes) == ["old", "new1", "new2", "new3"]
    migrate.upgrade(engine)  # and up again, numbering from 1
    with engine.begin() as conn:
        writer.forget()
        writer.write(conn, [Occurrence("order", 1, 2.0, scope="again")])
    assert _occurrences(engine)[-1] == ("again", 1)
