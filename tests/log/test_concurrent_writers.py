"""Several writers at once on one log: every occurrence is read back once, in order.

One row per transaction means concurrent transactions insert rows of their own
(no shared row, no read-modify-write); these tests write from threads with
connections of their own, with commit numbers taken and without, and with
transactions rolled back between the committed ones, then read everything back.
"""

from __future__ import annotations

import random
import threading

import pytest
import sqlalchemy as sa

from sentinel.log import LogReader, LogWriter
from sentinel.log.records import LoggedOccurrence
from sentinel.occurrence import ObjectRef

from .conftest import occ

WRITERS = 4
TRANSACTIONS = 25  # per writer
SIZE = 30  # occurrences per transaction


def _write(
    engine: sa.Engine,
    writer: LogWriter,
    me: int,
    committed: list[tuple[str, int]],
    errors: list[BaseException],
) -> None:
    rng = random.Random(me)
    try:
        for n in range(TRANSACTIONS):
            scope = f"w{me}-tx{n:03d}"
            occs = [
                occ(
                    "Account.deposit:end" if t % 3 else "Account:update",
                    t + 1,
                    scope,
                    source=ObjectRef("Account", (rng.randrange(100),)),
                    amount=rng.random() * 100,
                    note="é" * rng.randrange(3),
                )
                for t in range(SIZE)
            ]
            roll_back = rng.random() < 0.2
            with engine.connect() as conn, conn.begin() as txn:
                writer.write(conn, occs)
                if roll_back:
                    txn.rollback()
                    continue
            committed.extend((o.scope, o.t_occ) for o in occs)
    except BaseException as err:  # reported by the test
        errors.append(err)


@pytest.mark.parametrize("commit_order", [False, True], ids=["plain", "numbered"])
def test_concurrent_writers_lose_and_repeat_nothing(
    migrated: sa.Engine, commit_order: bool, request: pytest.FixtureRequest
) -> None:
    if migrated.dialect.name == "sqlite":
        # SQLite serializes writers: wait for the file lock instead of failing
        migrated = sa.create_engine(migrated.url, connect_args={"timeout": 60})
        request.addfinalizer(migrated.dispose)
    writer = LogWriter(commit_order=commit_order)
    committed: list[tuple[str, int]] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_write, args=(migrated, writer, me, committed, errors))
        for me in range(WRITERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    with LogReader(migrated, chunk_size=97) as reader:
        rows: list[LoggedOccurrence] = list(reader.occurrences())
        assert reader.count() == len(committed)
    got = [(r.occurrence.scope, r.occurrence.t_occ) for r in rows]
    assert got == sorted(committed)  # each once, in (scope, t_occ) order
    assert {r.outcome for r in rows} == {"committed"}
    with migrated.connect() as conn:
        b = sa.table("sentinel_event_batches", sa.column("n"), sa.column("commit_seq"))
        sizes = conn.execute(sa.select(b.c.n, b.c.commit_seq)).all()
    # one row per committed transaction
    assert len(sizes) == len(committed) // SIZE and {n for n, _ in sizes} == {SIZE}
    seqs = [s for _, s in sizes]
    if commit_order:
        assert None not in seqs and len(set(seqs)) == len(seqs)
    else:
        assert set(seqs) == {None}
