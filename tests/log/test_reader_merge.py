"""The reader's order over rows whose ``t_occ`` ranges overlap, against a model.

A scope's occurrences can be spread over several rows whose ranges interleave
(a rolled-back savepoint's row inside its transaction's, late rows, a long
transaction's flushes): the reader must give every occurrence back once, in
``(scope, t_occ)`` (or ``(t_occ, scope)``) order, in chunks of at most
``chunk_size``, with the filters applied to each occurrence, whatever the chunk
boundaries. The model is a sort of everything written.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sentinel.log import LogReader, LogWriter, migrate

from .conftest import occ

SCOPES = ("a", "b", "process:p", "tx")


@st.composite
def logs(draw: st.DrawFn) -> list[list[tuple[str, int, str]]]:
    """Writes (each a list of ``(scope, t_occ, event)``) of distinct occurrence
    ids, spread so that a scope's rows overlap."""
    ids = draw(
        st.lists(
            st.tuples(st.sampled_from(SCOPES), st.integers(1, 60)),
            min_size=1,
            max_size=80,
            unique=True,
        )
    )
    writes = draw(st.integers(1, 6))
    out: list[list[tuple[str, int, str]]] = [[] for _ in range(writes)]
    for scope, t in ids:
        out[draw(st.integers(0, writes - 1))].append((scope, t, draw(st.sampled_from("EF"))))
    return [w for w in out if w]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    log=logs(),
    size=st.integers(1, 12),
    order=st.sampled_from(["scope", "t_occ"]),
    events=st.sampled_from([None, ["E"]]),
    since=st.sampled_from([None, 20]),
)
# a held occurrence (5) between a row's t_first (2) and its first wanted
# occurrence (8) must wait: a later row (t_first 3) holds one before it
@example(
    log=[[("a", 1, "E"), ("a", 5, "E")], [("a", 2, "F"), ("a", 8, "E")], [("a", 3, "E")]],
    size=10,
    order="scope",
    events=["E"],
    since=None,
)
def test_rows_that_overlap_read_back_in_order(
    log: list[list[tuple[str, int, str]]],
    size: int,
    order: str,
    events: list[str] | None,
    since: int | None,
) -> None:
    engine = sa.create_engine("sqlite://")
    migrate.upgrade(engine)
    writer = LogWriter()
    written = []
    for batch in log:
        occs = [occ(event, t, scope, ts=1000.0 + t) for scope, t, event in batch]
        with engine.begin() as conn:
            # the process scope without an outcome: a row of its own per write
            writer.write_groups(
                conn,
                [
                    ([o for o in occs if not o.scope.startswith("process:")], "committed"),
                    ([o for o in occs if o.scope.startswith("process:")], None),
                ],
            )
        written.extend(occs)
    with LogReader(engine, chunk_size=size) as reader:
        start = None if since is None else dt.datetime.fromtimestamp(1000.0 + since, dt.UTC)
        chunks = list(reader.chunks(order=order, events=events, since=start))  # type: ignore[arg-type]
        total = reader.count(events=events, since=start)
    wanted = [
        o
        for o in written
        if (events is None or o.event in events) and (since is None or o.t_occ >= since)
    ]
    key = (lambda o: (o.scope, o.t_occ)) if order == "scope" else (lambda o: (o.t_occ, o.scope))
    assert [r.occurrence for c in chunks for r in c] == sorted(wanted, key=key)
    assert all(1 <= len(c) <= size for c in chunks)
    assert total == len(wanted)
    engine.dispose()
