"""Commit numbers and the order a reader reads them in.

On SQLite a number is taken under a lock held to the commit: no number is ever
visible before a smaller one. On PostgreSQL and MariaDB it is taken without
waiting for other writers: a number can be visible while a smaller one is not
yet (its transaction is still running) or never will be (it rolled back). A
reader that reads up to ``CommitReader.horizon`` waits for the first and
passes the second only once every transaction that could hold it has ended;
it reads every commit once, in number order, on every backend."""

from __future__ import annotations

import logging
import random
import threading
import time

import pytest
import sqlalchemy as sa

from sentinel.global_detector import GlobalDetector
from sentinel.global_detector.order import CommitReader
from sentinel.log import LogWriter, migrate
from sentinel.log.tables import log_tables
from sentinel.occurrence import Occurrence

from . import rules
from .forge import element, forge


def _occ(event: str, t: int, scope: str, **params: object) -> Occurrence:
    return Occurrence(event, t, 1000.0 + t, scope=scope, params=params)


def _tail(reader: CommitReader, conn: sa.Connection, after: int) -> list[int]:
    """The commit numbers a tailing reader reads after ``after`` in one look:
    up to the horizon, then the rows."""
    upto = reader.horizon(conn, after, wait=0.05)
    seqs = [r.commit_seq for r in reader.read(conn, after)]
    conn.rollback()
    return [s for s in dict.fromkeys(seqs) if upto is None or s <= upto]


def test_a_tailing_reader_reads_every_commit_once_in_number_order(engine: sa.Engine) -> None:
    """Four writers commit (and roll back a fifth of their transactions, after
    taking their number) while a reader tails: it reads each committed number
    once, in increasing order, and misses none. On SQLite no look ever sees a
    number before a smaller one."""
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    per_thread, threads = 40, 4
    # SQLite: writers wait for the file's lock instead of failing
    eng = (
        sa.create_engine(engine.url, connect_args={"timeout": 60})
        if engine.dialect.name == "sqlite"
        else engine
    )
    read: list[int] = []
    looks: list[list[int]] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def write(k: int) -> None:
        rnd = random.Random(k)
        try:
            for i in range(per_thread):
                occs = [Occurrence(e, j, 1.0, scope=f"w{k}-{i}") for j, e in enumerate("ab")]
                with eng.connect() as conn:
                    conn.begin()
                    writer.write(conn, occs)
                    time.sleep(rnd.random() * 0.003)
                    if rnd.random() < 0.2:
                        conn.rollback()
                    else:
                        conn.commit()
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    def tail() -> None:
        reader = CommitReader(log_tables())
        q = sa.text("SELECT DISTINCT commit_seq FROM sentinel_event_batches")
        try:
            with eng.connect() as conn:
                while True:
                    finished = done.is_set()  # before the look: it sees every commit
                    got = _tail(reader, conn, read[-1] if read else 0)
                    read.extend(got)
                    if engine.dialect.name == "sqlite":
                        looks.append(sorted(conn.execute(q).scalars()))
                        conn.rollback()
                    if finished and not got and not reader.waiting:
                        return
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    reader = threading.Thread(target=tail)
    reader.start()
    ws = [threading.Thread(target=write, args=(k,)) for k in range(threads)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    done.set()
    reader.join(timeout=120)
    assert not reader.is_alive() and not errors
    with eng.connect() as conn:
        rows = conn.execute(sa.text("SELECT scope, commit_seq FROM sentinel_occurrences")).all()
    per_scope: dict[str, set[int]] = {}
    for scope, seq in rows:
        per_scope.setdefault(scope, set()).add(seq)
    assert all(len(s) == 1 for s in per_scope.values())  # one number per transaction
    committed = sorted(s.pop() for s in per_scope.values())
    assert 0.6 * per_thread * threads < len(committed) < per_thread * threads
    assert read == committed  # each once, in number order, none missed
    for seen in looks:  # SQLite: no hole, ever
        assert seen == list(range(1, len(seen) + 1))
    if eng is not engine:
        eng.dispose()


def _short_lock_wait(conn: sa.Connection) -> None:
    """A writer that would wait for another's lock fails within 2 s instead."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
    else:
        conn.execute(sa.text("SET SESSION innodb_lock_wait_timeout = 2"))


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_smaller_number_committing_later_is_read_first_and_once(engine: sa.Engine) -> None:
    """A takes number n (its order), B takes n + 1 (the payment) and commits
    first, then A commits. The service reads nothing while A runs (n + 1 is
    visible, n is not), then n and n + 1, in that order, once: the order then
    its payment is one detection. Reading n + 1 first (or skipping n) makes
    none."""
    migrate.upgrade(engine)
    rules.make_effects(engine)
    writer = LogWriter(commit_order=True)
    service = GlobalDetector(rules.detector, engine, lease=10, run_actions=False)
    service.gap_wait = 0.05
    a = engine.connect()
    try:
        a.begin()
        writer.write(a, [_occ("order", 1, "txA", customer=1)])
        with engine.begin() as b:
            _short_lock_wait(b)  # B does not wait for A
            writer.write(b, [_occ("payment", 1, "txB", customer=1)])
        start = time.monotonic()
        first = service.step()
        assert (first.rows, first.position) == (0, 0)
        assert time.monotonic() - start >= 0.05  # it waited for the hole
        assert service.reader.waiting
        a.commit()
    finally:
        a.close()
    second = service.step()
    assert (second.rows, second.detections, second.position) == (2, 1, 2)
    assert not service.reader.waiting
    third = service.step()
    assert (third.rows, third.detections, third.position) == (0, 0, 2)
    service.close()
    with engine.connect() as conn:
        seqs = dict(
            conn.execute(sa.text("SELECT scope, commit_seq FROM sentinel_occurrences")).all()
        )
        outbox = conn.execute(sa.text("SELECT rule FROM sentinel_outbox")).scalars().all()
    assert seqs == {"txA": 1, "txB": 2}
    assert outbox == ["paid"]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_rolled_back_number_is_passed_once_every_transaction_it_could_be_has_ended(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A takes number 1 and rolls back after B took 2 and committed. While A
    runs, and after, while C (a transaction that was running when the reader
    first saw the hole, and could have been the one holding 1) runs, the
    reader does not pass 1; once C ended it passes 1 for good and reads 2
    once. A hole waited for longer than ``gap_warn`` is reported, with the
    transactions it waits for."""
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    reader = CommitReader(log_tables())
    reader.gap_warn = 0.0
    c = engine.connect()
    a = engine.connect()
    look = engine.connect()
    try:
        c.begin()
        c_xid = c.execute(sa.text("SELECT pg_current_xact_id()")).scalar()
        a.begin()
        writer.write(a, [_occ("order", 1, "txA", customer=1)])
        with engine.begin() as b:
            b.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
            writer.write(b, [_occ("payment", 1, "txB", customer=1)])
        with caplog.at_level(logging.WARNING, logger="sentinel.global"):
            assert _tail(reader, look, 0) == []  # A runs: 1 may still commit
            assert reader.waiting
            a.rollback()
            assert _tail(reader, look, 0) == []  # C runs: it could hold 1
            assert reader.waiting
        assert "commit number 1 was handed out" in caplog.text
        assert str(c_xid) in caplog.text
        c.commit()
        # (transactions of other databases of the server, running when the
        # reader saw the hole, are waited for too: a few looks may be needed)
        deadline = time.monotonic() + 30
        while (got := _tail(reader, look, 0)) == [] and time.monotonic() < deadline:
            pass
        assert got == [2]
        assert not reader.waiting
        assert _tail(reader, look, 2) == []
        # a reader that starts at 0 again passes 1 at once: it proved it
        assert _tail(reader, look, 0) == [2]
    finally:
        for conn in (c, a, look):
            conn.close()


@pytest.mark.parametrize("backend", ["mysql"])
@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "READ COMMITTED"])
def test_on_mariadb_a_rolled_back_number_is_passed_once_its_holder_has_ended(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture, isolation: str
) -> None:
    """MariaDB: A takes number 1, B takes 2 without waiting for A and commits.
    While A runs, the reader does not pass 1: the counter row's lock, which A
    holds shared since before it took 1, is not to be had (asked without
    waiting, then waiting at most a second, and then without waiting for a
    while: writers asking for the lock behind the reader's request wait). Once A rolled
    back, the reader gets the lock, passes 1 for good and reads 2 once. A hole
    waited for longer than ``gap_warn`` is reported. The writers' isolation
    does not matter."""
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    reader = CommitReader(log_tables())
    reader.gap_warn = 0.0
    a = engine.connect().execution_options(isolation_level=isolation)
    look = engine.connect()
    try:
        a.begin()
        writer.write(a, [_occ("order", 1, "txA", customer=1)])
        with engine.connect() as b:
            _short_lock_wait(b)
            b.commit()
            with b.begin():
                writer.write(b, [_occ("payment", 1, "txB", customer=1)])
        with caplog.at_level(logging.WARNING, logger="sentinel.global"):
            # first sight, then (A holds the lock) asked without waiting,
            # then, 50 ms after the first sight, waiting a second for it
            start = time.monotonic()
            assert _tail(reader, look, 0) == []
            assert reader.waiting
            time.sleep(0.06)
            assert _tail(reader, look, 0) == []
            assert 0.9 < time.monotonic() - start < 5
            start = time.monotonic()
            assert _tail(reader, look, 0) == []  # not again at once: writers wait behind it
            assert time.monotonic() - start < 0.5
            assert reader.waiting
        assert "commit number 1 was handed out" in caplog.text
        a.rollback()
        assert _tail(reader, look, 0) == [2]
        assert not reader.waiting
        assert _tail(reader, look, 2) == []
        # a reader that starts at 0 again passes 1 at once: it proved it
        assert _tail(reader, look, 0) == [2]
    finally:
        for conn in (a, look):
            conn.close()
    with engine.connect() as conn:
        seqs = dict(
            conn.execute(sa.text("SELECT scope, commit_seq FROM sentinel_occurrences")).all()
        )
    assert seqs == {"txB": 2}


@pytest.mark.parametrize("backend", ["mysql"])
def test_on_mariadb_numbers_continue_across_the_sequence_migration(engine: sa.Engine) -> None:
    """Revision 0009 starts MariaDB's commit sequence after the last number the
    counter handed out, and its downgrade moves the counter to the last one the
    sequence handed out: numbers only increase, across both, with the commits
    written before each still read in order."""
    migrate.upgrade(engine, "0008")

    def old_write(scope: str) -> None:
        """What a writer of revision 0008 does: the counter row, then the row."""
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE sentinel_commit_counter SET n = n + 1 WHERE id = 1"))
            n = conn.execute(sa.text("SELECT n FROM sentinel_commit_counter")).scalar_one()
            forge(conn, [element(1, "order", 1001.0, {"customer": 1})], seq=n, scope=scope)

    for i in range(3):  # numbered by the counter: 1, 2, 3
        old_write(f"old{i}")
    migrate.upgrade(engine, "0009")
    writer = LogWriter(commit_order=True)
    for i in range(2):
        with engine.begin() as conn:
            writer.write(conn, [_occ("order", 1, f"new{i}", customer=i)])
    reader = CommitReader(log_tables())
    with engine.connect() as conn:
        assert reader.handed_out(conn) == 5
        assert _tail(reader, conn, 0) == [1, 2, 3, 4, 5]
    migrate.downgrade(engine, "0008")
    old_write("after")
    with engine.connect() as conn:
        n = conn.execute(sa.text("SELECT n FROM sentinel_commit_counter")).scalar()
        seqs = conn.execute(
            sa.text("SELECT scope, commit_seq FROM sentinel_event_batches ORDER BY commit_seq")
        ).all()
    assert n == 6
    assert [tuple(r) for r in seqs] == [
        ("old0", 1),
        ("old1", 2),
        ("old2", 3),
        ("new0", 4),
        ("new1", 5),
        ("after", 6),
    ]
    migrate.upgrade(engine)
    with engine.begin() as conn:
        writer.write(conn, [_occ("order", 1, "again", customer=9)])
    with engine.connect() as conn:
        assert CommitReader(log_tables()).handed_out(conn) == 7


@pytest.mark.parametrize("backend", ["sqlite", "mysql"])
@pytest.mark.parametrize("rows", [1, 2], ids=["one-row", "two-rows"])
def test_a_deleted_counter_row_is_made_again_and_the_commit_still_numbered(
    engine: sa.Engine, rows: int
) -> None:
    """The counter row deleted by hand: the next numbered transaction (its
    row's own insert taking the number, or a separate statement for two
    rows) makes it again and is numbered all the same."""
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    with engine.begin() as conn:
        writer.write(conn, [_occ("order", 1, "before", customer=1)])
        conn.execute(sa.text("DELETE FROM sentinel_commit_counter"))
    with engine.begin() as conn:
        writer.write_groups(
            conn,
            [([_occ("order", 1, "after", customer=2)], "committed")]
            + [([_occ("order", 2, "after", customer=2)], "aborted", "sp1")] * (rows - 1),
        )
    with engine.connect() as conn:
        seqs = conn.execute(
            sa.text("SELECT scope, commit_seq FROM sentinel_event_batches ORDER BY id")
        ).all()
        counter = conn.execute(sa.text("SELECT count(*) FROM sentinel_commit_counter")).scalar()
    assert [s for _, s in seqs] == [1] + [2] * rows
    assert counter == 1


@pytest.mark.parametrize("backend", ["mysql"])
@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_on_mariadb_a_prepared_xa_transaction_holds_its_number(
    engine: sa.Engine, outcome: str
) -> None:
    """MariaDB releases a transaction's shared locks at ``XA PREPARE``: the
    counter row's lock alone would let the reader pass the number of a
    prepared transaction (two-phase commit, ``Session(twophase=True)``) that
    commits later, and never read it. The reader also locks the log rows
    after its position, which the prepared transaction keeps: it passes
    nothing while A is prepared, and reads A's commit in its place once it
    commits (or passes it once it rolled back)."""
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    reader = CommitReader(log_tables())
    a = engine.connect()
    look = engine.connect()
    try:
        xa = a.begin_twophase()
        writer.write(a, [_occ("order", 1, "txA", customer=1)])
        xa.prepare()
        with engine.begin() as b:
            writer.write(b, [_occ("payment", 1, "txB", customer=1)])
        for _ in range(3):  # first sight, without waiting, waiting
            assert _tail(reader, look, 0) == []
            time.sleep(0.06)
        assert reader.waiting
        getattr(xa, outcome)()
        expected = [1, 2] if outcome == "commit" else [2]
        deadline = time.monotonic() + 10
        while (got := _tail(reader, look, 0)) == [] and time.monotonic() < deadline:
            pass
        assert got == expected
    finally:
        for conn in (a, look):
            conn.close()


@pytest.mark.parametrize("backend", ["mysql"])
def test_on_mariadb_a_slow_wait_for_the_lock_is_not_repeated_at_the_next_hole(
    engine: sa.Engine,
) -> None:
    """Writers asking for the counter row's lock wait behind the reader's
    request: a wait that took long (A held its number for a while, then
    committed) makes the reader ask only without waiting for a while, so a
    second slow holder does not hold writers up again at once; it still
    passes that holder's number once it rolled back."""
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    reader = CommitReader(log_tables())
    look = engine.connect()
    try:
        # A1 holds its number 0.5 s, then commits: a wait for the lock from
        # 50 ms after the first sight on gets it only then (a slow wait)
        a = engine.connect()
        a.begin()
        writer.write(a, [_occ("order", 1, "A1", customer=0)])
        with engine.begin() as b:
            writer.write(b, [_occ("payment", 1, "B1", customer=0)])
        timer = threading.Timer(0.5, a.commit)
        timer.start()
        start = time.monotonic()
        deadline = start + 10
        while (got := _tail(reader, look, 0)) == [] and time.monotonic() < deadline:
            pass
        assert got == [1, 2]
        assert time.monotonic() - start > 0.4  # it waited for A1
        timer.join()
        a.close()
        # A2 holds on: the reader does not wait this time
        a = engine.connect()
        a.begin()
        writer.write(a, [_occ("order", 1, "A2", customer=1)])
        with engine.begin() as b:
            writer.write(b, [_occ("payment", 1, "B2", customer=1)])
        first = time.monotonic()
        assert _tail(reader, look, 2) == []  # first sight
        time.sleep(0.06)
        assert _tail(reader, look, 2) == []
        assert time.monotonic() - first < 0.5
        a.rollback()
        a.close()
        assert _tail(reader, look, 2) == [4]
    finally:
        look.close()
