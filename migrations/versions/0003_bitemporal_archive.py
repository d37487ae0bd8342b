"""The bitemporal archive mark: when an occurrence expired from detection.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27

``events.expired_at`` (nullable): set when an occurrence's lifespan ended in a
rule or event class that archives (``archive=True``), so a purged occurrence is
kept in the log, marked, instead of lost. Existing rows keep NULL; a downgrade
drops the column and its marks (the rows themselves stay).

Types are spelled out here, not imported from sentinel.log.tables: a revision is
frozen, the tables module describes only the newest revision.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _utc() -> sa.types.TypeEngine[Any]:
    # UTC instants: timestamptz on PostgreSQL, DATETIME(6) holding UTC on MariaDB.
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    op.add_column(f"{prefix}events", sa.Column("expired_at", _utc(), nullable=True), schema=schema)


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    # SQLite has dropped columns since 3.35 (ALTER TABLE ... DROP COLUMN).
    op.drop_column(f"{prefix}events", "expired_at", schema=schema)
