"""The outbox side of the service's batches: an entry per detection, written
in the batch's transaction (with the cursor's move: exactly once).

:class:`Enqueuer` makes the entries of a batch's detections before the
transaction (rows whose payload is already JSON text:
:class:`~sentinel.log.enqueue.OutboxRows`) and writes them all in it
(:func:`~sentinel.log.enqueue.insert_pending`: ``COPY`` on PostgreSQL,
multi-row ``INSERT`` elsewhere). A writer with a parameter policy or an
outbox key writes through its own path (:meth:`~sentinel.log.LogWriter.enqueue`),
which applies them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Connection

from sentinel.global_detector.detect import Detection
from sentinel.log import LogWriter, OutboxEntry
from sentinel.log.enqueue import OutboxRows, insert_pending
from sentinel.log.outbox import entry_for
from sentinel.rules import LocalEventDetector

__all__ = ["Enqueuer"]


class Enqueuer:
    """Outbox entries of ``rules``' detections, written by ``writer`` (its
    tables, its schema check) to a database of ``dialect`` (a dialect's name).
    Not thread-safe."""

    def __init__(self, rules: LocalEventDetector, writer: LogWriter, dialect: str) -> None:
        self.rules = rules
        self.writer = writer
        self._rows = OutboxRows(dialect, committed=True)

    def entry(self, d: Detection) -> OutboxEntry:
        """The :class:`~sentinel.log.OutboxEntry` of ``d``."""
        return entry_for(self.rules.rules[d.rule], d.occurrence, committed=True)

    def entries(self, detections: Iterable[Detection]) -> list[Any]:
        """The entries of ``detections``, in order, to hand to :meth:`write`
        (no I/O; raises for a parameter the outbox cannot store)."""
        rules = self.rules.rules
        if self.writer.policy or self.writer.signer is not None:
            return [self.entry(d) for d in detections]
        row = self._rows.row
        return [row(rules[d.rule], d.occurrence) for d in detections]

    def write(self, conn: Connection, entries: Sequence[Any]) -> list[str]:
        """Insert ``entries`` (from :meth:`entries`) on ``conn``, in its
        transaction; return their idempotency keys. Raises
        :class:`~sentinel.errors.LogWriteError` (a duplicate key: the
        detection was enqueued before) or
        :class:`~sentinel.errors.LogSchemaError`."""
        if not entries:
            return []
        if isinstance(entries[0], OutboxEntry):
            self.writer.enqueue(conn, entries)
            return [e.idempotency_key for e in entries]
        self.writer.check(conn)  # as LogWriter.enqueue checks the schema's revision
        insert_pending(conn, self.writer.tables, entries, datetime.now(UTC))
        return [e[1] for e in entries]
