"""What tailing costs the service: a batch's outbox entries go in one
statement (not one per entry), and a row's parameters are parsed once (the
reader's parse is what the feeder uses)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.global_detector import CommitReader, GlobalDetector, replay_committed
from sentinel.global_detector.detect import row_params
from sentinel.log import LogReader, LogWriter, migrate
from sentinel.log.tables import log_tables
from sentinel.occurrence import ObjectRef, Occurrence
from sentinel.replay.recorder import decode_params

from . import rules
from .forge import element, forge


@pytest.fixture
def log_db(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    return engine


def _pairs(engine: sa.Engine, n: int) -> None:
    """``n`` transactions each with an order and its payment (customer i)."""
    writer = LogWriter(commit_order=True)
    for i in range(n):
        with engine.begin() as conn:
            writer.write(
                conn,
                [
                    Occurrence("order", 1, 1000.0 + i, scope=f"t{i}", params={"customer": i}),
                    Occurrence("payment", 2, 1000.0 + i, scope=f"t{i}", params={"customer": i}),
                ],
            )


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_batch_s_entries_are_one_statement_for_the_database(log_db: sa.Engine) -> None:
    """Counted by SQLite itself (its trace of the statements it runs): an
    ``executemany`` of the entries ran one statement per entry."""
    _pairs(log_db, 30)
    ran: list[str] = []

    @sa.event.listens_for(log_db, "connect")
    def trace(dbapi: Any, _record: Any) -> None:
        dbapi.set_trace_callback(ran.append)

    log_db.dispose()  # connections from here on are traced
    with GlobalDetector(rules.detector, log_db, run_actions=False) as service:
        r = service.step()
    assert (r.rows, r.detections) == (60, 30)
    inserts = [s for s in ran if s.lstrip().upper().startswith("INSERT INTO SENTINEL_OUTBOX")]
    assert len(inserts) == 1
    with LogReader(log_db) as reader:
        entries = list(reader.outbox())
    assert sorted(e.constituents[0].params["customer"] for e in entries) == list(range(30))
    assert {e.idempotency_key for e in entries} == set(r.keys)


def test_parsed_rows_carry_what_their_text_decodes_to(log_db: sa.Engine) -> None:
    """Rows read with ``parsed=True`` hold the JSON object, which the feeder
    takes for the parameters their text decodes to, whatever they hold: tagged
    values, and what orjson reads otherwise than json (an integer beyond 64
    bits, a lone surrogate, a float too large), written by hand."""
    writer = LogWriter(commit_order=True)
    with log_db.begin() as conn:
        writer.write(
            conn,
            [
                Occurrence(
                    "order",
                    1,
                    1000.0,
                    scope="t1",
                    params={"customer": 1, "ref": ObjectRef("C", (1,)), "big": 2**80, "x": -0.0},
                ),
                Occurrence("payment", 2, 1000.0, scope="t1", params={}),
            ],
        )
    big = "1" + "0" * 25
    # PostgreSQL's and MariaDB's JSON refuse a lone surrogate
    odd = "\udc80" if log_db.dialect.name == "sqlite" else "odd"
    with log_db.begin() as conn:
        forge(
            conn,
            f'[[1, "order", 1000.5, null, null, null, {{"customer": {big}}}]]',
            seq=2,
            scope="f2",
        )
        forge(conn, [element(1, "order", 1001.0, {"customer": odd, "f": 1e300})], seq=3, scope="f3")
        forge(
            conn,
            [element(1, "order", 1002.0, {"nested": [{"n": 2**70}], "customer": 2})],
            seq=4,
            scope="f4",
        )
        forge(conn, [element(1, "order", 1003.0, [1, 2])], seq=5, scope="f5")
    reader = CommitReader(log_tables())
    with log_db.connect() as conn:
        text = reader.read(conn, 0)
        parsed = reader.read(conn, 0, parsed=True)
    assert len(text) == len(parsed) == 6
    for t, p in zip(text, parsed, strict=True):
        assert t._replace(params=None) == p._replace(params=None)
        assert isinstance(t.params, str) and not isinstance(p.params, str)
        assert json.loads(t.params) == p.params
        if t.event == "order" and t.commit_seq == 5:
            with pytest.raises(Exception, match="not the JSON object"):
                row_params(p.params)
            continue
        want = decode_params(t.params)
        got = row_params(p.params)
        assert got == want
        assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
    if log_db.dialect.name != "mysql":  # MariaDB keeps such a number as a double
        assert parsed[2].params == {"customer": int(big)}  # json's reading, not orjson's float
        assert parsed[4].params["nested"] == [{"n": 2**70}]
    assert parsed[3].params["customer"] == odd


def test_replay_and_the_service_read_parsed_rows(
    log_db: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service and batch replay read rows parsed: no row's parameters
    are written back to text and parsed again."""
    _pairs(log_db, 3)
    dumped: list[Any] = []
    import sentinel.global_detector.order as order

    real = order._dumps

    def spy(value: Any) -> str:
        dumped.append(value)
        return real(value)

    monkeypatch.setattr(order, "_dumps", spy)
    assert len(replay_committed(rules.detector, log_db)) == 3
    with GlobalDetector(rules.detector, log_db, run_actions=False) as service:
        assert service.step().detections == 3
    assert dumped == []
