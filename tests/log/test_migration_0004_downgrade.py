"""Migration 0004's downgrade writes rolled-back savepoints' rows as 0003 wrote
them, ``<scope>/sp<n>`` with ``n`` counting the transaction's rollbacks (an
enclosed savepoint is rolled back before the one enclosing it), so that the
upgrade, which reads ``n`` that way, gives back the savepoints' nesting: nested,
sibling and three-deep savepoints, rows and firings, on every backend; and a
downgraded and upgraded log replays as before."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from sentinel import LocalEventDetector
from sentinel.log import Firing, LogReader, LogWriter, migrate
from sentinel.replay import replay

from .conftest import occ

_AT = datetime(2026, 1, 1, tzinfo=UTC)

#: Transactions at head, as the ORM layer logs them: per scope, ``(t_occ,
#: savepoint path)`` in ``t_occ`` order (None: committed). Savepoints are
#: numbered in the order they began.
_PLAN: dict[str, list[tuple[int, str | None]]] = {
    # SAVEPOINT sp1; e2; SAVEPOINT sp2; e3; ROLLBACK TO sp2; e4; ROLLBACK TO sp1
    "nested": [(1, None), (2, "sp1"), (3, "sp1/sp2"), (4, "sp1"), (5, None)],
    # SAVEPOINT sp1; e2; ROLLBACK TO sp1; SAVEPOINT sp2; e3; ROLLBACK TO sp2
    "siblings": [(1, None), (2, "sp1"), (3, "sp2"), (4, None)],
    # the same with a committed row between them, and sp2 released before sp3
    "apart": [(1, "sp1"), (2, None), (3, "sp3"), (4, None)],
    # three deep, each with rows before and after the one it encloses
    "deep": [(1, "sp1"), (2, "sp1/sp2"), (3, "sp1/sp2/sp3"), (4, "sp1/sp2"), (5, "sp1"), (6, None)],
    # sp1 holds two savepoints one after the other, the second one more
    "tree": [(1, "sp1"), (2, "sp1/sp2"), (3, "sp1/sp3"), (4, "sp1/sp3/sp4"), (5, None)],
}

#: What the 0003 writer wrote for ``_PLAN``: each rolled-back savepoint under
#: ``<scope>/sp<n>``, ``n`` in the order of the rollbacks.
_AT_0003 = {
    ("nested", 1): "nested",
    ("nested", 2): "nested/sp2",
    ("nested", 3): "nested/sp1",
    ("nested", 4): "nested/sp2",
    ("nested", 5): "nested",
    ("siblings", 1): "siblings",
    ("siblings", 2): "siblings/sp1",
    ("siblings", 3): "siblings/sp2",
    ("siblings", 4): "siblings",
    ("apart", 1): "apart/sp1",
    ("apart", 2): "apart",
    ("apart", 3): "apart/sp2",
    ("apart", 4): "apart",
    ("deep", 1): "deep/sp3",
    ("deep", 2): "deep/sp2",
    ("deep", 3): "deep/sp1",
    ("deep", 4): "deep/sp2",
    ("deep", 5): "deep/sp3",
    ("deep", 6): "deep",
    ("tree", 1): "tree/sp4",
    ("tree", 2): "tree/sp1",
    ("tree", 3): "tree/sp3",
    ("tree", 4): "tree/sp2",
    ("tree", 5): "tree",
}

#: Firings made inside savepoints: (scope, t_occ, path, constituents' t_occs).
_FIRINGS = [
    ("nested", 3, "sp1/sp2", (1, 3)),
    ("nested", 4, "sp1", (2, 4)),
    ("deep", 3, "sp1/sp2/sp3", (1, 2, 3)),
    ("tree", 4, "sp1/sp3/sp4", (1, 3, 4)),
]


def _write(engine: sa.Engine, plan: dict[str, list[tuple[int, str | None]]]) -> None:
    groups: list[Any] = []
    for scope, rows in plan.items():
        groups.append(([occ(f"E{t}", t, scope) for t, path in rows if path is None], "committed"))
        for path in dict.fromkeys(p for _, p in rows if p is not None):
            groups.append(([occ(f"E{t}", t, scope) for t, p in rows if p == path], "aborted", path))
    firings = [
        Firing(
            rule="r",
            scope=scope,
            t_occ=t,
            constituents=tuple((scope, c) for c in cs),
            coupling="immediate",
            status="fired",
            fired_at=_AT,
            savepoint=path,
        )
        for scope, t, path, cs in _FIRINGS
        if scope in plan
    ]
    with engine.begin() as conn:
        LogWriter().write_groups(conn, groups, firings=firings)


def _paths(engine: sa.Engine) -> dict[tuple[str, int], str | None]:
    with LogReader(engine) as reader:
        return {(r.occurrence.scope, r.occurrence.t_occ): r.savepoint for r in reader.occurrences()}


def _firings(engine: sa.Engine) -> list[tuple[str, int, str | None, tuple[Any, ...]]]:
    with LogReader(engine) as reader:
        return sorted((f.scope, f.t_occ, f.savepoint, f.constituents) for f in reader.firings())


def _nesting(paths: dict[tuple[str, int], str | None]) -> dict[tuple[str, int], str | None]:
    """``paths`` with each transaction's savepoints renamed ``a``, ``b``, ... in
    the order the rows name them: equal for two logs with the same nesting
    whatever the savepoints' numbers."""
    out: dict[tuple[str, int], str | None] = {}
    names: dict[tuple[str, str], str] = {}
    for (scope, t), path in sorted(paths.items()):
        if path is None:
            out[(scope, t)] = None
            continue
        steps = []
        for step in path.split("/"):
            known = names.setdefault(
                (scope, step), chr(ord("a") + sum(s == scope for s, _ in names))
            )
            steps.append(known)
        out[(scope, t)] = "/".join(steps)
    return out


def test_downgrade_numbers_savepoints_by_their_rollbacks_as_0003_did(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    _write(engine, _PLAN)
    migrate.downgrade(engine, "0003")
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT scope, t_occ FROM sentinel_events").all()
        firings = conn.exec_driver_sql(
            "SELECT scope, t_occ, constituents FROM sentinel_rule_firings"
        ).all()
    scopes = {(scope.split("/")[0], t): scope for scope, t in rows}
    assert scopes == _AT_0003
    got = sorted((s, t, _json(c)) for s, t, c in firings)
    assert got == [
        ("deep/sp1", 3, [["deep/sp3", 1], ["deep/sp2", 2], ["deep/sp1", 3]]),
        ("nested/sp1", 3, [["nested", 1], ["nested/sp1", 3]]),
        ("nested/sp2", 4, [["nested/sp2", 2], ["nested/sp2", 4]]),
        ("tree/sp2", 4, [["tree/sp4", 1], ["tree/sp3", 3], ["tree/sp2", 4]]),
    ]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def test_downgrade_to_0003_and_upgrade_keep_nested_sibling_and_deep_savepoints(
    engine: sa.Engine,
) -> None:
    migrate.upgrade(engine)
    _write(engine, _PLAN)
    before = _paths(engine)
    assert before == {(s, t): p for s, rows in _PLAN.items() for t, p in rows}
    firings_before = _firings(engine)
    migrate.downgrade(engine, "0003")
    migrate.upgrade(engine)
    after = _paths(engine)
    assert _nesting(after) == _nesting(before)
    # the upgrade names savepoints by their rollbacks (0004's notes)
    assert after == {
        **before,
        ("nested", 2): "sp2",
        ("nested", 3): "sp2/sp1",
        ("nested", 4): "sp2",
        ("siblings", 2): "sp1",
        ("siblings", 3): "sp2",
        ("apart", 1): "sp1",
        ("apart", 3): "sp2",
        ("deep", 1): "sp3",
        ("deep", 2): "sp3/sp2",
        ("deep", 3): "sp3/sp2/sp1",
        ("deep", 4): "sp3/sp2",
        ("deep", 5): "sp3",
        ("tree", 1): "sp4",
        ("tree", 2): "sp4/sp1",
        ("tree", 3): "sp4/sp3",
        ("tree", 4): "sp4/sp3/sp2",
    }
    # firings keep their scope and constituents, their savepoint as the rows'
    firings_after = _firings(engine)
    assert [(s, t, c) for s, t, _, c in firings_after] == [
        (s, t, c) for s, t, _, c in firings_before
    ]
    assert [p for _, _, p, _ in firings_after] == [after[(s, t)] for s, t, _, _ in firings_before]
    # and once more: the same log
    migrate.downgrade(engine, "0003")
    migrate.upgrade(engine)
    assert _paths(engine) == after
    assert _firings(engine) == firings_after


def _detections(engine: sa.Engine) -> list[tuple[Any, ...]]:
    det = LocalEventDetector()
    for t in range(1, 7):
        det.explicit(f"E{t}")
    for a, b in ((1, 3), (2, 3), (2, 4), (3, 4), (1, 5), (2, 5), (4, 5), (3, 5)):
        det.rule(f"E{a};E{b}", f"E{a} ; E{b}", action=print)
    result = replay(engine, det)
    return sorted(
        (d["rule"], d["scope"], d["t_occ"], tuple(d["constituent_t_occs"])) for d in result.rows()
    )


#: The nesting the old form cannot tell from siblings: sp1 has no row before
#: sp2's (SAVEPOINT sp1; SAVEPOINT sp2; e2; ROLLBACK TO sp2; e3; ROLLBACK TO sp1).
_OUTER_LATER = {"later": [(1, None), (2, "sp1/sp2"), (3, "sp1"), (4, None)]}


def test_a_downgraded_and_upgraded_log_replays_as_before(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    _write(engine, {**_PLAN, **_OUTER_LATER})
    before = _detections(engine)
    # inside sp1, E2 is still there at E4 (only sp2 was rolled back); E2 was
    # rolled back before E3 in "later"
    assert ("E2;E4", "nested", 4, (2, 4)) in before
    assert not [d for d in before if d[1] == "later" and d[0] == "E2;E3"]
    migrate.downgrade(engine, "0003")
    migrate.upgrade(engine)
    assert _detections(engine) == before
    # "later" comes back as two siblings (0004's notes), which replay the same
    assert {k: p for k, p in _paths(engine).items() if k[0] == "later"} == {
        ("later", 1): None,
        ("later", 2): "sp1",
        ("later", 3): "sp2",
        ("later", 4): None,
    }


def _module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "m0004", migrate.script_directory() / "versions" / "0004_savepoint_rows.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rollback_numbers_put_enclosed_savepoints_first_and_read_back_as_nested() -> None:
    m = _module()
    numbers = m.rollback_numbers({"sp1": 4, "sp1/sp2": 3})
    assert numbers == {"sp1/sp2": 1, "sp1": 2}
    assert m.savepoint_paths({1: 3, 2: 2}) == {1: "sp2/sp1", 2: "sp2"}
    # an enclosing savepoint without rows of its own counts no rollback
    assert m.rollback_numbers({"sp1/sp2": 5, "sp1/sp3": 7}) == {"sp1/sp2": 1, "sp1/sp3": 2}
    assert m.rollback_numbers({"sp1": 1, "sp1/sp2": 2, "sp1/sp2/sp3": 3}) == {
        "sp1/sp2/sp3": 1,
        "sp1/sp2": 2,
        "sp1": 3,
    }


def test_scope_ids_differing_in_case_keep_their_own_savepoints(engine: sa.Engine) -> None:
    """MariaDB's collation takes ``Tx`` and ``tx`` for one id: the downgrade
    moves each row by its own."""
    migrate.upgrade(engine)
    plan: dict[str, list[tuple[int, str | None]]] = {
        "Tx": [(1, None), (2, "sp1"), (3, "sp1/sp2"), (4, None)],
        # other t_occs: MariaDB's unique (scope, t_first) ignores case too
        "tx": [(11, None), (12, "sp1/sp2"), (13, "sp1"), (14, "sp3"), (15, None)],
    }
    _write(engine, plan)
    migrate.downgrade(engine, "0003")
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT scope, t_occ FROM sentinel_events").all()
    assert sorted((s, t) for s, t in rows) == [
        ("Tx", 1),
        ("Tx", 4),
        ("Tx/sp1", 3),
        ("Tx/sp2", 2),
        ("tx", 11),
        ("tx", 15),
        ("tx/sp1", 12),
        ("tx/sp2", 13),
        ("tx/sp3", 14),
    ]
