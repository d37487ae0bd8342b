"""The event log, rule firings and the detached-rule outbox.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Types are spelled out here, not imported from sentinel.log.tables: a revision is
frozen, the tables module describes only the newest revision.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _utc() -> sa.types.TypeEngine[Any]:
    # UTC instants: timestamptz on PostgreSQL, DATETIME(6) holding UTC on MariaDB.
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
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
        sa.Column("source_key", sa.Text(), nullable=True),
        sa.Column("params", _json(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.UniqueConstraint("scope", "t_occ", name=f"uq_{p}events_scope_t_occ"),
        schema=schema,
    )
    op.create_index(f"ix_{p}events_t_occ", f"{p}events", ["t_occ"], schema=schema)
    op.create_index(f"ix_{p}events_at", f"{p}events", ["at"], schema=schema)

    op.create_table(
        f"{p}rule_firings",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("rule", sa.String(255), nullable=False),
        sa.Column("scope", sa.String(128), nullable=False),
        sa.Column("t_occ", sa.BigInteger(), nullable=False),
        sa.Column("constituents", _json(), nullable=False),
        sa.Column("coupling", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("fired_at", _utc(), nullable=False),
        sa.Column("finished_at", _utc(), nullable=True),
        schema=schema,
    )
    op.create_index(
        f"ix_{p}rule_firings_scope_t_occ", f"{p}rule_firings", ["scope", "t_occ"], schema=schema
    )
    op.create_index(f"ix_{p}rule_firings_rule", f"{p}rule_firings", ["rule"], schema=schema)

    op.create_table(
        f"{p}outbox",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("rule", sa.String(255), nullable=False),
        sa.Column("idempotency_key", sa.String(191), nullable=False),
        sa.Column("scope", sa.String(128), nullable=False),
        sa.Column("t_occ", sa.BigInteger(), nullable=False),
        sa.Column("payload", _json(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _utc(), nullable=True),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("done_at", _utc(), nullable=True),
        sa.UniqueConstraint("idempotency_key", name=f"uq_{p}outbox_idempotency_key"),
        schema=schema,
    )
    op.create_index(
        f"ix_{p}outbox_status_next", f"{p}outbox", ["status", "next_attempt_at"], schema=schema
    )


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = prefix
    op.drop_table(f"{p}outbox", schema=schema)
    op.drop_table(f"{p}rule_firings", schema=schema)
    op.drop_table(f"{p}events", schema=schema)
