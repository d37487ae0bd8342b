"""BiCEPL processor system tables: programs, classes, potential clock ticks,
purge work space, tick log.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01

The tables of a program's event classes are not created here: the processor
creates them when a program is installed (sentinel.bicep.install). Types are
spelled out, not imported from sentinel.bicep.tables.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _utc() -> sa.types.TypeEngine[Any]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = f"{prefix}bicep_"
    op.create_table(
        f"{p}programs",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("dialect", sa.String(32), nullable=False),
        sa.Column("chronon", sa.BigInteger(), nullable=False),
        sa.Column("options", sa.Text(), nullable=False),
        sa.Column("last_tick", sa.BigInteger(), nullable=True),
        sa.Column("next_eid", sa.BigInteger(), nullable=False),
        sa.Column("installed_at", _utc(), nullable=False),
        schema=schema,
    )
    op.create_table(
        f"{p}classes",
        sa.Column("program", sa.String(64), primary_key=True),
        sa.Column("ident", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("mutable", sa.Boolean(), nullable=False),
        sa.Column("lifespan", sa.BigInteger(), nullable=True),
        sa.Column("stratum", sa.Integer(), nullable=False),
        sa.Column("definition", sa.Text(), nullable=False),
        sa.Column("stale", sa.Boolean(), nullable=False),
        schema=schema,
    )
    op.create_table(
        f"{p}potential_ticks",
        sa.Column("program", sa.String(64), primary_key=True),
        sa.Column("class_ident", sa.String(64), primary_key=True),
        sa.Column("tick", sa.BigInteger(), primary_key=True),
        schema=schema,
    )
    op.create_index(
        f"ix_{p}potential_ticks_tick", f"{p}potential_ticks", ["program", "tick"], schema=schema
    )
    op.create_table(
        f"{p}purge",
        sa.Column("program", sa.String(64), primary_key=True),
        sa.Column("class_ident", sa.String(64), primary_key=True),
        sa.Column("eid", sa.BigInteger(), primary_key=True),
        schema=schema,
    )
    op.create_table(
        f"{p}ticks",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("program", sa.String(64), nullable=False),
        sa.Column("tick", sa.BigInteger(), nullable=False),
        sa.Column("announcements", sa.Integer(), nullable=False),
        sa.Column("changes", sa.Integer(), nullable=False),
        sa.Column("actions", sa.Integer(), nullable=False),
        sa.Column("purged", sa.Integer(), nullable=False),
        sa.Column("started_at", _utc(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        schema=schema,
    )
    op.create_index(f"ix_{p}ticks_program_tick", f"{p}ticks", ["program", "tick"], schema=schema)


def downgrade(schema: str | None = None, prefix: str = "sentinel_") -> None:
    p = f"{prefix}bicep_"
    op.drop_table(f"{p}ticks", schema=schema)
    op.drop_table(f"{p}purge", schema=schema)
    op.drop_table(f"{p}potential_ticks", schema=schema)
    op.drop_table(f"{p}classes", schema=schema)
    op.drop_table(f"{p}programs", schema=schema)
