"""The per-occurrence view ``<prefix>occurrences`` (issue 31): over batch rows
written directly, every column equals what the 0005 writer stored in the
``events`` table it replaces, with its type, on SQLite, PostgreSQL and
MariaDB, in the default schema and in another schema with another prefix."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.log.records import encode_key
from sentinel.log.tables import LogTables, log_tables
from sentinel.log.views import VIEW_COLUMNS, create_view_sql, drop_view_sql

_EPOCH = datetime(1970, 1, 1)
_WRITTEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
_EXPIRED = datetime(2026, 11, 30, 8, 15, 0, 123456, tzinfo=UTC)

#: ts / detected_ts pairs that round in every way the conversion can go wrong:
#: fractions at exactly half a microsecond (rounded to even: down, then up),
#: a fraction that rounds into the next second, far future, before 1970.
_TIMES: list[tuple[float, float]] = [
    (1000.0078125, 1000.0078125),  # 7812.5 us -> 7812
    (1000.0234375, 1000.0078125),  # 23437.5 us -> 23438; detected earlier (reported)
    (1.9999999, 2.0000004),  # 999999.9 us -> the next second
    (1.9999995, 1.9999995),
    (1_700_000_000.123456789, 1_700_000_000.1234573),
    (1_700_000_000.9999996, 1_700_000_001.0000005),
    (32_503_680_000.5, 32_503_680_000.5),  # the year 3000
    (-1.5, -0.0078125),
    (-0.0234375, 0.0),
    (0.0, 5e-07),
]

_PARAMS: list[dict[str, Any]] = [
    {},
    {"n": 7, "text": "ünïcödé ✓ 🙂 'q' \"d\"", "none": None, "yes": True},
    {"nested": {"a": [1, {"b": [True, None]}], "c": {}}, "$weird key": 1},
    {"big": 2**62 + 1, "real": 0.1 + 0.2, "huge": {"$float": "1e+16"}, "neg": {"$float": "-0.0"}},
    {"ref": {"$ref": ["Order", [7, "2024-01"]]}, "tiny": 5e-324},
]


def _sqlite_stamp(ts: float) -> str:
    """The text the 0005 writer stored on SQLite (sentinel/log/inserts.py):
    the second's floor and the rest in microseconds, rounded half to even."""
    secs = int(ts // 1)
    us = round((ts - secs) * 1e6)
    if us >= 1_000_000:
        secs, us = secs + 1, us - 1_000_000
    return (_EPOCH + timedelta(seconds=secs)).isoformat(" ") + f".{us:06d}"


def stored_at(backend: str, ts: float) -> Any:
    """What the 0005 ``events.at`` column held for ``ts``, as the driver returns it."""
    if backend == "sqlite":
        return _sqlite_stamp(ts)
    at = datetime.fromtimestamp(ts, UTC)  # what UTCDateTime bound
    return at if backend == "postgresql" else at.replace(tzinfo=None)


def _stored_expired(backend: str, value: datetime) -> Any:
    if backend == "sqlite":
        return value.replace(tzinfo=None).isoformat(" ", "microseconds")
    return value if backend == "postgresql" else value.replace(tzinfo=None)


def _batches() -> list[dict[str, Any]]:
    """Batch rows (without ``id``) and, per row, its occurrences as
    ``(t_occ, event, ts, detected_ts, source_class, source_key, params)``."""
    rows: list[dict[str, Any]] = []
    sources = [
        (None, None),
        ("Stock", encode_key(("IBM",))),
        ("Order", encode_key((7, "2024-01", uuid.UUID(int=5)))),
        ("Tëxt", encode_key(("ü 🙂", None, 2.5))),
    ]
    t = 0
    specs = [
        ("tx-1", "committed", None, 41),
        ("tx-1", "aborted", "sp1/sp3", None),  # what a savepoint's rollback undid
        ("tx-2", "aborted", None, None),
        (f"process:{uuid.UUID(int=9).hex}", None, None, None),  # the process scope
        ("tx-3", "committed", None, 42),
    ]
    for k, (scope, outcome, savepoint, seq) in enumerate(specs):
        occs = []
        for i, (ts, dts) in enumerate(_TIMES[k % 2 :: 1 + k % 2]):
            t += 1
            source_class, source_key = sources[(i + k) % len(sources)]
            params = _PARAMS[(i + 2 * k) % len(_PARAMS)]
            occs.append((t, f"E{i % 3}_é", ts, dts, source_class, source_key, params))
        rows.append(
            {
                "scope": scope,
                "outcome": outcome,
                "savepoint": savepoint,
                "commit_seq": seq,
                "occs": occs,
            }
        )
    return rows


def _write(engine: sa.Engine, tables: LogTables, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        for row in rows:
            occs = row["occs"]
            elements = [
                [t, ev, ts, None if dts == ts else dts, sc, sk, params]
                for t, ev, ts, dts, sc, sk, params in occs
            ]
            ats = [datetime.fromtimestamp(o[2], UTC) for o in occs]
            conn.execute(
                sa.insert(tables.batches).values(
                    scope=row["scope"],
                    t_first=occs[0][0],
                    t_last=occs[-1][0],
                    n=len(occs),
                    at_min=min(ats),
                    at_max=max(ats),
                    outcome=row["outcome"],
                    savepoint=row["savepoint"],
                    commit_seq=row["commit_seq"],
                    written_at=_WRITTEN,
                    process="host:1",
                    occurrences=elements,
                )
            )
        expired = [(r["scope"], o[0]) for r in rows for o in r["occs"] if o[0] % 4 == 0]
        for scope, t_occ in expired:
            conn.execute(
                sa.insert(tables.expired).values(scope=scope, t_occ=t_occ, expired_at=_EXPIRED)
            )


def _expected(backend: str, rows: list[dict[str, Any]], ids: list[int]) -> list[tuple[Any, ...]]:
    """The 0005 ``events`` rows, as the driver returns them (params decoded)."""
    out = []
    for bid, row in zip(ids, rows, strict=True):
        for t, ev, ts, dts, sc, sk, params in row["occs"]:
            expired = _stored_expired(backend, _EXPIRED) if t % 4 == 0 else None
            out.append(
                (
                    bid,
                    row["scope"],
                    t,
                    ev,
                    stored_at(backend, ts),
                    stored_at(backend, dts),
                    ts,
                    dts,
                    sc,
                    sk,
                    params,
                    row["outcome"],
                    expired,
                    row["savepoint"],
                    row["commit_seq"],
                )
            )
    return sorted(out, key=lambda r: (r[1], r[2]))


def _view_rows(engine: sa.Engine, tables: LogTables) -> list[tuple[Any, ...]]:
    view = sa.table(tables.view_name, *(sa.column(c) for c in VIEW_COLUMNS), schema=tables.schema)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(view).order_by(view.c.scope, view.c.t_occ)).all()
    out = []
    for r in rows:
        r = list(r)
        params = r[10]
        r[10] = json.loads(params) if isinstance(params, str) else params
        out.append(tuple(r))
    return out


def _ids(engine: sa.Engine, tables: LogTables) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(tables.batches.c.id).order_by(tables.batches.c.id)))


def _check(backend: str, engine: sa.Engine, tables: LogTables) -> None:
    rows = _batches()
    _write(engine, tables, rows)
    ids = [i for (i,) in _ids(engine, tables)]
    got = _view_rows(engine, tables)
    want = _expected(backend, rows, ids)
    assert len(got) == len(want) == sum(len(r["occs"]) for r in rows)
    for g, w in zip(got, want, strict=True):
        assert dict(zip(VIEW_COLUMNS, g, strict=True)) == dict(zip(VIEW_COLUMNS, w, strict=True))
        for value, expected in zip(g, w, strict=True):  # 1 == 1.0 == True: types too
            assert type(value) is type(expected), (value, expected)


def test_the_view_holds_what_the_0005_table_held(backend: str, engine: sa.Engine) -> None:
    tables = log_tables()
    tables.metadata.create_all(engine)
    _check(backend, engine, tables)


def test_in_another_schema_with_another_prefix(
    backend: str, engine: sa.Engine, extra_schema: str
) -> None:
    tables = log_tables(extra_schema, "audit_")
    tables.metadata.create_all(engine)
    _check(backend, engine, tables)
    assert tables.view_name == "audit_occurrences"
    tables.metadata.drop_all(engine)
    names = sa.inspect(engine).get_view_names(schema=extra_schema)
    assert names == [] and sa.inspect(engine).get_table_names(schema=extra_schema) == []


def test_in_an_attached_sqlite_database(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'main.db'}")
    other = tmp_path / "audit.db"

    @sa.event.listens_for(engine, "connect")
    def attach(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.execute(f"ATTACH DATABASE '{other}' AS audit")

    tables = log_tables("audit", "ops_")
    tables.metadata.create_all(engine)
    _check("sqlite", engine, tables)
    # the view names its tables without the schema: attached under another
    # name, the database's view still reads its own tables
    engine.dispose()
    again = sa.create_engine(f"sqlite:///{tmp_path / 'main.db'}")

    @sa.event.listens_for(again, "connect")
    def attach_as(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.execute(f"ATTACH DATABASE '{other}' AS elsewhere")

    with again.connect() as conn:
        n = conn.exec_driver_sql("SELECT count(*) FROM elsewhere.ops_occurrences").scalar()
    assert n == sum(len(r["occs"]) for r in _batches())
    again.dispose()


def test_the_view_has_the_0005_column_types(backend: str, engine: sa.Engine) -> None:
    tables = log_tables()
    tables.metadata.create_all(engine)
    _write(engine, tables, _batches()[:1])
    with engine.connect() as conn:
        if backend == "sqlite":
            cols = ", ".join(f"typeof({c})" for c in VIEW_COLUMNS)
            row = conn.exec_driver_sql(
                f"SELECT {cols} FROM sentinel_occurrences WHERE t_occ = 4"
            ).one()
            types = dict(zip(VIEW_COLUMNS, row, strict=True))
            assert types == {
                "id": "integer",
                "scope": "text",
                "t_occ": "integer",
                "event": "text",
                "at": "text",
                "detected_at": "text",
                "ts": "real",
                "detected_ts": "real",
                "source_class": "text",
                "source_key": "text",
                "params": "text",
                "outcome": "text",
                "expired_at": "text",
                "savepoint": "null",
                "commit_seq": "integer",
            }
            return
        info = sa.text(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'sentinel_occurrences' AND table_schema = "
            + ("current_schema()" if backend == "postgresql" else "database()")
            + " ORDER BY ordinal_position"
        )
        types = {name.lower(): kind.lower() for name, kind in conn.execute(info)}
    assert list(types) == list(VIEW_COLUMNS)
    if backend == "postgresql":
        assert types == {
            "id": "bigint",
            "scope": "character varying",
            "t_occ": "bigint",
            "event": "character varying",
            "at": "timestamp with time zone",
            "detected_at": "timestamp with time zone",
            "ts": "double precision",
            "detected_ts": "double precision",
            "source_class": "character varying",
            "source_key": "text",
            "params": "jsonb",
            "outcome": "character varying",
            "expired_at": "timestamp with time zone",
            "savepoint": "text",
            "commit_seq": "bigint",
        }
    else:
        assert {c: types[c] for c in ("t_occ", "at", "detected_at", "ts", "detected_ts")} == {
            "t_occ": "bigint",
            "at": "datetime",
            "detected_at": "datetime",
            "ts": "double",
            "detected_ts": "double",
        }


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql", "mariadb"])
def test_names_are_quoted_and_qualified(dialect: str) -> None:
    tables = log_tables("audit", "ops_")
    sql = create_view_sql(dialect, tables)
    q = "`" if dialect in ("mysql", "mariadb") else '"'
    assert sql.startswith("CREATE ") and f"VIEW {q}audit{q}.{q}ops_occurrences{q} AS" in sql
    inner = f"{q}ops_event_batches{q}"
    assert (f"{q}audit{q}.{inner}" in sql) is (dialect != "sqlite") and inner in sql
    assert drop_view_sql(dialect, tables) == (
        f"DROP VIEW IF EXISTS {q}audit{q}.{q}ops_occurrences{q}"
    )
    with pytest.raises(NotImplementedError):
        create_view_sql("oracle", tables)


def _docs_query() -> str:
    """The time-range query of docs/eventlog.md."""
    page = Path(__file__).resolve().parents[2] / "docs" / "eventlog.md"
    text = page.read_text(encoding="utf-8")
    start = text.index("```sql", text.index("### Schema 0006")) + len("```sql")
    return text[start : text.index("```", start)].strip().rstrip(";")


def test_the_documented_time_range_query(backend: str, engine: sa.Engine) -> None:
    tables = log_tables()
    tables.metadata.create_all(engine)
    day = datetime(2025, 1, 1, tzinfo=UTC).timestamp()
    times = [day - 1, day - 0.0000004, day + 43_200.5, day + 86_400, day + 86_399.9999996]
    occs = [
        (t, "E", ts, ts, None, None, {}) for t, ts in enumerate([*times, day - 86_400], start=1)
    ]
    # a row inside the range (its first time rounds up into it), one at its end
    # (its last time rounds out of it), one before it
    rows = [
        {
            "scope": "in",
            "outcome": "committed",
            "savepoint": None,
            "commit_seq": 1,
            "occs": occs[1:3],
        },
        {
            "scope": "edge",
            "outcome": "committed",
            "savepoint": None,
            "commit_seq": 2,
            "occs": occs[3:5],
        },
        {
            "scope": "before",
            "outcome": "committed",
            "savepoint": None,
            "commit_seq": 3,
            "occs": [occs[0], occs[5]],
        },
    ]
    _write(engine, tables, rows)
    with engine.connect() as conn:
        if backend == "postgresql":
            conn.exec_driver_sql("SET TIME ZONE 'UTC'")
        found = [(r.scope, r.t_occ) for r in conn.exec_driver_sql(_docs_query())]
    # 23:59:59.9999996 is stored as 00:00:00.000000 of the next day, as in 0005
    assert found == [("in", 2), ("in", 3)]
