"""A rule firing's partition key: the column and the indexes that find it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29

- ``<prefix>rule_firings.partition_key`` (nullable, at most 191 characters):
  for a firing of a partitioned rule (``E by key``), the detection's key value
  as canonical JSON text, outermost partition first (``[7]``, ``[7,"EU"]``,
  ``[{"$ref":["Order",[7]]}]``; see ``sentinel/log/partition.py``), else NULL.
- Indexes ``ix_<prefix>rule_firings_rule_key`` on ``(rule, partition_key,
  id)`` (a rule's firings of one key, newest first),
  ``ix_<prefix>rule_firings_key`` on ``(partition_key, id)`` (one key's
  firings of every rule, newest first) and ``ix_<prefix>rule_firings_fired_at``
  on ``fired_at`` (the web view's time ranges).

Data: rows already in the table keep every value; their key is NULL (the
rules' expressions are not in the log, so the key of an old firing cannot be
worked out). A downgrade drops the indexes and the column, and keeps the rows
with their other values.

Types are spelled out here, not imported from sentinel.log.tables: a revision is
frozen, the tables module describes only the newest revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_INDEXES = (
    ("rule_key", ["rule", "partition_key", "id"]),
    ("key", ["partition_key", "id"]),
    ("fired_at", ["fired_at"]),
)


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    table = f"{p}rule_firings"
    op.add_column(table, sa.Column("partition_key", sa.String(191), nullable=True), schema=schema)
    for name, columns in _INDEXES:
        op.create_index(f"ix_{table}_{name}", table, columns, schema=schema)


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    table = f"{p}rule_firings"
    for name, _columns in reversed(_INDEXES):
        op.drop_index(f"ix_{table}_{name}", table, schema=schema)
    op.drop_column(table, "partition_key", schema=schema)
