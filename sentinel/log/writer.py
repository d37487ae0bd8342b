"""Writing occurrences, rule firings and outbox entries to the log.

A :class:`LogWriter` turns a batch of occurrences into rows (validating them and
applying the parameter :class:`~sentinel.log.policy.LogPolicy`) before it sends
anything, then inserts each table's rows with one ``executemany`` call: one
statement, and one round trip where the driver allows it (psycopg 3 pipelines
``executemany``; PyMySQL rewrites it into a multi-row ``INSERT``; SQLite runs
in-process).

A committed transaction's occurrences are written on the transaction's own
connection (:meth:`LogWriter.write`), so the log and the data commit together; an
aborted transaction's occurrences are written afterwards in a short transaction of
their own (:meth:`LogWriter.write_aborted`).

Before the first write through an engine the writer checks the log's schema
revision once (see :func:`~sentinel.log.schema.check_schema`) and remembers the
answer for that engine.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from sentinel.errors import LogSchemaError, LogWriteError
from sentinel.log.policy import LogPolicy
from sentinel.log.records import Firing, OutboxEntry, encode_key, encode_params
from sentinel.log.schema import check_schema
from sentinel.log.tables import (
    DEFAULT_PREFIX,
    NAME_LENGTH,
    SCOPE_LENGTH,
    LogTables,
    Outcome,
    log_tables,
)
from sentinel.occurrence import ObjectRef, Occurrence

__all__ = ["LogWriter"]

_OUTCOMES = {None: None, "committed": "committed", "aborted": "aborted"}
_fromtimestamp = datetime.fromtimestamp


class LogWriter:
    """Writes occurrences, rule firings and outbox entries to the log tables.

    ``schema`` and ``prefix`` select the tables (see
    :func:`~sentinel.log.tables.log_tables`); ``policy`` excludes or redacts
    parameters per event. ``check_schema=False`` skips the once-per-engine
    revision check (for code that checked already).

    Thread-safe: a writer holds no per-batch state; share one per application.

    Example (the ORM layer does this in ``before_commit``, on the session's
    connection)::

        writer = LogWriter(policy=LogPolicy().exclude("User.login:*", "password"))
        with engine.begin() as conn:
            ...  # the application's own changes
            writer.write(conn, occurrences, outcome="committed")
    """

    def __init__(
        self,
        *,
        schema: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        policy: LogPolicy | None = None,
        check_schema: bool = True,
    ) -> None:
        self.tables: LogTables = log_tables(schema, prefix)
        self.policy = policy if policy is not None else LogPolicy()
        self._check = check_schema
        self._checked: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    # -- schema ----------------------------------------------------------------------
    def check(self, bind: Connection | Engine) -> str:
        """Check the log's schema revision through ``bind`` (once per engine; later
        calls return the remembered revision) and return it. Raises a
        :class:`~sentinel.errors.LogSchemaError` subclass saying what to run."""
        engine = bind.engine
        rev = self._checked.get(engine)
        if rev is not None:
            return rev
        if isinstance(bind, Engine):
            with bind.connect() as conn:
                rev = check_schema(conn, self.tables)
        else:
            rev = check_schema(bind, self.tables)
        with self._lock:
            self._checked[engine] = rev
        return rev

    def forget(self, engine: Engine | None = None) -> None:
        """Forget the schema check for ``engine`` (or all engines), so the next
        write checks again (after a migration while the process runs)."""
        with self._lock:
            if engine is None:
                self._checked.clear()
            else:
                self._checked.pop(engine, None)

    # -- rows (no I/O) ---------------------------------------------------------------
    def occurrence_rows(
        self, occurrences: Iterable[Occurrence], outcome: str | None
    ) -> list[dict[str, Any]]:
        """The ``events`` rows for ``occurrences``, with the policy applied.

        Raises :class:`~sentinel.errors.LogWriteError` for a scope that is not a
        string (or too long), a name too long, or a source that is not an
        :class:`~sentinel.occurrence.ObjectRef`, and
        :class:`~sentinel.params.UnloggableParameter` for a parameter value the
        log cannot store.
        """
        try:
            outcome = _OUTCOMES[None if outcome is None else str(outcome)]
        except KeyError:
            raise LogWriteError(
                f"unknown transaction outcome {outcome!r}; expected 'committed', 'aborted' "
                "or None (process scope)", table=self.tables.events.name
            ) from None
        apply = self.policy.apply if self.policy else None
        fromts = _fromtimestamp
        utc = UTC
        rows: list[dict[str, Any]] = []
        append = rows.append
        for occ in occurrences:
            event, t_occ, ts, dts, source, params, scope = occ
            if type(scope) is not str or len(scope) > SCOPE_LENGTH or len(event) > NAME_LENGTH:
                self._bad_ids(occ)
            if source is None:
                source_class = source_key = None
            elif type(source) is ObjectRef:
                source_class = source[0]
                if len(source_class) > NAME_LENGTH:
                    self._bad_ids(occ)
                source_key = encode_key(source[1])
            else:
                raise LogWriteError(
                    f"occurrence {event}@{t_occ} in scope {scope!r} has source {source!r}; "
                    "the log stores only ObjectRef sources (or None)",
                    table=self.tables.events.name,
                )
            if apply is not None:
                params = apply(event, params)
            append({
                "scope": scope,
                "t_occ": t_occ,
                "event": event,
                "at": fromts(ts, utc),
                "detected_at": fromts(dts, utc),
                "ts": ts,
                "detected_ts": dts,
                "source_class": source_class,
                "source_key": source_key,
                "params": encode_params(params, event=event) if params else {},
                "outcome": outcome,
            })
        return rows

    def _bad_ids(self, occ: Occurrence) -> None:
        event, t_occ, *_, scope = occ
        if type(scope) is not str:
            why = f"its scope id {scope!r} is a {type(scope).__name__}, not a str"
        elif len(scope) > SCOPE_LENGTH:
            why = f"its scope id is longer than {SCOPE_LENGTH} characters"
        elif len(event) > NAME_LENGTH:
            why = f"its event name is longer than {NAME_LENGTH} characters"
        else:
            why = f"its source class name is longer than {NAME_LENGTH} characters"
        raise LogWriteError(
            f"cannot log occurrence {event[:80]}@{t_occ}: {why}", table=self.tables.events.name
        )

    def firing_rows(self, firings: Iterable[Firing]) -> list[dict[str, Any]]:
        """The ``rule_firings`` rows for ``firings``."""
        rows = []
        for f in firings:
            if len(f.rule) > NAME_LENGTH or len(str(f.scope)) > SCOPE_LENGTH:
                raise LogWriteError(
                    f"cannot log a firing of rule {f.rule[:80]!r}: rule name or scope too long",
                    table=self.tables.firings.name,
                )
            rows.append({
                "rule": f.rule,
                "scope": str(f.scope),
                "t_occ": f.t_occ,
                "constituents": [[str(s), t] for s, t in f.constituents],
                "coupling": str(f.coupling),
                "status": str(f.status),
                "error": f.error,
                "fired_at": f.fired_at,
                "finished_at": f.finished_at,
            })
        return rows

    def outbox_rows(self, entries: Iterable[OutboxEntry]) -> list[dict[str, Any]]:
        """The ``outbox`` rows for ``entries`` (payloads encoded)."""
        return [
            {
                "rule": e.rule,
                "idempotency_key": e.idempotency_key,
                "scope": str(e.scope),
                "t_occ": e.t_occ,
                "payload": e.payload,
                "status": str(e.status),
                "attempts": e.attempts,
                "next_attempt_at": e.next_attempt_at,
                "claimed_by": e.claimed_by,
                "last_error": e.last_error,
                "created_at": e.created_at,
                "done_at": e.done_at,
            }
            for e in entries
        ]

    # -- writing ---------------------------------------------------------------------
    def write(
        self,
        connection: Connection,
        occurrences: Iterable[Occurrence] = (),
        *,
        outcome: Outcome | str | None = Outcome.COMMITTED,
        firings: Iterable[Firing] = (),
        outbox: Iterable[OutboxEntry] = (),
    ) -> int:
        """Insert ``occurrences`` (marked ``outcome``), ``firings`` and ``outbox``
        entries on ``connection``, in its current transaction; return the number of
        occurrences written.

        Order of work: every row is built and validated first (a bad value raises
        before any SQL is sent); then, through an engine not checked before, the
        schema revision is checked; then each non-empty table gets one
        ``executemany``. The caller owns the transaction: on an exception it must
        roll back (nothing of the batch then remains). ``outcome`` is
        ``"committed"`` for a transaction's own occurrences written before its
        commit (they are visible only if it commits), ``None`` for the process
        scope.

        Raises :class:`~sentinel.errors.LogSchemaError` subclasses when the tables
        are missing or at another revision, :class:`~sentinel.errors.LogWriteError`
        for values that cannot be stored or a database error (as ``__cause__``),
        :class:`~sentinel.params.UnloggableParameter` for unloggable parameters.
        """
        rows = self.occurrence_rows(occurrences, outcome)
        frows = self.firing_rows(firings)
        orows = self.outbox_rows(outbox)
        if not (rows or frows or orows):
            return 0
        if self._check:
            self.check(connection)
        t = self.tables
        for table, batch in ((t.events, rows), (t.firings, frows), (t.outbox, orows)):
            if batch:
                self._insert(connection, table, batch)
        return len(rows)

    def write_aborted(
        self,
        engine: Engine,
        occurrences: Iterable[Occurrence],
        *,
        firings: Iterable[Firing] = (),
    ) -> int:
        """Write an aborted transaction's ``occurrences`` (marked ``"aborted"``)
        and ``firings`` in a new short transaction on ``engine``; return how many
        occurrences were written. All or nothing: on an exception that
        transaction is rolled back and nothing is written."""
        occs = list(occurrences)
        fl = list(firings)
        if not occs and not fl:
            return 0
        with engine.begin() as conn:
            return self.write(conn, occs, outcome=Outcome.ABORTED, firings=fl)

    def write_firings(self, connection: Connection, firings: Iterable[Firing]) -> int:
        """Insert rule ``firings`` on ``connection``; return how many."""
        rows = self.firing_rows(firings)
        if rows:
            if self._check:
                self.check(connection)
            self._insert(connection, self.tables.firings, rows)
        return len(rows)

    def enqueue(self, connection: Connection, entries: Iterable[OutboxEntry]) -> int:
        """Insert outbox ``entries`` on ``connection`` (in the triggering
        transaction, so they commit with it); return how many. A duplicate
        idempotency key raises :class:`~sentinel.errors.LogWriteError`."""
        rows = self.outbox_rows(entries)
        if rows:
            if self._check:
                self.check(connection)
            self._insert(connection, self.tables.outbox, rows)
        return len(rows)

    def set_outcome(
        self, connection: Connection, scope: str, outcome: Outcome | str | None
    ) -> int:
        """Mark every logged occurrence of ``scope`` with ``outcome``; return the
        number of rows changed."""
        value = _OUTCOMES.get(None if outcome is None else str(outcome), "?")
        if value == "?":
            raise LogWriteError(f"unknown transaction outcome {outcome!r}")
        ev = self.tables.events
        res = connection.execute(sa.update(ev).where(ev.c.scope == scope).values(outcome=value))
        return res.rowcount

    def _insert(self, conn: Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
        try:
            conn.execute(table.insert(), rows)
        except sa.exc.IntegrityError as err:
            what = (
                "an occurrence with the same (scope, t_occ) is already logged"
                if table is self.tables.events
                else "an outbox entry with the same idempotency key exists"
                if table is self.tables.outbox
                else "a constraint was violated"
            )
            raise LogWriteError(
                f"writing {len(rows)} row(s) to {self.tables.qualified(table.name)} failed: "
                f"{what} ({_first_line(err)})", table=table.name
            ) from err
        except sa.exc.DBAPIError as err:
            self._diagnose(conn, err)
            raise LogWriteError(
                f"writing {len(rows)} row(s) to {self.tables.qualified(table.name)} failed: "
                f"{_first_line(err)}", table=table.name
            ) from err

    def _diagnose(self, conn: Connection, err: BaseException) -> None:
        """Turn a failed insert caused by a missing or outdated table into a
        LogSchemaError. Uses a separate connection: the failed one may be in an
        aborted transaction (PostgreSQL)."""
        self.forget(conn.engine)
        try:
            with conn.engine.connect() as other:
                check_schema(other, self.tables)
        except LogSchemaError as schema_err:
            raise schema_err from err
        except Exception:  # the diagnosis is best effort; report the original error
            return


def _first_line(err: BaseException) -> str:
    orig = getattr(err, "orig", None) or err
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
