"""Migration 0006 (issue 31): a log written at 0005, one row per occurrence,
moves into one row per transaction; the view ``occurrences`` then returns
exactly the rows the 0005 table held, and a downgrade gives the table exactly
those rows again, on SQLite, PostgreSQL and MariaDB, with a schema and a
prefix."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.log import migrate
from sentinel.log.records import encode_key
from sentinel.log.tables import LogJSON, UTCDateTime
from tests.log.test_views import stored_at

#: The 0005 ``events`` columns (``id`` aside), in order.
COLUMNS = (
    "scope",
    "t_occ",
    "event",
    "at",
    "detected_at",
    "ts",
    "detected_ts",
    "source_class",
    "source_key",
    "params",
    "outcome",
    "expired_at",
    "savepoint",
    "commit_seq",
)
_EXPIRED = datetime(2026, 11, 30, 8, 15, 0, 123456, tzinfo=UTC)


def _events(backend: str, schema: str | None, prefix: str) -> sa.Table:
    """The 0005 ``events`` table, with its values bound as the 0005 writer sent
    them: ``at`` as text and ``params`` as compact JSON text on SQLite (and
    ``params`` as text on MariaDB), the column types elsewhere."""
    text = backend == "sqlite"
    return sa.Table(
        f"{prefix}events",
        sa.MetaData(schema=schema),
        sa.Column("id", sa.BigInteger(), primary_key=True),
        sa.Column("scope", sa.String(128)),
        sa.Column("t_occ", sa.BigInteger()),
        sa.Column("event", sa.String(255)),
        sa.Column("at", sa.Text() if text else UTCDateTime()),
        sa.Column("detected_at", sa.Text() if text else UTCDateTime()),
        sa.Column("ts", sa.Double()),
        sa.Column("detected_ts", sa.Double()),
        sa.Column("source_class", sa.String(255)),
        sa.Column("source_key", sa.Text()),
        sa.Column("params", LogJSON() if backend == "postgresql" else sa.Text()),
        sa.Column("outcome", sa.String(16)),
        sa.Column("expired_at", UTCDateTime()),
        sa.Column("savepoint", sa.Text()),
        sa.Column("commit_seq", sa.BigInteger()),
    )


_TIMES = [
    1000.0078125,
    1000.0234375,
    1.9999999,
    1_700_000_000.123456789,
    1_700_000_000.9999996,
    32_503_680_000.5,
    -1.5,
    0.0,
]
_PARAMS: list[dict[str, Any]] = [
    {},
    {"n": 7, "text": "ünïcödé ✓ 🙂 'q' \"d\"", "none": None, "yes": True},
    {"nested": {"a": [1, {"b": [True, None]}], "c": {}}, "$weird key": 1},
    {"big": 2**62 + 1, "real": 0.1 + 0.2, "huge": {"$float": "1e+16"}, "neg": {"$float": "-0.0"}},
    {"ref": {"$ref": ["Order", [7, "2024-01"]]}, "tiny": 5e-324},
]
_SOURCES = [
    (None, None),
    ("Order", encode_key((7, "2024-01", uuid.UUID(int=5)))),
    ("Tëxt", encode_key(("ü 🙂", None, 2.5))),
]


def _old_rows() -> list[dict[str, Any]]:
    """A 0005 log: a committed transaction with commit numbers and, interleaved,
    what two nested savepoints' rollbacks undid; an aborted transaction; the
    process scope (outcome NULL); a transaction of an unnumbered writer; some
    rows archived."""
    process = f"process:{uuid.UUID(int=9).hex}"
    plan = [
        # scope, outcome, savepoint, commit_seq, t_occs
        ("tx-1", "committed", None, 41, [1, 2, 5, 9]),
        ("tx-1", "aborted", "sp1", None, [3, 6]),
        ("tx-1", "aborted", "sp1/sp2", None, [4]),
        ("tx-2", "aborted", None, None, [10, 11]),
        (process, None, None, None, [12, 13, 14]),
        ("tx-3", "committed", None, None, [15]),
        ("TX-3", "committed", None, 42, [16, 17]),  # differs in case only
    ]
    rows = []
    i = 0
    for scope, outcome, savepoint, seq, t_occs in plan:
        for t in t_occs:
            ts = _TIMES[i % len(_TIMES)]
            dts = ts if i % 3 else _TIMES[(i + 1) % len(_TIMES)]
            source_class, source_key = _SOURCES[i % len(_SOURCES)]
            rows.append(
                {
                    "scope": scope,
                    "t_occ": t,
                    "event": f"E{i % 4}_é",
                    "ts": ts,
                    "detected_ts": dts,
                    "source_class": source_class,
                    "source_key": source_key,
                    "params": _PARAMS[i % len(_PARAMS)],
                    "outcome": outcome,
                    "expired_at": _EXPIRED if i % 4 == 1 else None,
                    "savepoint": savepoint,
                    "commit_seq": seq,
                }
            )
            i += 1
    return rows


def _write_old(
    backend: str, engine: sa.Engine, rows: list[dict[str, Any]], schema: str | None, prefix: str
) -> None:
    table = _events(backend, schema, prefix)
    values = []
    for row in rows:
        params = row["params"]
        values.append(
            {
                **row,
                "at": stored_at(backend, row["ts"]),
                "detected_at": stored_at(backend, row["detected_ts"]),
                "params": params
                if backend == "postgresql"
                else json.dumps(params, separators=(",", ":")),
            }
        )
    with engine.begin() as conn:
        conn.execute(sa.insert(table), values)


def _raw(engine: sa.Engine, name: str, schema: str | None) -> list[tuple[Any, ...]]:
    """The rows of table or view ``name`` (no ``id``) as the driver returns them,
    by ``(scope, t_occ)`` (compared in Python: MariaDB's collation ignores case)."""
    t = sa.table(name, *(sa.column(c) for c in COLUMNS), schema=schema)
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(sa.select(t))]
    return sorted(rows, key=lambda r: (r[0], r[1]))


def _ids(engine: sa.Engine, name: str, schema: str | None) -> list[int]:
    t = sa.table(name, sa.column("id"), sa.column("scope"), sa.column("t_occ"), schema=schema)
    with engine.connect() as conn:
        return [r.id for r in conn.execute(sa.select(t.c.id).order_by(t.c.id))]


def _round_trip(backend: str, engine: sa.Engine, schema: str | None, prefix: str) -> None:
    migrate.upgrade(engine, "0005", schema=schema, prefix=prefix)
    rows = _old_rows()
    _write_old(backend, engine, rows, schema, prefix)
    before = _raw(engine, f"{prefix}events", schema)
    assert len(before) == len(rows)

    migrate.upgrade(engine, "0006", schema=schema, prefix=prefix)
    insp = sa.inspect(engine)
    assert f"{prefix}events" not in insp.get_table_names(schema=schema)
    assert f"{prefix}occurrences" in insp.get_view_names(schema=schema)
    assert _raw(engine, f"{prefix}occurrences", schema) == before

    b = sa.table(
        f"{prefix}event_batches",
        *(
            sa.column(c)
            for c in (
                [
                    "id",
                    "scope",
                    "t_first",
                    "t_last",
                    "n",
                    "outcome",
                    "savepoint",
                    "commit_seq",
                    "written_at",
                    "process",
                ]
            )
        ),
        schema=schema,
    )
    with engine.connect() as conn:
        batches = sorted(
            (r.scope, r.t_first, r.t_last, r.n, r.outcome, r.savepoint, r.commit_seq, r.process)
            for r in conn.execute(sa.select(b))
        )
        marks = conn.execute(
            sa.select(sa.func.count()).select_from(sa.table(f"{prefix}expired", schema=schema))
        ).scalar()
    process = f"process:{uuid.UUID(int=9).hex}"
    assert batches == sorted(
        [
            ("tx-1", 1, 9, 4, "committed", None, 41, None),
            ("tx-1", 3, 6, 2, "aborted", "sp1", None, None),
            ("tx-1", 4, 4, 1, "aborted", "sp1/sp2", None, None),
            ("tx-2", 10, 11, 2, "aborted", None, None, None),
            (process, 12, 14, 3, None, None, None, None),
            ("tx-3", 15, 15, 1, "committed", None, None, None),
            ("TX-3", 16, 17, 2, "committed", None, 42, None),
        ]
    )
    assert marks == sum(r["expired_at"] is not None for r in rows)

    migrate.downgrade(engine, "0005", schema=schema, prefix=prefix)
    insp = sa.inspect(engine)
    assert f"{prefix}event_batches" not in insp.get_table_names(schema=schema)
    assert f"{prefix}occurrences" not in insp.get_view_names(schema=schema)
    assert _raw(engine, f"{prefix}events", schema) == before
    assert len(_ids(engine, f"{prefix}events", schema)) == len(rows)
    # and up again: the same rows
    migrate.upgrade(engine, "0006", schema=schema, prefix=prefix)
    assert _raw(engine, f"{prefix}occurrences", schema) == before


def test_round_trip_keeps_every_row(backend: str, engine: sa.Engine) -> None:
    _round_trip(backend, engine, None, "sentinel_")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])  # SQLite has no schemas
def test_round_trip_in_a_schema_with_a_prefix(
    backend: str, engine: sa.Engine, extra_schema: str
) -> None:
    _round_trip(backend, engine, extra_schema, "audit_")
    assert sa.inspect(engine).get_table_names() == []  # nothing in the default schema


def test_long_transactions_are_split_into_rows_of_5000(backend: str, engine: sa.Engine) -> None:
    migrate.upgrade(engine, "0005")
    n = 12_001
    rows = [
        {
            "scope": "big",
            "t_occ": t,
            "event": "E",
            "ts": 1_700_000_000.0 + t / 7,
            "detected_ts": 1_700_000_000.0 + t / 7,
            "source_class": None,
            "source_key": None,
            "params": {"i": t},
            "outcome": "committed",
            "expired_at": None,
            "savepoint": None,
            "commit_seq": 3,
        }
        for t in range(1, n + 1)
    ]
    _write_old(backend, engine, rows, None, "sentinel_")
    before = _raw(engine, "sentinel_events", None)
    migrate.upgrade(engine, "0006")
    with engine.connect() as conn:
        sizes = conn.exec_driver_sql(
            "SELECT t_first, t_last, n FROM sentinel_event_batches ORDER BY t_first"
        ).all()
    assert [tuple(s) for s in sizes] == [(1, 5000, 5000), (5001, 10000, 5000), (10001, n, 2001)]
    assert _raw(engine, "sentinel_occurrences", None) == before
    migrate.downgrade(engine, "0005")
    assert _raw(engine, "sentinel_events", None) == before
    # ids follow the batch rows, and t_occ within them
    with engine.connect() as conn:
        order = conn.exec_driver_sql("SELECT t_occ FROM sentinel_events ORDER BY id").scalars()
        assert list(order) == list(range(1, n + 1))


@pytest.mark.parametrize(
    "url", ["sqlite://", "postgresql+psycopg://u@h/db", "mariadb+pymysql://u@h/db"]
)
def test_offline_sql_says_what_happens_to_the_rows(url: str) -> None:
    out = io.StringIO()
    migrate.upgrade(url, "0005:0006", sql=True, stdout=out)
    ddl = out.getvalue()
    assert "CREATE TABLE sentinel_event_batches" in ddl and "CREATE TABLE sentinel_expired" in ddl
    assert "sentinel_occurrences" in ddl and "DROP TABLE sentinel_events" in ddl
    assert "its rows are not moved offline" in ddl
    out = io.StringIO()
    migrate.downgrade(url, "0006:0005", sql=True, stdout=out)
    ddl = out.getvalue()
    assert "CREATE TABLE sentinel_events" in ddl
    assert "INSERT INTO sentinel_events" in ddl and "FROM sentinel_occurrences" in ddl
    assert ddl.index("INSERT INTO") < ddl.index("DROP VIEW") < ddl.index("DROP TABLE")
