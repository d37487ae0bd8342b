"""The persisted event log: tables, writer, readers (SQLAlchemy Core only).

- :mod:`~sentinel.log.tables`: the tables and the schema revision this code expects;
- :class:`LogWriter`: writes a transaction's occurrences, rule firings and outbox
  entries on its connection (one ``executemany`` per table), an aborted
  transaction's separately;
- :class:`LogPolicy`: per-event exclusion and redaction of parameters;
- :class:`LogReader`: streams occurrences back in replay order, in chunks;
- :mod:`~sentinel.log.partition`: a rule firing's partition key as the log
  stores it, and the texts a filter value may stand for;
- :mod:`sentinel.log.outbox`: the detached-rule outbox's store (entries, claims,
  leases timed by the database server's clock), for the ORM layer's workers and
  the global detector; :mod:`sentinel.log.enqueue`: outbox entries written many
  to a statement (the global detector's batches);
- :mod:`sentinel.log.migrate` (imported on demand: it loads alembic): upgrade,
  downgrade and inspect the tables with the migrations shipped in
  ``migrations/`` (top level; ``sentinel/migrations`` when installed).

This layer depends on :mod:`sentinel.occurrence` and :mod:`sentinel.params` only.
"""

from sentinel.log.policy import REDACTED, TOO_LARGE, LogPolicy
from sentinel.log.reader import LogReader, read_occurrences
from sentinel.log.records import (
    Firing,
    LoggedOccurrence,
    OutboxEntry,
    decode_occurrences,
    encode_occurrences,
    idempotency_key,
)
from sentinel.log.schema import check_schema, schema_revision
from sentinel.log.tables import (
    SCHEMA_VERSION,
    FiringStatus,
    LogTables,
    OutboxStatus,
    Outcome,
    log_tables,
)
from sentinel.log.writer import LogWriter

__all__ = [
    "REDACTED",
    "SCHEMA_VERSION",
    "TOO_LARGE",
    "Firing",
    "FiringStatus",
    "LogPolicy",
    "LogReader",
    "LogTables",
    "LogWriter",
    "LoggedOccurrence",
    "OutboxEntry",
    "OutboxStatus",
    "Outcome",
    "check_schema",
    "decode_occurrences",
    "encode_occurrences",
    "idempotency_key",
    "log_tables",
    "read_occurrences",
    "schema_revision",
]
