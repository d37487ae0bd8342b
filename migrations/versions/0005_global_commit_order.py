"""Commit order for the global event detector: a commit sequence and cursors.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26

- ``events.commit_seq`` (nullable, indexed): the number of the database
  transaction that wrote the row, in commit order, with no number visible before
  a smaller one (see ``sentinel/global_detector/order.py``). Rows written before
  this revision keep NULL: the global detector starts after them.
- ``commit_counter`` (SQLite, MariaDB: one row, the last number handed out;
  created everywhere, so the tables are the same on every backend) and, on
  PostgreSQL, the sequence ``<prefix>commit_seq``.
- ``global_cursors``: one row per global detector (its position in commit
  order, the lease of the instance that acts, the log time it reached).

A downgrade drops all three and the column (the numbers and cursors are lost;
the events stay).

Types are spelled out here, not imported from sentinel.log.tables: a revision is
frozen, the tables module describes only the newest revision.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _utc() -> sa.types.TypeEngine[Any]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _qualified(schema: str | None, name: str) -> str:
    return f'"{schema}"."{name}"' if schema else f'"{name}"'


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    op.add_column(
        f"{p}events", sa.Column("commit_seq", sa.BigInteger(), nullable=True), schema=schema
    )
    op.create_index(f"ix_{p}events_commit_seq", f"{p}events", ["commit_seq"], schema=schema)
    counter = op.create_table(
        f"{p}commit_counter",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        schema=schema,
    )
    op.bulk_insert(counter, [{"id": 1, "n": 0}])
    op.create_table(
        f"{p}global_cursors",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(255), nullable=True),
        sa.Column("lease_until", _utc(), nullable=True),
        sa.Column("log_time", sa.Double(), nullable=True),
        sa.Column("updated_at", _utc(), nullable=False),
        schema=schema,
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE SEQUENCE {_qualified(schema, p + 'commit_seq')}")


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP SEQUENCE IF EXISTS {_qualified(schema, p + 'commit_seq')}")
    op.drop_table(f"{p}global_cursors", schema=schema)
    op.drop_table(f"{p}commit_counter", schema=schema)
    op.drop_index(f"ix_{p}events_commit_seq", f"{p}events", schema=schema)
    op.drop_column(f"{p}events", "commit_seq", schema=schema)
