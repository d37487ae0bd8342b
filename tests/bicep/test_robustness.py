"""One bad announcement, row or tick never harms another (on every backend):

- values a backend would refuse (or store differently) are refused at the
  announcement, the same way everywhere, naming the attribute;
- rows the application writes into an inbox by hand are checked at the tick: a
  bad one is rejected (``TickResult.rejected``), never a tick that fails for ever;
- two processors of one program never run one tick twice;
- a detached action runs after the tick committed;
- a statement's string literal means the same text on every backend;
- times the processor cannot represent never reach a tick.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sentinel.bicep import ActionCall, Processor
from sentinel.bicep.times import MAX_TIME, as_datetime
from sentinel.errors import BicepAnnouncementError
from sentinel.rules import LocalEventDetector

from .conftest import at

T = at("1.4.14 10:00")
ROOT = Path(__file__).resolve().parents[2]

KINDS = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (r VARCHAR(5), n INTEGER, x REAL, m NUMERIC(5,2),
  b BOOLEAN, t TEXT) ID (r) LIFESPAN(1d)
  ON ANNOUNCEMENT DO f(new.r, new.n);
CREATE MUTABLE SUBSCRIBED EVENT CLASS K (k TEXT) ID (k) LIFESPAN(1d);
"""

#: (attributes of an announcement of D, what the error names)
BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"r": "a\x00b"}, "attribute r of D: a NUL character"),
    ({"r": "ok", "t": "\ud800"}, "attribute t of D: a lone surrogate"),
    ({"r": "toolong"}, "attribute r of D: 7 characters, more than VARCHAR(5) holds"),
    ({"r": "ok", "n": 2**63}, "attribute n of D: 9223372036854775808 is outside"),
    ({"r": "ok", "n": -(2**63) - 1}, "is outside"),
    ({"r": "ok", "x": float("nan")}, "attribute x of D: nan is not a finite number"),
    ({"r": "ok", "x": float("inf")}, "attribute x of D: inf is not a finite number"),
    ({"r": "ok", "m": float("nan")}, "attribute m of D: nan is not a finite number"),
    ({"r": "ok", "m": 1000.0}, "attribute m of D: 1000.0 does not fit NUMERIC(5,2)"),
    ({"r": "ok", "m": 10**30}, "does not fit NUMERIC(5,2)"),
    ({"r": "ok", "b": 1}, "attribute b of D is boolean, not int"),
]


def test_values_a_backend_refuses_are_refused_on_every_backend(
    make: Callable[..., Processor], migrated: sa.Engine
) -> None:
    proc = make(KINDS, name="kinds")
    for attrs, message in BAD_VALUES:
        with pytest.raises(BicepAnnouncementError, match=re.escape(message)):
            proc.announce("D", occ=T, det=T, **attrs)
        with pytest.raises(BicepAnnouncementError, match=re.escape(message)):
            proc.announce_many("D", [{"occ": T, "det": T, **attrs}])
    # a text key without a length is at most 191 characters (the key's column)
    with pytest.raises(BicepAnnouncementError, match=r"more than a key of TEXT \(191"):
        proc.announce("K", k="k" * 192, occ=T, det=T)
    for occ, message in [
        (float("inf"), "occ inf is not a time"),
        (float("nan"), "occ nan is not a time"),
        (10**12, "after 9999-12-31"),
        (2**70, "after 9999-12-31"),
    ]:
        with pytest.raises(BicepAnnouncementError, match=message):
            proc.announce("D", r="ok", occ=occ, det=T)
    with pytest.raises(BicepAnnouncementError, match=r"det .* after 9999-12-31"):
        proc.announce("D", r="ok", occ=T, det=2**63)
    with migrated.connect() as conn:
        inbox = proc.tables.classes["d"].inbox
        assert conn.execute(sa.select(sa.func.count()).select_from(inbox)).scalar() == 0
    # the largest values that fit are stored and come back as they were
    biggest = {"r": "ü" * 5, "n": 2**63 - 1, "x": 1e308, "m": 999.99, "b": True, "t": "x" * 5000}
    proc.announce("D", occ=T, det=T, **biggest)
    proc.announce("K", k="k" * 191, occ=MAX_TIME, det=T)
    results = proc.run_until(T)
    assert [str(c) for r in results for c in r.actions] == [f"f('üüüüü', {2**63 - 1})"]
    (row,) = proc.live("D")
    assert (row["r"], row["n"], row["x"], row["m"], row["b"], len(row["t"])) == (
        "ü" * 5,
        2**63 - 1,
        1e308,
        Decimal("999.99"),
        True,
        5000,
    )
    assert [r["occTime"] for r in proc.live("K")] == [as_datetime(MAX_TIME)]


def _forge(proc: Processor, cls: str, **row: Any) -> None:
    """Write a row into an inbox as an application can (no checks)."""
    inbox = proc.tables.classes[cls.lower()].inbox
    assert inbox is not None
    with proc.engine.begin() as conn:
        conn.execute(inbox.insert(), [row])


def test_a_bad_row_written_into_an_inbox_is_rejected_at_the_tick(
    make: Callable[..., Processor], backend: str
) -> None:
    proc = make(KINDS, name="inboxes")
    forged: list[tuple[dict[str, Any], str]] = [
        ({"occtime": T, "dettime": T, "revoked": 0, "r": None}, "its key r is missing"),
        ({"occtime": None, "dettime": T, "revoked": 0, "r": "a"}, "no occurrence time"),
        ({"occtime": T, "dettime": T, "revoked": 7, "r": "b"}, "revoked is 7, not 0 or 1"),
        ({"occtime": 10**12, "dettime": T, "revoked": 0, "r": "c"}, "after 9999-12-31"),
        ({"occtime": -60, "dettime": T, "revoked": 0, "r": "d"}, "before 1970"),
    ]
    if backend == "sqlite":  # SQLite stores any value in any column
        forged += [
            ({"occtime": "soon", "dettime": T, "revoked": 0, "r": "e"}, "occtime 'soon'"),
            ({"occtime": T, "dettime": T, "revoked": 0, "r": "f", "n": "xyz"}, "not str"),
            ({"occtime": T, "dettime": T, "revoked": 0, "r": "toolong"}, "more than VARCHAR"),
            ({"occtime": T, "dettime": "later", "revoked": 0, "r": "g"}, "dettime 'later'"),
        ]
    for row, _ in forged:
        _forge(proc, "D", **row)
    proc.announce("D", r="ok", n=1, occ=T, det=T)
    results = proc.run_until(T + 3600)
    assert [str(c) for r in results for c in r.actions] == ["f('ok', 1)"]
    rejected = [x for r in results for x in r.rejected]
    assert len(rejected) == len(forged)
    reasons = [x.reason for x in rejected]
    for _, message in forged:
        assert any(message in reason for reason in reasons), (message, reasons)
    assert {x.event_class for x in rejected} == {"D"}
    with proc.engine.connect() as conn:
        inbox = proc.tables.classes["d"].inbox
        assert conn.execute(sa.select(sa.func.count()).select_from(inbox)).scalar() == 0
    # and the ticks after it go on
    proc.announce("D", r="ok2", n=2, occ=T + 7200, det=T + 7200)
    assert [str(c) for r in proc.run_until(T + 7200) for c in r.actions] == ["f('ok2', 2)"]


RACE = """CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT DO f(new.k);"""


def test_two_processors_of_one_program_never_run_a_tick_twice(
    migrated: sa.Engine, db_url: str, backend: str
) -> None:
    """While one processor is inside tick T, another one's run waits for it and
    then finds T done: one row in the tick log, the event-id counter never goes
    back, and no event is lost to a reused id."""

    def processor() -> Processor:
        return Processor(
            RACE,
            sa.create_engine(db_url),
            name="race",
            chronon=600,
            detector=LocalEventDetector(),
            require_actions=False,
        )

    a, b = processor(), processor()
    a.install()
    a.announce("D", k=1, occ=T, det=T)
    inside, release = threading.Event(), threading.Event()
    purge = a.pipeline.purge

    def slow_purge(conn: Any, tick: int) -> int:
        inside.set()
        release.wait(30)
        return purge(conn, tick)

    a.pipeline.purge = slow_purge  # type: ignore[method-assign]
    out: dict[str, Any] = {}

    def run(name: str, proc: Processor) -> None:
        try:
            out[name] = proc.run_until(T)
        except BaseException as err:
            out[name] = err

    ta = threading.Thread(target=run, args=("a", a))
    ta.start()
    assert inside.wait(30)
    tb = threading.Thread(target=run, args=("b", b))
    tb.start()
    time.sleep(0.5)  # let b reach the program's row
    release.set()
    ta.join(60)
    tb.join(60)
    assert not isinstance(out["a"], BaseException), out["a"]
    assert not isinstance(out["b"], BaseException), out["b"]
    assert [str(c) for r in out["a"] for c in r.actions] == ["f(1)"]
    assert out["b"] == []
    ticks = a.system.ticks
    with migrated.connect() as conn:
        assert conn.execute(
            sa.select(ticks.c.tick).where(ticks.c.program == "race")
        ).scalars().all() == [T]
    a.pipeline.purge = purge  # type: ignore[method-assign]
    b.announce("D", k=2, occ=T + 600, det=T + 600)
    assert [str(c) for r in b.run_until(T + 600) for c in r.actions] == ["f(2)"]
    assert sorted(r["k"] for r in a.live("D")) == [1, 2]
    a.engine.dispose()
    b.engine.dispose()


FOLLOW = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT DO f(new.k);
"""


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_detached_action_runs_after_its_tick_committed(make: Callable[..., Processor]) -> None:
    """Without a session factory a detached action runs once the tick's
    transaction has committed: it sees the tick done and may announce."""
    proc = make(FOLLOW, name="follow", chronon=600)
    seen: list[Any] = []

    def f(call: ActionCall) -> None:
        seen.append((call.args, proc.last_tick))
        if call.args == (1,):
            proc.announce("D", k=2, occ=T + 600, det=T + 600)

    proc.action("f", f, coupling="detached")
    proc.announce("D", k=1, occ=T, det=T)
    proc.run_until(T)
    assert seen == [((1,), as_datetime(T))]
    proc.run_until(T + 600)
    assert seen[1] == ((2,), as_datetime(T + 600))


STRINGS = r"""
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k VARCHAR(20), p VARCHAR(20)) ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT AND new.p = 'C:\temp' DO f(new.p, 'a\nb', 'x\', 'it''s');
"""


def test_a_string_literal_means_the_same_on_every_backend(
    make: Callable[..., Processor],
) -> None:
    proc = make(STRINGS, name="strings")
    proc.announce("D", k="1", p="C:\\temp", occ=T, det=T)
    proc.announce("D", k="2", p="C:\temp", occ=T, det=T)  # a tab: no match
    fired = [c.args for r in proc.run_until(T) for c in r.actions]
    assert fired == [("C:\\temp", "a\\nb", "x\\", "it's")]


FAR = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT DO f(new.k, new.occTime + 2920000d);
CREATE COMPLEX EVENT CLASS Far (k INTEGER) ID (k) LIFESPAN(1d)
  AS SELECT k FROM D OCCURRING AT D.occTime + 2920000d
  ON ANNOUNCEMENT DO g(new.k);
"""


def test_times_after_9999_never_break_a_tick(make: Callable[..., Processor]) -> None:
    """A derived event occurring after 9999-12-31 is left out, like one with no
    occurrence time; a time argument beyond it is passed as seconds."""
    proc = make(FAR, name="far")
    proc.announce("D", k=1, occ=T, det=T)
    calls = [c for r in proc.run_until(T) for c in r.actions]
    assert [(c.action, c.args) for c in calls] == [("f", (1, T + 2_920_000 * 86_400))]
    assert proc.live("Far") == []


def test_the_longest_names_install_on_every_backend(make: Callable[..., Processor]) -> None:
    """Table names of up to 63 characters; the names of their indexes are longer
    and are shortened the same way on every backend."""
    cls, action = "C" * 27, "a" * 27  # sentinel_<24>_x_<27>: 63 characters
    program = f"""
    CREATE MUTABLE SUBSCRIBED EVENT CLASS {cls} (k INTEGER) ID (k) LIFESPAN(1d)
      ON ANNOUNCEMENT DO {action}(new.k);
    CREATE COMPLEX EVENT CLASS D{cls[1:]} (k INTEGER) ID (k) LIFESPAN(1d)
      AS SELECT k FROM {cls} OCCURRING AT {cls}.occTime;"""
    proc = make(program, name="p" * 24)
    proc.announce(cls, k=1, occ=T, det=T)
    assert [str(c) for r in proc.run_until(T) for c in r.actions] == [f"{action}(1)"]
    assert [r["k"] for r in proc.live("D" + cls[1:])] == [1]


def test_a_process_killed_inside_a_tick_leaves_nothing_of_it(
    make: Callable[..., Processor], db_url: str, tmp_path: Path
) -> None:
    """kill -9 while an immediate action runs: the tick is rolled back as a
    whole (announcements in the inbox, no event, no firing, the clock where it
    was); run again, it fires each action once in the database. (The callable
    itself ran again: effects outside the database belong in detached actions.)"""
    from . import kill_child

    proc = make(kill_child.PROGRAM, name="killed", chronon=600)
    for k in (1, 2, 3):
        proc.announce("D", k=k, occ=kill_child.T, det=kill_child.T)
    out = tmp_path / "calls.txt"
    child = subprocess.run(
        [sys.executable, "-m", "tests.bicep.kill_child", db_url, str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert out.read_text().split("\n")[:-1] == ["f 1", "f 2"]
    assert proc.last_tick is None and proc.live("D") == [] == proc.fired()
    with proc.engine.connect() as conn:
        inbox = proc.tables.classes["d"].inbox
        assert conn.execute(sa.select(sa.func.count()).select_from(inbox)).scalar() == 3

    again = kill_child.processor(db_url, str(out), die=False)
    fired = [str(c) for r in again.run_until(kill_child.T + 600) for c in r.actions]
    assert fired == ["f(1)", "f(2)", "f(3)", "g(1)", "g(2)", "g(3)"]
    assert sorted(str(c) for c in proc.fired()) == sorted(fired)
    assert [r["k"] for r in proc.live("C")] == [1, 2, 3]
    again.engine.dispose()


EDGES = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(-1)
  ON ANNOUNCEMENT DO f(new.k, new.occTime);
"""


@pytest.mark.parametrize(
    "occ",
    [-0.5, -1e-7, datetime(1969, 12, 31, 23, 59, 59, 500_000), "1969-12-31T23:59:59.9Z"],
    ids=repr,
)
def test_a_time_just_before_1970_is_refused(make: Callable[..., Processor], occ: Any) -> None:
    """Fractions of a second were cut toward zero, so half a second before 1970
    became 1970 itself and was accepted (this test failed on the old code)."""
    proc = make(EDGES, name="edges")
    with pytest.raises(BicepAnnouncementError, match=r"announcement of D: occ .* before 1970"):
        proc.announce("D", k=1, occ=occ, det=T)
    proc.announce("D", k=2, occ=T, det=T)
    assert [c.args for r in proc.run_until(T) for c in r.actions] == [(2, as_datetime(T))]


@pytest.mark.parametrize(
    "occ",
    [
        datetime(9999, 12, 31, 23, 59, 59, 999_999),
        "9999-12-31T23:59:59.999999",
        datetime(10000 - 1, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ],
    ids=repr,
)
def test_the_last_microsecond_of_9999_is_its_last_second(
    make: Callable[..., Processor], occ: Any
) -> None:
    """A datetime's POSIX timestamp is a float, which rounds 23:59:59.999999 of
    9999-12-31 up to the year 10000: the last second a time may be was refused
    as after 9999-12-31 (this test failed on the old code)."""
    proc = make(EDGES, name="edges")
    proc.announce("D", k=1, occ=occ, det=T)
    proc.run_until(T)
    assert [(r["k"], r["occTime"]) for r in proc.live("D")] == [(1, as_datetime(MAX_TIME))]


CASES = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k VARCHAR(10), v TEXT, n INTEGER) ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT AND new.v = 'milk' DO f(new.k, new.n);
CREATE COMPLEX EVENT CLASS E (k VARCHAR(10), n INTEGER) ID (k) LIFESPAN(1d)
  AS SELECT k, n FROM D OCCURRING AT D.occTime
  ON ANNOUNCEMENT DO g(new.k, new.n);
"""


def test_keys_that_differ_in_case_or_trailing_spaces_are_different_events(
    make: Callable[..., Processor],
) -> None:
    """MariaDB's default collation ignores case and trailing spaces: the keys
    'Milk', 'milk' and 'Milk ' collided in the as-of-now table's primary key and
    every tick failed with a bare IntegrityError, for ever (this test failed on
    the old code on MariaDB). Text attributes compare as on the other backends."""
    proc = make(CASES, name="cases")
    for n, (k, v) in enumerate([("Milk", "milk"), ("milk", "MILK"), ("Milk ", "milk ")]):
        proc.announce("D", k=k, v=v, n=n, occ=T, det=T)
    calls = sorted((c.action, c.args) for r in proc.run_until(T) for c in r.actions)
    assert calls == [
        ("f", ("Milk", 0)),
        ("g", ("Milk", 0)),
        ("g", ("Milk ", 2)),
        ("g", ("milk", 1)),
    ]
    assert sorted(r["k"] for r in proc.live("D")) == ["Milk", "Milk ", "milk"]
    proc.announce("D", k="milk", v="milk", n=3, occ=T + 900, det=T + 900)  # a revision
    assert [r["n"] for r in proc.live("D") if r["k"] == "milk"] == [1]
    proc.run_until(T + 900)
    assert sorted((r["k"], r["n"]) for r in proc.live("E")) == [
        ("Milk", 0),
        ("Milk ", 2),
        ("milk", 3),
    ]


ZERO = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k INTEGER, v INTEGER) ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT DO f(new.k, new.v);
"""


def test_an_integer_key_of_0_is_0_on_every_backend(make: Callable[..., Processor]) -> None:
    """A one-column integer key was the as-of-now table's AUTO_INCREMENT column
    on MariaDB, which stores 0 as the next number: the event of key 0 became
    key 1, or collided with it and broke every tick (this test failed on the
    old code on MariaDB)."""
    proc = make(ZERO, name="zero")
    proc.announce("D", k=0, v=10, occ=T, det=T)
    proc.run_until(T)
    assert [(r["k"], r["v"]) for r in proc.live("D")] == [(0, 10)]
    for k in (1, -1, 0):
        proc.announce("D", k=k, v=k, occ=T + 900, det=T + 900)
    calls = sorted(c.args for r in proc.run_until(T + 900) for c in r.actions)
    assert calls == [(-1, -1), (1, 1)]  # 0 was revised, not announced
    assert sorted((r["k"], r["v"]) for r in proc.live("D")) == [(-1, -1), (0, 0), (1, 1)]


NUMBERS = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k INTEGER, m NUMERIC(5,2), u NUMERIC) ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT DO f(new.k, new.m, new.u);
"""


def test_a_number_is_stored_the_same_on_every_backend(make: Callable[..., Processor]) -> None:
    """``NUMERIC(5,2)`` kept 1.234 on SQLite and rounded it to 1.23 on the
    others; a plain ``NUMERIC`` kept 17 digits on SQLite and MariaDB and 15 on
    PostgreSQL (this test failed on the old code). A value is rounded to its
    scale, half away from zero, before any backend sees it."""
    proc = make(NUMBERS, name="numbers")
    given = [(1.234, 123456789.12345679), (1.235, 0.1 + 0.2), (-999.994, -1e-300), (0.015, 2.5)]
    for k, (m, u) in enumerate(given):
        proc.announce("D", k=k, m=m, u=u, occ=T, det=T)
    calls = sorted(c.args for r in proc.run_until(T) for c in r.actions)
    assert calls == [
        (0, Decimal("1.23"), 123456789.12345679),
        (1, Decimal("1.24"), 0.30000000000000004),
        (2, Decimal("-999.99"), -1e-300),
        (3, Decimal("0.02"), 2.5),
    ]
    assert all(type(m) is Decimal for _, m, _ in calls)  # NUMERIC(p, s) is exact (issue 28.8)
    assert sorted((r["k"], r["m"], r["u"]) for r in proc.live("D")) == [c for c in calls]
