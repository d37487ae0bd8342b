"""The attachment of one session factory: the session events it follows.

:class:`Attachment` (made by :func:`sentinel.orm.attach`) listens to the
session events of its factory and drives the detector with them (the table in
:mod:`sentinel.orm.attach`); a transaction joined to one begun outside the
session is handled in :mod:`sentinel.orm.outer`, a transaction that ended
without a commit sentinel saw in :mod:`sentinel.orm.endings`. :func:`~sentinel.orm.attach`'s
options reach it grouped by concern, checked: :class:`LogOptions` and
:class:`OutboxOptions` (the latter also its :class:`~sentinel.orm.worker.Runner`'s).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, SessionTransaction

from sentinel.errors import AttachError, CascadeLimitError, SentinelError
from sentinel.log import LogPolicy, LogWriter, idempotency_key
from sentinel.log.records import Firing
from sentinel.log.signing import OutboxSigner, key_from_env
from sentinel.log.tables import DEFAULT_PREFIX, FiringStatus
from sentinel.orm.binds import Target, sync_engine
from sentinel.orm.commit import PreCommit, in_commit, is_clean
from sentinel.orm.db_events import note_expressions, signal_flush, signal_made
from sentinel.orm.endings import Endings, _collect_abandoned
from sentinel.orm.integration import _ATTACHED, _INTEGRATIONS, _LOCK
from sentinel.orm.logsink import LogSink
from sentinel.orm.outbox import entry_for
from sentinel.orm.outer import _OUTER_SUBMIT_DELAY, OuterTransactions, _joins_outer
from sentinel.orm.state import (
    ABANDONED,
    KEY,
    LIVE,
    Savepoint,
    TxnState,
    clock_datetime,
    depth_below,
    register,
    unregister,
)
from sentinel.orm.worker import DrainReport, Runner
from sentinel.rules import LocalEventDetector, Rule

__all__ = ["Attachment", "LogOptions", "OutboxOptions"]

log = logging.getLogger("sentinel.orm")


def _scope_id() -> str:
    """A new transaction scope id: 32 hex digits, the time in nanoseconds then
    random bits. Unique like a UUID, and increasing, so the log's index on
    ``(scope, t_occ)`` grows at its end (a random id would touch a page anywhere
    in it at every commit)."""
    return f"{time.time_ns():016x}{os.urandom(8).hex()}"  # as uuid4's randomness, 3 µs less


def _check_count(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise AttachError(f"attach({name}=...) must be an int >= {low}, not {value!r}")


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise AttachError(f"attach({name}=...) must be a number of seconds >= 0, not {value!r}")
    return float(value)


def _make_signer(key: str | bytes | OutboxSigner) -> OutboxSigner:
    if isinstance(key, OutboxSigner):
        return key
    try:
        return OutboxSigner(key)
    except (TypeError, ValueError) as err:
        raise AttachError(f"attach(outbox_key=...): {err}") from None


@dataclass(frozen=True, kw_only=True)
class LogOptions:
    """:func:`~sentinel.orm.attach`'s options for the event log (each described
    there). Checked when made: a bad value raises
    :class:`~sentinel.errors.AttachError` naming the option."""

    log: bool | LogWriter | LogPolicy | None = True
    schema: str | None = None
    prefix: str = DEFAULT_PREFIX
    flush_every: int = 10_000
    log_empty: bool = False
    log_condition_false: bool = False
    commit_order: bool = False
    log_bind: Any = None

    def __post_init__(self) -> None:
        _check_count("flush_every", self.flush_every, 1)
        log = self.log
        if not (
            log is True or log is False or log is None or isinstance(log, LogWriter | LogPolicy)
        ):
            raise AttachError(
                f"attach(log=...) takes True, False, a LogWriter or a LogPolicy, not {log!r:.60}",
                target=log,
            )

    @property
    def logging_on(self) -> bool:
        """Whether occurrences are logged (the outbox needs a writer either way)."""
        return self.log is not False and self.log is not None

    def make_writer(self) -> LogWriter:
        """The writer of the log and the outbox: the one given (switched to
        ``commit_order`` if asked), or a new one for ``schema`` / ``prefix``."""
        log = self.log
        if isinstance(log, LogWriter):
            if self.commit_order:
                log.commit_order = True
            return log
        policy = log if isinstance(log, LogPolicy) else None
        order = self.commit_order and self.logging_on
        return LogWriter(schema=self.schema, prefix=self.prefix, policy=policy, commit_order=order)


@dataclass(frozen=True, kw_only=True)
class OutboxOptions:
    """:func:`~sentinel.orm.attach`'s options for detached rules: the outbox and
    the :class:`~sentinel.orm.worker.Runner` running its entries (each described
    at :func:`~sentinel.orm.attach`). Checked when made: a bad value raises
    :class:`~sentinel.errors.AttachError` naming the option; ``signer`` is
    ``outbox_key`` as an :class:`~sentinel.log.signing.OutboxSigner`."""

    outbox: bool = True
    workers: int = 2
    max_attempts: int = 5
    backoff: float = 0.5
    max_backoff: float = 60.0
    lease: float = 60.0
    session_factory: Callable[[], Session] | None = None
    context: Callable[[], AbstractContextManager[Any]] | None = None
    outbox_key: str | bytes | OutboxSigner | None = None
    signer: OutboxSigner | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_count("workers", self.workers, 0)
        _check_count("max_attempts", self.max_attempts, 1)
        for name in ("backoff", "max_backoff", "lease"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name)))
        if self.context is not None and not callable(self.context):
            raise AttachError(
                f"attach(context=...) takes a callable returning a context manager (such as "
                f"app.app_context), not {self.context!r:.60}",
                target=self.context,
            )
        key = self.outbox_key
        object.__setattr__(self, "signer", None if key is None else _make_signer(key))

    def signer_for(self, writer: LogWriter, log: LogOptions) -> OutboxSigner | None:
        """The signer ``writer`` must get: from ``outbox_key``, else from the
        environment (for a writer that has none of its own); ``None``: leave the
        writer as it is."""
        if self.signer is not None:
            if isinstance(log.log, LogWriter):
                raise AttachError(
                    "attach(outbox_key=...) together with log=LogWriter(...): give the key to "
                    "the writer instead (LogWriter(outbox_key=...)), which writes the outbox rows",
                    target=log.log,
                )
            return self.signer
        key = key_from_env()
        return None if key is None or writer.signer is not None else _make_signer(key)


class Attachment(Endings, OuterTransactions):
    """Sentinel attached to one session factory (returned by :func:`attach`).

    ``detector`` is the detector its sessions' transactions drive;
    ``session_factory`` makes the sessions of detached rules; ``writer`` writes
    the log and the outbox; ``sink`` is ``None`` when occurrences are not
    logged. A context manager: leaving the block detaches.
    """

    def __init__(
        self,
        target: Any,
        resolved: Target,
        detector: LocalEventDetector,
        writer: LogWriter,
        sink: LogSink | None,
        *,
        home: Engine | None,
        log_options: LogOptions,
        outbox_options: OutboxOptions,
    ) -> None:
        self.target = target
        self._resolved = resolved
        self._listen_on = resolved.listen_on
        self.session_class = resolved.session_class
        self.session_factory: Callable[[], Session] = (
            resolved.session_factory or self._no_sync_factory
        )
        self.is_async = resolved.is_async
        #: The home database inside the sessions' transactions (see
        #: :mod:`sentinel.orm.binds`); ``None`` until known.
        self._home = home
        self.detector = detector
        self.writer = writer
        self.sink = sink
        self.log_options = log_options
        self.outbox_options = outbox_options
        self.outbox = outbox_options.outbox
        self.flush_every = log_options.flush_every
        self.log_empty = log_options.log_empty
        self.log_condition_false = log_options.log_condition_false
        self.runner = Runner(self, outbox_options)
        #: The engine of writes outside the sessions' transactions (late rows, the
        #: workers' claims): the home database, through a synchronous driver.
        self._engine: Engine | None = None
        self._last_home: Engine | None = None
        if resolved.explicit_factory:
            # the workers mark an entry done in the detached transaction, on
            # this engine: the one the detached sessions use
            kw = getattr(resolved.session_factory, "kw", None) or {}
            self._engine = sync_engine(kw.get("bind"))
        if self._engine is None and not resolved.is_async:
            self._engine = home
        self._attached = False
        #: Where and how the pre-commit step runs (see :mod:`sentinel.orm.commit`).
        self._commit = PreCommit(self)
        self._handlers: list[tuple[str, Callable[..., Any]]] = [
            ("after_transaction_create", self._on_create),
            ("after_begin", self._on_begin),
            ("before_flush", self._on_before_flush),
            ("after_flush", self._on_flush),
            ("after_flush_postexec", self._on_flush_postexec),
            ("before_commit", self._commit.at_before_commit),
            ("after_commit", self._on_after_commit),
            ("after_transaction_end", self._on_end),
        ]

    def __repr__(self) -> str:
        state = "attached" if self._attached else "detached"
        return f"<sentinel Attachment {self.session_class.__name__} {state}>"

    # -- public ------------------------------------------------------------------------
    def engine(self) -> Engine:
        """The engine of the home database (see :mod:`sentinel.orm.binds`), where
        the outbox, the late log rows and the workers' claims are: the bind of
        ``session_factory`` when one was given, else ``log_bind``, else the
        session factory's default bind (for a factory of unbound sessions,
        ``Session`` itself: the default bind of the last transaction logged).

        Raises :class:`~sentinel.errors.AttachError` for an asyncio target
        without a synchronous ``session_factory``: work outside its sessions'
        transactions (late rows written by :meth:`flush_log` or at detach, the
        outbox workers) needs a synchronous engine on the same database."""
        if self._engine is not None:
            return self._engine
        if self.is_async:
            raise AttachError(
                f"{self.target!r:.80} makes asyncio sessions; outside their transactions "
                "(late log rows, the outbox workers) sentinel needs a synchronous engine on "
                "the same database: attach(..., session_factory=sessionmaker(<an engine "
                "with a synchronous driver>))",
                target=self.target,
            )
        try:
            with self.session_factory() as s:
                self._engine = self._home_of(s)
        except AttachError:
            if self._last_home is None:
                raise
            return self._last_home  # the session factory makes unbound sessions
        except Exception as err:
            if self._last_home is not None:  # a factory needing arguments (Flask's class)
                return self._last_home
            raise AttachError(
                f"sentinel cannot find the engine of the log and the outbox: the session "
                f"factory {self.session_factory!r:.80} could not make a session and give its "
                f"bind ({type(err).__name__}: {err}); give attach() a session factory that "
                "can be called without arguments (attach(..., session_factory=...)), or "
                "name the home database (attach(..., log_bind=engine))",
                target=self.target,
            ) from err
        return self._engine

    def _no_sync_factory(self) -> Session:
        raise AttachError(
            f"{self.target!r:.80} makes asyncio sessions; detached rules run in worker "
            "threads and need a synchronous one: attach(..., session_factory=sessionmaker("
            "<an engine on the same database with a synchronous driver>))",
            target=self.target,
        )

    def _home_of(self, session: Session) -> Engine:
        """The home database of ``session``'s transaction (see the module docs of
        :mod:`sentinel.orm.binds`): the configured one, else the session's
        default bind."""
        if self._home is not None:
            return self._home
        try:
            bind = session.get_bind()
        except Exception as err:
            raise AttachError(
                f"the sessions of {self.target!r:.80} have no default bind ({err}): name "
                "the database of sentinel's outbox and late log rows with "
                "attach(..., log_bind=engine)",
                target=self.target,
            ) from err
        engine = sync_engine(bind)
        if engine is None:  # pragma: no cover - a get_bind() returning something else
            raise AttachError(f"get_bind() of {self.target!r:.80} returned {bind!r:.60}")
        # not kept as the home: a get_bind() override (Flask-SQLAlchemy's) may
        # answer another engine for the next session; only remembered for
        # engine() (late rows) when the session factory makes unbound sessions
        self._last_home = engine
        return engine

    def drain(self, *, limit: int | None = None) -> DrainReport:
        """Run the detached rules waiting in the outbox that are due now (after a
        restart, or when this process runs no worker threads), in this thread.
        See :meth:`sentinel.orm.worker.Runner.drain`."""
        return self.runner.drain(limit=limit)

    def wait_detached(self, timeout: float | None = None) -> bool:
        """Block until the worker pool has run everything handed to it
        (retries included); False if ``timeout`` seconds passed first."""
        return self.runner.wait(timeout)

    def flush_log(self) -> int:
        """Write the late log rows (see :mod:`sentinel.orm.logsink`) now; return
        how many occurrences were written."""
        if ABANDONED:
            _collect_abandoned()
        if self.sink is None:
            return 0
        return self.sink.flush(self.engine() if self.sink.late else None)

    def detach(self, *, timeout: float = 10.0) -> None:
        """Stop following the sessions: stop the worker pool (entries it had
        not started stay pending in the outbox; those running get ``timeout``
        seconds to finish, followed as before), then remove the session
        listeners (and, with the detector's last attachment, the detector
        hooks) and write the late log rows. Transactions still in progress
        are no longer followed: their occurrences are not logged. Idempotent.

        SQLAlchemy's listeners must not be removed while another thread runs
        them (its listener collections are plain deques: ``RuntimeError:
        deque mutated during iteration`` in that thread): the pool is
        stopped first for that reason; the application's own threads using
        sessions of the attached class should be done with them before."""
        with _LOCK:
            if not self._attached:
                return
        # First the pool: a worker thread committing a batch iterates the
        # class's listener deques; a listener removed meanwhile failed the
        # batch's shared transaction, and left it (and its entries, run again
        # alone) unlogged.
        if not self.runner.close(timeout):
            log.warning(
                "sentinel's outbox: a worker thread of %r still runs a detached rule "
                "after %g s; detaching now: its transaction is no longer followed, and "
                "its commit may fail (SQLAlchemy's listeners are removed while it runs "
                "them), its entry then retried",
                self.target,
                timeout,
            )
        with _LOCK:
            if not self._attached:  # detached meanwhile by another thread
                return
            self._attached = False
            for name, fn in self._handlers:
                if sa_event.contains(self._listen_on, name, fn):
                    sa_event.remove(self._listen_on, name, fn)
            _ATTACHED.pop(self.session_class, None)
            integ = _INTEGRATIONS.get(self.detector)
            if integ is not None:
                integ.attachments.remove(self)
                if not integ.attachments:
                    integ.uninstall()
                    del _INTEGRATIONS[self.detector]
                else:
                    integ.refresh_listener()
            for ref in list(LIVE.values()):
                st = ref()
                if st is not None and st.attachment is self:
                    unregister(st)
                    if st.scope is not None:
                        # no longer followed: its thread's signals go elsewhere
                        # (EventDetector._settle; here at once)
                        if st.scope.status == "active":
                            st.scope.status = "detached"
                        self.detector.leave_ambient(st.scope)
                    sess = st.session
                    if sess is not None:
                        sess.info.pop(KEY, None)
            if self._resolved.undo is not None:
                self._resolved.undo()
        if ABANDONED:
            _collect_abandoned()
        if self.sink is not None:
            if self.sink.late and self.is_async and self._engine is None:
                log.warning(
                    "sentinel's event log: %d late rows of %r not written at detach (an "
                    "asyncio target without a synchronous session_factory)",
                    len(self.sink.late),
                    self.target,
                )
            elif self.sink.late:
                try:
                    self.sink.flush(self.engine())
                except Exception:
                    log.exception("sentinel's event log: late rows lost at detach")
            self.sink.close()

    close = detach

    def __enter__(self) -> Attachment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.detach()

    # -- session events ----------------------------------------------------------------
    def _on_create(self, session: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is None:
            if ABANDONED:
                _collect_abandoned()
            st = TxnState(self, transaction, weakref.ref(session), _scope_id())
            det = self.detector
            # det.begin(id), in two steps so that the scope exists even if a rule
            # on txn:begin fails: raising out of SQLAlchemy's transaction set-up
            # would leave the session half-begun, so the failure dooms the
            # transaction instead (its commit raises RollbackOnlyError).
            st.scope = det.scope(st.scope_id)
            register(st)
            session.info[KEY] = st
            # explicit signals of this thread (or task) go to the transaction
            det.enter_ambient(st.scope)
            try:
                # as det.begin signals it: never muted (a transaction event)
                det.emit(det.channel("txn:begin"), (), (), None, (), st.scope, None, False)
            except SentinelError as err:
                log.warning("sentinel: a rule on txn:begin failed: %s", err)
                st.doom(getattr(err, "rule", "txn:begin"), err)
            return
        if not transaction.nested:
            return
        outer: TxnState | None = session.info.get(KEY)
        if outer is None or outer.scope is None or not outer.scope.active:
            return
        self._savepoint(outer, transaction)

    def _savepoint(self, st: TxnState, transaction: SessionTransaction) -> None:
        assert st.scope is not None
        pending = st.scope.info.get("detached")
        st.savepoints_begun += 1
        name = f"sp{st.savepoints_begun}"
        st.savepoints.append(
            Savepoint(
                transaction,
                st.scope.savepoint(),
                len(st.occurrences),
                len(st.firings),
                len(pending) if pending else 0,
                f"{st.savepoints[-1].path}/{name}" if st.savepoints else name,
            )
        )

    def _on_before_flush(self, session: Session | None = None, *_: Any) -> None:
        if session is None:  # dispatched without arguments (SQLAlchemy's own tests do)
            return
        st = session.info.get(KEY)
        if st is None or st.scope is None or not st.scope.active:
            return
        st.flush_expressions = note_expressions(session)

    def _on_flush(self, session: Session, flush_context: Any) -> None:
        st = session.info.get(KEY)
        if st is None or st.scope is None or not st.scope.active:
            return
        integ = _INTEGRATIONS.get(self.detector)
        if integ is None:  # pragma: no cover - detached meanwhile
            return
        if st.pre_committed:
            PreCommit.note_change(st)
        # made here, where the objects' history says what the flush wrote;
        # signalled at the flush's end (_on_flush_postexec), once SQLAlchemy has
        # reset that history: what a rule changes then, the next flush writes
        # (a failed flush's are replaced by the next flush's: its transaction
        # rolled back with it)
        st.flush_events = []
        expressions, st.flush_expressions = st.flush_expressions, None
        signal_flush(
            self.detector,
            integ.plans,
            session,
            st.scope,
            flush_context,
            st.flush_events,
            expressions,
        )

    def _on_begin(self, session: Session, transaction: Any, connection: Connection) -> None:
        st = session.info.get(KEY)
        if st is None:
            return
        engine = connection.engine
        if engine not in st.engines:
            st.engines.append(engine)
        if transaction is st.transaction and _joins_outer(transaction, connection):
            st.outer.append(connection)

    def _on_flush_postexec(self, session: Session, flush_context: Any) -> None:
        st = session.info.get(KEY)
        if st is None or st.scope is None or not st.scope.active:
            return
        made = st.flush_events
        if made:
            st.flush_events = []
            firings = len(st.firings)
            signal_made(self.detector, made)
            if st.scope is None or not st.scope.active:
                return  # a rule ended the transaction (the call fails: see integration)
            self._check_flush_chain(session, st, firings)
        if st.commit_seen and in_commit(st.transaction):
            self._commit.at_flush_end(session, st)
            return
        if (
            self.sink is None
            or st.savepoints
            or len(st.occurrences) - st.written < self.flush_every
        ):
            return
        self.sink.write_partial(self._commit.connections(session, st, None), st)

    def _check_flush_chain(self, session: Session, st: TxnState, firings: int) -> None:
        """Inside a commit, the rules on this flush's events left changes for
        another flush: count such flushes in a row, and past the cascade limit
        fail the commit with a :class:`~sentinel.errors.CascadeLimitError` (a
        rule that changes the row it reacts to at every update: a counter, a
        stamp), naming a rule that fired, rather than SQLAlchemy's ``FlushError``
        after 100 flushes."""
        if not in_commit(st.transaction) or is_clean(session):
            st.rule_flushes = 0
            return
        st.rule_flushes += 1
        limit = self.detector.scheduler.cascade_limit
        if st.rule_flushes > limit:
            fired = [f[0].name for f in st.firings[firings:] if f[2] == "fired"]
            raise CascadeLimitError(fired[-1] if fired else "a rule on a database event", limit)

    def _on_after_commit(self, session: Session) -> None:
        st = session.info.get(KEY)
        if st is None or st.scope is None:
            return
        nested = session.get_nested_transaction()
        if nested is not None:
            self._release(st, nested)
            return
        if session.get_transaction() is not st.transaction or not st.scope.active:
            return
        if st.outer and self._hand_over(st):
            return  # not the database's commit: txn:commit waits for it
        if not st.pre_committed:
            log.warning(
                "sentinel: transaction %s committed without its pre-commit step (deferred "
                "rules did not run; its log rows are written after the commit)",
                st.scope_id,
            )
        self._committed(st)

    def _committed(self, st: TxnState) -> None:
        """``st``'s transaction committed: ``txn:commit``, then what came after
        the commit (``txn:commit`` and the rules it ran) to the late rows."""
        assert st.scope is not None
        st.committed = True
        try:
            # Rules on txn:commit run after the commit: their failure cannot undo it,
            # and raising out of after_commit would leave the session half-closed.
            self.detector.commit(st.scope)
        except Exception:
            log.exception("sentinel: a rule on txn:commit of %s failed", st.scope_id)
        finally:
            if self.sink is not None:
                self.sink.after_commit(st, skip_empty=not self.log_empty)

    def _release(self, st: TxnState, nested: SessionTransaction) -> None:
        for i, sp in enumerate(st.savepoints):
            if sp.transaction is nested:
                sp.released = True
                assert st.scope is not None
                st.scope.release(sp.token)
                if st.doomed is not None and st.doomed[0] == i + 1:
                    st.doomed = (i, st.doomed[1], st.doomed[2])  # the enclosing level now
                del st.savepoints[i:]
                return

    def _on_end(self, session: Session, transaction: SessionTransaction) -> None:
        st = session.info.get(KEY)
        if st is None:
            return
        if transaction.nested:
            released = not any(sp.transaction is transaction for sp in st.savepoints)
            self._savepoint_ended(st, transaction)
            if released and st.commit_seen:
                self._commit.at_savepoint_released(session, st)
            return
        if transaction.parent is not None or st.transaction is not transaction:
            return
        # a rule triggered in this transaction is running (here, or in the
        # clock's thread on a handle of the scope): its action ends it
        in_rule = st.scope is not None and (
            st.scope.depth > 0
            or (st.scope.elsewhere is not None and threading.get_ident() in st.scope.elsewhere)
        )
        session.info.pop(KEY, None)
        try:
            if not st.committed and not st.handed_over:
                outcome = False if st.witness is None else self._resolve(st)
                if outcome is True:
                    self._committed(st)
                elif outcome is False:
                    self._abort(session, st)
                else:
                    self._in_doubt(st)
        finally:
            if not st.handed_over:  # else live until the outer transaction ends
                unregister(st)
            st.ended = True
            if st.scope is not None:
                self.detector.leave_ambient(st.scope)
            if in_rule:  # after the rules on txn:abort: the running rule's run fails
                integ = _INTEGRATIONS.get(self.detector)
                if integ is not None and st.scope is not None:
                    integ.note_ended(st.scope_id, st.scope)
        sink = self.sink
        if sink is not None and sink.late and sink.late_due():
            try:
                home = self._home_of(session)
            except Exception:
                log.exception("sentinel's event log: no database for the late rows (kept)")
                return
            sink.flush_quietly(home)

    def _savepoint_ended(self, st: TxnState, nested: SessionTransaction) -> None:
        for i, sp in enumerate(st.savepoints):
            if sp.transaction is not nested:
                continue
            scope = st.scope
            assert scope is not None
            if not sp.released and scope.active:
                occs = st.occurrences[sp.occurrences :]
                firings = st.firings[sp.firings :]
                del st.occurrences[sp.occurrences :]
                del st.firings[sp.firings :]
                if occs or firings:
                    st.rolled_back.append((sp.path, occs, firings))
                pending = scope.info.get("detached")
                if pending:
                    del pending[sp.detached :]
                scope.rollback_to(sp.token)
                if st.doomed is not None and st.doomed[0] >= i + 1:
                    st.doomed = None
            del st.savepoints[i:]
            return

    # -- detached rules ----------------------------------------------------------------
    def _detached(self, rule: Rule, occ: Any, committed: bool, st: TxnState | None) -> None:
        """Hand one detached detection to the outbox (see the module docs of
        :mod:`sentinel.orm.outbox`): already written in the trigger's commit,
        written with the aborted transaction's log, or written now."""
        if not self.outbox:
            log.error(
                "sentinel: detached rule %r triggered, but this attachment has no outbox "
                "(attach(..., outbox=True)); it does not run",
                rule.name,
            )
            return
        key = idempotency_key(rule.name, occ)
        if st is not None and committed and key in st.outbox_keys:
            # written in the trigger's commit; an outer transaction's commit
            # signals txn:commit just before the database commits, which may
            # take a while (a slow COMMIT): looked for until it shows
            if st.handed_over:
                self.runner.submit_awaited(key, _OUTER_SUBMIT_DELAY, self.runner.lease)
            else:
                self.runner.submit(key, 0.0)
            return
        entry = entry_for(
            rule,
            occ,
            committed=committed,
            depth=depth_below(None if st is None else st.session_ref()),
        )
        pending = (
            [
                Firing.of(
                    rule.name,
                    occ,
                    coupling=str(rule.coupling),
                    status=FiringStatus.PENDING,
                    fired_at=clock_datetime(self.detector),
                    partition=rule.partition(occ),
                )
            ]
            if self.sink is not None
            else []
        )
        if st is not None and not committed and not st.ended:
            st.aborted_outbox.append(entry)
            st.aborted_pending.extend(pending)
            return
        try:
            with self.engine().begin() as conn:
                self.writer.write(conn, (), outbox=[entry], firings=pending)
        except Exception:
            log.exception("sentinel's outbox: detached rule %r not enqueued", rule.name)
            return
        self.runner.submit(entry.idempotency_key)
