"""The processor's tables (SQLAlchemy Core).

System tables, created by sentinel's migrations (``migrations/versions``) next
to the event log, named ``<prefix>bicep_...`` (the prefix is the log's,
``sentinel_`` by default):

``bicep_programs``
    one row per installed program: name, version, digest and text, chronon,
    options, the last tick processed and the next event id (the thesis's
    ``S_System`` and its dynamic tables).
``bicep_classes``
    one row per event class of an installed program: kind, mutability,
    lifespan, stratum, attributes and keys (``S_SituationClass`` and
    ``S_SituationClassAttribute``), and ``stale`` (a constituent was purged: derive
    it at the next tick).
``bicep_potential_ticks``
    the global occurrence-time optimization (4.1.4): the ticks at which some
    class has an event whose occurrence time arrives.
``bicep_purge``
    the events a tick is about to purge (work space of the expiration pass).
``bicep_ticks``
    the processor's log: one row per tick processed, with its counts and times
    (``S_ProcessorLog``).

Per program, created when it is installed (:mod:`sentinel.bicep.install`),
``<prefix><program>_<kind>_<class>``:

====  ==========================================================================
kind  table
====  ==========================================================================
i     inbox: announcements not yet read (the application may insert rows here)
n     as-of-now: one row per live event (key), its current version
h     history: every version read or derived (a revocation has no occTime)
v     as-of-now view: the live events' times and attributes (for your queries)
a     archive: purged history (only with archiving)
c     changes of the tick being processed (old and new values side by side)
s     staging: a complex class's query result at the tick being processed
l     lineage: which events each complex event was derived from
x     actions: one table per action, one row per firing (``_x_<action>``)
====  ==========================================================================

Times are integer seconds since the epoch (UTC) in every dialect.
"""

from __future__ import annotations

import decimal
import hashlib
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from sentinel.bicep import model as m
from sentinel.bicep.compiler import CompiledClass, CompiledProgram, Kind
from sentinel.bicep.sqlpart import EID
from sentinel.log.system_tables import SystemTables, system_tables
from sentinel.log.tables import DEFAULT_PREFIX

__all__ = [
    "ClassTables",
    "ProgramTables",
    "SystemTables",
    "program_tables",
    "system_tables",
]

#: Longest table name sentinel creates (MariaDB allows 64, PostgreSQL 63).
MAX_NAME: Final = 63
#: The expiration time of an event whose lifespan is unbounded (LIFESPAN(-1)).
UNBOUNDED: Final = 2**62
#: Length of a text key column with no length given (fits MariaDB's index limits).
KEY_TEXT_LENGTH: Final = 191


def index_name(table: str, suffix: str) -> str:
    """``ix_<table>_<suffix>``, shortened with a digest of itself when longer
    than a name may be (PostgreSQL would refuse it, MariaDB too)."""
    name = f"ix_{table}_{suffix}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME - len(digest) - 1]}_{digest}"


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


# -- per program ------------------------------------------------------------------------------
def sa_type(
    kind: Kind, t: m.SqlType | None = None, *, key: bool = False
) -> sa.types.TypeEngine[Any]:
    """The column type for an attribute (or action parameter) of ``kind``."""
    if kind == "integer":
        return sa.BigInteger()
    if kind == "numeric":
        if t is not None and t.precision is not None:
            return ExactDecimal(t.precision, t.scale or 0)
        # A double everywhere: MariaDB's plain FLOAT has single precision, and
        # PostgreSQL's NUMERIC keeps 15 of a float's 17 digits.
        return sa.Double()
    if kind == "real":
        return sa.Double()
    if kind == "boolean":
        return sa.Boolean()
    length = t.length if t is not None else None
    if length is None:
        return ExactText(KEY_TEXT_LENGTH, indexed=True) if key else ExactText()
    return ExactText(length, indexed=key)


#: The most significant digits a double holds exactly, decimal to double and back.
_DOUBLE_DIGITS: Final = 15
_WIDE: Final = decimal.Context(prec=200)


class ExactDecimal(sa.types.TypeDecorator[decimal.Decimal]):
    """``NUMERIC(p, s)``, exact on every backend: a :class:`~decimal.Decimal`
    of ``scale`` decimals in, the same out, zero never negative.

    PostgreSQL and MariaDB store a ``DECIMAL(p, s)``. SQLite has no decimal
    type: a value of at most 15 digits is a ``REAL`` there (every such number
    survives a double, and reading it rounds it to ``scale`` decimals again),
    so SQLite computes and compares with it as a number; a wider one is stored
    as its text, exact, which SQLite compares as text (``docs/bicepl.md``,
    *Limits*). ``precision=None``: any number a backend holds exactly (an
    action's parameter: PostgreSQL's ``NUMERIC``, text elsewhere; it is never
    compared in SQL).
    """

    impl = sa.Numeric
    cache_ok = True

    def __init__(self, precision: int | None = None, scale: int | None = None) -> None:
        super().__init__(precision, scale, asdecimal=True)
        self.precision = precision
        self.scale = scale

    def _as_text(self, dialect: sa.Dialect) -> bool:
        if self.precision is None:
            return dialect.name != "postgresql"
        return dialect.name == "sqlite" and self.precision > _DOUBLE_DIGITS

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if self._as_text(dialect):
            return dialect.type_descriptor(sa.Text())
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.Double())
        return dialect.type_descriptor(sa.Numeric(self.precision, self.scale, asdecimal=True))

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None or isinstance(value, bool):
            return value
        exact = self._exact(value)
        if exact is None:
            return value  # not a number: the database says what it thinks of it
        if self._as_text(dialect):
            return str(exact)
        return float(exact) if dialect.name == "sqlite" else exact

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None or isinstance(value, bool):
            return value
        exact = self._exact(value)
        # (what is not a number, written into an inbox by hand, is rejected by
        # the tick that reads it)
        return value if exact is None else exact

    def _exact(self, value: Any) -> decimal.Decimal | None:
        try:
            if isinstance(value, float):
                exact = decimal.Decimal(repr(value))
            elif isinstance(value, (int, str, decimal.Decimal)):
                exact = decimal.Decimal(value)
            else:
                return None
        except decimal.InvalidOperation:
            return None
        if not exact.is_finite():
            return None
        if self.scale is not None:
            exact = exact.quantize(
                decimal.Decimal(1).scaleb(-self.scale), decimal.ROUND_HALF_UP, _WIDE
            )
        return exact.copy_abs() if exact.is_zero() else exact


class ExactText(sa.types.TypeDecorator[str]):
    """Text that compares as Python's strings do, on every backend.

    MariaDB's and MySQL's default collations ignore case and trailing spaces:
    the keys ``'Milk'``, ``'milk'`` and ``'Milk '`` of three events would be
    one row of the as-of-now table's primary key there, and ``new.v = 'milk'``
    would hold for ``'MILK'``. There the column gets the binary collation
    without padding (``utf8mb4_nopad_bin``; MySQL's ``utf8mb4_0900_bin``), as
    text compares on PostgreSQL and SQLite. ``length``: ``VARCHAR(length)``, or
    ``TEXT`` when ``None``.

    There a column that is not part of an index (``indexed``) is ``TEXT`` of
    any length: InnoDB counts every byte a ``VARCHAR(n)`` may hold (four a
    character) against its row size (8126 bytes in a page), so a class of 20
    ``VARCHAR(60)`` attributes, twice in its change table, would not fit. The
    length is the announcement's check (:mod:`sentinel.bicep.values`).
    """

    impl = sa.Text
    cache_ok = True

    def __init__(self, length: int | None = None, *, indexed: bool = False) -> None:
        super().__init__()
        self.length = length
        self.indexed = indexed

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        collation = None
        if dialect.name == "mysql":
            mariadb = getattr(dialect, "is_mariadb", False)
            collation = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
            if not self.indexed:
                return dialect.type_descriptor(sa.Text(collation=collation))
        if self.length is None:
            return dialect.type_descriptor(sa.Text(collation=collation))
        return dialect.type_descriptor(sa.String(self.length, collation=collation))


@dataclass
class ClassTables:
    """The tables of one event class."""

    cls: CompiledClass
    inbox: sa.Table | None
    now: sa.Table
    history: sa.Table
    archive: sa.Table | None
    changes: sa.Table
    staging: sa.Table | None
    lineage: sa.Table | None

    @property
    def all(self) -> list[sa.Table]:
        return [
            t
            for t in (
                self.inbox,
                self.now,
                self.history,
                self.archive,
                self.changes,
                self.staging,
                self.lineage,
            )
            if t is not None
        ]


class ProgramTables:
    """The tables of one installed program (see the module docs)."""

    def __init__(
        self,
        program: CompiledProgram,
        *,
        schema: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        archive: bool = False,
    ) -> None:
        self.program = program
        self.metadata = md = sa.MetaData(schema=schema)
        self.schema = schema
        self.base = f"{prefix}{program.name}_"
        self.classes: dict[str, ClassTables] = {}
        for cls in program:
            self.classes[cls.ident] = self._class(md, cls, archive)
        self.actions: dict[str, sa.Table] = {}
        for ident, sig in program.actions.items():
            cols = [
                sa.Column(
                    f"p{i + 1}",
                    ExactDecimal() if sig.decimals and sig.decimals[i] else sa_type(k),
                    nullable=True,
                )
                for i, k in enumerate(sig.kinds)
            ]
            self.actions[ident] = sa.Table(
                self.name("x", ident),
                md,
                sa.Column("id", _id(), primary_key=True, autoincrement=True),
                sa.Column("bicep_tick", sa.BigInteger(), nullable=False),
                sa.Column("class_ident", sa.String(64), nullable=False),
                sa.Column(EID, sa.BigInteger(), nullable=False),
                sa.Column("stmt", sa.Integer(), nullable=False),
                sa.Column("occtime", sa.BigInteger(), nullable=True),
                sa.Column("dettime", sa.BigInteger(), nullable=True),
                sa.Column("published", sa.Integer(), nullable=False, default=0),
                *cols,
                sa.Index(index_name(self.name("x", ident), "eid"), "class_ident", EID),
                sa.Index(index_name(self.name("x", ident), "tick"), "bicep_tick"),
            )

    def name(self, kind: str, ident: str) -> str:
        return f"{self.base}{kind}_{ident}"

    def qualified(self, table: sa.Table) -> str:
        return f"{self.schema}.{table.name}" if self.schema else table.name

    def _attrs(
        self, cls: CompiledClass, prefix: str = "", *, keys_bounded: bool = False
    ) -> list[sa.Column[Any]]:
        keys = {k.lower() for k in cls.definition.keys}
        return [
            sa.Column(
                prefix + a.ident,
                sa_type(a.type.kind, a.type, key=keys_bounded and a.ident in keys),
                nullable=True,
            )
            for a in cls.definition.attributes
        ]

    def _class(self, md: sa.MetaData, cls: CompiledClass, archive: bool) -> ClassTables:
        ident = cls.ident
        keys = [k.lower() for k in cls.definition.keys]
        inbox = None
        if not cls.complex:
            inbox = sa.Table(
                self.name("i", ident),
                md,
                sa.Column("id", _id(), primary_key=True, autoincrement=True),
                sa.Column("occtime", sa.BigInteger(), nullable=True),
                sa.Column("dettime", sa.BigInteger(), nullable=False),
                sa.Column("revoked", sa.Integer(), nullable=False, default=0),
                *self._attrs(cls, keys_bounded=True),
                sa.Index(index_name(self.name("i", ident), "det"), "dettime"),
            )
        # autoincrement=False: a lone integer key would be MariaDB's
        # AUTO_INCREMENT column, which stores a key of 0 as its next number.
        now_cols = [
            sa.Column(
                c.name,
                c.type,
                nullable=c.name not in keys,
                primary_key=c.name in keys,
                autoincrement=False,
            )
            for c in self._attrs(cls, keys_bounded=True)
        ]
        now = sa.Table(
            self.name("n", ident),
            md,
            sa.Column(EID, sa.BigInteger(), nullable=False, unique=True),
            sa.Column("occtime", sa.BigInteger(), nullable=False),
            sa.Column("dettime", sa.BigInteger(), nullable=False),
            sa.Column("bicep_occ_tick", sa.BigInteger(), nullable=False, index=True),
            sa.Column("bicep_base_exp", sa.BigInteger(), nullable=False),
            sa.Column("bicep_exp", sa.BigInteger(), nullable=False, index=True),
            *now_cols,
        )

        def history_cols() -> list[sa.Column[Any]]:
            return [
                sa.Column(EID, sa.BigInteger(), nullable=False, index=True),
                sa.Column("bicep_tick", sa.BigInteger(), nullable=False),
                sa.Column("occtime", sa.BigInteger(), nullable=True),
                sa.Column("dettime", sa.BigInteger(), nullable=False),
                sa.Column("revoked", sa.Integer(), nullable=False),
                *self._attrs(cls),
            ]

        history = sa.Table(
            self.name("h", ident),
            md,
            sa.Column("id", _id(), primary_key=True, autoincrement=True),
            *history_cols(),
            sa.Index(index_name(self.name("h", ident), "revoked"), "revoked", "bicep_tick"),
        )
        arch = None
        if archive:
            arch = sa.Table(
                self.name("a", ident),
                md,
                sa.Column("id", _id(), primary_key=True, autoincrement=True),
                *history_cols(),
                sa.Column("archived_tick", sa.BigInteger(), nullable=False),
            )
        changes = sa.Table(
            self.name("c", ident),
            md,
            sa.Column(EID, sa.BigInteger(), primary_key=True, autoincrement=False),
            sa.Column("touched", sa.Integer(), nullable=False),
            sa.Column("o_present", sa.Integer(), nullable=False),
            sa.Column("n_present", sa.Integer(), nullable=False),
            sa.Column("o_occtime", sa.BigInteger(), nullable=True),
            sa.Column("o_dettime", sa.BigInteger(), nullable=True),
            sa.Column("o_occ_tick", sa.BigInteger(), nullable=True),
            sa.Column("n_occtime", sa.BigInteger(), nullable=True),
            sa.Column("n_dettime", sa.BigInteger(), nullable=True),
            sa.Column("n_occ_tick", sa.BigInteger(), nullable=True),
            *self._attrs(cls, "o_"),
            *self._attrs(cls, "n_"),
        )
        staging = lineage = None
        if cls.complex:
            assert cls.query is not None
            staging = sa.Table(
                self.name("s", ident),
                md,
                sa.Column("occtime", sa.BigInteger(), nullable=True),
                *self._attrs(cls, keys_bounded=True),  # an index on the keys
                *[
                    sa.Column(f"bicep_dep_{i}", sa.BigInteger(), nullable=True)
                    for i in range(self.lineage_width(cls))
                ],
                sa.Column("bicep_rn", sa.BigInteger(), nullable=True),
                sa.Index(index_name(self.name("s", ident), "key"), *keys),
            )
            lineage = sa.Table(
                self.name("l", ident),
                md,
                sa.Column(EID, sa.BigInteger(), nullable=False, index=True),
                sa.Column("dep_class", sa.String(64), nullable=False),
                sa.Column("dep_eid", sa.BigInteger(), nullable=False),
                sa.Index(index_name(self.name("l", ident), "dep"), "dep_class", "dep_eid"),
            )
        return ClassTables(cls, inbox, now, history, arch, changes, staging, lineage)

    def views(self) -> dict[str, str]:
        """The as-of-now view of each class, ``<prefix><program>_v_<class>``: its
        live events with ``occtime``, ``dettime`` and the attributes (name ->
        ``CREATE VIEW`` statement)."""
        out: dict[str, str] = {}
        for ident, t in self.classes.items():
            name = self.name("v", ident)
            q = f"{self.schema}.{name}" if self.schema else name
            cols = ", ".join(
                ["occtime", "dettime", *(a.ident for a in t.cls.definition.attributes)]
            )
            out[name] = f"CREATE VIEW {q} AS SELECT {cols} FROM {self.qualified(t.now)}"
        return out

    def lineage_width(self, cls: CompiledClass) -> int:
        """How many lineage columns ``cls``'s physical query has (0: none)."""
        from sentinel.bicep.sqlpart import render_query

        assert cls.query is not None
        rendered = render_query(
            cls.query, physical=True, table_of=lambda c: self.name("n", c), schema=self.schema
        )
        return len(rendered.lineage or ())

    def physical_query(self, cls: CompiledClass) -> tuple[str, tuple[str, ...] | None]:
        from sentinel.bicep.sqlpart import render_query

        assert cls.query is not None
        rendered = render_query(
            cls.query, physical=True, table_of=lambda c: self.name("n", c), schema=self.schema
        )
        return rendered.sql, rendered.lineage

    @property
    def tables(self) -> list[sa.Table]:
        return list(self.metadata.sorted_tables)


def program_tables(
    program: CompiledProgram,
    *,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    archive: bool = False,
) -> ProgramTables:
    """The tables of ``program`` (not created: see :mod:`sentinel.bicep.install`)."""
    return ProgramTables(program, schema=schema, prefix=prefix, archive=archive)
