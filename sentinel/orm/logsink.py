"""When and where an attachment writes the event log.

- A transaction's occurrences and rule firings are buffered in its
  :class:`~sentinel.orm.state.TxnState` (by the detector's occurrence listener
  and the scheduler's rule observer) and written **in the transaction**, on the
  session's connections, at pre-commit: after the deferred rules ran and their
  changes were flushed, so the rows commit exactly when the data does. A very
  long transaction also writes at flushes (every ``flush_every`` occurrences),
  unless a savepoint is open.
- Where: on every database the transaction used (each database's log is the
  complete record of the transactions that used it); the outbox entries, their
  ``pending`` firings and the late rows only on the attachment's home database
  (see :mod:`sentinel.orm.binds`).
- What a rolled-back savepoint took with it is written with the transaction,
  in its scope, marked ``aborted`` and with the savepoint's path (``sp1/sp3``,
  see :class:`~sentinel.orm.state.Savepoint`): the transaction's committed rows
  never contain it, and ids ``(scope, t_occ)`` never change, so a firing (of
  this transaction or a later one, for ``flush=False`` rules) names rows that
  are in the log.
- An aborted transaction's occurrences are written after the rollback, in a
  short transaction of their own, marked ``aborted``.
- Everything else is *late*: ``txn:commit`` (signalled after the commit, when the
  transaction's rows are already written) and what rules triggered by it do,
  occurrences of the process scope and of detection scopes that are not session
  transactions (``detector.transaction()`` blocks), and the rows of an aborted
  transaction whose own write failed. Late rows wait in memory and are written
  in short transactions of their own, never in another transaction's batch: when
  a transaction ends and more than ``late_limit`` wait or the oldest has waited
  ``late_delay`` seconds, by :meth:`LogSink.flush`, at ``detach()`` and at
  interpreter exit. A crash loses at most these (never a transaction's own rows).

One transaction's rows never travel with another's, so a write that fails fails
only for the transaction that made the rows: a transaction's own write fails its
commit (nothing of it is written); late rows that cannot be written are retried
one origin (one transaction or scope) at a time, then in halves down to the row
the database refuses, which is written with its values replaced by a marker (or
dropped) and reported to the ``sentinel.orm`` logger, while the others are
written (see :meth:`LogSink.flush`).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import deque
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection, Engine

from sentinel.errors import LogSchemaError, LogWriteError
from sentinel.log import TOO_LARGE, Firing, LogWriter, OutboxEntry, Outcome
from sentinel.occurrence import Occurrence, leaves, names_of

if TYPE_CHECKING:
    from sentinel.orm.state import FiringRecord, TxnState

__all__ = ["TXN_EVENTS", "LogSink", "firing_of", "only_transaction_events"]

log = logging.getLogger("sentinel.orm")

_new: Any = tuple.__new__
_utc = UTC
_fromts = datetime.fromtimestamp
_monotonic = time.monotonic


def _lock_order(conn: Connection) -> str:
    return conn.engine.url.render_as_string(hide_password=True)


def firing_of(record: FiringRecord, *, savepoint: str | None = None) -> Firing:
    """The log's :class:`~sentinel.log.Firing` for a buffered rule run;
    ``savepoint`` is the path of the savepoint whose rollback undid it.
    Constituents keep their ids: an occurrence is logged under the scope it was
    signalled in, rolled back or not."""
    rule, occ, status, error, at = record
    constituents = tuple([(c[6], c[1]) for c in leaves(occ)])  # (scope, t_occ)
    when = _fromts(at, _utc)
    return Firing(
        rule=rule.name,
        scope=str(occ.scope),
        t_occ=occ.t_occ,
        constituents=constituents,
        coupling=str(rule.coupling),
        status=status,
        error=None if error is None else f"{type(error).__name__}: {error}"[:4000],
        fired_at=when,
        finished_at=when,
        savepoint=savepoint,
        partition=rule.partition(occ),
    )


#: The transaction events sentinel signals itself.
TXN_EVENTS = frozenset({"txn:begin", "txn:pre_commit", "txn:commit", "txn:abort"})


def only_transaction_events(st: TxnState) -> bool:
    """True when nothing happened in ``st``'s transaction but its own
    ``txn:*`` events: no other occurrence, no rule ran, no savepoint was rolled
    back (a read-only unit of work). Such transactions are not logged unless
    the attachment asks for it (``attach(..., log_empty=True)``)."""
    if st.firings or st.rolled_back:
        return False
    txn = TXN_EVENTS
    return all(o[0] in txn for o in st.occurrences)


#: A late item: ("occ", occurrence, outcome[, savepoint path]), ("firing", Firing) or ("expired",
#: (scope, t_occ, when)): an occurrence's archive mark (docs/bitemporal.md).
Late = tuple[Any, ...]


class LogSink:
    """An attachment's log writing (see the module docs). Thread-safe."""

    def __init__(
        self,
        writer: LogWriter,
        *,
        late_limit: int = 1000,
        late_delay: float = 1.0,
        max_late: int = 1_000_000,
    ) -> None:
        self.writer = writer
        self.late: deque[Late] = deque()
        self.late_limit = late_limit
        #: Seconds late rows may wait before a transaction's end writes them.
        self.late_delay = late_delay
        self.max_late = max_late
        self._late_since = 0.0
        self._dropped = 0
        self._lock = threading.Lock()
        #: The engine late rows go to when no transaction carries them.
        self.engine: Engine | None = None
        self._atexit = _register_atexit(self)

    # -- late rows ---------------------------------------------------------------------
    def add_late(self, item: Late) -> None:
        late = self.late
        if not late:
            self._late_since = _monotonic()
        late.append(item)
        if len(late) > self.max_late:  # the database has been failing for long
            try:
                late.popleft()
                self._dropped += 1
            except IndexError:
                pass
            if self._dropped in (1, 1000) or self._dropped % 100_000 == 0:
                log.error(
                    "sentinel's event log: %d late rows dropped (more than %d waited: is the "
                    "log's database reachable and migrated?)",
                    self._dropped,
                    self.max_late,
                )

    def late_due(self) -> bool:
        """True when the late rows should be written now (at a transaction's end):
        more than ``late_limit`` wait, or the oldest has waited ``late_delay``
        seconds."""
        late = self.late
        return bool(late) and (
            len(late) > self.late_limit or _monotonic() - self._late_since >= self.late_delay
        )

    def take_late(self) -> list[Late]:
        out = []
        popleft = self.late.popleft
        while True:
            try:
                out.append(popleft())
            except IndexError:
                return out

    def give_back(self, items: list[Late]) -> None:
        """Put late items taken for a write that did not commit back in front."""
        if items and not self.late:
            self._late_since = _monotonic()
        self.late.extendleft(reversed(items))

    @staticmethod
    def _late_groups(
        items: list[Late],
    ) -> tuple[list[tuple[list[Occurrence], str | None, str | None]], list[Firing], list[Any]]:
        by_outcome: dict[tuple[str | None, str | None], list[Occurrence]] = {}
        firings: list[Firing] = []
        expired: list[Any] = []
        for item in items:
            if item[0] == "occ":
                key = (item[2], item[3] if len(item) > 3 else None)
                by_outcome.setdefault(key, []).append(item[1])
            elif item[0] == "expired":
                expired.append(item[1])
            else:
                firings.append(item[1])
        return [(occs, oc, sp) for (oc, sp), occs in by_outcome.items()], firings, expired

    def _write_late(self, engine: Engine, items: list[Late]) -> int:
        groups, firings, expired = self._late_groups(items)
        with engine.begin() as conn:
            return self.writer.write_groups(conn, groups, firings=firings, expired=expired)

    def flush(self, engine: Engine | None = None) -> int:
        """Write the late rows now, in short transactions of their own on
        ``engine`` (default: the attachment's); return how many occurrences were
        written.

        All in one transaction first. If that fails, one origin at a time (the
        rows of one transaction, its rolled-back savepoints' included, or of one
        other scope), and an origin the database refuses while it still
        answers (``SELECT 1``) in halves, down to single rows: a row refused on
        its own costs only itself. An occurrence's row is written again with
        every parameter's value replaced by :data:`~sentinel.log.TOO_LARGE`
        (reported to the ``sentinel.orm`` logger); a row refused even so, or a
        rule firing or archive mark refused on its own, is dropped, and
        :class:`~sentinel.errors.LogWriteError` names the origins of what was
        dropped (the first refusal as its cause) once the others are written.
        While the database does not answer, or
        the log's tables are missing or at another revision
        (:class:`~sentinel.errors.LogSchemaError`), nothing is dropped: the
        rows not written are kept and the error is raised."""
        engine = engine or self.engine
        if engine is None or not self.late:
            return 0
        items = self.take_late()
        try:
            return self._write_late(engine, items)
        except Exception as err:
            if isinstance(err, LogSchemaError) or not _answers(engine):
                self.give_back(items)
                raise
        except BaseException:
            self.give_back(items)
            raise
        origins: dict[str, list[Late]] = {}
        for item in items:
            origins.setdefault(_origin(item), []).append(item)
        written = 0
        dropped: dict[str, int] = {}
        cause: BaseException | None = None
        marked: set[int] = set()  # ids of occurrence items rewritten with the marker
        # Batches still to write, the next one last: an origin at a time, then
        # halves of a refused batch, down to single rows.
        todo = [(origin, batch) for origin, batch in reversed(origins.items())]
        while todo:
            origin, batch = todo.pop()
            try:
                written += self._write_late(engine, batch)
                continue
            except Exception as err:
                if isinstance(err, LogSchemaError) or not _answers(engine):
                    self.give_back([*batch, *(it for _, b in reversed(todo) for it in b)])
                    raise
                cause = cause or err
                refusal = err
            except BaseException:
                self.give_back([*batch, *(it for _, b in reversed(todo) for it in b)])
                raise
            if len(batch) > 1:
                half = len(batch) // 2
                todo.append((origin, batch[half:]))
                todo.append((origin, batch[:half]))
                continue
            (item,) = batch
            if item[0] == "occ" and item[1][5] and id(item) not in marked:
                # refused on its own: the occurrence stays, its values do not
                occ = item[1]
                again = ("occ", _marked(occ), *item[2:])
                marked.add(id(again))
                log.error(
                    "sentinel's event log: the late row of %s@%s (%s) was refused by the "
                    "database; it is written with its parameters replaced by %r: %s",
                    occ[0][:80],
                    occ[1],
                    origin,
                    TOO_LARGE,
                    refusal,
                )
                todo.append((origin, [again]))
                continue
            dropped[origin] = dropped.get(origin, 0) + 1
            log.error(
                "sentinel's event log: a late row of %s refused by the database and dropped: %s",
                origin,
                refusal,
            )
        if dropped:
            names = list(dropped)
            raise LogWriteError(
                f"{sum(dropped.values())} late row(s) of {len(names)} origin(s) could not be "
                f"written and were dropped ({', '.join(names[:5])}"
                f"{', ...' if len(names) > 5 else ''}); the other late rows were written"
            ) from cause
        return written

    def flush_quietly(self, engine: Engine | None = None) -> None:
        """:meth:`flush`, reporting a failure to the ``sentinel.orm`` logger."""
        try:
            self.flush(engine)
        except Exception:
            log.exception("sentinel's event log: late rows could not be written")

    # -- transactions ------------------------------------------------------------------
    def write_transaction(
        self,
        conns: list[Connection],
        st: TxnState,
        outbox: list[OutboxEntry],
        pending: list[Firing],
        *,
        home: Connection | None = None,
    ) -> int:
        """Write ``st``'s unwritten occurrences and firings (``committed``) and
        what its rolled-back savepoints took (``aborted``) on each of ``conns``
        (the transaction's connections to every database it used), and the
        ``outbox`` entries and their ``pending`` firings on ``home`` if it is one
        of them (else the first); return how many events rows were written on
        ``home`` (else the first). Only ``st``'s own rows: on failure nothing is
        taken from ``st`` and the error fails its commit, nobody else's."""
        occs = st.occurrences[st.written :]
        groups: list[Any] = [(occs, Outcome.COMMITTED)]
        firings = [firing_of(r) for r in st.firings[st.firings_written :]]
        for path, sp_occs, sp_firings in st.rolled_back[st.rolled_back_written :]:
            groups.append((sp_occs, Outcome.ABORTED, path))
            firings.extend(firing_of(r, savepoint=path) for r in sp_firings)
        main = home if home is not None and any(c is home for c in conns) else conns[0]
        # rows a long transaction wrote at flushes get its commit number now
        restamp = st.scope_id if st.written else None
        # Each write takes its database's commit-number lock until the commit
        # (SQLite, MariaDB; PostgreSQL numbers without one): in
        # one order (by URL), so two transactions using the same databases never
        # wait for each other's lock on two databases at once.
        rows = 0
        for conn in conns if len(conns) == 1 else sorted(conns, key=_lock_order):
            mine, mine_firings = groups, firings
            if st.partial:
                # rows written at flushes went to the databases used by then:
                # one used only later gets the transaction's rows from the start
                occ0, fir0 = st.partial.get(conn.engine, (0, 0))
                if occ0 != st.written or fir0 != st.firings_written:
                    mine = [(st.occurrences[occ0:], Outcome.COMMITTED), *groups[1:]]
                    mine_firings = [
                        *(firing_of(r) for r in st.firings[fir0 : st.firings_written]),
                        *firings,
                    ]
            if conn is main:
                extra = [*mine_firings, *pending] if pending else mine_firings
                rows = self.writer.write_groups(
                    main, mine, firings=extra, outbox=outbox, restamp=restamp
                )
            else:
                self.writer.write_groups(conn, mine, firings=mine_firings, restamp=restamp)
        if st.partial:  # what each database has now (after every write succeeded)
            for conn in conns:
                st.partial[conn.engine] = (len(st.occurrences), len(st.firings))
        st.written += len(occs)
        st.firings_written = len(st.firings)
        # Kept, not cleared: should the commit fail now, the aborted transaction's
        # log holds them again (write_aborted).
        st.rolled_back_written = len(st.rolled_back)
        return rows

    def write_partial(self, conns: list[Connection], st: TxnState) -> None:
        """Write what ``st`` buffered so far (a long transaction, at a flush), on
        each of ``conns``."""
        occs = st.occurrences[st.written :]
        firings = [firing_of(r) for r in st.firings[st.firings_written :]]
        for conn in conns:
            # a database the transaction used only since the last flush gets
            # its rows from the start (st.partial: what each one has)
            occ0, fir0 = st.partial.get(conn.engine, (st.written, st.firings_written))
            if st.partial and conn.engine not in st.partial:
                occ0, fir0 = 0, 0
            mine = occs if occ0 == st.written else st.occurrences[occ0:]
            mine_firings = (
                firings if fir0 == st.firings_written else [firing_of(r) for r in st.firings[fir0:]]
            )
            # no commit number yet: taking it would hold its lock until the commit
            rows = self.writer.write_groups(
                conn, [(mine, Outcome.COMMITTED)], firings=mine_firings, sequence=False
            )
            if rows and st.witness is None:
                st.witness = (conn.engine, None)
            st.partial[conn.engine] = (len(st.occurrences), len(st.firings))
        st.written += len(occs)
        st.firings_written = len(st.firings)

    def after_commit(self, st: TxnState, *, skip_empty: bool = False) -> None:
        """After the commit: what came later (``txn:commit``, the rules it
        triggered) becomes late rows (nothing, with ``skip_empty``, for a
        transaction in which only its ``txn:*`` events happened)."""
        if skip_empty and st.written == 0 and only_transaction_events(st):
            st.written = len(st.occurrences)
            return
        for occ in st.occurrences[st.written :]:
            self.add_late(("occ", occ, "committed"))
        for r in st.firings[st.firings_written :]:
            self.add_late(("firing", firing_of(r)))
        st.written = len(st.occurrences)
        st.firings_written = len(st.firings)

    def write_aborted(
        self,
        engine: Engine,
        st: TxnState,
        outbox: list[OutboxEntry],
        *,
        copies: list[Engine] | None = None,
    ) -> None:
        """After a rollback: write everything ``st`` holds marked ``aborted`` in a
        short transaction of its own on ``engine`` (the home database), and
        ``st``'s own rows on each of ``copies`` (the other databases the
        transaction used). A failure is reported to the ``sentinel.orm``
        logger and the rows are kept as late rows, written on their own later
        (the rollback already happened; raising here would hide why)."""
        groups: list[Any] = [(st.occurrences, Outcome.ABORTED)]
        firings = [firing_of(r) for r in st.firings]
        for path, sp_occs, sp_firings in st.rolled_back:
            groups.append((sp_occs, Outcome.ABORTED, path))
            firings.extend(firing_of(r, savepoint=path) for r in sp_firings)
        for other in copies or ():
            try:
                with other.begin() as conn:
                    self.writer.write_groups(conn, list(groups), firings=firings)
            except Exception:
                log.exception(
                    "sentinel's event log: the occurrences of aborted transaction %s could "
                    "not be written to %s",
                    st.scope_id,
                    other.url,
                )
        try:
            with engine.begin() as conn:
                self.writer.write_groups(
                    conn,
                    groups,
                    firings=[*firings, *st.aborted_pending] if outbox else firings,
                    outbox=outbox,
                )
        except Exception:
            log.exception(
                "sentinel's event log: the occurrences of aborted transaction %s could not "
                "be written; they are kept and written later, on their own",
                st.scope_id,
            )
            for grp, outcome, *savepoint in groups:
                for occ in grp:
                    self.add_late(
                        ("occ", occ, None if outcome is None else str(outcome), *savepoint)
                    )
            for f in firings:
                self.add_late(("firing", f))
            if outbox:
                log.error(
                    "sentinel's outbox: %d detached rule(s) of aborted transaction %s were "
                    "not enqueued and will not run",
                    len(outbox),
                    st.scope_id,
                )

    def close(self) -> None:
        atexit.unregister(self._atexit)


def _origin(item: Late) -> str:
    """The transaction (or other scope) a late item comes from (a rolled-back
    savepoint's rows keep their transaction's scope)."""
    kind, what = item[0], item[1]
    if kind == "occ":
        scope = str(what[6])
    elif kind == "expired":
        scope = str(what[0])
    else:
        scope = str(what.scope)
    return scope


def _marked(occ: Occurrence) -> Occurrence:
    """``occ`` with every parameter's value replaced by the marker."""
    occ_type: Any = Occurrence
    names = occ[7]
    if names is None:  # the parameters as a mapping
        names = names_of(tuple(occ[5]))
    marked = (TOO_LARGE,) * len(names)
    return _new(occ_type, (*occ[:5], marked, occ[6], names))  # type: ignore[no-any-return]


def _answers(engine: Engine) -> bool:
    """True when ``engine``'s database answers a trivial query (tells a refused
    row from a database that is gone)."""
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception:
        return False
    return True


def _register_atexit(sink: LogSink) -> Any:
    ref = weakref.ref(sink)

    def at_exit() -> None:  # pragma: no cover - runs at interpreter exit
        s = ref()
        if s is not None and s.late:
            deadline = time.monotonic() + 5
            while s.late and time.monotonic() < deadline:
                try:
                    s.flush()
                except Exception:
                    log.exception("sentinel's event log: late rows lost at exit")
                    return

    atexit.register(at_exit)
    return at_exit
