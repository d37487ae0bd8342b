"""Switching a global rule while the service runs (issue 34, item 2): a
disable stops the rule's detections from being enqueued and an enable resumes
them; each switch is recorded at the commit position where the service applied
it, so an instance that restarts anywhere (rebuilding its memory from the log)
enqueues exactly what one that never restarted did, and so does batch replay
given the detector's switches."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from sentinel import LocalEventDetector
from sentinel.errors import GlobalDetectorError, LogTablesMissingError, RuleSwitchError
from sentinel.global_detector import GlobalDetector, replay_committed
from sentinel.global_detector.detect import CommitFeeder
from sentinel.global_detector.order import LogRow
from sentinel.log import LogWriter, migrate
from sentinel.log.switches import latest_switches, request_switch
from sentinel.log.tables import SCHEMA_VERSION, log_tables
from sentinel.occurrence import Occurrence

from . import rules

TABLES = log_tables()
OUTBOX = TABLES.outbox


@pytest.fixture
def log_db(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    return engine


class Clock:
    t = 0


def _write(engine: sa.Engine, event: str, customer: int) -> None:
    Clock.t += 1
    with engine.begin() as conn:
        LogWriter(commit_order=True).write(
            conn,
            [
                Occurrence(
                    event,
                    Clock.t,
                    1000.0 + Clock.t,
                    scope=f"s{Clock.t}",
                    params={"customer": customer},
                )
            ],
        )


def _service(engine: sa.Engine) -> GlobalDetector:
    return GlobalDetector(rules.detector, engine, run_actions=False)


def _enqueued(engine: sa.Engine) -> list[tuple[str, str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(OUTBOX.c.rule, OUTBOX.c.scope, OUTBOX.c.t_occ).order_by(OUTBOX.c.id)
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


#: The story: (what happens, and whether the rule ``paid`` is enabled after it).
#: Orders and payments of customers 1..3; ``paid`` pairs an order with the next
#: payment of its customer (chronicle, across transactions).
STORY = [
    ("order", 1),
    ("payment", 1),  # paid: detected
    ("order", 2),
    ("disable", None),  # customer 2's order is dropped with the rule's state
    ("payment", 2),  # not detected: disabled
    ("order", 3),  # not held: disabled
    ("enable", None),  # NOW trigger mode: only what comes from here on
    ("payment", 3),  # not detected: its order came while disabled
    ("order", 1),
    ("payment", 1),  # detected again
]


def _play(engine: sa.Engine, restart_after: set[int]) -> list[tuple[str, str, int]]:
    Clock.t = 0
    svc = _service(engine)
    try:
        for i, (what, customer) in enumerate(STORY):
            if what in ("enable", "disable"):
                request_switch(engine, TABLES, "paid", what == "enable")
            else:
                assert customer is not None
                _write(engine, what, customer)
            svc.step()  # applies a pending switch, then reads
            if i in restart_after:
                svc.close()
                svc = _service(engine)
        svc.step()
    finally:
        svc.close()
    return _enqueued(engine)


def test_a_disabled_rule_is_not_enqueued_and_an_enabled_one_is_again(
    log_db: sa.Engine,
) -> None:
    got = _play(log_db, set())
    # the first and the last payment of customer 1, nothing else
    assert [(r, s) for r, s, _ in got] == [("paid", "s2"), ("paid", "s8")]
    with log_db.connect() as conn:
        done = latest_switches(conn, TABLES)
    assert [(s.rule, s.enabled, s.state) for s in reversed(done)] == [
        ("paid", False, "applied"),
        ("paid", True, "applied"),
    ]
    # applied where the service stood: after the order of customer 2 (commit
    # 3), and after the order of customer 3 (commit 5)
    assert [s.position for s in reversed(done)] == [3, 5]


@pytest.mark.parametrize("restart_after", [{3}, {4}, {5}, {6}, {3, 4, 5, 6, 7}])
def test_a_restart_anywhere_enqueues_what_an_uninterrupted_run_did(
    engine: sa.Engine, restart_after: set[int]
) -> None:
    """A new instance rebuilds its memory from the log with the switches at
    their recorded positions: without them it would hold the orders of
    customers 2 and 3 and detect their payments."""
    migrate.upgrade(engine)
    got = _play(engine, restart_after)
    assert [(r, s) for r, s, _ in got] == [("paid", "s2"), ("paid", "s8")]


def test_batch_replay_applies_the_switches_it_is_given(log_db: sa.Engine) -> None:
    enqueued = _play(log_db, set())
    with_switches = replay_committed(rules.detector, log_db, switches="global")
    assert [(d.rule, str(d.occurrence.constituents[-1].scope)) for d in with_switches] == [
        (r, s) for r, s, _ in enqueued
    ]
    # without them: the rules as their module defines them, enabled throughout
    plain = replay_committed(rules.detector, log_db)
    assert [str(d.occurrence.constituents[-1].scope) for d in plain] == ["s2", "s4", "s6", "s8"]


def test_a_request_for_a_rule_the_service_does_not_have_is_refused_and_recorded(
    log_db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    svc = _service(log_db)
    try:
        request_switch(log_db, TABLES, "no-such-rule", False)
        with caplog.at_level(logging.WARNING, logger="sentinel.global"):
            svc.step()
        assert "defines no rule named 'no-such-rule'" in caplog.text
        _write(log_db, "order", 1)
        _write(log_db, "payment", 1)
        svc.step()
    finally:
        svc.close()
    assert len(_enqueued(log_db)) == 1  # 'paid' still runs
    with log_db.connect() as conn:
        (s,) = latest_switches(conn, TABLES)
    assert s.state == "refused" and "no rule named" in (s.refused or "")


def test_enabling_a_rule_that_is_not_detached_is_refused() -> None:
    det = LocalEventDetector()
    rules.events(det)
    det.rule("paid", "order ; payment", action=print, coupling="detached")
    det.rule("local", "order", action=print, enabled=False)  # immediate
    feeder = CommitFeeder(det)
    assert feeder.refusal("local", False) is None
    assert "not detached" in (feeder.refusal("local", True) or "")
    with pytest.raises(GlobalDetectorError, match="not detached"):
        feeder.switch("local", True)


def test_a_request_names_a_rule_of_the_rule_set_when_it_is_known(log_db: sa.Engine) -> None:
    with pytest.raises(RuleSwitchError, match=r"no rule named 'nope'.*'paid'"):
        request_switch(log_db, TABLES, "nope", False, rules=rules.detector.rules)
    with log_db.connect() as conn:
        assert latest_switches(conn, TABLES) == []


def test_a_log_without_the_switches_table_says_which_command_adds_it(
    engine: sa.Engine,
) -> None:
    migrate.upgrade(engine, "0006")
    with pytest.raises(LogTablesMissingError, match=r"revision 0006.*sentinel db upgrade --url"):
        request_switch(engine, TABLES, "paid", False)
    with pytest.raises(LogTablesMissingError, match=r"revision 0007 adds it"):  # not 0009
        request_switch(engine, TABLES, "paid", False)
    svc = _service(engine)
    try:
        with pytest.raises(LogTablesMissingError, match=r"revision 0006.*sentinel db upgrade"):
            svc.step()
    finally:
        svc.close()


def test_the_cli_writes_and_lists_requests_with_clear_errors(tmp_path: Path) -> None:
    from sentinel.cli import main

    url = f"sqlite:///{tmp_path / 'app.db'}"
    run = CliRunner().invoke
    r = run(main, ["rules", "disable", "paid", "--url", url])
    assert r.exit_code == 1 and "no SQLite database at" in r.output
    engine = sa.create_engine(url)
    migrate.upgrade(engine, "0006")
    r = run(main, ["rules", "disable", "paid", "--url", url])
    assert r.exit_code == 1
    assert "revision 0006" in r.output and f"run `sentinel db upgrade --url {url}`" in r.output
    migrate.upgrade(engine)
    ref = "tests.global_detector.rules:detector"
    r = run(main, ["rules", "disable", "nope", "--url", url, "--rules", ref])
    assert r.exit_code == 1 and "defines no rule named 'nope' (its rules: 'paid')" in r.output
    r = run(main, ["rules", "disable", "paid", "--url", url, "--rules", ref])
    assert r.exit_code == 0 and "request #1: disable rule 'paid'" in r.output
    # no detector has run on this log yet: the request waits, and says so
    assert "no global detector named 'global' has run on this log (those that have: none)" in (
        r.stderr
    )
    svc = _service(engine)
    svc.step()
    svc.close()
    r = run(main, ["rules", "enable", "paid", "--url", url, "--name", "other"])
    assert r.exit_code == 0, r.output
    assert "no global detector named 'other' has run on this log (those that have: 'global')" in (
        r.stderr
    )
    r = run(main, ["rules", "enable", "paid", "--url", url])
    assert r.exit_code == 0 and "has run" not in r.stderr
    r = run(main, ["rules", "switches", "--url", url])
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert "global" in lines[2] and "enable" in lines[2] and "pending" in lines[2]
    assert "other" in lines[3] and "enable" in lines[3] and "pending" in lines[3]
    assert "global" in lines[4] and "disable" in lines[4] and "applied" in lines[4]
    with engine.connect() as conn:
        assert [s.rule for s in latest_switches(conn, TABLES)] == ["paid"] * 3
    engine.dispose()


def test_a_switch_applies_where_the_service_stands_not_at_the_logs_end(
    log_db: sa.Engine,
) -> None:
    """The boundary is a place in the commit order: a pair committed before
    the request, but not read yet by the service, is read after the switch."""
    Clock.t = 0
    svc = _service(log_db)
    try:
        svc.step()
        _write(log_db, "order", 1)
        _write(log_db, "payment", 1)  # in the log, not read yet
        request_switch(log_db, TABLES, "paid", False)
        svc.step()
    finally:
        svc.close()
    assert _enqueued(log_db) == []
    with log_db.connect() as conn:
        (s,) = latest_switches(conn, TABLES)
    assert (s.state, s.position) == ("applied", 0)


def _rows(*events: tuple[int, str]) -> list[LogRow]:
    return [
        LogRow(
            seq,
            seq,
            f"s{seq}",
            1,
            event,
            1000.0 + seq,
            1000.0 + seq,
            None,
            None,
            '{"customer": 1}',
            "committed",
        )
        for seq, event in events
    ]


def test_a_rule_its_module_disables_detects_once_a_switch_enables_it() -> None:
    """Enabling a rule the rule set defines disabled makes the detector listen
    to its events from there on (and check its partition key)."""
    det = LocalEventDetector()
    rules.events(det)
    det.rule(
        "paid",
        "(order ; payment) by customer",
        action=print,
        coupling="detached",
        enabled=False,
        flush=False,
    )
    feeder = CommitFeeder(det)
    assert feeder.feed(_rows((1, "order"), (2, "payment"))) == []
    feeder.schedule([(2, "paid", True)])
    got = feeder.feed(_rows((3, "order"), (4, "payment")))
    assert [(d.rule, d.commit_seq) for d in got] == [("paid", 4)]
    # a row whose key cannot be a key is refused now that a rule partitions by it
    bad = LogRow(
        5, 5, "s5", 1, "order", 1005.0, 1005.0, None, None, '{"customer": {"a": 1}}', "committed"
    )
    feeder.feed([bad])
    assert [i for i, _ in feeder.skipped] == [5]


def test_a_failure_while_recording_a_switch_leaves_it_pending_and_the_memory_rebuilt(
    log_db: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails while the switch is recorded, the detector does not go
    on with a memory the log may contradict: it is rebuilt at the next step,
    which applies the request (rolled back: still pending) then."""
    from sentinel.global_detector import switches as module

    Clock.t = 0
    svc = _service(log_db)
    try:
        _write(log_db, "order", 1)
        svc.step()
        request_switch(log_db, TABLES, "paid", False)
        mark = module.mark_handled

        def fail(*args: object, **kwargs: object) -> int:
            mark(*args, **kwargs)  # type: ignore[arg-type]
            raise RuntimeError("the connection went away")

        monkeypatch.setattr(module, "mark_handled", fail)
        with pytest.raises(RuntimeError):
            svc.step()
        assert svc._feeder is None
        monkeypatch.setattr(module, "mark_handled", mark)
        svc.step()
        _write(log_db, "payment", 1)
        svc.step()
    finally:
        svc.close()
    assert _enqueued(log_db) == []  # the order was dropped with the rule's state
    with log_db.connect() as conn:
        (s,) = latest_switches(conn, TABLES)
    assert (s.state, s.position) == ("applied", 1)


def test_a_cursor_set_back_reads_again_with_the_switches_where_they_were(
    log_db: sa.Engine,
) -> None:
    from sentinel.global_detector.cursor import Cursor

    first = _play(log_db, set())
    with log_db.begin() as conn:
        Cursor(TABLES, "global").reset(conn, 1)
        conn.execute(sa.delete(OUTBOX))
    svc = _service(log_db)
    try:
        svc.run(until_idle=True)
    finally:
        svc.close()
    assert _enqueued(log_db) == first


@pytest.mark.parametrize("revision", ["0008", "0010"])
@pytest.mark.parametrize("command", ["enable", "disable", "switches"])
def test_the_cli_refuses_a_log_at_another_schema_revision_before_writing(
    tmp_path: Path, revision: str, command: str
) -> None:
    """An older log (0008: it has the switches table) or a newer one (0010:
    migrated by a newer sentinel) is refused with the message every command
    reading the log gives, and no request is written."""
    from sentinel.cli import main

    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(url)
    migrate.upgrade(engine, "0008" if revision == "0008" else "head")
    if revision == "0010":
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE sentinel_alembic_version SET version_num = '0010'"))
    args = ["paid"] if command != "switches" else []
    r = CliRunner().invoke(main, ["rules", command, *args, "--url", url])
    assert r.exit_code == 1, r.output
    expected = (
        f"is at schema revision 0008, older than {SCHEMA_VERSION}"
        if revision == "0008"
        else "is at schema revision '0010', which this version of sentinel does not know"
    )
    assert expected in r.output
    assert "Traceback" not in r.output
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM sentinel_rule_switches")).scalar() == 0
    engine.dispose()
