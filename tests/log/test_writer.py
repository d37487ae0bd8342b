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
    occs = [
        occ("E", t, "tx-1" if t <= 300 else "tx-2", params=t, **every_loggable_value())
        for t in range(1, 501)
    ]
    firings = [Firing.of("R", o, coupling="immediate", status="fired") for o in occs[:50]]
    outbox = [OutboxEntry.of("D", o) for o in occs[:20]]
    with Statements(migrated) as stmts, migrated.begin() as conn:
        assert writer.write(conn, occs, firings=firings, outbox=outbox) == 500
    inserts = stmts.inserts()
    assert len(inserts) == 3, [s[0][:60] for s in stmts.seen]
    # everything else sent was transaction control, not per-row work
    assert len(stmts.seen) == 3
    # the 500 occurrences are one event_batches row per scope
    assert "sentinel_event_batches" in inserts[0][0]
    assert [rows for _, _, rows in inserts] == [2, 50, 20]
    with LogReader(migrated) as reader:
        assert reader.count() == 501
        assert [o.occurrence.t_occ for o in reader.occurrences()] == list(range(0, 501))


def _batch_rows(engine: sa.Engine) -> list[Any]:
    b = log_tables().batches
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(b.c.id, b.c.scope, b.c.t_first, b.c.t_last, b.c.n, b.c.outcome)
                .add_columns(b.c.savepoint)
                .order_by(b.c.id)
            )
        )


def test_a_transaction_is_one_row_and_a_rolled_back_savepoint_one_more(
    migrated: sa.Engine,
) -> None:
    """One transaction's occurrences, written together, are ONE row of
    ``event_batches``; what the rollback of each savepoint undid is one more
    row (``aborted``, with the savepoint's path); every occurrence reads back
    once, in ``t_occ`` order, with its row's outcome and savepoint."""
    writer = LogWriter()
    own = [occ("E", t, "tx-9", n=t) for t in (1, 2, 5, 6, 9)]
    sp1 = [occ("F", t, "tx-9") for t in (3, 4)]
    sp2 = [occ("G", 7, "tx-9"), occ("G", 8, "tx-9")]
    with Statements(migrated) as stmts, migrated.begin() as conn:
        n = writer.write_groups(
            conn, [(own, "committed"), (sp1, "aborted", "sp1"), (sp2, "aborted", "sp2/sp3")]
        )
    assert n == 9
    assert [rows for _, _, rows in stmts.inserts()] == [3]  # one statement, three rows
    rows = _batch_rows(migrated)
    assert [tuple(r[1:]) for r in rows] == [
        ("tx-9", 1, 9, 5, "committed", None),
        ("tx-9", 3, 4, 2, "aborted", "sp1"),
        ("tx-9", 7, 8, 2, "aborted", "sp2/sp3"),
    ]
    with LogReader(migrated) as reader:
        back = [(r.occurrence.t_occ, r.outcome, r.savepoint, r.id) for r in reader.occurrences()]
    ids = {"committed": rows[0].id, "sp1": rows[1].id, "sp2/sp3": rows[2].id}
    assert back == [
        (t, out, sp, ids[sp or "committed"])
        for t, out, sp in [
            (1, "committed", None),
            (2, "committed", None),
            (3, "aborted", "sp1"),
            (4, "aborted", "sp1"),
            (5, "committed", None),
            (6, "committed", None),
            (7, "aborted", "sp2/sp3"),
            (8, "aborted", "sp2/sp3"),
            (9, "committed", None),
        ]
    ]


def test_a_write_longer_than_a_row_holds_is_split_into_rows_read_in_order(
    migrated: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write of more than ``MAX_ROW_OCCURRENCES`` occurrences of one scope
    becomes several rows (still one statement), each with at most that many,
    covering consecutive ``t_occ`` ranges; they read back as one sequence in
    ``t_occ`` order (here handed to the writer out of order)."""
    from sentinel.log import inserts

    size = inserts.MAX_ROW_OCCURRENCES
    count = 2 * size + 7
    ts = list(range(1, count + 1))
    occs = [occ("E", t, "tx-big", k=t) for t in ts[::-1]]
    with Statements(migrated) as stmts, migrated.begin() as conn:
        assert LogWriter().write(conn, occs) == count
    assert [rows for _, _, rows in stmts.inserts()] == [3]
    rows = _batch_rows(migrated)
    assert [(r.t_first, r.t_last, r.n) for r in rows] == [
        (1, size, size),
        (size + 1, 2 * size, size),
        (2 * size + 1, count, 7),
    ]
    assert len({r.scope for r in rows}) == 1
    with LogReader(migrated, chunk_size=3_333) as reader:
        back = [(r.occurrence.t_occ, r.occurrence.params["k"]) for r in reader.occurrences()]
        assert back == [(t, t) for t in ts]
        assert [r.occurrence.t_occ for r in reader.latest(3)] == ts[-3:]
    # a smaller limit (as for larger occurrences) splits the same way
    monkeypatch.setattr(inserts, "MAX_ROW_OCCURRENCES", 4)
    with migrated.begin() as conn:
        LogWriter().write(conn, [occ("E", t, "tx-small") for t in range(1, 11)])
    small = [r for r in _batch_rows(migrated) if r.scope == "tx-small"]
    assert [(r.t_first, r.t_last, r.n) for r in small] == [(1, 4, 4), (5, 8, 4), (9, 10, 2)]
    # and so does a write whose JSON text is longer than a row holds
    monkeypatch.setattr(inserts, "MAX_ROW_TEXT", 1_000)
    with migrated.begin() as conn:
        LogWriter().write(conn, [occ("E", t, "tx-long", pad="x" * 200) for t in range(1, 11)])
    long = [r for r in _batch_rows(migrated) if r.scope == "tx-long"]
    assert len(long) > 2 and all(r.n <= 4 for r in long)
    assert [r.t_first for r in long] == [1] + [r.t_last + 1 for r in long[:-1]]
    assert long[-1].t_last == 10 and sum(r.n for r in long) == 10
    with LogReader(migrated, chunk_size=3) as reader:
        back = [r.occurrence.t_occ for r in reader.occurrences(scopes=["tx-long", "tx-small"])]
    assert back == list(range(1, 11)) * 2


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
    b = log_tables().batches
    if sa.inspect(engine).has_table(b.name):
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(b)).scalar() == 0


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


def _element(o: Occurrence) -> list[Any]:
    """The element of ``event_batches.occurrences`` the log documents for
    ``o`` (no source), with its parameters as :func:`encode_params` makes them."""
    from sentinel.log.records import encode_params

    dts = None if o.detected_timestamp == o.timestamp else o.detected_timestamp
    return [o.t_occ, o.event, o.timestamp, dts, None, None, encode_params(o.params, event="E")]


def test_sqlite_rows_are_what_the_columns_types_bind() -> None:
    """The writer makes SQLite's ``event_batches`` row itself (a shortcut per
    row): the ``at_min`` / ``at_max`` / ``written_at`` texts equal what the
    columns' own types bind, for instants on second and half-microsecond
    boundaries, before 1970 and in every year a datetime holds, and the
    ``occurrences`` text is the JSON value the column's own type binds for the
    documented elements, with parameters of every loggable kind (plain ones,
    database events' read-only mappings, names needing escapes, values
    needing tags)."""
    import json
    import random
    from types import MappingProxyType

    from sentinel.log.inserts import BATCH_COLUMNS, _BatchInsert, _sqlite_stamp, batch_elements

    dialect = sa.create_engine("sqlite://").dialect
    table = log_tables().batches
    plan = _BatchInsert(table, dialect)
    # the shortcuts are what this test checks: text stamps, the JSON text as made
    assert plan.at is _sqlite_stamp and plan.json is None and plan.names is None
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
    # one scope per occurrence: each row's at_min and at_max are its instant
    occs = [
        Occurrence(
            "E", i, ts, ts if i % 3 else ts + 0.25e-6, None, params[i % len(params)], f"tx{i:05d}"
        )
        for i, ts in enumerate(stamps)
    ]
    written = 1_700_000_000.5000005
    rows = plan.rows(batch_elements(LogWriter().event_values(occs, "committed")), written, "host:1")
    at_bind = table.c.at_min.type.dialect_impl(dialect).bind_processor(dialect)
    json_bind = table.c.occurrences.type.dialect_impl(dialect).bind_processor(dialect)

    def at_text(ts: float) -> Any:
        value = UTCDateTime().process_bind_param(dt.datetime.fromtimestamp(ts, dt.UTC), dialect)
        return at_bind(value) if at_bind else value

    # equal JSON values, told apart by type (1 and 1.0) and sign (0.0 and -0.0)
    compact = json.JSONEncoder(separators=(",", ":")).encode

    def value(text: str) -> str:
        return compact(json.loads(text))

    assert len(rows) == len(occs)
    for o, row in zip(occs, rows, strict=True):
        got = dict(zip(BATCH_COLUMNS, row, strict=True))
        assert got["at_min"] == got["at_max"] == at_text(o.timestamp), o.timestamp
        assert (got["scope"], got["t_first"], got["t_last"], got["n"]) == (
            o.scope,
            o.t_occ,
            o.t_occ,
            1,
        )
        assert got["written_at"] == at_text(written)
        assert (got["outcome"], got["savepoint"], got["process"]) == ("committed", None, "host:1")
        theirs = json_bind([_element(o)])
        assert value(got["occurrences"]) == value(theirs), o
    # one row of them all: the earliest and latest instants, the elements in t_occ order
    same = [Occurrence(o[0], o[1], o[2], o[3], None, o.params, "tx") for o in occs]
    [row] = plan.rows(batch_elements(LogWriter().event_values(same, None)), written, None)
    got = dict(zip(BATCH_COLUMNS, row, strict=True))
    assert (got["at_min"], got["at_max"]) == (at_text(min(stamps)), at_text(max(stamps)))
    assert (got["t_first"], got["t_last"], got["n"]) == (0, len(same) - 1, len(same))
    theirs = json_bind([_element(o) for o in same])
    assert value(got["occurrences"]) == value(theirs)


def test_psycopg_rows_are_what_the_columns_types_bind() -> None:
    """On PostgreSQL through psycopg the writer hands the driver the
    occurrences' JSON text in psycopg's ``Jsonb`` and the aware datetimes
    itself: the same JSON values and instants the columns' own types bind
    (``LogJSON`` tags the floats JSONB would change)."""
    import json
    from types import MappingProxyType

    from sentinel.log.inserts import _BatchInsert, batch_elements

    pytest.importorskip("psycopg")
    dialect = sa.create_engine("postgresql+psycopg://").dialect
    table = log_tables().batches
    plan = _BatchInsert(table, dialect)
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
        Occurrence("E", i, T0 + i, T0 + i + (0.5e-6 if i % 2 else 0), None, p, f"tx{i}")
        for i, p in enumerate(params)
    ]
    occs.append(Occurrence("E", 100, T0 - 5, T0 - 5, None, params[1], "tx0"))  # two in one row
    written = T0 + 99
    rows = plan.rows(batch_elements(LogWriter().event_values(occs, "committed")), written, "host:1")
    json_bind = table.c.occurrences.type.dialect_impl(dialect).bind_processor(dialect)
    at_bind = table.c.at_min.type.dialect_impl(dialect).bind_processor(dialect)

    def at(ts: float) -> Any:
        value = dt.datetime.fromtimestamp(ts, dt.UTC)
        return at_bind(value) if at_bind else value

    by_scope: dict[str, list[Occurrence]] = {}
    for o in occs:
        by_scope.setdefault(o.scope, []).append(o)
    assert [r["scope"] for r in rows] == list(by_scope)
    for row in rows:
        mine = by_scope[row["scope"]]
        ours, theirs = row["occurrences"], json_bind([_element(o) for o in mine])
        assert type(ours) is type(theirs)
        assert json.loads((ours.dumps or json.dumps)(ours.obj)) == json.loads(
            json.dumps(theirs.obj)
        ), mine
        times = [o.timestamp for o in mine]
        assert row["at_min"] == at(min(times)) and row["at_max"] == at(max(times))
        assert row["written_at"] == at(written)
        assert row["at_min"].tzinfo is dt.UTC and row["written_at"].tzinfo is dt.UTC
        assert (row["t_first"], row["t_last"], row["n"]) == (
            mine[0].t_occ,
            mine[-1].t_occ,
            len(mine),
        )


@pytest.mark.parametrize("year", [1, 800, 999])
def test_an_occurrence_before_the_year_1000_is_found_by_its_time(
    migrated: sa.Engine, year: int
) -> None:
    """Occurrence times before the year 1000 (``signal_at`` accepts them) are
    written as the column's type writes them: on SQLite, the row's
    ``at_min`` / ``at_max`` texts have a four-digit year, so ``since``/``until``
    (text comparisons on them there) find its row, and the view's ``at`` is
    the instant."""
    when = dt.datetime(year, 3, 4, 5, 6, 7, 890123, tzinfo=dt.UTC)
    early = occ("E", 1, ts=when.timestamp())
    with migrated.begin() as conn:  # a row of its own: its at_min and at_max decide
        LogWriter().write(conn, [early])
    with migrated.begin() as conn:
        LogWriter().write(conn, [occ("E", 2, "tx-2", ts=T0)])
    with LogReader(migrated) as r:
        found = [
            o.t_occ
            for o, _, _ in r.occurrences(
                since=dt.datetime(year, 1, 1, tzinfo=dt.UTC),
                until=dt.datetime(year + 1, 1, 1, tzinfo=dt.UTC),
            )
        ]
        assert found == [1]
        assert r.count(since=dt.datetime(year, 3, 4, tzinfo=dt.UTC)) == 2
        assert r.count(until=dt.datetime(year, 3, 5, tzinfo=dt.UTC)) == 1
    view = sa.table(log_tables().view_name, sa.column("t_occ"), sa.column("at", UTCDateTime()))
    b = log_tables().batches
    with migrated.connect() as conn:
        at = conn.execute(sa.select(view.c.at).where(view.c.t_occ == 1)).scalar_one()
        lo, hi = conn.execute(sa.select(b.c.at_min, b.c.at_max).where(b.c.scope == "tx-1")).one()
    exact = dt.datetime.fromtimestamp(early.timestamp, dt.UTC)  # to the float's precision
    assert at == lo == hi == exact


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
