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

Data, downgrade: the reverse: rows with a savepoint go to
``<scope>/sp<n>`` (``n`` from the path's last step), as do firings with one, and
constituents naming such rows are renamed in every firing. Then the columns go.

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


def _rows_into_sub_scopes(conn: sa.Connection, schema: str | None, prefix: str) -> None:
    ev, fi = _events(schema, prefix), _firings(schema, prefix)
    moved: dict[tuple[str, int], str] = {}
    paths: set[tuple[str, str]] = set()
    for scope, t_occ, path in conn.execute(
        sa.select(ev.c.scope, ev.c.t_occ, ev.c.savepoint).where(ev.c.savepoint.is_not(None))
    ):
        sub = f"{scope}/{path.rsplit('/', 1)[-1]}"
        moved[(scope, t_occ)] = sub
        paths.add((scope, path))
    if (
        not moved
        and conn.execute(sa.select(fi.c.id).where(fi.c.savepoint.is_not(None))).first() is None
    ):
        return
    for scope, path in paths:
        conn.execute(
            sa.update(ev)
            .where(ev.c.scope == scope, ev.c.savepoint == path)
            .values(scope=f"{scope}/{path.rsplit('/', 1)[-1]}", savepoint=None)
        )
    last = None
    while True:
        q = sa.select(fi.c.id, fi.c.scope, fi.c.constituents, fi.c.savepoint)
        if last is not None:
            q = q.where(fi.c.id > last)
        rows = conn.execute(q.order_by(fi.c.id).limit(_CHUNK)).all()
        if not rows:
            return
        for fid, scope, constituents, path in rows:
            named = [[moved.get((s, t), s), t] for s, t in constituents]
            if path is None and named == [list(c) for c in constituents]:
                continue
            values: dict[str, Any] = {"constituents": named}
            if path is not None:
                values["scope"] = f"{scope}/{path.rsplit('/', 1)[-1]}"
            conn.execute(sa.update(fi).where(fi.c.id == fid).values(**values))
        last = rows[-1][0]
