"""Writing occurrences and reading them back, on every backend."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.errors import LogWriteError
from sentinel.log import (
    Firing,
    FiringStatus,
    LogReader,
    LogWriter,
    OutboxEntry,
    Outcome,
    read_occurrences,
)
from sentinel.log.tables import log_tables
from sentinel.occurrence import ObjectRef, Occurrence
from sentinel.params import MAX_STRING, UnloggableParameter

from .conftest import T0, every_loggable_value, occ


def test_every_loggable_type_round_trips(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    params = every_loggable_value()
    original = occ("Stock.set_price:begin", 1, source=ObjectRef("Stock", ("IBM",)), **params)
    with migrated.begin() as conn:
        assert writer.write(conn, [original]) == 1

    [row] = list(reader.occurrences())
    back = row.occurrence
    assert len(back) == 8
    assert back == original  # every field, every parameter value
    for name, value in original.params.items():
        assert type(back.params[name]) is type(value), name
    # datetimes keep their offset, decimals their exponent, refs their key types
    assert back.params["aware"].utcoffset() == dt.timedelta(hours=5)
    assert str(back.params["money_exp"]) == "1E+3"
    assert back.params["composite_ref"].key[2] == original.params["composite_ref"].key[2]
    assert back.params["transient"].transient
    assert row.outcome == "committed"


def test_timestamps_are_restored_exactly(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    stamps = [T0, T0 + 1e-7, 0.0, 1.5, 4_102_444_800.999999, 1_234_567_890.000_000_4]
    occs = [Occurrence("E", i + 1, ts, ts + 0.25e-6, None, {}, "tx") for i, ts in enumerate(stamps)]
    with migrated.begin() as conn:
        writer.write(conn, occs)
    back = [r.occurrence for r in reader.occurrences()]
    assert [o.timestamp for o in back] == stamps
    assert [o.detected_timestamp for o in back] == [o.detected_timestamp for o in occs]

    # the row's datetime columns hold the earliest and latest instants to the
    # microsecond, in UTC
    b = log_tables().batches
    with migrated.connect() as conn:
        lo, hi = conn.execute(sa.select(b.c.at_min, b.c.at_max)).one()
    for at, ts in ((lo, min(stamps)), (hi, max(stamps))):
        assert at.tzinfo is not None and at.utcoffset() == dt.timedelta(0)
        assert abs(at.timestamp() - ts) <= 1e-6


def test_nan_parameter(migrated: sa.Engine, writer: LogWriter, reader: LogReader) -> None:
    with migrated.begin() as conn:
        writer.write(conn, [occ("E", 1, x=float("nan"), y=float("-inf"))])
    [row] = reader.occurrences()
    assert math.isnan(row.occurrence.params["x"])
    assert row.occurrence.params["y"] == float("-inf")


def test_sources(migrated: sa.Engine, writer: LogWriter, reader: LogReader) -> None:
    sources = [
        None,
        ObjectRef("Stock", ("IBM",)),
        ObjectRef("Line", (3, 4)),
        ObjectRef("Draft", ("local", 9)),
        ObjectRef("Doc", (uuid_value := __import__("uuid").UUID(int=1),)),
        ObjectRef("Day", (dt.date(2024, 1, 2), "x")),
    ]
    occs = [occ("E", i + 1, source=s) for i, s in enumerate(sources)]
    with migrated.begin() as conn:
        writer.write(conn, occs)
    back = [r.occurrence.source for r in reader.occurrences()]
    assert back == sources
    assert type(back[1]) is ObjectRef and back[4].key == (uuid_value,)


def test_order_is_scope_then_t_occ_across_chunks(migrated: sa.Engine, writer: LogWriter) -> None:
    # written in an order that is neither scope nor t_occ order
    occs = []
    t = 0
    for round_ in range(9):
        for scope in ("b", "a", "process:x", "c"):
            t += 1
            occs.append(occ("E", t, scope, n=round_))
    with migrated.begin() as conn:
        writer.write(conn, occs[::2])
    with migrated.begin() as conn:
        writer.write(conn, occs[1::2])

    for size in (1, 5, 7, 36, 100):
        reader = LogReader(migrated, chunk_size=size)
        chunks = list(reader.chunks())
        assert all(len(c) <= size for c in chunks)
        got = [(r.occurrence.scope, r.occurrence.t_occ) for c in chunks for r in c]
        assert got == sorted((o.scope, o.t_occ) for o in occs)

        by_time = [
            (r.occurrence.t_occ, r.occurrence.scope) for r in reader.occurrences(order="t_occ")
        ]
        assert by_time == sorted((o.t_occ, o.scope) for o in occs)


def test_chunks_are_separate_bounded_queries(migrated: sa.Engine, writer: LogWriter) -> None:
    with migrated.begin() as conn:
        writer.write(conn, [occ("E", t, f"s{t % 3}") for t in range(1, 26)])
    reader = LogReader(migrated, chunk_size=10)
    reader.check()
    selects: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT"):
            selects.append(statement)

    sa.event.listen(migrated, "before_cursor_execute", count)
    try:
        it = reader.chunks()
        first = next(it)
        # lazy: pages of row heads (LIMIT) and those rows (by id), until a
        # chunk is complete (the last row's occurrences wait for the next row)
        assert len(first) == 10 and len(selects) == 4
        rest = list(it)
    finally:
        sa.event.remove(migrated, "before_cursor_execute", count)
    assert [len(c) for c in [first, *rest]] == [10, 10, 5]
    assert len(selects) == 4  # the second page of heads was the last
    heads, rows = selects[0::2], selects[1::2]
    assert all("LIMIT" in s.upper() for s in heads) and all(" IN " in s for s in rows)


def test_filters(migrated: sa.Engine, writer: LogWriter, reader: LogReader) -> None:
    with migrated.begin() as conn:
        writer.write(conn, [occ("A", 1, "tx1", ts=100.0), occ("B", 2, "tx1", ts=200.0)])
        writer.write(conn, [occ("A", 3, "process:p", ts=300.0)], outcome=None)
    writer.write_aborted(migrated, [occ("B", 4, "tx2", ts=400.0)])

    def ids(**kw: object) -> list[int]:
        return [r.occurrence.t_occ for r in reader.occurrences(**kw)]  # type: ignore[arg-type]

    assert ids() == [3, 1, 2, 4]  # "process:p" < "tx1" < "tx2"
    assert ids(scopes=["tx1"]) == [1, 2]
    assert ids(scope_range=("tx", None)) == [1, 2, 4]
    assert ids(scope_range=(None, "tx2")) == [3, 1, 2]
    assert ids(outcomes={"committed"}) == [1, 2]
    assert ids(outcomes={"aborted", None}) == [3, 4]
    assert ids(outcomes=set()) == []
    assert ids(events=["B"]) == [2, 4]
    utc = dt.UTC
    assert ids(
        since=dt.datetime.fromtimestamp(200.0, utc), until=dt.datetime.fromtimestamp(400.0, utc)
    ) == [3, 2]
    assert ids(since=dt.datetime(1970, 1, 1, 0, 6)) == [4]  # naive means UTC
    assert reader.count(outcomes={"committed"}) == 2
    assert reader.count() == 4

    outcomes = {r.occurrence.t_occ: r.outcome for r in reader.occurrences()}
    assert outcomes == {1: "committed", 2: "committed", 3: None, 4: "aborted"}


def test_aborted_write_is_its_own_transaction(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    aborted = [occ("txn:begin", 1, "tx9"), occ("E", 2, "tx9", v=1), occ("txn:abort", 3, "tx9")]
    firing = Firing.of(
        "R", aborted[1], coupling="immediate", status=FiringStatus.FAILED, error="boom"
    )
    assert writer.write_aborted(migrated, aborted, firings=[firing]) == 3
    rows = list(reader.occurrences())
    assert [r.occurrence for r in rows] == aborted
    assert {r.outcome for r in rows} == {"aborted"}
    assert [f.error for f in reader.firings()] == ["boom"]


def test_aborted_write_is_all_or_nothing(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    with migrated.begin() as conn:
        writer.write(conn, [occ("E", 2, "tx8")])
    # the firing's rule name is too long: nothing of the batch stays
    firing = Firing.of("R" * 300, occ("E", 1, "tx9"), coupling="immediate", status="failed")
    with pytest.raises(LogWriteError, match="too long"):
        writer.write_aborted(migrated, [occ("E", 1, "tx9"), occ("E", 2, "tx9")], firings=[firing])
    assert [r.occurrence.t_occ for r in reader.occurrences()] == [2]


def test_one_occurrence_id_twice_in_a_write_is_refused(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    with pytest.raises(LogWriteError, match=r"same \(scope, t_occ\)"):
        writer.write_aborted(migrated, [occ("E", 2, "tx9"), occ("E", 1, "tx9"), occ("E", 2, "tx9")])
    assert list(reader.occurrences()) == []


def test_bad_values_raise_before_anything_is_sent(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    statements: list[str] = []
    sa.event.listen(migrated, "before_cursor_execute", lambda *a: statements.append(a[2]))
    bad = [
        (Occurrence("E", 2, T0, None, None, {"x": object()}, "tx"), UnloggableParameter, "'x'"),
        (Occurrence("E", 2, T0, None, ("not", "a ref"), {}, "tx"), LogWriteError, "ObjectRef"),
        (Occurrence("E", 2, T0, None, None, {}, 17), LogWriteError, "scope id 17 is a int"),
        (Occurrence("E", 2, T0, None, None, {}, "s" * 129), LogWriteError, "longer than 128"),
        (Occurrence("E" * 256, 2, T0, None, None, {}, "tx"), LogWriteError, "event name"),
    ]
    for bad_occ, error, text in bad:
        with migrated.begin() as conn, pytest.raises(error, match=text):
            writer.write(conn, [occ("E", 1, "tx"), bad_occ])
    with pytest.raises(LogWriteError, match="unknown transaction outcome"):
        writer.occurrence_rows([], "maybe")
    assert not [s for s in statements if "INSERT" in s.upper()]
    assert list(reader.occurrences()) == []


def test_firings_round_trip(migrated: sa.Engine, writer: LogWriter, reader: LogReader) -> None:
    e1, e2 = occ("E1", 1, "tx"), occ("E2", 2, "tx")
    from sentinel.algebra import parse
    from sentinel.occurrence import CompositeOccurrence

    comp = CompositeOccurrence(parse("E1 ; E2"), 2, (e1, e2))
    fired = Firing.of(
        "R1",
        comp,
        coupling="deferred",
        status=FiringStatus.FIRED,
        finished_at=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    )
    false = Firing.of("R2", e1, coupling="immediate", status="condition_false")
    with migrated.begin() as conn:
        assert writer.write_firings(conn, [fired, false]) == 2
    back = list(reader.firings())
    assert [f.rule for f in back] == ["R1", "R2"]
    f = back[0]
    assert (f.scope, f.t_occ, f.constituents) == ("tx", 2, (("tx", 1), ("tx", 2)))
    assert (f.coupling, f.status, f.error) == ("deferred", "fired", None)
    assert f.finished_at == fired.finished_at
    assert abs((f.fired_at - fired.fired_at).total_seconds()) < 1e-6
    assert f.id is not None
    assert [x.rule for x in reader.firings(statuses=["condition_false"])] == ["R2"]
    assert [x.rule for x in reader.firings(rules=["R1"], scopes=["tx"])] == ["R1"]


def test_outbox_round_trip(migrated: sa.Engine, writer: LogWriter, reader: LogReader) -> None:
    params = every_loggable_value()
    trigger = occ("E", 5, "tx", source=ObjectRef("Stock", ("IBM",)), **params)
    entry = OutboxEntry.of(
        "notify", trigger, extra={"attempt_limit": 3, "when": dt.date(2024, 1, 1)}
    )
    with migrated.begin() as conn:
        assert writer.enqueue(conn, [entry]) == 1
        with pytest.raises(LogWriteError, match="idempotency key"), conn.begin_nested():
            writer.enqueue(conn, [OutboxEntry.of("notify", trigger)])
    [back] = reader.outbox()
    assert back.constituents == (trigger,)
    assert dict(back.extra) == {"attempt_limit": 3, "when": dt.date(2024, 1, 1)}
    assert (back.rule, back.status, back.attempts, back.scope, back.t_occ) == (
        "notify",
        "pending",
        0,
        "tx",
        5,
    )
    assert back.idempotency_key == entry.idempotency_key and len(back.idempotency_key) == 64
    assert back.next_attempt_at is not None and back.next_attempt_at.tzinfo is not None
    assert list(reader.outbox(statuses=["done"])) == []


def test_write_in_a_rolled_back_transaction_leaves_nothing(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    with migrated.connect() as conn:
        writer.write(
            conn,
            [occ("E", 1)],
            firings=[Firing.of("R", occ("E", 1), coupling="immediate", status="fired")],
        )
        conn.rollback()
    assert list(reader.occurrences()) == [] and list(reader.firings()) == []


def test_set_outcome(migrated: sa.Engine, writer: LogWriter, reader: LogReader) -> None:
    with migrated.begin() as conn:
        writer.write(
            conn, [occ("E", 1, "tx"), occ("E", 2, "tx"), occ("E", 3, "other")], outcome=None
        )
        assert writer.set_outcome(conn, "tx", Outcome.ABORTED) == 2
    assert {r.occurrence.t_occ: r.outcome for r in reader.occurrences()} == {
        1: "aborted",
        2: "aborted",
        3: None,
    }


def test_read_occurrences_from_a_url(db_url: str, migrated: sa.Engine, writer: LogWriter) -> None:
    with migrated.begin() as conn:
        writer.write(conn, [occ("E", 1), occ("E", 2)])
    got = [(o.t_occ, outcome) for o, outcome, _ in read_occurrences(db_url, chunk_size=1)]
    assert got == [(1, "committed"), (2, "committed")]


def test_reader_arguments_are_checked(migrated: sa.Engine) -> None:
    from sentinel.errors import LogConfigError

    with pytest.raises(LogConfigError, match="chunk_size"):
        LogReader(migrated, chunk_size=0)
    with pytest.raises(LogConfigError, match="order"):
        list(LogReader(migrated).occurrences(order="time"))  # type: ignore[arg-type]


def test_floats_keep_their_type_and_sign(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    # JSONB (PostgreSQL) stores numbers as numeric: 1e16 would come back as an int
    # and -0.0 as 0.0 unless the log keeps them apart
    values = {
        "big": 1e16,
        "huge": -1.5e300,
        "neg_zero": -0.0,
        "one": 1.0,
        "tiny": 5e-324,
        "nested": [1e20, {"x": -0.0}],
        "int": 10**16,
    }
    trigger = occ("E", 1, **values)
    with migrated.begin() as conn:
        writer.write(conn, [trigger], outbox=[OutboxEntry.of("D", trigger)])
    [row] = reader.occurrences()
    [entry] = reader.outbox()
    for back in (row.occurrence.params, entry.constituents[0].params):
        assert back == trigger.params
        assert type(back["big"]) is float and type(back["int"]) is int
        assert math.copysign(1.0, back["neg_zero"]) == -1.0
        assert type(back["nested"][0]) is float
        assert math.copysign(1.0, back["nested"][1]["x"]) == -1.0


def test_one_event_whose_parameter_names_change_round_trips(
    migrated: sa.Engine, writer: LogWriter, reader: LogReader
) -> None:
    """The writer's parameter text is made from a template per list of names:
    occurrences of one event whose names change (other names, the same in
    another order, names that need escapes) in one batch each read back as
    they were, with values at the plain/tagged boundaries."""
    variants: list[dict[str, Any]] = [
        {"a": 1, "b": "x"},
        {"b": "x", "a": 1},
        {"a": 1},
        {"a": 1, "b": "x", "c": None},
        {'a"b': 2**63 - 1, "\\": -(2**63), "%s": "%s%%", "": 5e-324, "é🙂": "\u2028\U0001f642"},
        {'a"b': 2**63, "\\": -(2**63) - 1, "%s": "\x00", "": 1e16, "é🙂": "\ud800"},
        {"a": 9999999999999998.0, "b": -0.0, "c": 1e308, "d": float("inf")},
        {"a": "y" * MAX_STRING, "b": True},
    ]
    occs = [occ("E", i + 1, **p) for i, p in enumerate(variants)]
    with migrated.begin() as conn:
        writer.write(conn, occs)
    back = [row.occurrence for row in reader.occurrences()]
    # (JSONB keeps an object's keys in an order of its own)
    assert [sorted(o.params) for o in back] == [sorted(p) for p in variants]
    for o, p in zip(back, variants, strict=True):
        for name, value in p.items():
            got = o.params[name]
            assert type(got) is type(value) and repr(got) == repr(value), name
