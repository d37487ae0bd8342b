"""Commit numbers: concurrent writers, a reader that looks all the time; every
look sees the numbers 1..n with no hole (no number visible before a smaller
one), and each transaction's rows carry one number."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from sentinel.log import LogWriter, migrate
from sentinel.occurrence import Occurrence


def test_no_number_is_visible_before_a_smaller_one(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    writer = LogWriter(commit_order=True)
    per_thread, threads = 40, 4
    # SQLite: writers wait for the file's lock instead of failing
    eng = (
        sa.create_engine(engine.url, connect_args={"timeout": 60})
        if engine.dialect.name == "sqlite"
        else engine
    )
    looks: list[list[int]] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def write(k: int) -> None:
        try:
            for i in range(per_thread):
                occs = [Occurrence(e, j, 1.0, scope=f"w{k}-{i}") for j, e in enumerate("ab")]
                with eng.begin() as conn:
                    writer.write(conn, occs)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    def look() -> None:
        q = sa.text(
            "SELECT DISTINCT commit_seq FROM sentinel_occurrences WHERE commit_seq IS NOT NULL"
        )
        while not done.is_set():
            with eng.connect() as conn:
                looks.append(sorted(conn.execute(q).scalars()))

    reader = threading.Thread(target=look)
    reader.start()
    ws = [threading.Thread(target=write, args=(k,)) for k in range(threads)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    done.set()
    reader.join()
    assert not errors
    assert len(looks) > 5
    for seen in looks:
        assert seen == list(range(1, len(seen) + 1))
    with eng.connect() as conn:
        rows = conn.execute(sa.text("SELECT scope, commit_seq FROM sentinel_occurrences")).all()
    per_scope: dict[str, set[int]] = {}
    for scope, seq in rows:
        per_scope.setdefault(scope, set()).add(seq)
    assert all(len(s) == 1 for s in per_scope.values())
    assert sorted(s.pop() for s in per_scope.values()) == list(range(1, per_thread * threads + 1))
    if eng is not engine:
        eng.dispose()
