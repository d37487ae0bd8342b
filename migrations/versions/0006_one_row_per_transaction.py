"""The event log holds one row per transaction; a view gives one row per occurrence.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29

- ``<prefix>event_batches``: one row per transaction (per write), its
  occurrences in the JSON column ``occurrences`` (one array per occurrence,
  ``[t_occ, event, ts, detected_ts, source_class, source_key, params]``, in
  ``t_occ`` order; ``detected_ts`` ``null`` when equal to ``ts``), with what
  the transaction has once: ``scope``, ``outcome``, ``savepoint``,
  ``commit_seq``, ``written_at``, ``process``, and ``t_first`` / ``t_last`` /
  ``n`` / ``at_min`` / ``at_max`` for lookups (see ``sentinel/log/tables.py``).
- ``<prefix>expired``: the archive marks (``scope``, ``t_occ``, ``expired_at``)
  that were ``events.expired_at``.
- The view ``<prefix>occurrences``: the columns and values of the old
  ``events`` table (``sentinel/log/views.py``).
- ``<prefix>events`` goes.

Data, upgrade: ``events`` is read in ``(scope, t_occ)`` order, a page at a
time; each scope's rows are grouped by ``(outcome, savepoint, commit_seq)`` (a
transaction's committed rows, each rolled-back savepoint's rows, the process
scope's rows) into batch rows of at most 5,000 occurrences, in ``t_occ`` order.
``written_at`` is the latest ``detected_at`` of the row's occurrences (the old
rows do not say when they were written), ``process`` is NULL. The
occurrences' values are carried over exactly: the ``params`` JSON text as the
database holds it, floats as Python's ``repr``. Rows with an ``expired_at``
give a mark in ``expired``. Memory is bounded by one page and one scope's
unfinished batch rows.

Data, downgrade: ``events`` is made again as 0005 had it and filled from the
view (``INSERT ... SELECT``, in batch-row order, so the new ids follow the
batch rows' and ``t_occ`` within them): ``at`` / ``detected_at`` are made from
``ts`` / ``detected_ts`` exactly as the 0005 writer made them, ``expired_at``
from ``expired``. Then the view and the new tables go. On MariaDB/MySQL
``events.source_key`` is made ``LONGTEXT`` (0005 had ``TEXT``, at most 65,535
bytes: the writer takes longer keys, which a ``TEXT`` column would cut or
refuse), and the view is replaced first by ``sentinel.log.views``' (a view
made by an earlier 0006 cut ``source_key`` to 65,535 characters).

Offline (``--sql``): the downgrade's data step is SQL and is written out; the
upgrade's is not (it reads the rows and writes their JSON in Python), so an
offline upgrade creates the new tables and the view and DROPS ``events`` WITH
ITS ROWS: run it on an empty log only (a new database), or upgrade online.

Types are spelled out here, not imported from sentinel.log.tables: a revision is
frozen, the tables module describes only the newest revision. The view's SQL is
``sentinel.log.views``' (the same on every revision that has the view); a
revision that changes the view must copy this one's SQL here first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

from sentinel.log.tables import log_tables
from sentinel.log.views import create_view_sql, drop_view_sql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: Most occurrences in one batch row.
BATCH = 5_000
#: Rows of ``events`` read per query.
PAGE = 5_000

_EVENT_COLUMNS = (
    "scope",
    "t_occ",
    "event",
    "at",
    "detected_at",
    "ts",
    "detected_ts",
    "source_class",
    "source_key",
    "params",
    "outcome",
    "expired_at",
    "savepoint",
    "commit_seq",
)


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _utc() -> sa.types.TypeEngine[Any]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _long_text() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def _dialect() -> str:
    return str(op.get_context().dialect.name)


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    op.create_table(
        f"{p}event_batches",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(128), nullable=False),
        sa.Column("t_first", sa.BigInteger(), nullable=False),
        sa.Column("t_last", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("at_min", _utc(), nullable=False),
        sa.Column("at_max", _utc(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("savepoint", sa.Text(), nullable=True),
        sa.Column("commit_seq", sa.BigInteger(), nullable=True),
        sa.Column("written_at", _utc(), nullable=False),
        sa.Column("process", sa.String(255), nullable=True),
        sa.Column("occurrences", _json(), nullable=False),
        sa.UniqueConstraint("scope", "t_first", name=f"uq_{p}event_batches_scope_t_first"),
        schema=schema,
    )
    op.create_index(f"ix_{p}event_batches_t_first", f"{p}event_batches", ["t_first"], schema=schema)
    op.create_index(f"ix_{p}event_batches_at_max", f"{p}event_batches", ["at_max"], schema=schema)
    op.create_index(
        f"ix_{p}event_batches_commit_seq", f"{p}event_batches", ["commit_seq"], schema=schema
    )
    op.create_table(
        f"{p}expired",
        sa.Column("scope", sa.String(128), primary_key=True),
        sa.Column("t_occ", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("expired_at", _utc(), nullable=False),
        schema=schema,
    )
    if op.get_context().as_sql:
        op.execute(f"-- {p}events: its rows are not moved offline (see migration 0006's notes)")
    else:
        _events_into_batches(op.get_bind(), schema, prefix)
    op.drop_table(f"{p}events", schema=schema)
    op.execute(create_view_sql(_dialect(), log_tables(schema, prefix)))


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    op.create_table(
        f"{p}events",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(128), nullable=False),
        sa.Column("t_occ", sa.BigInteger(), nullable=False),
        sa.Column("event", sa.String(255), nullable=False),
        sa.Column("at", _utc(), nullable=False),
        sa.Column("detected_at", _utc(), nullable=False),
        sa.Column("ts", sa.Double(), nullable=False),
        sa.Column("detected_ts", sa.Double(), nullable=False),
        sa.Column("source_class", sa.String(255), nullable=True),
        sa.Column("source_key", _long_text(), nullable=True),
        sa.Column("params", _json(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("expired_at", _utc(), nullable=True),
        sa.Column("savepoint", sa.Text(), nullable=True),
        sa.Column("commit_seq", sa.BigInteger(), nullable=True),
        sa.UniqueConstraint("scope", "t_occ", name=f"uq_{p}events_scope_t_occ"),
        schema=schema,
    )
    op.create_index(f"ix_{p}events_t_occ", f"{p}events", ["t_occ"], schema=schema)
    op.create_index(f"ix_{p}events_at", f"{p}events", ["at"], schema=schema)
    op.create_index(f"ix_{p}events_commit_seq", f"{p}events", ["commit_seq"], schema=schema)
    events = sa.table(f"{p}events", *(sa.column(c) for c in _EVENT_COLUMNS), schema=schema)
    if _dialect() in ("mysql", "mariadb"):  # the view without an earlier 0006's 64 KB cut
        made = create_view_sql(_dialect(), log_tables(schema, prefix))
        op.execute(made.replace("CREATE ", "CREATE OR REPLACE ", 1))
    view = sa.table(
        f"{p}occurrences", *(sa.column(c) for c in ("id", *_EVENT_COLUMNS)), schema=schema
    )
    op.execute(
        sa.insert(events).from_select(
            list(_EVENT_COLUMNS),
            sa.select(*(view.c[c] for c in _EVENT_COLUMNS)).order_by(view.c.id, view.c.t_occ),
        )
    )
    op.execute(drop_view_sql(_dialect(), log_tables(schema, prefix)))
    op.drop_table(f"{p}expired", schema=schema)
    op.drop_table(f"{p}event_batches", schema=schema)


# -- the upgrade's data move ------------------------------------------------------------


def _old_events(schema: str | None, prefix: str) -> Any:
    return sa.table(
        f"{prefix}events",
        sa.column("scope", sa.String(128)),
        sa.column("t_occ", sa.BigInteger()),
        sa.column("event", sa.String(255)),
        sa.column("at", _utc()),
        sa.column("detected_at", _utc()),
        sa.column("ts", sa.Double()),
        sa.column("detected_ts", sa.Double()),
        sa.column("source_class", sa.String(255)),
        sa.column("source_key", sa.Text()),
        sa.column("params", _json()),
        sa.column("outcome", sa.String(16)),
        sa.column("expired_at", _utc()),
        sa.column("savepoint", sa.Text()),
        sa.column("commit_seq", sa.BigInteger()),
        schema=schema,
    )


def _new_tables(schema: str | None, prefix: str) -> tuple[Any, Any]:
    batches = sa.table(
        f"{prefix}event_batches",
        sa.column("scope", sa.String(128)),
        sa.column("t_first", sa.BigInteger()),
        sa.column("t_last", sa.BigInteger()),
        sa.column("n", sa.Integer()),
        sa.column("at_min", _utc()),
        sa.column("at_max", _utc()),
        sa.column("outcome", sa.String(16)),
        sa.column("savepoint", sa.Text()),
        sa.column("commit_seq", sa.BigInteger()),
        sa.column("written_at", _utc()),
        sa.column("process", sa.String(255)),
        sa.column("occurrences", sa.Text()),  # JSON text made here
        schema=schema,
    )
    expired = sa.table(
        f"{prefix}expired",
        sa.column("scope", sa.String(128)),
        sa.column("t_occ", sa.BigInteger()),
        sa.column("expired_at", _utc()),
        schema=schema,
    )
    return batches, expired


def _pages(conn: sa.Connection, schema: str | None, prefix: str) -> Iterator[list[Any]]:
    """The rows of ``events`` in ``(scope, t_occ)`` order (unique), a page at a
    time, each with ``params`` as the JSON text the database holds."""
    ev = _old_events(schema, prefix)
    c = ev.c
    name = conn.dialect.name
    params = (
        sa.cast(c.params, sa.Text) if name == "postgresql" else sa.type_coerce(c.params, sa.Text)
    )
    cols = [col for col in ev.c if col.name != "params"]
    base = sa.select(*cols, params.label("params")).order_by(c.scope, c.t_occ).limit(PAGE)
    last: tuple[str, int] | None = None
    while True:
        q = base
        if last is not None:
            if name in ("mysql", "mariadb"):  # its range optimizer reads this form
                q = q.where(
                    sa.or_(c.scope > last[0], sa.and_(c.scope == last[0], c.t_occ > last[1]))
                )
            else:
                q = q.where(sa.tuple_(c.scope, c.t_occ) > sa.tuple_(*last))
        rows = conn.execute(q).all()
        if not rows:
            return
        yield rows
        last = (rows[-1].scope, rows[-1].t_occ)


def _number(value: float, tag: bool) -> str:
    """A float as JSON text that reads back as the same float; on PostgreSQL
    (``tag``) the floats ``jsonb`` cannot keep are tagged as LogJSON tags them."""
    value = float(value)
    if tag and (abs(value) >= 1e16 or (value == 0.0 and str(value).startswith("-"))):
        return json.dumps({"$float": repr(value)})
    return repr(value)


def _text(value: str | None) -> str:
    return "null" if value is None else json.dumps(value)


class _Batch:
    """One batch row in the making."""

    __slots__ = ("at_max", "at_min", "elements", "key", "t_first", "t_last", "written_at")

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self.elements: list[str] = []
        self.t_first = self.t_last = 0
        self.at_min: datetime | None = None
        self.at_max: datetime | None = None
        self.written_at: datetime | None = None

    def add(self, row: Any, tag: bool) -> None:
        if not self.elements:
            self.t_first = row.t_occ
        self.t_last = row.t_occ
        ts, dts = row.ts, row.detected_ts
        self.elements.append(
            f"[{int(row.t_occ)},{json.dumps(row.event)},{_number(ts, tag)},"
            f"{'null' if dts == ts else _number(dts, tag)},"
            f"{_text(row.source_class)},{_text(row.source_key)},{row.params}]"
        )
        at, detected = row.at, row.detected_at
        self.at_min = at if self.at_min is None or at < self.at_min else self.at_min
        self.at_max = at if self.at_max is None or at > self.at_max else self.at_max
        if self.written_at is None or detected > self.written_at:
            self.written_at = detected

    def values(self) -> dict[str, Any]:
        scope, outcome, savepoint, commit_seq = self.key
        return {
            "scope": scope,
            "t_first": self.t_first,
            "t_last": self.t_last,
            "n": len(self.elements),
            "at_min": self.at_min,
            "at_max": self.at_max,
            "outcome": outcome,
            "savepoint": savepoint,
            "commit_seq": commit_seq,
            "written_at": self.written_at,
            "process": None,
            "occurrences": "[" + ",".join(self.elements) + "]",
        }


def _events_into_batches(conn: sa.Connection, schema: str | None, prefix: str) -> None:
    batches, expired = _new_tables(schema, prefix)
    tag = conn.dialect.name == "postgresql"
    insert = sa.insert(batches)
    if tag:  # the JSON text into jsonb
        insert = insert.values(
            occurrences=sa.cast(sa.bindparam("occurrences", type_=sa.Text), postgresql.JSONB)
        )
    done: list[dict[str, Any]] = []
    pending = 0  # occurrences in ``done``
    marks: list[dict[str, Any]] = []
    open_: dict[tuple[Any, ...], _Batch] = {}  # the current scope's unfinished rows
    scope: str | None = None

    def flush(rows: list[_Batch]) -> None:
        nonlocal pending
        for b in sorted(rows, key=lambda b: b.t_first):
            done.append(b.values())
            pending += len(b.elements)

    def write() -> None:
        nonlocal pending
        if done:
            conn.execute(insert, done)
            done.clear()
            pending = 0
        if marks:
            conn.execute(sa.insert(expired), marks)
            marks.clear()

    for page in _pages(conn, schema, prefix):
        for row in page:
            if row.scope != scope:
                flush(list(open_.values()))
                open_.clear()
                scope = row.scope
            key = (row.scope, row.outcome, row.savepoint, row.commit_seq)
            batch = open_.get(key)
            if batch is None:
                batch = open_[key] = _Batch(key)
            batch.add(row, tag)
            if len(batch.elements) >= BATCH:
                flush([open_.pop(key)])
            if row.expired_at is not None:
                marks.append({"scope": row.scope, "t_occ": row.t_occ, "expired_at": row.expired_at})
        if pending >= BATCH or len(marks) >= PAGE:
            write()
    flush(list(open_.values()))
    write()
