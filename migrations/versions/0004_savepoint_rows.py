"""Rolled-back savepoints keep their transaction's scope, marked with the savepoint.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28

Until 0003, what a rolled-back savepoint took with it was logged under a scope id
of its own, ``<scope>/sp<n>`` (``n`` counting the transaction's rollbacks), and
firings made inside it named that scope and their constituents from it. Replay
then saw a separate aborted transaction, without the state its transaction had
before the savepoint, and a firing of a later transaction could name ``(scope,
t_occ)`` while the event log held ``(scope/sp<n>, t_occ)``.

From 0004 such rows keep their transaction's scope (their ``outcome`` stays
``aborted``) and ``events.savepoint`` / ``rule_firings.savepoint`` name the
savepoint whose rollback undid them, as a path from the outermost savepoint
open at that moment: ``sp1/sp3``.

Data, upgrade: each ``<scope>/sp<n>`` whose ``<scope>`` has rows of its own
moves back into ``<scope>`` with a path of the form ``spA/.../sp<n>``: savepoint
Y encloses X when Y was rolled back after X (a larger ``n``) and has a row
before X's first row. A savepoint that enclosed another but had no row before
it comes out as its sibling, which replays the same. Savepoints that were
released are not in the old rows and do not appear in the paths. Firings of
those scopes move likewise, their constituents renamed. Other scope ids ending
in ``/sp<n>`` (an application's own ``detector.begin("x/sp1")``) are left as
they are.

Data, downgrade: the reverse, in the form 0003 wrote: the rows of each
savepoint path of a transaction go to ``<scope>/sp<n>``, ``n`` counting that
transaction's rolled-back savepoints in the order of their rollbacks (the
``n`` the upgrade reads), not the path's last step (from 0004 on savepoints are
numbered in the order they began). A savepoint was rolled back after the last
row in it or in a savepoint it enclosed, and after the savepoints it enclosed:
so paths are numbered by that last row, an enclosed path before its enclosing
one. Firings with a savepoint move likewise, and constituents naming such rows
are renamed in every firing. Then the columns go. Downgrade and upgrade give back
the same nesting, the savepoints named by their rollback order, except where the
old form cannot tell: a savepoint that enclosed another but had no row before it
comes back as its sibling (see the upgrade), which replays the same; released
savepoints, and those rolled back with no row, leave no step in the paths.

Offline (``--sql``) the data steps cannot run (they read rows): only the
columns are added or dropped, and old rows keep their ``<scope>/sp<n>`` ids
(replay then treats them as before 0004).

Types are spelled out here, not imported from sentinel.log.tables: a revision is
frozen, the tables module describes only the newest revision.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SUB = re.compile(r"^(.+)/sp([0-9]+)$")
_CHUNK = 1000


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _events(schema: str | None, prefix: str) -> Any:
    return sa.table(
        f"{prefix}events",
        sa.column("id", sa.BigInteger()),
        sa.column("scope", sa.String(128)),
        sa.column("t_occ", sa.BigInteger()),
        sa.column("savepoint", sa.Text()),
        schema=schema,
    )


def _firings(schema: str | None, prefix: str) -> Any:
    return sa.table(
        f"{prefix}rule_firings",
        sa.column("id", sa.BigInteger()),
        sa.column("scope", sa.String(128)),
        sa.column("t_occ", sa.BigInteger()),
        sa.column("constituents", _json()),
        sa.column("savepoint", sa.Text()),
        schema=schema,
    )


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    op.add_column(
        f"{prefix}events", sa.Column("savepoint", sa.Text(), nullable=True), schema=schema
    )
    op.add_column(
        f"{prefix}rule_firings", sa.Column("savepoint", sa.Text(), nullable=True), schema=schema
    )
    if not op.get_context().as_sql:
        _rows_into_their_transactions(op.get_bind(), schema, prefix)


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    if not op.get_context().as_sql:
        _rows_into_sub_scopes(op.get_bind(), schema, prefix)
    # SQLite has dropped columns since 3.35 (ALTER TABLE ... DROP COLUMN).
    op.drop_column(f"{prefix}rule_firings", "savepoint", schema=schema)
    op.drop_column(f"{prefix}events", "savepoint", schema=schema)


def savepoint_paths(subs: dict[int, int]) -> dict[int, str]:
    """For one transaction's old sub-scopes, ``{n: first t_occ}``, the path of
    each (see the module docs)."""
    out = {}
    for n, first in subs.items():
        outer = sorted((f, m) for m, f in subs.items() if m > n and f < first)
        out[n] = "/".join([*(f"sp{m}" for _, m in outer), f"sp{n}"])
    return out


def _rows_into_their_transactions(conn: sa.Connection, schema: str | None, prefix: str) -> None:
    ev, fi = _events(schema, prefix), _firings(schema, prefix)
    firsts = conn.execute(
        sa.select(ev.c.scope, sa.func.min(ev.c.t_occ))
        .where(ev.c.scope.like("%/sp%"))
        .group_by(ev.c.scope)
    ).all()
    by_base: dict[str, dict[int, int]] = defaultdict(dict)
    for scope, first in firsts:
        m = _SUB.match(scope)
        if m is not None:
            by_base[m.group(1)][int(m.group(2))] = first
    if not by_base:
        return
    bases = list(by_base)
    present: set[str] = set()
    for i in range(0, len(bases), _CHUNK):
        part = bases[i : i + _CHUNK]
        present.update(
            conn.execute(sa.select(ev.c.scope).where(ev.c.scope.in_(part)).distinct()).scalars()
        )
    renamed: dict[str, tuple[str, str]] = {}  # old sub-scope -> (scope, path)
    for base in present:
        for n, path in savepoint_paths(by_base[base]).items():
            renamed[f"{base}/sp{n}"] = (base, path)
    for sub, (base, path) in renamed.items():
        conn.execute(sa.update(ev).where(ev.c.scope == sub).values(scope=base, savepoint=path))
    subs = list(renamed)
    for i in range(0, len(subs), _CHUNK):
        rows = conn.execute(
            sa.select(fi.c.id, fi.c.scope, fi.c.constituents).where(
                fi.c.scope.in_(subs[i : i + _CHUNK])
            )
        ).all()
        for fid, scope, constituents in rows:
            base, path = renamed[scope]
            named = [[renamed.get(s, (s, ""))[0], t] for s, t in constituents]
            conn.execute(
                sa.update(fi)
                .where(fi.c.id == fid)
                .values(scope=base, savepoint=path, constituents=named)
            )


def rollback_numbers(lasts: dict[str, int]) -> dict[str, int]:
    """For one transaction's savepoint paths, ``{path: t_occ of its last row}``,
    the number 0003 gave each: its place, from 1, in the order of the
    rollbacks (see the module docs)."""
    ends: dict[str, int] = {}  # path -> last row in it or in what it enclosed
    for path, last in lasts.items():
        steps = path.split("/")
        for i in range(1, len(steps) + 1):
            outer = "/".join(steps[:i])
            if ends.get(outer, last) <= last:
                ends[outer] = last
    order = sorted(lasts, key=lambda p: (ends[p], -p.count("/"), p))
    return {path: n for n, path in enumerate(order, 1)}


def _rows_into_sub_scopes(conn: sa.Connection, schema: str | None, prefix: str) -> None:
    ev, fi = _events(schema, prefix), _firings(schema, prefix)
    # Read in Python, not grouped in SQL: MariaDB's collation would take scope
    # ids that differ in case for one.
    rows = conn.execute(
        sa.select(ev.c.id, ev.c.scope, ev.c.t_occ, ev.c.savepoint).where(
            ev.c.savepoint.is_not(None)
        )
    ).all()
    frows = conn.execute(
        sa.select(fi.c.scope, fi.c.t_occ, fi.c.savepoint).where(fi.c.savepoint.is_not(None))
    ).all()
    if not rows and not frows:
        return
    lasts: dict[str, dict[str, int]] = defaultdict(dict)  # scope -> {path: last t_occ}
    for scope, t_occ, path in [(r.scope, r.t_occ, r.savepoint) for r in (*rows, *frows)]:
        known = lasts[scope].get(path)
        lasts[scope][path] = t_occ if known is None else max(known, t_occ)
    subs = {
        (scope, path): f"{scope}/sp{n}"
        for scope, paths in lasts.items()
        for path, n in rollback_numbers(paths).items()
    }
    moved: dict[tuple[str, int], str] = {}
    updates = []
    for row_id, scope, t_occ, path in rows:
        sub = moved[(scope, t_occ)] = subs[(scope, path)]
        updates.append({"row_id": row_id, "sub": sub})
    move = (
        sa.update(ev)
        .where(ev.c.id == sa.bindparam("row_id"))
        .values(scope=sa.bindparam("sub"), savepoint=None)
    )
    for i in range(0, len(updates), _CHUNK):
        conn.execute(move, updates[i : i + _CHUNK])
    last = None
    while True:
        q = sa.select(fi.c.id, fi.c.scope, fi.c.constituents, fi.c.savepoint)
        if last is not None:
            q = q.where(fi.c.id > last)
        page = conn.execute(q.order_by(fi.c.id).limit(_CHUNK)).all()
        if not page:
            return
        for fid, scope, constituents, path in page:
            named = [[moved.get((s, t), s), t] for s, t in constituents]
            if path is None and named == [list(c) for c in constituents]:
                continue
            values: dict[str, Any] = {"constituents": named}
            if path is not None:
                values["scope"] = subs[(scope, path)]
            conn.execute(sa.update(fi).where(fi.c.id == fid).values(**values))
        last = page[-1][0]
