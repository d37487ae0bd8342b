"""The event log's tables (SQLAlchemy Core).

Seven tables, named ``<prefix>event_batches``, ``<prefix>expired``,
``<prefix>rule_firings``, ``<prefix>outbox``, ``<prefix>commit_counter``,
``<prefix>global_cursors`` and ``<prefix>rule_switches`` (the prefix is
``sentinel_`` unless configured), the view ``<prefix>occurrences``, plus the
version table ``<prefix>alembic_version`` that sentinel's migrations keep apart
from any application's own alembic history.

``event_batches`` -- one row per transaction (per write)
    A transaction's occurrences travel in one row, written in the transaction
    at its commit (a very long transaction's flushes, and what happens after
    its commit, add rows of their own; the process scope's occurrences are
    written in batches). ``id`` (insertion order), ``scope`` (the detection
    scope: a transaction id, or ``process:<hex>`` for events outside any
    transaction), ``t_first`` / ``t_last`` (the smallest and largest ``t_occ``
    in the row), ``n`` (how many occurrences), ``at_min`` / ``at_max`` (the
    earliest and latest occurrence time, for time-range queries),
    ``outcome`` (``committed``, ``aborted``, or NULL for the process scope),
    ``savepoint`` (NULL, except for a row holding what the rollback of a
    savepoint undid: that savepoint as a path from the outermost savepoint
    open then, ``sp1/sp3``, savepoints numbered per transaction in the order
    they began; such rows are ``aborted`` and keep their transaction's scope),
    ``commit_seq`` (see below), ``written_at`` (when the row was written, UTC)
    and ``process`` (``host:pid`` of the writer), and ``occurrences``: a JSON
    array with one array per occurrence, in ``t_occ`` order,
    ``[t_occ, event, ts, detected_ts, source_class, source_key, params]``:
    ``ts`` / ``detected_ts`` are the POSIX floats the detector used
    (``detected_ts`` is ``null`` when it equals ``ts``), ``source_class`` /
    ``source_key`` the :class:`ObjectRef` (the key as JSON text; both ``null``
    for events without a source), ``params`` the parameters in the tagged form
    of :mod:`sentinel.params`. An occurrence's identity is ``(scope, t_occ)``:
    rows of one scope never share a ``t_occ``, and ``(scope, t_first)`` is
    unique.

``expired`` -- archive marks
    ``(scope, t_occ)`` and ``expired_at``: when the occurrence's lifespan ended
    in a rule or event class that archives (see ``docs/bitemporal.md``). An
    occurrence keeps its first mark.

``occurrences`` (a view) -- one row per occurrence
    ``id`` (the row of ``event_batches`` holding it), ``scope``, ``t_occ``,
    ``event``, ``at`` / ``detected_at`` (the two times as UTC datetimes),
    ``ts``, ``detected_ts``, ``source_class``, ``source_key``, ``params``,
    ``outcome``, ``expired_at``, ``savepoint`` and ``commit_seq``: the columns
    the log had when it held one row per occurrence (schema revision 0005), made
    with SQLite's ``json_each``, PostgreSQL's ``jsonb_array_elements`` and
    MariaDB's ``JSON_TABLE`` (:mod:`sentinel.log.views`).

``rule_firings`` -- one row per rule execution (or attempt)
    rule name, scope and ``t_occ`` of the detection, ``constituents`` (JSON list
    of ``[scope, t_occ]``), coupling mode, status (see :class:`FiringStatus`),
    error text, ``fired_at`` and ``finished_at``, ``savepoint``: for a rule
    run that the rollback of a savepoint undid, that savepoint (as for events),
    else NULL, and ``partition_key``: for a partitioned rule (``E by key``), the
    detection's key value as canonical JSON text (:mod:`sentinel.log.partition`),
    else NULL. Indexed by ``(scope, t_occ)``, ``rule``, ``(rule, partition_key,
    id)`` (a rule's firings of one key, newest first), ``(partition_key, id)``
    (one key's firings of every rule) and ``fired_at`` (time ranges).

``event_batches.commit_seq``, ``commit_counter``, ``global_cursors`` -- commit order
    every transaction that writes log rows numbers them, in commit order (see
    :mod:`sentinel.global_detector.order`); the global detectors' cursors and
    leases. PostgreSQL and MariaDB number with the sequence
    ``<prefix>commit_seq`` (MariaDB since revision 0009).

``rule_switches`` -- enabling and disabling a global detector's rules
    one row per request (:mod:`sentinel.log.switches`): ``detector`` (the
    global detector's name, its cursor's), ``rule``, ``enabled`` (what was
    asked), ``requested_at`` / ``requested_by``; once the service handled it,
    ``position`` (the commit number after which it applied it: the cursor's
    position then), ``applied_at`` / ``applied_by`` (the instance), and
    ``refused`` (why it was not applied, else NULL). Rows with a ``position``
    and no ``refused`` are applied again at that position by everything that
    rebuilds the detector from the log.

``outbox`` -- detached rules waiting to run (written in the triggering commit)
    rule, a unique ``idempotency_key``, the trigger's ``scope`` / ``t_occ``, the
    detection as JSON ``payload``, ``status`` (see :class:`OutboxStatus`),
    ``attempts``, ``next_attempt_at`` (when a pending row may run; for a running
    row, when its claim expires; NULL: due now, no live claim), ``claimed_by``
    (the worker running it),
    ``last_error``, ``created_at`` and ``done_at``.

Types are portable: JSON is JSONB on PostgreSQL; datetimes are
``TIMESTAMP WITH TIME ZONE`` on PostgreSQL, ``DATETIME(6)`` holding UTC on
MariaDB/MySQL and text on SQLite, always bound and returned as aware UTC
datetimes (:class:`UTCDateTime`). Indexed strings stay short enough for
MariaDB's index limits with utf8mb4.

The migrations in ``migrations/`` (top level; ``sentinel/migrations`` when
installed) create exactly these tables; a test compares the two. Changing a table
here means adding a migration and bumping :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from functools import lru_cache
from math import copysign
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Dialect

from sentinel.errors import LogConfigError

__all__ = [
    "DEFAULT_PREFIX",
    "SCHEMA_REVISIONS",
    "SCHEMA_VERSION",
    "FiringStatus",
    "LogJSON",
    "LogTables",
    "OutboxStatus",
    "Outcome",
    "UTCDateTime",
    "log_tables",
]

#: The migration revision (in sentinel's own version table) this code expects.
SCHEMA_VERSION: Final = "0009"
#: Every revision sentinel's migrations have had, oldest first; the last is
#: :data:`SCHEMA_VERSION`. A revision not in this list is unknown to this code.
SCHEMA_REVISIONS: Final[tuple[str, ...]] = (
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
)

DEFAULT_PREFIX: Final = "sentinel_"

#: Maximum lengths, checked by the writer before anything is sent.
SCOPE_LENGTH: Final = 128
NAME_LENGTH: Final = 255
KEY_LENGTH: Final = 191
#: Longest table-name prefix: index names must stay within MariaDB's 64 and
#: PostgreSQL's 63 characters.
MAX_PREFIX: Final = 24


class Outcome(enum.StrEnum):
    """How the transaction an occurrence belongs to ended (NULL: process scope)."""

    COMMITTED = "committed"
    ABORTED = "aborted"


class FiringStatus(enum.StrEnum):
    """What became of one rule execution."""

    FIRED = "fired"  #: condition held and the action ran (immediate, deferred)
    CONDITION_FALSE = "condition_false"  #: condition did not hold; no action
    FAILED = "failed"  #: condition or action raised (``error`` says what)
    PENDING = "pending"  #: detached: waiting for its own transaction
    DONE = "done"  #: detached: the action's transaction committed


class OutboxStatus(enum.StrEnum):
    """Life cycle of a detached rule's outbox row."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A datetime stored as UTC and returned as an aware UTC datetime.

    Binds aware datetimes (converted to UTC) or naive ones (taken as UTC).
    PostgreSQL stores ``TIMESTAMP WITH TIME ZONE``; MariaDB/MySQL ``DATETIME(6)``
    (microseconds; the server's time zone never applies); SQLite ISO text.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is UTC:  # the common case (the writer makes these)
            return value if dialect.name == "postgresql" else value.replace(tzinfo=None)
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
            if dialect.name != "postgresql":
                value = value.replace(tzinfo=None)
        elif dialect.name == "postgresql":
            value = value.replace(tzinfo=UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class LogJSON(sa.types.TypeDecorator[Any]):
    """JSON (JSONB on PostgreSQL) that returns every value it was given.

    JSONB stores numbers as ``numeric``, which forgets that ``1e+16`` was a float
    (it comes back as the int ``10000000000000000``) and the sign of ``-0.0``.
    On PostgreSQL such floats are written in the tagged form of
    :mod:`sentinel.params` (``{"$float": "1e+16"}``), which every reader decodes.
    """

    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.JSONB())
        return dialect.type_descriptor(sa.JSON())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if dialect.name == "postgresql":
            return _jsonb_exact(value)
        return value


def _jsonb_exact(value: Any) -> Any:
    t = type(value)
    if t is float:
        if abs(value) >= 1e16 or (value == 0.0 and copysign(1.0, value) < 0):
            return {"$float": repr(value)}
        return value
    if t is dict:
        return {k: _jsonb_exact(v) for k, v in value.items()}
    if t is list:
        return [_jsonb_exact(v) for v in value]
    return value


def _id() -> sa.types.TypeEngine[int]:
    # SQLite only auto-increments an INTEGER PRIMARY KEY, not BIGINT.
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class LogTables:
    """The log's tables for one schema and table-name prefix.

    Get instances from :func:`log_tables` (cached: equal arguments give the same
    object). ``metadata`` holds the tables; ``batches``, ``expired``,
    ``firings`` and ``outbox`` are the :class:`~sqlalchemy.Table` objects
    (creating the metadata creates the view :attr:`view_name` too); ``version_table`` is
    the name of sentinel's alembic version table.
    """

    def __init__(self, schema: str | None = None, prefix: str = DEFAULT_PREFIX) -> None:
        self.schema = schema
        self.prefix = prefix
        self.version_table = f"{prefix}alembic_version"
        self.metadata = md = sa.MetaData(schema=schema)
        p = prefix
        #: One row per transaction (per write): see the module docs.
        self.batches = sa.Table(
            f"{p}event_batches",
            md,
            sa.Column("id", _id(), primary_key=True, autoincrement=True),
            sa.Column("scope", sa.String(SCOPE_LENGTH), nullable=False),
            sa.Column("t_first", sa.BigInteger(), nullable=False),
            sa.Column("t_last", sa.BigInteger(), nullable=False),
            sa.Column("n", sa.Integer(), nullable=False),
            sa.Column("at_min", UTCDateTime(), nullable=False),
            sa.Column("at_max", UTCDateTime(), nullable=False),
            sa.Column("outcome", sa.String(16), nullable=True),
            sa.Column("savepoint", sa.Text(), nullable=True),
            sa.Column("commit_seq", sa.BigInteger(), nullable=True),
            sa.Column("written_at", UTCDateTime(), nullable=False),
            sa.Column("process", sa.String(NAME_LENGTH), nullable=True),
            sa.Column("occurrences", LogJSON(), nullable=False),
            sa.UniqueConstraint("scope", "t_first", name=f"uq_{p}event_batches_scope_t_first"),
            sa.Index(f"ix_{p}event_batches_t_first", "t_first"),
            sa.Index(f"ix_{p}event_batches_at_max", "at_max"),
            sa.Index(f"ix_{p}event_batches_commit_seq", "commit_seq"),
        )
        #: Archive marks: ``(scope, t_occ) -> expired_at``.
        self.expired = sa.Table(
            f"{p}expired",
            md,
            sa.Column("scope", sa.String(SCOPE_LENGTH), primary_key=True),
            sa.Column("t_occ", sa.BigInteger(), primary_key=True, autoincrement=False),
            sa.Column("expired_at", UTCDateTime(), nullable=False),
        )
        #: The per-occurrence view's name (see :mod:`sentinel.log.views`).
        self.view_name = f"{p}occurrences"
        sa.event.listen(md, "after_create", self._create_view)
        sa.event.listen(md, "before_drop", self._drop_view)
        #: SQLite and MySQL: the one row whose ``n`` is the last commit sequence
        #: number handed out (PostgreSQL and MariaDB use the sequence; on
        #: MariaDB a writer holds this row's lock, shared, while it takes its
        #: number, and a reader that needs every holder gone takes it
        #: exclusively: :mod:`sentinel.log.commit_order`).
        self.commit_counter = sa.Table(
            f"{p}commit_counter",
            md,
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
            sa.Column("n", sa.BigInteger(), nullable=False),
        )
        # Its one row, as the migration that made it inserts it.
        sa.event.listen(self.commit_counter, "after_create", _first_counter_row)
        #: PostgreSQL and MariaDB: the commit sequence (numbers taken without
        #: a lock need not follow commit order; see ``docs/global.md``).
        self.commit_sequence_name = f"{p}commit_seq"
        seq = f'"{schema}"."{p}commit_seq"' if schema else f'"{p}commit_seq"'
        create = sa.DDL(f"CREATE SEQUENCE IF NOT EXISTS {seq}")  # type: ignore[no-untyped-call]
        drop = sa.DDL(f"DROP SEQUENCE IF EXISTS {seq}")  # type: ignore[no-untyped-call]
        sa.event.listen(md, "after_create", create.execute_if(dialect="postgresql"))
        sa.event.listen(md, "before_drop", drop.execute_if(dialect="postgresql"))
        mseq = f"`{schema}`.`{p}commit_seq`" if schema else f"`{p}commit_seq`"
        # without a cache: the reader reads the last number handed out from it
        mcreate = sa.DDL(f"CREATE SEQUENCE IF NOT EXISTS {mseq} NOCACHE")  # type: ignore[no-untyped-call]
        mdrop = sa.DDL(f"DROP SEQUENCE IF EXISTS {mseq}")  # type: ignore[no-untyped-call]
        sa.event.listen(md, "after_create", mcreate.execute_if(callable_=_on_mariadb))
        sa.event.listen(md, "before_drop", mdrop.execute_if(callable_=_on_mariadb))
        self.global_cursors = sa.Table(
            f"{p}global_cursors",
            md,
            sa.Column("name", sa.String(NAME_LENGTH), primary_key=True),
            sa.Column("position", sa.BigInteger(), nullable=False),
            sa.Column("holder", sa.String(NAME_LENGTH), nullable=True),
            sa.Column("lease_until", UTCDateTime(), nullable=True),
            sa.Column("log_time", sa.Double(), nullable=True),
            sa.Column("updated_at", UTCDateTime(), nullable=False),
        )
        #: Requests to enable or disable a global detector's rule, and where
        #: the service applied each (:mod:`sentinel.log.switches`).
        self.rule_switches = sa.Table(
            f"{p}rule_switches",
            md,
            sa.Column("id", _id(), primary_key=True, autoincrement=True),
            sa.Column("detector", sa.String(NAME_LENGTH), nullable=False),
            sa.Column("rule", sa.String(NAME_LENGTH), nullable=False),
            sa.Column("enabled", sa.Boolean(), nullable=False),
            sa.Column("requested_at", UTCDateTime(), nullable=False),
            sa.Column("requested_by", sa.String(NAME_LENGTH), nullable=True),
            sa.Column("position", sa.BigInteger(), nullable=True),
            sa.Column("applied_at", UTCDateTime(), nullable=True),
            sa.Column("applied_by", sa.String(NAME_LENGTH), nullable=True),
            sa.Column("refused", sa.Text(), nullable=True),
            sa.Index(f"ix_{p}rule_switches_detector_position", "detector", "position"),
        )
        self.firings = sa.Table(
            f"{p}rule_firings",
            md,
            sa.Column("id", _id(), primary_key=True, autoincrement=True),
            sa.Column("rule", sa.String(NAME_LENGTH), nullable=False),
            sa.Column("scope", sa.String(SCOPE_LENGTH), nullable=False),
            sa.Column("t_occ", sa.BigInteger(), nullable=False),
            sa.Column("constituents", LogJSON(), nullable=False),
            sa.Column("coupling", sa.String(32), nullable=False),
            sa.Column("status", sa.String(32), nullable=False),
            sa.Column("error", sa.Text(), nullable=True),
            sa.Column("fired_at", UTCDateTime(), nullable=False),
            sa.Column("finished_at", UTCDateTime(), nullable=True),
            sa.Column("savepoint", sa.Text(), nullable=True),
            sa.Column("partition_key", sa.String(KEY_LENGTH), nullable=True),
            sa.Index(f"ix_{p}rule_firings_scope_t_occ", "scope", "t_occ"),
            sa.Index(f"ix_{p}rule_firings_rule", "rule"),
            sa.Index(f"ix_{p}rule_firings_rule_key", "rule", "partition_key", "id"),
            sa.Index(f"ix_{p}rule_firings_key", "partition_key", "id"),
            sa.Index(f"ix_{p}rule_firings_fired_at", "fired_at"),
        )
        self.outbox = sa.Table(
            f"{p}outbox",
            md,
            sa.Column("id", _id(), primary_key=True, autoincrement=True),
            sa.Column("rule", sa.String(NAME_LENGTH), nullable=False),
            sa.Column("idempotency_key", sa.String(KEY_LENGTH), nullable=False),
            sa.Column("scope", sa.String(SCOPE_LENGTH), nullable=False),
            sa.Column("t_occ", sa.BigInteger(), nullable=False),
            sa.Column("payload", LogJSON(), nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False),
            sa.Column("next_attempt_at", UTCDateTime(), nullable=True),
            sa.Column("claimed_by", sa.String(NAME_LENGTH), nullable=True),
            sa.Column("last_error", sa.Text(), nullable=True),
            sa.Column("created_at", UTCDateTime(), nullable=False),
            sa.Column("done_at", UTCDateTime(), nullable=True),
            sa.UniqueConstraint("idempotency_key", name=f"uq_{p}outbox_idempotency_key"),
            sa.Index(f"ix_{p}outbox_status_next", "status", "next_attempt_at"),
        )

    def _create_view(self, target: Any, connection: sa.Connection, **kw: Any) -> None:
        from sentinel.log.views import create_view_sql

        connection.exec_driver_sql(create_view_sql(connection.dialect.name, self))

    def _drop_view(self, target: Any, connection: sa.Connection, **kw: Any) -> None:
        from sentinel.log.views import drop_view_sql

        connection.exec_driver_sql(drop_view_sql(connection.dialect.name, self))

    @property
    def names(self) -> tuple[str, ...]:
        """The log tables' names (without schema)."""
        return (
            self.batches.name,
            self.expired.name,
            self.firings.name,
            self.outbox.name,
            self.commit_counter.name,
            self.global_cursors.name,
            self.rule_switches.name,
        )

    def qualified(self, name: str) -> str:
        """``schema.name`` or ``name``, for messages."""
        return f"{self.schema}.{name}" if self.schema else name

    def __repr__(self) -> str:
        return f"<LogTables schema={self.schema!r} prefix={self.prefix!r}>"


def _first_counter_row(table: sa.Table, connection: sa.Connection, **kw: Any) -> None:
    connection.execute(table.insert().values(id=1, n=0))


def _on_mariadb(
    ddl: Any,
    target: Any,
    bind: Any,
    tables: Any = None,
    state: Any = None,
    *,
    dialect: sa.Dialect,
    **kw: Any,
) -> bool:
    """Whether the DDL runs on MariaDB (which numbers commits with a sequence)."""
    return sequenced_mariadb(dialect)


def sequenced_mariadb(dialect: sa.Dialect) -> bool:
    """Whether ``dialect`` speaks to MariaDB with sequences (10.3 and later),
    where commits are numbered with the sequence ``<prefix>commit_seq`` under
    a shared lock of the counter row (MySQL, which has no sequences, takes the
    counter row's exclusive lock instead)."""
    return bool(getattr(dialect, "is_mariadb", False)) and bool(
        getattr(dialect, "supports_sequences", False)
    )


@lru_cache(maxsize=32)
def log_tables(schema: str | None = None, prefix: str = DEFAULT_PREFIX) -> LogTables:
    """The log's tables in ``schema`` (``None``: the connection's default) with
    table names starting with ``prefix``.

    >>> log_tables().batches.name
    'sentinel_event_batches'
    >>> log_tables(prefix="audit_").version_table
    'audit_alembic_version'
    """
    if (
        not prefix
        or len(prefix) > MAX_PREFIX
        or not prefix.isascii()
        or not prefix.replace("_", "").isalnum()
    ):
        raise LogConfigError(
            f"a table-name prefix must be 1 to {MAX_PREFIX} ASCII letters, digits and '_', "
            f"not {prefix!r}"
        )
    return LogTables(schema, prefix)
