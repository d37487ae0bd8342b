"""Migration 0004 (issue 11): a log written before it, with rolled-back
savepoints under scope ids of their own (``<scope>/sp<n>``), moves into its
transactions' scopes with savepoint paths, and back on downgrade; replay of the
upgraded log finds the detection inside the savepoint."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from sentinel import LocalEventDetector
from sentinel.log import LogReader, migrate
from sentinel.log.tables import LogJSON, UTCDateTime, log_tables
from sentinel.replay import replay

_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _paths() -> Any:
    spec = importlib.util.spec_from_file_location(
        "m0004", migrate.script_directory() / "versions" / "0004_savepoint_rows.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.savepoint_paths


def test_savepoint_paths_from_the_old_numbering() -> None:
    paths = _paths()
    # sp2 rolled back after sp1 and has a row before sp1's first: it enclosed it
    assert paths({2: 2, 1: 3}) == {2: "sp2", 1: "sp2/sp1"}
    # siblings: the first rolled back first
    assert paths({1: 2, 2: 5}) == {1: "sp1", 2: "sp2"}
    # three deep
    assert paths({3: 1, 2: 2, 1: 3}) == {3: "sp3", 2: "sp3/sp2", 1: "sp3/sp2/sp1"}


#: An old log: transaction S committed E1@1, then a savepoint (rolled back, "sp2"
#: in the old numbering) held E2@2, an inner savepoint ("sp1") holding E3@3 and
#: E2@4; then E4@5 committed. The rule "E1 ; E3" fired inside the inner one.
_OLD_EVENTS = [
    ("S", 1, "E1", "committed"),
    ("S/sp2", 2, "E2", "aborted"),
    ("S/sp1", 3, "E3", "aborted"),
    ("S/sp2", 4, "E2", "aborted"),
    ("S", 5, "E4", "committed"),
    ("app/sp1", 6, "E1", "committed"),  # an application's own scope id: untouched
]
_OLD_FIRING = ("r", "S/sp1", 3, [["S", 1], ["S/sp1", 3]])


#: The ``events`` table of revisions 0003 to 0005 (``savepoint`` from 0004 on).
_EVENTS = sa.table(
    "sentinel_events",
    *(
        sa.column(name)
        for name in ("scope", "t_occ", "event", "ts", "detected_ts", "outcome", "savepoint")
    ),
    sa.column("at", UTCDateTime()),
    sa.column("detected_at", UTCDateTime()),
    sa.column("params", LogJSON()),
)


def _write_old(engine: sa.Engine) -> None:
    t = log_tables()
    with engine.begin() as conn:
        for scope, t_occ, event, outcome in _OLD_EVENTS:
            conn.execute(
                sa.insert(_EVENTS).values(
                    scope=scope,
                    t_occ=t_occ,
                    event=event,
                    at=_AT,
                    detected_at=_AT,
                    ts=_AT.timestamp(),
                    detected_ts=_AT.timestamp(),
                    params={},
                    outcome=outcome,
                )
            )
        rule, scope, t_occ, constituents = _OLD_FIRING
        conn.execute(
            sa.insert(t.firings).values(
                rule=rule,
                scope=scope,
                t_occ=t_occ,
                constituents=constituents,
                coupling="immediate",
                status="fired",
                fired_at=_AT,
            )
        )


def _events(engine: sa.Engine, with_savepoint: bool) -> list[tuple[Any, ...]]:
    c = _EVENTS.c
    cols = [c.scope, c.t_occ, c.outcome] + ([c.savepoint] if with_savepoint else [])
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(*cols).order_by(c.t_occ))]


def _firings(engine: sa.Engine) -> list[tuple[Any, ...]]:
    f = log_tables().firings.c
    with engine.connect() as conn:
        return [
            (r.scope, r.t_occ, [list(x) for x in r.constituents])
            for r in conn.execute(sa.select(f.scope, f.t_occ, f.constituents))
        ]


def test_upgrade_and_downgrade_move_the_rows(engine: sa.Engine) -> None:
    migrate.upgrade(engine, "0003")
    _write_old(engine)
    before = _events(engine, with_savepoint=False)
    migrate.upgrade(engine, "0004")
    assert _events(engine, with_savepoint=True) == [
        ("S", 1, "committed", None),
        ("S", 2, "aborted", "sp2"),
        ("S", 3, "aborted", "sp2/sp1"),
        ("S", 4, "aborted", "sp2"),
        ("S", 5, "committed", None),
        ("app/sp1", 6, "committed", None),
    ]
    migrate.upgrade(engine)  # the readers need the newest revision (0004 is not the last)
    with LogReader(engine) as reader:
        [firing] = list(reader.firings())
        assert (firing.scope, firing.savepoint, firing.constituents) == (
            "S",
            "sp2/sp1",
            (("S", 1), ("S", 3)),
        )
        assert {r.occurrence.t_occ: r.savepoint for r in reader.occurrences()} == {
            1: None,
            2: "sp2",
            3: "sp2/sp1",
            4: "sp2",
            5: None,
            6: None,
        }
    # the upgraded log replays the detection made inside the savepoints
    det = LocalEventDetector()
    for name in ("E1", "E2", "E3", "E4"):
        det.explicit(name)
    det.rule("r", "E1 ; E3", action=print)
    det.rule("after", "E1 ; E4", action=print, context="chronicle")
    det.rule("never", "E2 ; E4", action=print)  # E2s were rolled back before E4
    result = replay(engine, det)
    assert sorted(
        (d["rule"], d["scope"], d["t_occ"], d["constituent_t_occs"]) for d in result.rows()
    ) == [("after", "S", 5, [1, 5]), ("r", "S", 3, [1, 3])]

    migrate.downgrade(engine, "0003")
    assert _events(engine, with_savepoint=False) == before
    assert _firings(engine) == [("S/sp1", 3, [["S", 1], ["S/sp1", 3]])]
