"""The writer: one statement per table per batch, the parameter policy, and clear
errors for a log that is missing or at another revision."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.errors import (
    LogConfigError,
    LogSchemaError,
    LogSchemaOutdatedError,
    LogSchemaUnknownError,
    LogTablesMissingError,
    LogWriteError,
)
from sentinel.log import REDACTED, Firing, LogPolicy, LogReader, LogWriter, OutboxEntry, migrate
from sentinel.log import schema as schema_module
from sentinel.log.tables import SCHEMA_REVISIONS, SCHEMA_VERSION, UTCDateTime, log_tables
from sentinel.occurrence import ObjectRef, Occurrence

from .conftest import T0, every_loggable_value, occ


class Statements:
    """Counts the statements SQLAlchemy sends (one per cursor execute/executemany)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.seen: list[tuple[str, bool, int]] = []

    def __enter__(self) -> Statements:
        sa.event.listen(self.engine, "before_cursor_execute", self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._on)

    def _on(self, conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        rows = len(parameters) if executemany else 1
        self.seen.append((statement, executemany, rows))

    def inserts(self) -> list[tuple[str, bool, int]]:
        return [s for s in self.seen if s[0].lstrip().upper().startswith("INSERT")]


def test_a_batch_is_one_statement_per_table(migrated: sa.Engine) -> None:
    writer = LogWriter()
    with migrated.begin() as conn:  # the first write through an engine checks the schema
        writer.write(conn, [occ("E", 0)])
    occs = [occ("E", t, params=t, **every_loggable_value()) for t in range(1, 501)]
    firings = [Firing.of("R", o, coupling="immediate", status="fired") for o in occs[:50]]
    outbox = [OutboxEntry.of("D", o) for o in occs[:20]]
    with Statements(migrated) as stmts, migrated.begin() as conn:
        assert writer.write(conn, occs, firings=firings, outbox=outbox) == 500
    inserts = stmts.inserts()
    assert len(inserts) == 3, [s[0][:60] for s in stmts.seen]
    # everything else sent was transaction control, not per-row work
    assert len(stmts.seen) == 3
    assert [rows for _, _, rows in inserts] == [500, 50, 20]
    with LogReader(migrated) as reader:
        assert reader.count() == 501


def test_schema_is_checked_once_per_engine(migrated: sa.Engine) -> None:
    writer = LogWriter()
    with Statements(migrated) as first, migrated.begin() as conn:
        writer.write(conn, [occ("E", 1)])
    with Statements(migrated) as second, migrated.begin() as conn:
        writer.write(conn, [occ("E", 2)])
    assert len(first.seen) > len(second.seen) == 1
    assert writer.check(migrated) == SCHEMA_VERSION


def test_policy_excludes_and_redacts_at_write_time(migrated: sa.Engine) -> None:
    policy = LogPolicy(
        {
            "User.set_password:*": {"exclude": ["password"]},
            "User.*": {"redact": ["email"]},
            "*": {"redact": ["*token*"]},
        }
    )
    writer = LogWriter(policy=policy)
    login = occ("User.set_password:begin", 1, password="hunter2", email="a@b.c", user=7)
    other = occ("Stock.sell:begin", 2, qty=3, api_token="t0k", password="kept")
    with migrated.begin() as conn:
        writer.write(conn, [login, other])
    with LogReader(migrated) as reader:
        back = {r.occurrence.t_occ: dict(r.occurrence.params) for r in reader.occurrences()}
    assert back[1] == {"email": REDACTED, "user": 7}
    assert back[2] == {"qty": 3, "api_token": REDACTED, "password": "kept"}
    # the occurrences handed to the writer are untouched
    assert login.params["password"] == "hunter2"


def test_policy_rules() -> None:
    p = LogPolicy(marker="***")
    assert not p
    assert p.apply("E", {"a": 1}) == {"a": 1}
    params = {"a": 1, "secret": 2, "key_1": 3, "key_2": 4}
    p.exclude("E?", "secret").redact("E*", "key_*", "secret")
    assert p
    assert p.apply("E1", params) == {"a": 1, "key_1": "***", "key_2": "***"}  # exclude wins
    assert p.apply("E", params) == {"a": 1, "secret": "***", "key_1": "***", "key_2": "***"}
    assert p.apply("F", params) is params  # untouched events are not copied
    assert p.apply("e1", params) is params  # patterns are case sensitive
    # changing the policy applies to later calls (cached plans are dropped)
    p.exclude("F", "a")
    assert p.apply("F", params) == {"secret": 2, "key_1": 3, "key_2": 4}
    assert "E?" in repr(p)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"E": ["x"]}, "must be a mapping"),
        ({"E": {"drop": ["x"]}}, "unknown key"),
        ({"": {"exclude": ["x"]}}, "non-empty string"),
        ({"E": {"exclude": [""]}}, "non-empty strings"),
    ],
)
def test_policy_errors(rules: object, message: str) -> None:
    with pytest.raises(LogConfigError, match=message):
        LogPolicy(rules)  # type: ignore[arg-type]


def test_policy_marker_must_be_loggable() -> None:
    with pytest.raises(LogConfigError, match="marker"):
        LogPolicy(marker=object())


def test_prefix_must_be_sane() -> None:
    with pytest.raises(LogConfigError, match="prefix"):
        log_tables(prefix="bad prefix")
    with pytest.raises(LogConfigError, match="prefix"):
        log_tables(prefix="x" * 25)


# -- a missing or mismatched schema ----------------------------------------------------
def _assert_nothing_written(engine: sa.Engine) -> None:
    ev = log_tables().events
    if sa.inspect(engine).has_table(ev.name):
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(ev)).scalar() == 0


def test_missing_tables(engine: sa.Engine) -> None:
    writer = LogWriter()
    with engine.begin() as conn, pytest.raises(LogTablesMissingError) as info:
        writer.write(conn, [occ("E", 1)])
    err = info.value
    assert "sentinel db upgrade --url" in str(err)
    assert err.found is None and err.expected == SCHEMA_VERSION
    assert set(err.missing) == set(log_tables().names)
    with pytest.raises(LogTablesMissingError):
        LogReader(engine).check()
    _assert_nothing_written(engine)


def test_a_table_dropped_after_the_check(migrated: sa.Engine) -> None:
    writer = LogWriter()
    with migrated.begin() as conn:
        writer.write(conn, [occ("E", 1)])
    with migrated.begin() as conn:
        log_tables().firings.drop(conn)
    # the cached check passed; the failed insert is diagnosed as a missing table
    firing = Firing.of("R", occ("E", 2), coupling="immediate", status="fired")
    with (
        pytest.raises(LogTablesMissingError, match="sentinel_rule_firings"),
        migrated.begin() as conn,
    ):
        writer.write(conn, [occ("E", 2)], firings=[firing])
    with LogReader(migrated, check=False) as reader:
        assert [r.occurrence.t_occ for r in reader.occurrences()] == [1]


def test_older_revision(migrated: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # pretend this code expects a revision 9999 that the database does not have yet
    monkeypatch.setattr(schema_module, "SCHEMA_REVISIONS", (*SCHEMA_REVISIONS, "9999"))
    monkeypatch.setattr(schema_module, "SCHEMA_VERSION", "9999")
    with migrated.begin() as conn, pytest.raises(LogSchemaOutdatedError) as info:
        LogWriter().write(conn, [occ("E", 1)])
    assert info.value.found == SCHEMA_VERSION and info.value.expected == "9999"
    assert "older than 9999" in str(info.value)
    assert "sentinel db upgrade --url" in str(info.value)
    with pytest.raises(LogSchemaOutdatedError):
        LogReader(migrated).check()
    _assert_nothing_written(migrated)


def test_unknown_revision(migrated: sa.Engine) -> None:
    version = sa.table("sentinel_alembic_version", sa.column("version_num"))
    with migrated.begin() as conn:
        conn.execute(sa.update(version).values(version_num="0042"))
    with migrated.begin() as conn, pytest.raises(LogSchemaUnknownError) as info:
        LogWriter().write(conn, [occ("E", 1)])
    assert info.value.found == "0042"
    assert "does not know" in str(info.value) and "upgrade sentinel" in str(info.value)
    with pytest.raises(LogSchemaUnknownError):
        list(LogReader(migrated).occurrences())
    _assert_nothing_written(migrated)


def test_tables_without_version(engine: sa.Engine) -> None:
    log_tables().metadata.create_all(engine)
    with engine.begin() as conn, pytest.raises(LogTablesMissingError, match="not under"):
        LogWriter().write(conn, [occ("E", 1)])


def test_schema_errors_share_a_root(migrated: sa.Engine) -> None:
    assert issubclass(LogTablesMissingError, LogSchemaError)
    migrate.downgrade(migrated, "base")
    with migrated.begin() as conn, pytest.raises(LogSchemaError):
        LogWriter().write(conn, [occ("E", 1)])


def test_unreachable_database() -> None:
    from sentinel.errors import LogConnectionError

    reader = LogReader("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    with pytest.raises(LogConnectionError, match="cannot connect"):
        reader.check()
    with pytest.raises(LogTablesMissingError, match="no SQLite database"):
        LogReader("sqlite:////nonexistent/dir/log.db")


def test_writer_rejects_unknown_outcome(migrated: sa.Engine) -> None:
    with migrated.begin() as conn, pytest.raises(LogWriteError, match="unknown transaction"):
        LogWriter().write(conn, [occ("E", 1)], outcome="maybe")


def test_sqlite_rows_are_what_the_columns_types_bind() -> None:
    """The writer makes SQLite's ``at`` text and ``params`` JSON itself (a
    shortcut per row): they equal what the columns' own types bind, for
    instants on second and half-microsecond boundaries, before 1970, and
    parameters of every loggable kind (plain ones, database events' read-only
    mappings, names needing escapes, values needing tags)."""
    import json
    import random
    from types import MappingProxyType

    from sentinel.log.inserts import EVENT_COLUMNS, _EventsInsert
    from sentinel.log.records import encode_params

    dialect = sa.create_engine("sqlite://").dialect
    table = log_tables().events
    plan = _EventsInsert(table, dialect)
    assert plan.sqlite_text  # the shortcut is what this test checks
    rng = random.Random(17)
    stamps = [0.0, -0.5, -1.0, -86_400.25, 1.0078125, 2.9999995, T0, 4_102_444_800.999999]
    stamps += [rng.uniform(-2e9, 5e9) for _ in range(2_000)]
    stamps += [1_700_000_000 + k / 128 for k in range(128)]  # exact halves of a microsecond
    # every year a datetime holds (years before 1000 keep their leading zeros)
    stamps += [-62_135_596_800.0, 253_402_300_799.0, -30_610_224_000.5]
    stamps += [rng.uniform(-62_135_596_800, 253_402_300_799) for _ in range(500)]
    mp = MappingProxyType
    params: list[dict[str, Any]] = [
        {},
        {"amount": 2.0, "result": -12.5},
        {"old": mp({"balance": 0.0, "ops": 0}), "new": mp({"balance": 1e15, "ops": 2**63 - 1})},
        {"100%": "a%sb", "é": 'ünï ✓ 🙂 "q" \\ \n', "n": None, "t": True, "f": False},
        {"neg0": -0.0, "big": 1e16, "huge": 2**64, "nul": "a\x00b", "sur": "\ud800"},
        {"m": mp({"$x": 1})},  # each alone: one value needing a tag takes its row's
        {"k": mp({"a": -0.0})},  # other values the slow way too
        {"k": mp({"a": 1e16})},
        {"k": mp({"a": 2**63})},
        {"k": mp({"a": "\x00"})},
        {"e": mp({}), "l": (1, "x")},
        {"d": mp({"when": dt.date(2024, 1, 2)}), "r": ObjectRef("A", (1,))},
    ]
    occs = [
        Occurrence("E", i, ts, ts if i % 3 else ts + 0.25e-6, None, params[i % len(params)], "tx")
        for i, ts in enumerate(stamps)
    ]
    rows = plan.rows(LogWriter().event_values(occs, "committed"))
    at_bind = table.c.at.type.dialect_impl(dialect).bind_processor(dialect)

    def at_text(ts: float) -> Any:
        value = UTCDateTime().process_bind_param(dt.datetime.fromtimestamp(ts, dt.UTC), dialect)
        return at_bind(value) if at_bind else value

    compact = json.JSONEncoder(separators=(",", ":")).encode
    for o, row in zip(occs, rows, strict=True):
        got = dict(zip(EVENT_COLUMNS, row, strict=True))
        assert got["at"] == at_text(o.timestamp), o.timestamp
        assert got["detected_at"] == at_text(o.detected_timestamp), o.detected_timestamp
        assert got["params"] == compact(encode_params(o.params, event="E")), o.params
        assert (got["ts"], got["detected_ts"], got["t_occ"]) == (o[2], o[3], o.t_occ)


def test_psycopg_rows_are_what_the_columns_types_bind() -> None:
    """On PostgreSQL through psycopg the writer hands the driver the
    parameters' JSON text in psycopg's ``Jsonb`` and the aware datetimes
    itself: the same JSON values and instants the columns' own types bind
    (``LogJSON`` tags the floats JSONB would change)."""
    import json
    from types import MappingProxyType

    from sentinel.log.inserts import _EventsInsert
    from sentinel.log.records import encode_params

    pytest.importorskip("psycopg")
    dialect = sa.create_engine("postgresql+psycopg://").dialect
    table = log_tables().events
    plan = _EventsInsert(table, dialect)
    mp = MappingProxyType
    params: list[dict[str, Any]] = [
        {},
        {"amount": 2.0, "result": -12.5, "s": "é\x01", "n": None, "b": True},
        {"old": mp({"balance": 0.0}), "new": mp({"balance": 1e15, "ops": 2**63 - 1})},
        {"neg0": -0.0, "big": 1e16, "huge": 2**64, "nul": "a\x00b"},
        {"k": mp({"a": -0.0})},
        {"k": mp({"$x": 1e300})},
        {"d": dt.date(2024, 1, 2), "r": ObjectRef("A", (1,))},
    ]
    occs = [
        Occurrence("E", i, T0 + i, T0 + i + 0.5e-6, None, p, "tx") for i, p in enumerate(params)
    ]
    rows = plan.rows(LogWriter().event_values(occs, "committed"))
    json_bind = table.c.params.type.dialect_impl(dialect).bind_processor(dialect)
    at_bind = table.c.at.type.dialect_impl(dialect).bind_processor(dialect)
    for o, row in zip(occs, rows, strict=True):
        ours, theirs = row["params"], json_bind(encode_params(o.params, event="E"))
        assert type(ours) is type(theirs)
        assert json.loads((ours.dumps or json.dumps)(ours.obj)) == json.loads(
            json.dumps(theirs.obj)
        ), o.params
        assert row["at"] == at_bind(dt.datetime.fromtimestamp(o.timestamp, dt.UTC))
        assert row["detected_at"] == at_bind(
            dt.datetime.fromtimestamp(o.detected_timestamp, dt.UTC)
        )
        assert row["at"].tzinfo is dt.UTC


@pytest.mark.parametrize("year", [1, 800, 999])
def test_an_occurrence_before_the_year_1000_is_found_by_its_time(
    migrated: sa.Engine, year: int
) -> None:
    """Occurrence times before the year 1000 (``signal_at`` accepts them) are
    written as the column's type writes them: on SQLite, the ``at`` text has a
    four-digit year, so ``since``/``until`` (text comparisons there) find it."""
    when = dt.datetime(year, 3, 4, 5, 6, 7, 890123, tzinfo=dt.UTC)
    early = occ("E", 1, ts=when.timestamp())
    with migrated.begin() as conn:
        LogWriter().write(conn, [early, occ("E", 2, ts=T0)])
    with LogReader(migrated) as r:
        found = [
            o.t_occ
            for o, _, _ in r.occurrences(
                since=dt.datetime(year, 1, 1, tzinfo=dt.UTC),
                until=dt.datetime(year + 1, 1, 1, tzinfo=dt.UTC),
            )
        ]
        assert found == [1]
    ev = log_tables().events
    with migrated.connect() as conn:
        at = conn.execute(sa.select(ev.c.at).where(ev.c.t_occ == 1)).scalar_one()
    assert at == dt.datetime.fromtimestamp(early.timestamp, dt.UTC)  # to the float's precision


@pytest.mark.parametrize(
    "ts", [253_402_300_800.0, 1e12, -62_135_596_801.0], ids=["year-10000", "year-33658", "year-0"]
)
def test_an_occurrence_time_no_datetime_holds_is_refused_before_any_sql(
    migrated: sa.Engine, ts: float
) -> None:
    """An occurrence time outside the years 1 to 9999 (a finite number
    ``signal_at`` accepts) cannot be the ``at`` column's datetime: every backend
    refuses the batch with a :class:`LogWriteError` naming the occurrence,
    before any SQL (SQLite's shortcut wrote a text no reader parses)."""
    bad = occ("E", 2, ts=ts)
    with (
        Statements(migrated) as st,
        migrated.begin() as conn,
        pytest.raises(LogWriteError, match=r"E@2.*year"),
    ):
        LogWriter(check_schema=False).write(conn, [occ("E", 1), bad])
    assert st.inserts() == []
    late = Occurrence("E", 3, T0, ts, None, {}, "tx")
    with pytest.raises(LogWriteError, match=r"E@3.*detection time"), migrated.begin() as conn:
        LogWriter().write(conn, [late])
    with LogReader(migrated) as r:
        assert list(r.occurrences()) == []
