"""The BiCEPL processor's system tables, declared next to the log's.

sentinel's migrations create them with the log's tables (revision 0002), and
:func:`sentinel.log.migrate.upgrade` creates a new database's tables from these
declarations and :mod:`sentinel.log.tables`' in one step, so they live in this
layer; :mod:`sentinel.bicep.tables` documents them and re-exports them.
"""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa

from sentinel.log.tables import DEFAULT_PREFIX, UTCDateTime

__all__ = ["SystemTables", "system_tables"]


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class SystemTables:
    """The system tables for one schema and prefix (what each holds:
    :mod:`sentinel.bicep.tables`)."""

    def __init__(self, schema: str | None = None, prefix: str = DEFAULT_PREFIX) -> None:
        self.schema = schema
        self.prefix = prefix
        self.metadata = md = sa.MetaData(schema=schema)
        p = f"{prefix}bicep_"
        self.programs = sa.Table(
            f"{p}programs",
            md,
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("digest", sa.String(64), nullable=False),
            sa.Column("source", sa.Text(), nullable=False),
            sa.Column("dialect", sa.String(32), nullable=False),
            sa.Column("chronon", sa.BigInteger(), nullable=False),
            sa.Column("options", sa.Text(), nullable=False),
            sa.Column("last_tick", sa.BigInteger(), nullable=True),
            sa.Column("next_eid", sa.BigInteger(), nullable=False),
            sa.Column("installed_at", UTCDateTime(), nullable=False),
        )
        self.classes = sa.Table(
            f"{p}classes",
            md,
            sa.Column("program", sa.String(64), primary_key=True),
            sa.Column("ident", sa.String(64), primary_key=True),
            sa.Column("name", sa.String(64), nullable=False),
            sa.Column("kind", sa.String(16), nullable=False),
            sa.Column("mutable", sa.Boolean(), nullable=False),
            sa.Column("lifespan", sa.BigInteger(), nullable=True),
            sa.Column("stratum", sa.Integer(), nullable=False),
            sa.Column("definition", sa.Text(), nullable=False),
            sa.Column("stale", sa.Boolean(), nullable=False),
        )
        self.potential_ticks = sa.Table(
            f"{p}potential_ticks",
            md,
            sa.Column("program", sa.String(64), primary_key=True),
            sa.Column("class_ident", sa.String(64), primary_key=True),
            sa.Column("tick", sa.BigInteger(), primary_key=True),
            sa.Index(f"ix_{p}potential_ticks_tick", "program", "tick"),
        )
        self.purge = sa.Table(
            f"{p}purge",
            md,
            sa.Column("program", sa.String(64), primary_key=True),
            sa.Column("class_ident", sa.String(64), primary_key=True),
            sa.Column("eid", sa.BigInteger(), primary_key=True),
        )
        self.ticks = sa.Table(
            f"{p}ticks",
            md,
            sa.Column("id", _id(), primary_key=True, autoincrement=True),
            sa.Column("program", sa.String(64), nullable=False),
            sa.Column("tick", sa.BigInteger(), nullable=False),
            sa.Column("announcements", sa.Integer(), nullable=False),
            sa.Column("changes", sa.Integer(), nullable=False),
            sa.Column("actions", sa.Integer(), nullable=False),
            sa.Column("purged", sa.Integer(), nullable=False),
            sa.Column("started_at", UTCDateTime(), nullable=False),
            sa.Column("seconds", sa.Float(), nullable=False),
            sa.Index(f"ix_{p}ticks_program_tick", "program", "tick"),
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.metadata.sorted_tables)


@lru_cache(maxsize=32)
def system_tables(schema: str | None = None, prefix: str = DEFAULT_PREFIX) -> SystemTables:
    """The processor's system tables in ``schema`` with ``prefix`` (cached)."""
    return SystemTables(schema, prefix)
