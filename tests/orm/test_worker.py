"""The outbox worker's guarantees (issue 11, items 4-6; issue 13, item 3):
nothing a rule raises ends a worker or leaves an entry ``running``; attempts are
counted on every claim and a running rule keeps its claim by heartbeat; a
worker runs only the detached rules of its own rule set, and with a signing key
only rows its application signed; a session factory that cannot make sessions,
and a context to run rules in."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from sentinel import LocalEventDetector
from sentinel.errors import AttachError
from sentinel.log import LogWriter, OutboxEntry
from sentinel.log.outbox import Claimed, Exhausted, OutboxStore
from sentinel.log.signing import OUTBOX_KEY_ENV, OutboxSigner
from sentinel.log.tables import UTCDateTime
from sentinel.occurrence import Occurrence
from sentinel.orm import attach

from . import actions
from .conftest import ORM, make_model

KEY = "a test key of more than sixteen bytes"


def _trigger(orm: ORM, price: float = 1.0) -> None:
    (ibm,) = orm.add_stocks("IBM")
    with orm.Session.begin() as s:
        s.get(orm.model.Stock, ibm).set_price(price)


def _rows(orm: ORM) -> list[tuple[Any, ...]]:
    """``(rule, status, attempts, last_error)`` of every outbox row, read
    without decoding payloads (forged ones may not decode)."""
    with orm.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text(
                    "SELECT rule, status, attempts, last_error FROM sentinel_outbox ORDER BY id"
                )
            )
        ]


# -- BaseException from user code ---------------------------------------------------------

BASE_EXCEPTIONS = [SystemExit, KeyboardInterrupt, GeneratorExit, actions.CustomInterrupt]


@pytest.mark.parametrize("exc", BASE_EXCEPTIONS, ids=lambda e: e.__name__)
@pytest.mark.parametrize("phase", ["action", "condition"])
def test_a_base_exception_in_a_rule_is_its_attempts_failure(
    orm: ORM, exc: type[BaseException], phase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool thread survives: the entry is retried, then failed with the
    error; an entry triggered afterwards runs on the same pool."""
    monkeypatch.setitem(actions.RAISE, "exc", exc)
    att = orm.attach(workers=1, max_attempts=2, backoff=0.01)
    if phase == "action":
        orm.det.rule("Boom", "Stock.e2", action=actions.raise_base, coupling="detached")
    else:
        orm.det.rule(
            "Boom",
            "Stock.e2",
            actions.raise_base_in_condition,
            action=actions.record,
            coupling="detached",
        )
    _trigger(orm)
    assert att.wait_detached(60)
    orm.det.rule("R", "Stock.e3", action=actions.record, coupling="detached")
    _trigger(orm, 2.0)
    assert att.wait_detached(60)
    rows = _rows(orm)
    boom = [r for r in rows if r[0] == "Boom"]
    assert [(r[1], r[2]) for r in boom] == [("failed", 2), ("failed", 2)]
    for r in boom:
        assert f"failed in its {phase}: {exc.__name__}: raised by the {phase}" in r[3]
    assert [(r[1], r[2]) for r in rows if r[0] == "R"] == [("done", 1)]
    assert [e[0] for e in orm.effects()] == ["R"]
    assert [a[2] for a in actions.ATTEMPTS if a[0] == "Boom"] == [1, 2, 1, 2]
    firings = [f for f in orm.firings() if f.rule == "Boom" and f.status == "failed"]
    assert len(firings) == 4 and all(exc.__name__ in str(f.error) for f in firings)


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("exc", BASE_EXCEPTIONS, ids=lambda e: e.__name__)
def test_a_drain_records_a_base_exception_and_goes_on(
    orm: ORM, exc: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the calling thread too; only a KeyboardInterrupt of the main thread
    (Ctrl-C) is raised again, after the attempt is recorded."""
    monkeypatch.setitem(actions.RAISE, "exc", exc)
    att = orm.attach(workers=0, max_attempts=3, backoff=3600, max_backoff=3600)
    orm.det.rule("Boom", "Stock.e2", action=actions.raise_base, coupling="detached")
    orm.det.rule("R", "Stock.e3", action=actions.record, coupling="detached")
    _trigger(orm)
    if exc is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            att.drain()
        report = att.drain()  # the rest
        assert (report.done, report.retried) == (1, 0)
    else:
        report = att.drain()
        assert (report.done, report.retried) == (1, 1)
    assert [r[:3] for r in _rows(orm)] == [("Boom", "pending", 1), ("R", "done", 1)]
    assert exc.__name__ in _rows(orm)[0][3]


def test_a_keyboard_interrupt_in_a_pool_thread_is_not_re_raised(
    orm: ORM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool thread is never the main thread: the interrupt came from the
    rule, and is its failure only."""
    monkeypatch.setitem(actions.RAISE, "exc", KeyboardInterrupt)
    att = orm.attach(workers=1, max_attempts=1)
    orm.det.rule("Boom", "Stock.e2", action=actions.raise_base, coupling="detached")
    _trigger(orm)
    assert att.wait_detached(60)
    assert [r[:3] for r in _rows(orm)] == [("Boom", "failed", 1)]
    assert all(t.is_alive() for t in att.runner._threads)


# -- attempts and leases ---------------------------------------------------------------


def _claim_as(orm: ORM, store: OutboxStore, key: str, worker: str, max_attempts: int) -> Any:
    with orm.engine.begin() as conn:
        return store.claim(conn, key, worker, 0.0, max_attempts)


def test_an_expired_claim_with_no_attempts_left_is_failed_not_run(orm: ORM) -> None:
    """Workers that died mid-action used every attempt: the next claim marks the
    entry failed, naming the lost attempt and the error before it."""
    att = orm.attach(workers=0, max_attempts=3)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm)
    (entry,) = orm.outbox()
    key = entry.idempotency_key
    store = att.runner.store
    got = _claim_as(orm, store, key, "dead-1", 3)
    assert isinstance(got, Claimed) and got.attempts == 1
    with orm.engine.begin() as conn:  # it failed once and was put back
        assert store.fail(conn, got, "dead-1", "ValueError: first", retry_at=None) is True
        conn.execute(
            sa.text(
                "UPDATE sentinel_outbox SET status = 'pending', next_attempt_at = :t"
            ).bindparams(sa.bindparam("t", type_=UTCDateTime())),  # as the store binds it
            {"t": entry.created_at},
        )
    for n in (2, 3):  # two workers died with the claim (lease 0: expired at once)
        got = _claim_as(orm, store, key, f"dead-{n}", 3)
        assert isinstance(got, Claimed) and got.attempts == n
    report = att.drain()
    assert (report.done, report.failed) == (0, 1)
    assert orm.effects() == [] and actions.ATTEMPTS == []
    (row,) = _rows(orm)
    assert row[:3] == ("R", "failed", 3)
    assert "attempt 3 of 3 did not finish: the claim of worker 'dead-3' expired" in row[3]
    assert "the last error before: ValueError: first" in row[3]
    assert [f.status for f in orm.firings() if f.rule == "R"] == ["pending", "failed"]
    assert _claim_as(orm, store, key, "late", 3) is None  # failed for good


def test_a_pending_entry_with_no_attempts_left_is_failed(orm: ORM) -> None:
    """Setting a failed entry back to ``pending`` without resetting ``attempts``
    does not buy more attempts than ``max_attempts``."""
    att = orm.attach(workers=0, max_attempts=2)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm)
    with orm.engine.begin() as conn:
        conn.execute(sa.text("UPDATE sentinel_outbox SET attempts = 2"))
    key = orm.outbox()[0].idempotency_key
    with orm.engine.begin() as conn:
        got = att.runner.store.claim(conn, key, "w", 60, 2)
    assert isinstance(got, Exhausted)
    assert "no attempts left (2 made, at most 2)" in got.error
    assert _rows(orm)[0][:3] == ("R", "failed", 2)
    assert orm.effects() == []


@pytest.mark.parametrize("status", ["paused", "cancelled", "", "zzz"])
def test_an_entry_of_unknown_status_is_failed_and_reported(
    orm: ORM, status: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A status that is none of pending, running, done, failed (a row changed by
    hand) was never claimed, run, requeued or reported. A drain marks it
    ``failed``, naming the status, and says so on the logger; requeueing it then
    runs it like any failed entry. Entries of known status are not touched."""
    att = orm.attach(workers=0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm, 1.0)
    _trigger(orm, 2.0)
    first, second = (e.idempotency_key for e in orm.outbox())
    with orm.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE sentinel_outbox SET status = :s WHERE idempotency_key = :k"),
            {"s": status, "k": first},
        )
    report = att.drain()
    assert (report.done, report.failed) == (1, 1)
    rows = _rows(orm)
    assert [r[:3] for r in rows] == [("R", "failed", 0), ("R", "done", 1)]
    assert f"its status {status!r} is none of pending, running, done, failed" in rows[0][3]
    assert f"has the unknown status {status!r} (changed by hand); marked failed" in caplog.text
    assert [e[2] for e in orm.effects()] == [2.0]
    caplog.clear()
    assert att.drain().total == 0  # reported once
    with orm.engine.begin() as conn:
        assert att.runner.store.requeue(conn, keys=[first]) == 1
    assert att.drain().done == 1
    assert sorted(e[2] for e in orm.effects()) == [1.0, 2.0]
    assert second and "unknown status" not in caplog.text


def test_an_entry_whose_status_is_not_text_is_failed_too(orm: ORM) -> None:
    """SQLite stores whatever it is given: a status written as a blob (or a
    number) was read as its Python text and then matched no row, so it was
    never failed, and a hundred of them hid every later one."""
    if orm.engine.dialect.name != "sqlite":
        pytest.skip("only SQLite stores a status that is not text")
    att = orm.attach(workers=0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm, 1.0)
    _trigger(orm, 2.0)
    with orm.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE sentinel_outbox SET status = CAST('paused' AS BLOB) WHERE id = 1")
        )
        conn.execute(sa.text("UPDATE sentinel_outbox SET status = 7 WHERE id = 2"))
    assert att.runner.refuse_unknown() == 2
    assert [r[1] for r in _rows(orm)] == ["failed", "failed"]
    assert att.runner.refuse_unknown() == 0


def _next_attempt_at(orm: ORM) -> Any:
    with orm.engine.connect() as conn:
        return conn.execute(sa.text("SELECT next_attempt_at FROM sentinel_outbox")).scalar()


def test_a_running_rule_keeps_its_claim_by_heartbeat(orm: ORM) -> None:
    """While the action runs past several leases, the lease is renewed and no
    other worker can claim the entry; the attempt then commits."""
    att = orm.attach(workers=0, lease=0.3)
    orm.det.rule("R", "Stock.e2", action=actions.hook, coupling="detached")
    _trigger(orm)
    key = orm.outbox()[0].idempotency_key
    seen: list[Any] = []
    others: list[Any] = []

    def body(occ: Any) -> None:
        deadline = time.monotonic() + 60
        seen.append(_next_attempt_at(orm))
        while len(set(seen)) < 4 and time.monotonic() < deadline:  # three renewals
            time.sleep(0.05)
            seen.append(_next_attempt_at(orm))
        others.append(_claim_as(orm, att.runner.store, key, "other", 5))

    actions.HOOKS["hook"] = body
    assert att.drain().done == 1
    assert len(set(seen)) == 4, "the lease was not renewed"
    assert others == [None]
    assert [e[0] for e in orm.effects()] == ["R"]
    assert [r[:3] for r in _rows(orm)] == [("R", "done", 1)]


def test_a_claim_lost_while_the_rule_runs_rolls_the_attempt_back(
    orm: ORM, caplog: pytest.LogCaptureFixture
) -> None:
    """The heartbeat finds the row taken by another worker: the attempt does not
    commit its effects, and the other worker's claim stands."""
    att = orm.attach(workers=0, lease=0.3)
    orm.det.rule("R", "Stock.e2", action=actions.hook, coupling="detached")
    _trigger(orm)

    def body(occ: Any) -> None:
        with orm.engine.begin() as conn:  # as if the lease had run out and "thief" claimed
            conn.execute(sa.text("UPDATE sentinel_outbox SET claimed_by = 'thief'"))
        deadline = time.monotonic() + 60
        while "lost its claim" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)

    actions.HOOKS["hook"] = body
    with caplog.at_level(logging.WARNING, "sentinel.orm"):
        assert att.drain().skipped == 1
    assert "lost its claim" in caplog.text
    assert orm.effects() == []
    with orm.engine.connect() as conn:
        row = conn.execute(sa.text("SELECT status, claimed_by FROM sentinel_outbox")).one()
    assert tuple(row) == ("running", "thief")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_leases_are_timed_by_the_database_not_by_the_workers_clocks(orm: ORM) -> None:
    """Two workers whose clocks disagree by more than a lease: the one ahead
    cannot take over an entry whose claim is alive, and the renewals of the one
    behind keep it alive. (Each used its own clock: the first took over a running
    entry, the second's renewals were already expired.) On SQLite every worker
    shares the machine's clock."""
    att = orm.attach(workers=0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm)
    key = orm.outbox()[0].idempotency_key
    tables = att.writer.tables
    real = OutboxStore(tables)
    ahead = OutboxStore(tables, clock=lambda: datetime.now(UTC) + timedelta(minutes=10))
    behind = OutboxStore(tables, clock=lambda: datetime.now(UTC) - timedelta(minutes=10))
    with orm.engine.begin() as conn:
        first = real.claim(conn, key, "real", 60, 5)
    assert isinstance(first, Claimed)
    with orm.engine.begin() as conn:
        assert ahead.due(conn) == []
        assert ahead.claim(conn, key, "ahead", 60, 5) is None
    with orm.engine.begin() as conn:  # a lease of 0 s ends at once, by the database's clock
        assert real.renew(conn, first, "real", 0)
    with orm.engine.begin() as conn:
        assert behind.due(conn) == [key]
        second = behind.claim(conn, key, "behind", 60, 5)
    assert isinstance(second, Claimed) and second.attempts == 2
    with orm.engine.begin() as conn:
        assert behind.renew(conn, second, "behind", 60)
    with orm.engine.begin() as conn:
        assert real.due(conn) == []
        assert real.claim(conn, key, "real", 60, 5) is None
    with orm.engine.begin() as conn:
        assert behind.renew(conn, second, "behind", 0)
    with orm.engine.begin() as conn:
        third = real.claim(conn, key, "real", 60, 5)
    assert isinstance(third, Claimed) and third.attempts == 3


def test_entries_retried_at_once_do_not_hide_the_ones_after_them_from_a_drain(orm: ORM) -> None:
    """A drain reads due entries a batch at a time; entries that fail and are
    due again at once (no backoff) fill the batch again, yet the drain still
    reaches every entry after them."""
    att = orm.attach(workers=0, backoff=0.0, max_backoff=0.0, max_attempts=3)
    att.runner.batch = 2
    orm.det.rule("F", "Stock.e1", action=actions.always_fails, coupling="detached")
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    for stock in orm.add_stocks("A", "B"):
        with orm.Session.begin() as s:
            s.get(orm.model.Stock, stock).sell_stock(1)
    _trigger(orm, 7.0)
    report = att.drain()
    assert (report.done, report.retried) == (1, 2)
    assert [e[2] for e in orm.effects()] == [7.0]


def test_a_failure_the_pool_could_not_record_is_run_again_once_its_claim_expires(
    orm: ORM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool thread whose attempt failed, and whose record of that failure
    the database refused (it was away for a moment), leaves the entry
    ``running`` until its lease ends. The pool must come back to it then: in
    an application with only pool workers nothing else would, and the entry
    stayed ``running`` for ever."""
    att = orm.attach(workers=1, lease=0.3, max_attempts=3)
    orm.det.rule("R", "Stock.e2", action=actions.flaky, coupling="detached")
    monkeypatch.setitem(actions.FAILURES, "flaky", 1)
    real, refused = att.runner.store.fail, []

    def fail(*args: Any, **kwargs: Any) -> bool:
        if not refused:
            refused.append(args[1].attempts)
            raise sa.exc.OperationalError("UPDATE", {}, Exception("the database went away"))
        return real(*args, **kwargs)

    monkeypatch.setattr(att.runner.store, "fail", fail)
    _trigger(orm, 4.0)
    assert att.wait_detached(10)
    assert refused == [1]
    assert [a[2] for a in actions.ATTEMPTS] == [1, 2]
    assert [r[:3] for r in _rows(orm)] == [("R", "done", 2)]
    assert [(e[0], e[2], e[3]) for e in orm.effects()] == [("R", 2, "flaky")]


# -- only the worker's own rules ----------------------------------------------------------


_FORGED = itertools.count(1)


def _forge(orm: ORM, rule: str, *, writer: LogWriter | None = None, **extra: Any) -> str:
    """Write an outbox row as someone with write access to the table could."""
    occ = Occurrence(
        "Stock.e2", next(_FORGED), time.time(), params={"price": 666.0}, scope="forged"
    )
    entry = OutboxEntry.of(rule, occ, extra={"composite": False, **extra})
    with orm.engine.begin() as conn:
        (writer or LogWriter()).enqueue(conn, [entry])
    return entry.idempotency_key


def test_a_forged_row_naming_a_function_is_refused(orm: ORM) -> None:
    """Rows naming code (``sys:exit``, an action of the application) under a name
    that is no rule of the worker fail at once; nothing is imported or run, and
    the worker goes on."""
    att = orm.attach(workers=1)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    orm.det.rule("Now", "Stock.e3", action=actions.positive)  # immediate
    for rule, action in [
        ("exit", "sys:exit"),
        ("sneaky", "tests.orm.actions:record"),
        ("Now", "tests.orm.actions:record"),
    ]:
        att.runner.submit(_forge(orm, rule, action=action, condition=None, coupling="detached"))
    assert att.wait_detached(60)
    _trigger(orm)  # a genuine entry still runs
    assert att.wait_detached(60)
    rows = _rows(orm)
    assert [r[:3] for r in rows] == [
        ("exit", "failed", 1),
        ("sneaky", "failed", 1),
        ("Now", "failed", 1),
        ("R", "done", 1),
    ]
    assert "this worker's rule set defines no rule of that name" in rows[0][3]
    assert "this worker's rule set defines no rule of that name" in rows[1][3]
    assert "'Now' is not a detached rule of this worker (its coupling is immediate)" in rows[2][3]
    assert [(e[0], e[2]) for e in orm.effects()] == [("R", 1.0)]
    assert [a[0] for a in actions.ATTEMPTS] == ["R"]


def test_a_row_that_cannot_be_read_is_refused(orm: ORM) -> None:
    att = orm.attach(workers=0)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    key = _forge(orm, "R")
    with orm.engine.begin() as conn:
        t = att.writer.tables.outbox
        conn.execute(sa.update(t).values(payload={"constituents": "not a list of occurrences"}))
    assert att.drain().failed == 1
    (row,) = _rows(orm)
    assert row[:3] == ("R", "failed", 1) and "its payload cannot be read" in row[3]
    assert key and orm.effects() == []


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_a_payload_that_cannot_be_decoded_fails_and_the_worker_goes_on(
    orm: ORM, signed: bool
) -> None:
    """Forged payloads that are not JSON (SQLite keeps any text) or nest deeper
    than Python's JSON reader (or the signature check) goes: each is ``failed``
    at its claim, and the genuine entry after them runs. They made every drain
    raise, for ever, before any later entry ran."""
    att = orm.attach(workers=0, outbox_key=KEY if signed else None)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    payloads = []
    if orm.backend != "mysql":  # MariaDB's JSON check refuses all of these
        payloads += ['{"constituents": ' + "[" * 5000 + "]" * 5000 + "}"]
        if signed:  # read, but too deep for the signature's canonical form
            payloads += ['{"sig": "v1:0", "x": ' + "[" * 900 + "]" * 900 + "}"]
    if orm.backend == "sqlite":
        payloads += ["{not json", '"a string"']
    if not payloads:
        pytest.skip("MariaDB stores only valid JSON of at most 32 levels")
    t = att.writer.tables.outbox
    for text in payloads:
        key = _forge(orm, "R", writer=LogWriter(outbox_key=KEY) if signed else None)
        cast = "CAST(:p AS jsonb)" if orm.backend == "postgresql" else ":p"
        with orm.engine.begin() as conn:
            conn.execute(
                sa.text(f"UPDATE {t.name} SET payload = {cast} WHERE idempotency_key = :k"),
                {"p": text, "k": key},
            )
    _trigger(orm, 5.0)
    report = att.drain()
    assert (report.done, report.failed) == (1, len(payloads))
    rows = _rows(orm)
    assert [r[:3] for r in rows] == [("R", "failed", 1)] * len(payloads) + [("R", "done", 1)]
    reasons = ["payload cannot be read", "payload is not a JSON"]
    if signed:
        # Newer Pythons' JSON reads (3.13) and writes (3.12) nestings that 3.11's
        # cannot: such a payload is then read, and refused by its missing or
        # forged signature instead.
        reasons += ["refused: it is not signed", "refused: its signature does not match"]
    for row in rows[:-1]:
        assert any(reason in row[3] for reason in reasons), row
    assert [e[2] for e in orm.effects()] == [5.0]


# -- signed rows ----------------------------------------------------------------------------


def test_with_a_key_only_rows_signed_with_it_run(orm: ORM) -> None:
    att = orm.attach(workers=0, outbox_key=KEY)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm, 5.0)  # genuine: signed at the trigger's commit
    _forge(orm, "R")  # unsigned
    _forge(orm, "R", writer=LogWriter(outbox_key="another key, sixteen bytes+"))
    _forge(orm, "R", writer=LogWriter(outbox_key=KEY))  # a key holder's row: runs
    report = att.drain()
    assert (report.done, report.failed) == (2, 2)
    rows = _rows(orm)
    assert [r[1] for r in rows] == ["done", "failed", "failed", "done"]
    assert "refused: it is not signed" in rows[1][3]
    assert "refused: its signature does not match" in rows[2][3]
    assert sorted(e[2] for e in orm.effects()) == [5.0, 666.0]


def test_a_signed_row_changed_in_the_table_is_refused(orm: ORM) -> None:
    """Changing a parameter of a genuine row (its price) breaks the signature."""
    att = orm.attach(workers=0, outbox_key=KEY)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm, 5.0)
    t = att.writer.tables.outbox
    with orm.engine.begin() as conn:
        payload = dict(conn.execute(sa.select(t.c.payload)).scalar_one())
        payload["constituents"] = [
            {**c, "params": {**c["params"], "price": 5000.0}} for c in payload["constituents"]
        ]
        conn.execute(sa.update(t).values(payload=payload))
    assert att.drain().failed == 1
    assert "its signature does not match" in _rows(orm)[0][3]
    assert orm.effects() == []


AWKWARD = [1e16, -0.0, 0.1, 2.5e-07, 123456789.125, 1e300, 2**70, "ünï\u2028code", None]


@pytest.mark.parametrize("value", AWKWARD, ids=repr)
def test_signatures_survive_each_backends_json_column(orm: ORM, value: Any) -> None:
    """PostgreSQL's jsonb reorders keys and writes 1e16 back as an integer;
    MariaDB and SQLite keep the text: a genuine row verifies on each."""
    att = orm.attach(workers=0, outbox_key=KEY)
    orm.det.explicit("Deposit")
    orm.det.rule("R", "Deposit", action=actions.note_attempt, coupling="detached")
    orm.det.signal("Deposit", amount=value, nested={"b": [value, 1.0], "a": {"$x": 1}})
    report = att.drain()
    assert (report.done, report.failed) == (1, 0), _rows(orm)
    assert len(actions.ATTEMPTS) == 1


def test_the_environment_gives_the_key(orm: ORM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OUTBOX_KEY_ENV, KEY)
    att = orm.attach(workers=0)
    assert att.writer.signer is not None
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _forge(orm, "R")
    _trigger(orm)
    assert [att.drain().failed, len(orm.effects())] == [1, 1]


def test_keys_rotate_and_bad_keys_are_refused(orm: ORM) -> None:
    old = OutboxSigner("the old key, long enough")
    payload = old.signed("R", "k", "s", 1, {"constituents": []})
    assert (
        OutboxSigner("the new key, long enough", "the old key, long enough").verify(
            "R", "k", "s", 1, payload
        )
        is None
    )
    with pytest.raises(AttachError, match="at least 16 bytes"):
        attach(orm.Session, detector=orm.det, outbox_key="short")
    with pytest.raises(AttachError, match="give the key to the writer"):
        attach(orm.Session, detector=orm.det, log=LogWriter(), outbox_key=KEY)


def test_signatures_cover_identity_and_payload_only() -> None:
    """What the log's JSON column may do to a document (reorder keys, tag the
    floats jsonb would change) keeps the signature; any change of a value
    breaks it."""
    s = OutboxSigner(KEY)
    payload = {
        "constituents": [{"p": {"x": 1e16, "y": 2.0, "z": 0.5, "n": {"$float": "nan"}}}],
        "extra": {"a": 1, "m": -0.0},
    }
    signed = s.signed("R", "key", "scope", 7, payload)
    as_stored = {
        "sig": signed["sig"],
        "extra": {"m": {"$float": "-0.0"}, "a": 1},
        "constituents": [{"p": {"z": 0.5, "n": {"$float": "nan"}, "y": 2.0, "x": 1e16}}],
    }
    assert s.verify("R", "key", "scope", 7, as_stored) is None
    for args in [("Q", "key", "scope", 7), ("R", "kex", "scope", 7), ("R", "key", "scop", 7)]:
        assert s.verify(*args, as_stored) == "its signature does not match"
    for extra in [{"a": 2, "m": -0.0}, {"a": 1, "m": 0.0}, {"a": 1.0, "m": -0.0}]:
        changed = {**as_stored, "extra": extra}
        assert s.verify("R", "key", "scope", 7, changed) == "its signature does not match"


def test_a_mappings_own_dollar_float_key_is_signed_as_text() -> None:
    """A mapping with a key "$float" is stored escaped, ``{"$map": {"$float":
    "100"}}``; the canonical form read that as a tagged float, so "100", "1e2"
    and "0100.000" signed alike and a changed row ran."""
    from sentinel.params import to_json

    s = OutboxSigner(KEY)
    payload = {"constituents": [{"params": {"meta": to_json({"$float": "100"})}}]}
    assert payload["constituents"][0]["params"]["meta"] == {"$map": {"$float": "100"}}
    signed = s.signed("R", "key", "scope", 7, payload)
    assert s.verify("R", "key", "scope", 7, signed) is None
    for text in ("1e2", "0100.000", "100.0"):
        changed = {**signed, "constituents": [{"params": {"meta": {"$map": {"$float": text}}}}]}
        assert s.verify("R", "key", "scope", 7, changed) == "its signature does not match"
    # a tagged float inside such a mapping keeps its canonical form
    inner = {"constituents": [{"params": {"m": {"$map": {"$k": -0.0}}}}]}
    stored = {"constituents": [{"params": {"m": {"$map": {"$k": {"$float": "-0.0"}}}}}]}
    assert (
        s.verify(
            "R",
            "key",
            "scope",
            7,
            {**stored, "sig": s.signed("R", "key", "scope", 7, inner)["sig"]},
        )
        is None
    )


# -- session factories and contexts ---------------------------------------------------------


class NeedsAnArgument(Session):
    """A session class that cannot be called without arguments (as
    Flask-SQLAlchemy's, which needs ``db``)."""

    def __init__(self, owner: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.owner = owner


def test_a_session_factory_that_fails_leaves_no_entry_running(orm: ORM) -> None:
    att = attach(NeedsAnArgument, detector=orm.det, workers=0, max_attempts=2, backoff=0)
    orm.attached.append(att)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    with NeedsAnArgument("app", bind=orm.engine) as s, s.begin():
        stock = orm.model.Stock(name="IBM")
        s.add(stock)
        s.flush()
        stock.set_price(3.0)
    report = att.drain()
    report2 = att.drain()
    assert (report.retried, report2.failed) == (1, 1)
    (row,) = _rows(orm)
    assert row[:3] == ("R", "failed", 2)
    assert "could not make a session for a detached rule" in row[3]
    assert "attach(..., session_factory=...)" in row[3]
    # with a factory that can, it runs
    with orm.engine.begin() as conn:
        assert att.runner.store.requeue(conn) == 1
    att.detach()
    det_session = sessionmaker(orm.engine, class_=NeedsAnArgument, owner="worker")
    with attach(NeedsAnArgument, detector=orm.det, workers=0, session_factory=det_session) as a:
        assert a.drain().done == 1
    assert [e[2] for e in orm.effects()] == [3.0]


def test_detach_lets_the_entry_a_worker_thread_commits_finish_first(
    orm: ORM, caplog: pytest.LogCaptureFixture
) -> None:
    """``detach()`` while a worker thread commits an entry: the pool is
    stopped first (its running entries get ``timeout`` seconds), then the
    session listeners are removed, so the entry is done on its first attempt.
    Before, SQLAlchemy's listeners were removed while the thread ran them:
    its commit failed (``RuntimeError: deque mutated during iteration``), an
    attempt lost and the transaction not followed."""
    att = orm.attach(workers=1)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    entered = threading.Event()

    def hold(session: Session) -> None:
        # the worker's commit: held until the listeners are gone (detach
        # has begun), or half a second at most
        if not threading.current_thread().name.startswith("sentinel-outbox"):
            return
        if session.in_nested_transaction() or entered.is_set():
            return
        entered.set()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline and all(
            sa.event.contains(orm.Session, name, fn) for name, fn in att._handlers
        ):
            time.sleep(0.005)

    sa.event.listen(orm.Session, "before_commit", hold)
    try:
        _trigger(orm, 3.0)
        assert entered.wait(30)
        with caplog.at_level(logging.WARNING, logger="sentinel"):
            att.detach()
    finally:
        sa.event.remove(orm.Session, "before_commit", hold)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r[:3] for r in _rows(orm)] == [("R", "done", 1)]
    assert [e[2] for e in orm.effects()] == [3.0]


def test_detach_says_so_when_a_worker_thread_outlives_its_timeout(
    orm: ORM, caplog: pytest.LogCaptureFixture
) -> None:
    """A rule still running after ``detach(timeout=...)``: detach reports it
    and goes on; the entry still commits once (unfollowed) when the rule ends."""
    att = orm.attach(workers=1)
    orm.det.rule("R", "Stock.e2", action=actions.hook, coupling="detached")
    entered, release = threading.Event(), threading.Event()

    def body(occ: Any) -> None:
        entered.set()
        assert release.wait(30)

    actions.HOOKS["hook"] = body
    try:
        _trigger(orm, 3.0)
        assert entered.wait(30)
        with caplog.at_level(logging.WARNING, logger="sentinel"):
            att.detach(timeout=0.05)
        assert any("still runs a detached rule" in r.getMessage() for r in caplog.records)
    finally:
        release.set()
    for t in att.runner._threads:
        t.join(30)
    assert [r[:3] for r in _rows(orm)] == [("R", "done", 1)]
    assert [e[2] for e in orm.effects()] == [3.0]


_INSIDE: list[str] = []


@contextlib.contextmanager
def _app_context() -> Iterator[None]:
    _INSIDE.append(threading.current_thread().name)
    try:
        yield
    finally:
        _INSIDE.pop()


def test_rules_run_inside_the_given_context(orm: ORM) -> None:
    att = orm.attach(workers=1, context=_app_context)
    orm.det.rule("R", "Stock.e2", action=actions.hook, coupling="detached")
    seen: list[list[str]] = []
    actions.HOOKS["hook"] = lambda occ: seen.append(list(_INSIDE))
    _trigger(orm)
    assert att.wait_detached(60)
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith("sentinel-outbox")
    assert _INSIDE == [] and [e[0] for e in orm.effects()] == ["R"]
    with pytest.raises(AttachError, match="context"):
        attach(sessionmaker(orm.engine), detector=LocalEventDetector(), context=42)


def test_a_worker_process_rule_set_loads_the_same_rules(orm: ORM) -> None:
    """A detector built by importing the rules again (as ``sentinel worker``
    does) runs the application's entries; with a key, both sides share it."""
    orm.attach(workers=0, outbox_key=KEY)
    orm.det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    _trigger(orm, 9.0)
    det = LocalEventDetector()
    make_model(det)
    det.rule("R", "Stock.e2", action=actions.record, coupling="detached")
    with attach(sessionmaker(orm.engine), detector=det, workers=0, outbox_key=KEY) as w:
        assert w.drain().done == 1
    assert [e[2] for e in orm.effects()] == [9.0]


def test_a_detached_rule_outside_transactions_needs_a_factory_that_finds_the_engine(
    orm: ORM, caplog: pytest.LogCaptureFixture
) -> None:
    """Triggered outside any transaction before any commit, an entry is written
    through the engine the session factory's sessions use: a factory that cannot
    make sessions is named in the error; with one that can, the rule runs."""
    orm.det.explicit("Deposit")
    orm.det.rule("R", "Deposit", action=actions.record, coupling="detached")
    with attach(NeedsAnArgument, detector=orm.det, workers=0):
        with caplog.at_level(logging.ERROR, "sentinel.orm"):
            orm.det.signal("Deposit", amount=1.0)
        assert "not enqueued" in caplog.text
        assert "could not make a session and give its bind" in caplog.text
        assert "attach(..., session_factory=...)" in caplog.text
    assert _rows(orm) == []
    factory = sessionmaker(orm.engine, class_=NeedsAnArgument, owner="worker")
    with attach(NeedsAnArgument, detector=orm.det, workers=0, session_factory=factory) as att:
        orm.det.signal("Deposit", amount=2.0)
        assert att.drain().done == 1
    assert [(e[0], e[2]) for e in orm.effects()] == [("R", 2.0)]


# -- stopping ---------------------------------------------------------------------------

#: What ``stop_after`` sets (and counts its runs in).
STOPPING: dict[str, Any] = {}


def stop_after(occ: Any) -> None:
    """A detached action that asks its worker to stop (as Ctrl-C would)."""
    STOPPING["ran"] += 1
    STOPPING["stop"].set()


def test_serve_stops_between_entries_once_stop_is_set(orm: ORM) -> None:
    """``sentinel worker`` on Ctrl-C: the action running finishes, the entries
    not started are handed back (pending, their attempt not counted) instead
    of all being run first; the next worker runs them."""
    from sentinel.orm.worker import serve

    att = orm.attach(workers=0, max_attempts=2)
    stop = threading.Event()
    STOPPING.update(stop=stop, ran=0)
    for name in ("A", "B", "C"):
        orm.det.rule(name, "Stock.e2", action=stop_after, coupling="detached")
    _trigger(orm)
    total = serve(att, poll=0.01, stop=stop)
    assert (STOPPING["ran"], total.done) == (1, 1)
    rows = _rows(orm)
    assert sorted(r[1:3] for r in rows) == [("done", 1), ("pending", 0), ("pending", 0)]
    assert att.runner.stop_event is None  # serve's alone
    STOPPING["stop"] = threading.Event()
    again = serve(att, once=True)
    assert (STOPPING["ran"], again.done) == (3, 2)
    assert {r[1:3] for r in _rows(orm)} == {("done", 1)}
