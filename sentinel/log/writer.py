"""Writing occurrences, rule firings and outbox entries to the log.

A :class:`LogWriter` turns a batch of occurrences into rows (validating them and
applying the parameter :class:`~sentinel.log.policy.LogPolicy`) before it sends
anything: one ``event_batches`` row per transaction scope (and per rolled-back
savepoint), its occurrences' JSON made in one pass (see
:mod:`sentinel.log.tables` for the layout). It then inserts each table's rows
with one ``executemany`` call: one statement, and one round trip where the
driver allows it (psycopg 3 pipelines ``executemany``; PyMySQL rewrites it into
a multi-row ``INSERT``; SQLite runs in-process).

A committed transaction's occurrences are written on the transaction's own
connection (:meth:`LogWriter.write`), so the log and the data commit together; an
aborted transaction's occurrences are written afterwards in a short transaction of
their own (:meth:`LogWriter.write_aborted`).

Before the first write through an engine the writer checks the log's schema
revision once (see :func:`~sentinel.log.schema.check_schema`) and remembers the
answer for that engine.

The inserts skip SQLAlchemy's per-statement compilation and per-row parameter
handling: each table's ``INSERT`` is compiled once per dialect
(:mod:`sentinel.log.inserts`), rows are built as tuples (or dicts, for drivers
with named parameters) with the columns' own bind processors applied (the
occurrences' JSON text made by :mod:`sentinel.log.encoding` and
:func:`~sentinel.log.inserts.batch_elements`), and the batch goes to
the driver's ``executemany`` through ``Connection.exec_driver_sql`` (so the
connection's transaction, events and error wrapping still apply). This is what
makes logging cheap enough to run inside every transaction of an ORM
application (see ``bench/orm.py``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from sentinel.errors import LogSchemaError, LogTablesMissingError, LogWriteError
from sentinel.log.commit_order import (
    _PG_NOTIFY,
    ADVISORY_SEED,
    notify_channel,
    numbered_insert,
    take_commit_seq,
)
from sentinel.log.encoding import _KEYS, _key_text
from sentinel.log.inserts import BadValue, _BatchInsert, _InsertPlan, batch_elements
from sentinel.log.partition import partition_key_text
from sentinel.log.policy import LogPolicy
from sentinel.log.records import Firing, OutboxEntry, encode_key, encode_params
from sentinel.log.schema import check_schema, location
from sentinel.log.signing import OutboxSigner
from sentinel.log.tables import (
    DEFAULT_PREFIX,
    NAME_LENGTH,
    SCOPE_LENGTH,
    LogTables,
    Outcome,
    log_tables,
    sequenced_mariadb,
)
from sentinel.occurrence import ObjectRef, Occurrence, params_of
from sentinel.params import storable_text

__all__ = ["LogWriter"]

_OUTCOMES = {None: None, "committed": "committed", "aborted": "aborted"}
_fromtimestamp = datetime.fromtimestamp
_time = time.time
_UNSET: Any = object()


def _redacted(entry: OutboxEntry, policy: LogPolicy) -> OutboxEntry:
    """``entry`` with ``policy`` applied to its constituents' parameters."""
    apply = policy.apply
    occs = tuple(
        _new_occ(Occurrence, (*o[:5], apply(o[0], params_of(o)), o[6], None)) if o[5] else o
        for o in entry.constituents
    )
    return dataclasses.replace(entry, constituents=occs)


_new_occ: Any = tuple.__new__


class LogWriter:
    """Writes occurrences, rule firings and outbox entries to the log tables.

    ``schema`` and ``prefix`` select the tables (see
    :func:`~sentinel.log.tables.log_tables`); ``policy`` excludes or redacts
    parameters per event. The schema revision is checked at the first write
    through an engine and again at the first write after ``recheck`` seconds
    (default 30), so a migration run under a live process (a downgrade, another
    sentinel's upgrade) fails that process's writes with a
    :class:`~sentinel.errors.LogSchemaError` within ``recheck`` seconds, on every
    backend alike, at the cost of one catalog query per engine per period.
    ``check_schema=False`` skips the check (for code that checked already).
    ``outbox_key`` (a key, or an :class:`~sentinel.log.signing.OutboxSigner`)
    signs the outbox rows it writes, so workers with the same key can refuse rows that were not (see
    :mod:`sentinel.log.signing`).

    Thread-safe: a writer holds no per-batch state; share one per application.

    Example (the ORM layer does this inside ``commit()``, on the session's
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
        outbox_key: str | bytes | OutboxSigner | None = None,
        recheck: float = 30.0,
        commit_order: bool = False,
    ) -> None:
        self.tables: LogTables = log_tables(schema, prefix)
        #: Number each writing transaction in commit order (``event_batches.commit_seq``,
        #: :meth:`take_commit_seq`), for a global detector (``docs/global.md``).
        #: Off by default: on SQLite and MariaDB the number is taken under a
        #: lock held until the commit, so concurrent log-writing commits wait
        #: for each other (PostgreSQL takes it without a lock).
        self.commit_order = commit_order
        #: Seconds after which the next write checks the schema revision again.
        self.recheck = recheck
        self.policy = policy if policy is not None else LogPolicy()
        #: Signs outbox rows (``None``: rows are not signed).
        self.signer: OutboxSigner | None = (
            outbox_key
            if isinstance(outbox_key, OutboxSigner) or outbox_key is None
            else OutboxSigner(outbox_key)
        )
        self._check = check_schema
        #: engine -> (revision, when the next write checks again: time.monotonic())
        self._checked: weakref.WeakKeyDictionary[Engine, tuple[str, float]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._plans: dict[tuple[str, str, str], Any] = {}
        self._proc: tuple[int, str] | None = None

    # -- schema ----------------------------------------------------------------------
    def check(self, bind: Connection | Engine) -> str:
        """Check the log's schema revision through ``bind`` (once per engine and
        ``recheck`` seconds; calls in between return the remembered revision)
        and return it. Raises a :class:`~sentinel.errors.LogSchemaError`
        subclass saying what to run."""
        engine = bind.engine
        known = self._checked.get(engine)
        if known is not None and time.monotonic() < known[1]:
            return known[0]
        if isinstance(bind, Engine):
            with bind.connect() as conn:
                rev = check_schema(conn, self.tables)
        else:
            rev = check_schema(bind, self.tables)
        with self._lock:
            self._checked[engine] = (rev, time.monotonic() + self.recheck)
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
        self, occurrences: Iterable[Occurrence], outcome: str | None, savepoint: str | None = None
    ) -> list[dict[str, Any]]:
        """One dict per occurrence, with the columns of the ``occurrences`` view
        (the rows the log held per occurrence until schema 0006), with the policy applied
        (``savepoint``: the savepoint whose rollback undid them, else None).

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
                "or None (process scope)",
                table=self.tables.batches.name,
            ) from None
        apply = self.policy.apply if self.policy else None
        fromts = _fromtimestamp
        utc = UTC
        rows: list[dict[str, Any]] = []
        append = rows.append
        for occ in occurrences:
            event, t_occ, ts, dts, source, _, scope, _ = occ
            params: Mapping[str, Any] = params_of(occ)
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
                    table=self.tables.batches.name,
                )
            if apply is not None:
                params = apply(event, params)
            append(
                {
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
                    "savepoint": savepoint,
                }
            )
        return rows

    def event_values(
        self, occurrences: Iterable[Occurrence], outcome: str | None, savepoint: str | None = None
    ) -> list[tuple[Any, ...]]:
        """The occurrences in the writer's own form, from which it makes the
        ``event_batches`` rows: tuples ``(scope, t_occ, event, ts, detected_ts, source_class,
        source_key, params, outcome, savepoint)`` with the policy applied and the identifiers
        checked (raises what :meth:`occurrence_rows` raises for them); the
        parameters are encoded, and the datetimes made, when the rows are sent
        (:class:`_EventsInsert`)."""
        try:
            outcome = _OUTCOMES[None if outcome is None else str(outcome)]
        except KeyError:
            raise LogWriteError(
                f"unknown transaction outcome {outcome!r}; expected 'committed', 'aborted' "
                "or None (process scope)",
                table=self.tables.batches.name,
            ) from None
        apply = self.policy.apply if self.policy else None
        ref_type = ObjectRef
        key_text = _key_text
        keys = _KEYS
        name_length = NAME_LENGTH
        rows: list[tuple[Any, ...]] = []
        append = rows.append
        # A batch's occurrences share their scope (one object): checked once.
        checked: Any = _UNSET
        for occ in occurrences:
            event, t_occ, ts, dts, source, params, scope, names = occ
            if names is not None and params:  # params_of, inlined: once per logged occurrence
                params = dict(zip(names, params, strict=False))
            if scope is not checked:
                if type(scope) is not str or len(scope) > SCOPE_LENGTH:
                    self._bad_ids(occ)
                checked = scope
            if len(event) > name_length:
                self._bad_ids(occ)
            if source is None:
                source_class = source_key = None
            elif type(source) is ref_type:
                source_class = source[0]
                if len(source_class) > name_length:
                    self._bad_ids(occ)
                try:  # _key_text's lookup, without the call when it succeeds
                    source_key = keys[source[1]]
                except (KeyError, TypeError):
                    source_key = key_text(source[1])
            else:
                raise LogWriteError(
                    f"occurrence {event}@{t_occ} in scope {scope!r} has source {source!r}; "
                    "the log stores only ObjectRef sources (or None)",
                    table=self.tables.batches.name,
                )
            if params and apply is not None:
                params = apply(event, params)
            append(
                (scope, t_occ, event, ts, dts, source_class, source_key, params, outcome, savepoint)
            )
        return rows

    def _bad_value(self, rows: list[tuple[Any, ...]], bad: BadValue) -> None:
        """Raise the :class:`~sentinel.errors.LogWriteError` for ``bad`` (from
        making the batch rows of ``rows``, :meth:`event_values` rows)."""
        if bad.index < 0:
            raise LogWriteError(
                f"cannot log two occurrences with the same id {bad.t_occ} in scope "
                f"{str(bad.scope)[:80]!r}: "
                "an occurrence with the same (scope, t_occ) is already in the batch",
                table=self.tables.batches.name,
            ) from None
        scope, t_occ, event, ts, dts, *_ = rows[bad.index]
        if bad.what == "event":
            raise LogWriteError(
                f"cannot log occurrence {event!r:.80}@{t_occ} in scope {str(scope)[:80]!r}: "
                "its event name is not a string",
                table=self.tables.batches.name,
            ) from None
        if bad.what == "t_occ":
            raise LogWriteError(
                f"cannot log occurrence {event[:80]}@{t_occ!r:.40} in scope {str(scope)[:80]!r}: "
                "its t_occ is not an integer",
                table=self.tables.batches.name,
            ) from None
        value = ts if bad.what == "occurrence time" else dts
        raise LogWriteError(
            f"cannot log occurrence {event[:80]}@{t_occ}: its {bad.what} {value!r:.80} "
            "(POSIX seconds) is outside the years 1 to 9999 that the log's "
            "datetime columns hold",
            table=self.tables.batches.name,
        ) from None

    def _bad_ids(self, occ: Occurrence) -> None:
        event, t_occ, scope = occ[0], occ[1], occ[6]
        if type(scope) is not str:
            why = f"its scope id {scope!r} is a {type(scope).__name__}, not a str"
        elif len(scope) > SCOPE_LENGTH:
            why = f"its scope id is longer than {SCOPE_LENGTH} characters"
        elif len(event) > NAME_LENGTH:
            why = f"its event name is longer than {NAME_LENGTH} characters"
        else:
            why = f"its source class name is longer than {NAME_LENGTH} characters"
        raise LogWriteError(
            f"cannot log occurrence {event[:80]}@{t_occ}: {why}", table=self.tables.batches.name
        )

    def firing_rows(self, firings: Iterable[Firing]) -> list[dict[str, Any]]:
        """The ``rule_firings`` rows for ``firings``."""
        rows = []
        policy = self.policy
        for f in firings:
            key = f.key
            if key is None and f.partition:
                try:
                    key = partition_key_text(f.partition, policy)
                except (TypeError, ValueError):  # pragma: no cover - the detector's keys are
                    key = None  # loggable; a hand-made Firing's may not be
            if len(f.rule) > NAME_LENGTH or len(str(f.scope)) > SCOPE_LENGTH:
                raise LogWriteError(
                    f"cannot log a firing of rule {f.rule[:80]!r}: rule name or scope too long",
                    table=self.tables.firings.name,
                )
            rows.append(
                {
                    "rule": f.rule,
                    "scope": str(f.scope),
                    "t_occ": f.t_occ,
                    "constituents": [[str(s), t] for s, t in f.constituents],
                    "coupling": str(f.coupling),
                    "status": str(f.status),
                    "error": None if f.error is None else storable_text(f.error),
                    "fired_at": f.fired_at,
                    "finished_at": f.finished_at,
                    "savepoint": f.savepoint,
                    "partition_key": key,
                }
            )
        return rows

    def outbox_rows(self, entries: Iterable[OutboxEntry]) -> list[dict[str, Any]]:
        """The ``outbox`` rows for ``entries`` (payloads encoded with the
        parameter policy applied to the constituents, as in the event log, and
        signed when the writer has a key)."""
        policy = self.policy if self.policy else None
        rows: list[dict[str, Any]] = [
            {
                "rule": e.rule,
                "idempotency_key": e.idempotency_key,
                "scope": str(e.scope),
                "t_occ": e.t_occ,
                "payload": e.payload if policy is None else _redacted(e, policy).payload,
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
        signer = self.signer
        if signer is not None:
            for r in rows:
                r["payload"] = signer.signed(
                    r["rule"], r["idempotency_key"], r["scope"], r["t_occ"], r["payload"]
                )
        return rows

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
        return self.write_groups(
            connection, [(occurrences, outcome)], firings=firings, outbox=outbox
        )

    def write_groups(
        self,
        connection: Connection,
        groups: Iterable[
            tuple[Iterable[Occurrence], Outcome | str | None]
            | tuple[Iterable[Occurrence], Outcome | str | None, str | None]
        ],
        *,
        firings: Iterable[Firing] = (),
        outbox: Iterable[OutboxEntry] = (),
        expired: Iterable[tuple[str, int, float]] = (),
        sequence: bool = True,
        restamp: str | None = None,
    ) -> int:
        """:meth:`write` for occurrences of several outcomes at once: each group
        is ``(occurrences, outcome)``, or ``(occurrences, "aborted", savepoint)``
        for what the rollback of a savepoint undid (its path, such as
        ``"sp1/sp3"``); all rows still go in one ``executemany`` per
        table. The ORM layer writes a transaction's own occurrences together with
        earlier ones that were waiting (the process scope's, a previous
        transaction's ``txn:commit``) this way. ``expired`` marks occurrences
        (after the rows are inserted: see :meth:`mark_expired`). Raises what
        :meth:`write` raises, before any SQL for bad values.

        Commit order (only when the writer was made with ``commit_order=True``):
        with ``sequence`` (the default) the ``event_batches`` rows get the
        transaction's commit sequence number (:meth:`take_commit_seq`), and so
        do the rows of scope ``restamp`` written earlier in this transaction
        without one (a long transaction's flushes, written with
        ``sequence=False``: a number is taken only at the last write before
        the commit, because on SQLite and MySQL taking it holds a lock until
        the commit, and on PostgreSQL and MariaDB the reader waits for a
        number taken and not yet committed)."""
        rows: list[tuple[Any, ...]] = []
        for group in groups:
            rows.extend(self.event_values(*group))
        frows = self.firing_rows(firings)
        orows = self.outbox_rows(outbox)
        marks = list(expired)
        if not (rows or frows or orows or marks or restamp is not None):
            return 0
        prepared: list[Any] = []
        plan = None
        if rows:
            plan = self._batches_plan(connection)
            try:  # may raise, before any SQL
                prepared = plan.rows(batch_elements(rows), _time(), self._process())
            except BadValue as bad:
                self._bad_value(rows, bad)
                raise
        if self._check:
            self.check(connection)
        t = self.tables
        numbered = sequence and self.commit_order and (prepared or restamp is not None)
        if numbered and restamp is None and len(prepared) == 1:
            # PostgreSQL: the row's insert takes the number itself (one
            # statement less, and the number as late as can be)
            assert plan is not None
            inline = self._numbered_sql(connection, plan)
            if inline is not None:
                self._send_numbered(connection, inline, prepared[0])
                numbered, prepared = False, []
        seq = self.take_commit_seq(connection) if numbered else None
        if restamp is not None and seq is not None:
            b = t.batches
            connection.execute(
                sa.update(b)
                .where(b.c.scope == restamp, b.c.commit_seq.is_(None))
                .values(commit_seq=seq)
            )
        if prepared:
            assert plan is not None
            if seq is not None:
                prepared = plan.stamp(prepared, seq)
            self._send(connection, t.batches, prepared, plan)
        for table, batch in ((t.firings, frows), (t.outbox, orows)):
            if batch:
                self._insert(connection, table, batch)
        if marks:
            self.mark_expired(connection, marks)
        return len(rows)

    def mark_expired(self, connection: Connection, marks: Iterable[tuple[str, int, float]]) -> int:
        """Mark occurrences as expired from detection: each mark is
        ``(scope, t_occ, when)`` (``when`` in POSIX seconds), kept in the
        ``expired`` table (the ``occurrences`` view shows it as the
        occurrence's ``expired_at``). An occurrence keeps its first mark; a
        mark for an occurrence not yet logged applies once it is. Returns how
        many marks were sent."""
        batch: list[dict[str, Any]] = [
            {"scope": str(scope), "t_occ": int(t_occ), "expired_at": _fromtimestamp(when, UTC)}
            for scope, t_occ, when in marks
        ]
        if not batch:
            return 0
        if self._check:
            self.check(connection)
        x = self.tables.expired
        name = connection.dialect.name
        stmt: Any
        if name == "sqlite":
            stmt = sqlite_insert(x).on_conflict_do_nothing()
        elif name == "postgresql":
            stmt = pg_insert(x).on_conflict_do_nothing()
        elif name in ("mysql", "mariadb"):
            stmt = sa.insert(x).prefix_with("IGNORE")
        else:  # pragma: no cover - a backend we do not test
            stmt = sa.insert(x).from_select(
                ["scope", "t_occ", "expired_at"],
                sa.select(
                    sa.bindparam("scope"), sa.bindparam("t_occ"), sa.bindparam("expired_at")
                ).where(
                    ~sa.exists().where(
                        x.c.scope == sa.bindparam("scope"), x.c.t_occ == sa.bindparam("t_occ")
                    )
                ),
            )
        # one mark per occurrence: the first of a batch counts, as in the table
        first: dict[tuple[str, int], dict[str, Any]] = {}
        for m in batch:
            first.setdefault((m["scope"], m["t_occ"]), m)
        connection.execute(stmt, list(first.values()))
        return len(batch)

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

    def set_outcome(self, connection: Connection, scope: str, outcome: Outcome | str | None) -> int:
        """Mark every logged occurrence of ``scope`` with ``outcome`` (not those
        a rolled-back savepoint undid: they stay ``aborted``); return how many
        occurrences that is."""
        value = _OUTCOMES.get(None if outcome is None else str(outcome), "?")
        if value == "?":
            raise LogWriteError(f"unknown transaction outcome {outcome!r}")
        b = self.tables.batches
        mine = (b.c.scope == scope, b.c.savepoint.is_(None))
        n = connection.execute(sa.select(sa.func.coalesce(sa.func.sum(b.c.n), 0)).where(*mine))
        changed = int(n.scalar_one())
        connection.execute(sa.update(b).where(*mine).values(outcome=value))
        return changed

    def _batches_plan(self, conn: Connection) -> _BatchInsert:
        dialect = conn.dialect
        key = (dialect.name, self.tables.batches.name, "*")
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _BatchInsert(self.tables.batches, dialect)
        return plan

    def _process(self) -> str:
        """``host:pid`` of this process (the ``process`` column)."""
        pid = os.getpid()
        known = self._proc
        if known is None or known[0] != pid:
            known = self._proc = (pid, f"{socket.gethostname()}:{pid}"[:NAME_LENGTH])
        return known[1]

    def take_commit_seq(self, conn: Connection) -> int:
        """Number the current transaction for the global detector's commit
        order and return the number: :func:`sentinel.log.commit_order.take_commit_seq`
        for this writer's tables."""
        return take_commit_seq(conn, self.tables)

    def _numbered_sql(self, conn: Connection, plan: _BatchInsert) -> str | None:
        """The ``event_batches`` insert of one row whose ``commit_seq`` is
        taken in it, as :meth:`take_commit_seq` takes it, or ``None`` where
        there is none. PostgreSQL through a driver with named parameters
        (``pyformat``: psycopg, psycopg2): the transaction's id first, then
        ``nextval``, returning the number and whether a reader sleeps (then
        the caller notifies). MariaDB: an ``INSERT ... SELECT`` from the
        counter row, read with its lock shared, taking ``NEXTVAL`` for the
        row (no row is inserted if the counter row is missing)."""
        dialect = conn.dialect
        # MySQL and MariaDB share a dialect name; not this statement
        kind = "numbered:mariadb" if sequenced_mariadb(dialect) else "numbered"
        key = (dialect.name, self.tables.batches.name, kind)
        if key not in self._plans:
            self._plans[key] = numbered_insert(dialect, plan.sql, plan.names, self.tables)
        return self._plans[key]  # type: ignore[no-any-return]

    def _send_numbered(self, conn: Connection, sql: str, row: Any) -> None:
        """Insert ``row`` with :meth:`_numbered_sql`'s ``sql``; on PostgreSQL,
        queue a ``NOTIFY`` when a reader sleeps (see :meth:`take_commit_seq`)."""
        t = self.tables
        if conn.dialect.name != "postgresql":  # MariaDB
            # the row without its commit number, which the statement takes
            names = self._batches_plan(conn).names
            if names is not None:
                params: Any = {k: v for k, v in row.items() if k != names[8]}
            else:
                params = (*row[:8], *row[9:])
            if self._send(conn, t.batches, params, sql=sql).rowcount == 0:
                # no counter row (deleted by hand): made, then the row numbered
                seq = self.take_commit_seq(conn)
                plan = self._batches_plan(conn)
                self._send(conn, t.batches, plan.stamp([row], seq), plan)
            return
        q = t.commit_sequence_name
        params = {
            **row,
            "sentinel_seq": f'"{t.schema}"."{q}"' if t.schema else f'"{q}"',
            "sentinel_schema": t.schema,
            "sentinel_prefix": t.prefix,
            "sentinel_seed": ADVISORY_SEED,
        }
        result = self._send(conn, t.batches, params, sql=sql)
        _, wake = result.one()
        if wake:
            conn.execute(_PG_NOTIFY, {"c": notify_channel(t)})

    def _plan(self, conn: Connection, table: sa.Table, columns: Sequence[str]) -> _InsertPlan:
        dialect = conn.dialect
        key = (dialect.name, table.name, ",".join(columns))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _InsertPlan(table, columns, dialect)
        return plan

    def _insert(
        self,
        conn: Connection,
        table: sa.Table,
        rows: Sequence[dict[str, Any]] | Sequence[tuple[Any, ...]],
        columns: Sequence[str] | None = None,
    ) -> None:
        """Insert ``rows`` (dicts, or tuples in the order of ``columns``) with one
        ``executemany``."""
        values: Sequence[Sequence[Any]]
        if columns is None:
            dicts: Sequence[dict[str, Any]] = rows  # type: ignore[assignment]
            columns = tuple(dicts[0])
            values = [tuple(r[c] for c in columns) for r in dicts]
        else:
            values = rows  # type: ignore[assignment]
        self._execute(conn, table, self._plan(conn, table, columns), values)

    def _execute(
        self, conn: Connection, table: sa.Table, plan: Any, values: Sequence[Sequence[Any]]
    ) -> None:
        rows = plan.rows(values)  # may raise (unloggable values) before any SQL
        self._send(conn, table, rows, plan)

    def _send(
        self, conn: Connection, table: sa.Table, rows: Any, plan: Any = None, sql: str | None = None
    ) -> Any:
        """Send ``rows`` (made by ``plan.rows``; the batches' plan by default)
        with one ``executemany`` (one row, a dict, with one ``execute``: of
        ``sql`` if given); return the result."""
        if sql is None:
            sql = (plan or self._batches_plan(conn)).sql
        n = 1 if isinstance(rows, dict) else len(rows)
        try:
            return conn.exec_driver_sql(sql, rows)
        except sa.exc.IntegrityError as err:
            text = _first_line(err).lower()
            duplicate = "unique" in text or "duplicate" in text
            what = (
                "an occurrence with the same (scope, t_occ) is already logged"
                if duplicate and table is self.tables.batches
                else "an outbox entry with the same idempotency key exists"
                if duplicate and table is self.tables.outbox
                else "a constraint was violated"
            )
            raise LogWriteError(
                f"writing {n} row(s) to {self.tables.qualified(table.name)} failed: "
                f"{what} ({_first_line(err)})",
                table=table.name,
            ) from err
        except sa.exc.DBAPIError as err:
            self._diagnose(conn, err)
            raise LogWriteError(
                f"writing {n} row(s) to {self.tables.qualified(table.name)} failed: "
                f"{_first_line(err)}",
                table=table.name,
            ) from err

    def _diagnose(self, conn: Connection, err: BaseException) -> None:
        """Turn a failed insert caused by a missing or outdated table into a
        LogSchemaError. Uses a separate connection: the failed one may be in an
        aborted transaction (PostgreSQL)."""
        self.forget(conn.engine)
        try:
            with conn.engine.connect() as other:
                found = check_schema(other, self.tables)
        except LogSchemaError as schema_err:
            raise schema_err from err
        except Exception:  # the diagnosis is best effort; report the original error
            return
        seq = self.tables.commit_sequence_name
        if sequenced_mariadb(conn.dialect) and f"{seq}' doesn't exist" in str(err):
            # a log migrated to 0009 while the server was a MariaDB before 10.3
            where = location(conn, self.tables)
            raise LogTablesMissingError(
                f"the event log in {where} is at revision {found} but has no commit "
                f"sequence {self.tables.qualified(seq)} (migrated while the server was a "
                "MariaDB before 10.3?): run `sentinel db downgrade 0008` then `sentinel db "
                "upgrade` to make it",
                location=where,
                found=found,
                expected=found,
                missing=[seq],
            ) from err


def _first_line(err: BaseException) -> str:
    orig = getattr(err, "orig", None) or err
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
