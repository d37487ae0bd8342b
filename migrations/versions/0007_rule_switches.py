"""Rule switches: requests to enable or disable a global detector's rule.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29

- ``<prefix>rule_switches``: one row per request (``detector``, ``rule``,
  ``enabled``, ``requested_at``, ``requested_by``) and, once the global
  detector service applied it, the commit number after which it did
  (``position``), when and by which instance (``applied_at``,
  ``applied_by``), or why it refused it (``refused``); indexed by
  ``(detector, position)`` (see ``sentinel/log/tables.py`` and
  ``docs/global.md``, "Switching a rule").

A downgrade drops the table and its rows: switches already applied are then
forgotten, and a global detector that rebuilds its memory from the log runs
its rules as its rule set defines them.

Types are spelled out here, not imported from sentinel.log.tables: a revision is
frozen, the tables module describes only the newest revision.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _utc() -> sa.types.TypeEngine[Any]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    op.create_table(
        f"{p}rule_switches",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("detector", sa.String(255), nullable=False),
        sa.Column("rule", sa.String(255), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("requested_at", _utc(), nullable=False),
        sa.Column("requested_by", sa.String(255), nullable=True),
        sa.Column("position", sa.BigInteger(), nullable=True),
        sa.Column("applied_at", _utc(), nullable=True),
        sa.Column("applied_by", sa.String(255), nullable=True),
        sa.Column("refused", sa.Text(), nullable=True),
        schema=schema,
    )
    op.create_index(
        f"ix_{p}rule_switches_detector_position",
        f"{p}rule_switches",
        ["detector", "position"],
        schema=schema,
    )


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    op.drop_index(f"ix_{p}rule_switches_detector_position", f"{p}rule_switches", schema=schema)
    op.drop_table(f"{p}rule_switches", schema=schema)
