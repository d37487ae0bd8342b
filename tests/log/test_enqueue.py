"""Outbox rows made directly and inserted many to a statement
(``sentinel.log.enqueue``): the rows ``LogWriter.enqueue`` writes, on every
backend, in fewer statements."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel import LocalEventDetector
from sentinel.errors import LogSchemaError, LogWriteError
from sentinel.log import LogReader, LogWriter, enqueue
from sentinel.log.enqueue import OutboxRows, insert_pending
from sentinel.log.outbox import entry_for
from sentinel.log.records import detection_key, idempotency_key
from sentinel.log.tables import _jsonb_exact, log_tables
from sentinel.occurrence import CompositeOccurrence, ObjectRef, Occurrence

from .conftest import every_loggable_value, occ


def _rules() -> Any:
    det = LocalEventDetector()
    order, payment = det.explicit("order"), det.explicit("payment")
    det.rule(
        "paid",
        (order >> payment).by("order_id"),
        action=print,
        condition=bool,
        coupling="detached",
        context="chronicle",
        flush=False,
    )
    det.rule("ordered", order, action=print, coupling="detached")
    return det.rules


def _detections() -> list[tuple[str, Any]]:
    """Detections of every shape a payload holds: primitive and composite,
    every loggable parameter, a source, times JSONB would not keep as numbers,
    text needing escapes."""
    rules = _rules()
    every = every_loggable_value()
    a = occ("order", 5 << 20, "tx-1", order_id=1, **every)
    b = occ("payment", (6 << 20) | 3, 'tx "2" ✓', source=ObjectRef("Pay", (1, "x")), order_id=1)
    odd = Occurrence("order", 7, 1e17, -0.0, None, {"order_id": 2}, "tx-3")
    texts = occ("order", 8, "tx-4", order_id=3, nul="a\x00b", lone="\udc80", name="ünï")
    return [
        ("ordered", a),
        ("ordered", odd),
        ("ordered", texts),
        ("ordered", occ("order", 9, "tx-5", order_id=4, name="ünï ✓", f=0.5, n=None, y=True)),
        ("ordered", occ("order", 10, "tx-6", order_id=5, lone="\udc80")),  # orjson refuses
        (
            "paid",
            CompositeOccurrence(rules["paid"].event, 12, (occ("order", 11), occ("payment", 12))),
        ),
        ("paid", CompositeOccurrence(rules["paid"].event, b.t_occ, (a, b))),
        ("paid", CompositeOccurrence(rules["paid"].event, 9, (odd,))),
    ]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mysql"])
def test_a_row_holds_what_the_writer_makes_of_the_entry(dialect: str) -> None:
    rules = _rules()
    made = OutboxRows(dialect)
    for name, detection in _detections():
        rule = rules[name]
        entry = entry_for(rule, detection, committed=True)
        [want] = LogWriter().outbox_rows([entry])
        payload = _jsonb_exact(want["payload"]) if dialect == "postgresql" else want["payload"]
        row = made.row(rule, detection)
        assert row[:4] == (want["rule"], want["idempotency_key"], want["scope"], want["t_occ"])
        assert json.loads(row[4]) == json.loads(json.dumps(payload))
        assert row == made.row(rule, detection)  # the rule's extra, remembered


@pytest.mark.parametrize(
    ("rule", "scope", "t_occ"),
    [("paid", "tx-1", 5), ("päid ✓", 'a "quoted"\\ scope', 2**70), ("r", "\udc80", 1.5)],
)
def test_detection_key_is_the_json_text_s_sha256(rule: str, scope: str, t_occ: Any) -> None:
    parts = (occ("E", 1, scope), occ("F", 2, "ünï"))
    ident = [rule, scope, t_occ, *(f"{c.scope}/{c.t_occ}" for c in parts)]
    want = hashlib.sha256(json.dumps(ident).encode()).hexdigest()
    assert detection_key(rule, scope, t_occ, parts) == want
    composite = CompositeOccurrence("X", t_occ, parts)
    assert idempotency_key(rule, composite) == detection_key(
        rule, str(composite.scope), t_occ, composite.constituents
    )


def _read(engine: sa.Engine) -> list[tuple[Any, ...]]:
    with LogReader(engine) as reader:
        return [
            (
                e.rule,
                e.idempotency_key,
                e.scope,
                e.t_occ,
                e.constituents,
                dict(e.extra),
                e.status,
                e.attempts,
                e.claimed_by,
                e.last_error,
                e.done_at,
            )
            for e in reader.outbox()
        ]


def test_inserted_rows_read_back_as_the_writer_s(migrated: sa.Engine) -> None:
    rules = _rules()
    detections = _detections()
    with migrated.begin() as conn:
        LogWriter().enqueue(conn, [entry_for(rules[n], d, committed=True) for n, d in detections])
    written = _read(migrated)
    with migrated.begin() as conn:
        conn.execute(sa.delete(log_tables().outbox))
    now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    made = OutboxRows(migrated.dialect.name)
    with migrated.begin() as conn:
        assert (
            insert_pending(conn, log_tables(), [made.row(rules[n], d) for n, d in detections], now)
            == 8
        )
    assert _read(migrated) == written
    with LogReader(migrated) as reader:
        times = {(e.next_attempt_at, e.created_at) for e in reader.outbox()}
    assert times == {(now, now)}


def test_a_duplicate_key_is_a_log_write_error(migrated: sa.Engine) -> None:
    rules = _rules()
    name, detection = _detections()[0]
    row = OutboxRows(migrated.dialect.name).row(rules[name], detection)
    now = datetime.now(UTC)
    with migrated.begin() as conn:
        insert_pending(conn, log_tables(), [row], now)
        with pytest.raises(LogWriteError, match="idempotency key"), conn.begin_nested():
            insert_pending(conn, log_tables(), [row], now)
    assert len(_read(migrated)) == 1


def _statements(engine: sa.Engine) -> list[str]:
    """The outbox inserts sent on ``engine`` (SQLite and MariaDB: each
    statement is one; PostgreSQL's ``COPY`` goes by the driver, unseen)."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "outbox" in statement and statement.lstrip().upper().startswith(("INSERT", "COPY")):
            seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    return seen


def test_rows_go_many_to_a_statement(migrated: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """As many rows a statement as the backend's parameters allow (at most
    SQLAlchemy's page size), and at most STATEMENT_TEXT of payload."""
    if migrated.dialect.name == "postgresql":
        pytest.skip("COPY: one statement the driver sends, whatever the rows")
    rules = _rules()
    made = OutboxRows(migrated.dialect.name)
    rows = [
        made.row(rules["ordered"], occ("order", i, f"tx-{i}", order_id=i)) for i in range(1, 2502)
    ]
    seen = _statements(migrated)
    now = datetime.now(UTC)
    with migrated.begin() as conn:
        insert_pending(conn, log_tables(), rows[:2001], now)
    assert len(seen) == 3  # 1000, 1000, 1 (insertmanyvalues' page size)
    seen.clear()
    monkeypatch.setattr(enqueue, "STATEMENT_TEXT", 1)
    with migrated.begin() as conn:
        insert_pending(conn, log_tables(), rows[2001:], now)
    assert len(seen) == 500  # a row larger than the bound goes alone
    assert len(_read(migrated)) == 2501


def test_a_missing_outbox_table_is_a_schema_error(migrated: sa.Engine) -> None:
    rules = _rules()
    name, detection = _detections()[0]
    row = OutboxRows(migrated.dialect.name).row(rules[name], detection)
    with migrated.begin() as conn:
        conn.execute(sa.text("DROP TABLE sentinel_outbox"))
    with pytest.raises(LogSchemaError), migrated.begin() as conn:
        insert_pending(conn, log_tables(), [row], datetime.now(UTC))
