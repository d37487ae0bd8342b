"""Attaching sentinel to a SQLAlchemy session factory.

:func:`attach` listens to the session events of a ``sessionmaker`` (or
``scoped_session``, or ``Session`` subclass) and drives its detector with them:

===================================  =============================================
SQLAlchemy                           sentinel
===================================  =============================================
``after_transaction_create`` (root)  a detection scope per root transaction;
                                     ``txn:begin``
``after_transaction_create``         a savepoint of the scope
(``begin_nested``)
``after_begin``                      remember the database (where the log goes)
``after_flush``                      ``Class:insert`` / ``:update`` / ``:delete``
``before_commit`` (root),            the pre-commit step, once the session has
``after_flush_postexec``,            nothing left to flush (see
``after_transaction_end``            :mod:`sentinel.orm.commit`):
(a savepoint released at commit)     ``txn:pre_commit`` (deferred rules), then the
                                     log and the outbox written in the transaction
``after_commit`` (root)              ``txn:commit``; flush the scope; detached
                                     rules to the worker pool (a session that
                                     joined a transaction begun outside it: at
                                     that transaction's commit, see
                                     :meth:`Attachment._hand_over`)
``after_commit`` (``begin_nested``)  release the savepoint
``after_transaction_end``            savepoint not released: roll detection back
                                     to it; root not committed: ``txn:abort``,
                                     flush the scope, log it as aborted
===================================  =============================================

``after_transaction_end`` stands for ``after_rollback`` / ``after_soft_rollback``:
it is the one event SQLAlchemy sends for every end of a transaction (a
rollback, a ``close()`` without commit, a rollback that itself failed), and it
comes after the database rollback.

Per detector (whatever number of session factories is attached to it) sentinel
installs: the reactive layer's scope hook (an object's method events go to its
session's transaction), an occurrence listener (the log), the scheduler's rule
observer (rule firings; a failed rule dooms its transaction), the detached
executor (the outbox) and a rule check (detached actions must be importable).
:meth:`Attachment.detach` (or :func:`detach`) removes everything again.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import partial
from types import MappingProxyType, TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, SessionTransaction

from sentinel.detector import events
from sentinel.errors import AttachError, RuleError, ScopeError, SentinelError
from sentinel.log import LogPolicy, LogWriter, idempotency_key
from sentinel.log.records import Firing
from sentinel.log.signing import OutboxSigner, key_from_env
from sentinel.log.tables import DEFAULT_PREFIX, FiringStatus
from sentinel.occurrence import Occurrence
from sentinel.orm.binds import Target, check_binds, resolve_target, sync_engine
from sentinel.orm.commit import PreCommit, in_commit
from sentinel.orm.db_events import define_db_events, signal_flush
from sentinel.orm.logsink import TXN_EVENTS, LogSink, firing_of, only_transaction_events
from sentinel.orm.outbox import check_importable, entry_for
from sentinel.orm.state import (
    ABANDONED,
    KEY,
    LIVE,
    Savepoint,
    TxnState,
    clock_datetime,
    clock_of,
    register,
    take_abandoned,
    unregister,
)
from sentinel.orm.worker import DrainReport, Runner
from sentinel.params import (
    MAX_INT_BITS,
    MAX_STRING,
    UnloggableParameter,
    normalize,
    too_large,
    unstorable_text,
)
from sentinel.reactive import attached_classes
from sentinel.reactive.classes import PLAIN
from sentinel.rules import LocalEventDetector, Rule

__all__ = ["Attachment", "attach", "attachments", "detach"]

log = logging.getLogger("sentinel.orm")

_LOCK = threading.RLock()
#: Attached session classes (a sessionmaker's own subclass, or the class given).
_ATTACHED: dict[type, Attachment] = {}
_INTEGRATIONS: weakref.WeakKeyDictionary[LocalEventDetector, _Integration] = (
    weakref.WeakKeyDictionary()
)

#: Parameter value types the log listener takes as they are (already loggable).
_LOGGABLE = PLAIN | {MappingProxyType}
#: Types of database events' column values passed as they are, and capped by
#: the log (``sentinel.params.too_large``) besides strings.
_CAPPED = frozenset({bytes, int})
#: The integers the log takes: those in (-_INT_CAP, _INT_CAP).
_INT_CAP = 1 << MAX_INT_BITS
#: Parameter names seen to be storable (names recur: one set lookup each).
_NAMES_OK: set[str] = set()


def _check_name(event: str, name: Any, value: Any) -> None:
    """Refuse a parameter name no backend's JSON keeps as a key (``**{"\\x00": 1}``
    in an explicit signal); remember a good one."""
    if type(name) is not str or unstorable_text(name) or len(name) > 1000:
        raise UnloggableParameter(
            event,
            repr(name)[:80],
            value,
            "parameter names must be strings of at most 1,000 characters without NUL "
            "characters or lone surrogates",
        )
    if len(_NAMES_OK) > 10_000:
        _NAMES_OK.clear()
    _NAMES_OK.add(name)


def _kept(
    policy: LogPolicy | None, event: str, params: dict[str, Any], path: tuple[str, ...]
) -> bool:
    """Whether the log keeps the value at ``path`` of ``params`` as it is (it
    drops an excluded value and replaces a redacted one)."""
    value: Any = params
    for p in path:
        value = value[p]
    view: Any = params if policy is None else policy.apply(event, params)
    for p in path:
        if not isinstance(view, Mapping) or p not in view:
            return False
        view = view[p]
    return view is value


def _refuse_logged(
    policy: LogPolicy | None, event: str, params: dict[str, Any], path: tuple[str, ...]
) -> None:
    """Raise for the value over its type's cap (a string too long, bytes, an
    integer too large) at ``path`` of ``params``, unless the log leaves it out."""
    if _kept(policy, event, params, path):
        value: Any = params
        for p in path:
            value = value[p]
        normalize(value, event=event, param=".".join(path))  # raises, naming both


def _normalize_mapping(
    policy: LogPolicy | None, event: str, params: dict[str, Any], name: str
) -> None:
    """Normalize the read-only mapping ``params[name]`` as a dict would be (or
    raise), unless the log leaves it out."""
    if _kept(policy, event, params, (name,)):
        params[name] = normalize(params[name], event=event, param=name)


def _make_loggable(policy: LogPolicy | None, event: str, params: dict[str, Any]) -> None:
    """Replace the values of ``params`` that are not loggable by loggable ones
    (or raise), leaving alone those the log leaves out."""
    for k, val in list(params.items()):
        if type(val) not in _LOGGABLE and _kept(policy, event, params, (k,)):
            params[k] = normalize(val, event=event, param=k)


# -- one detector ----------------------------------------------------------------------


class _Integration:
    """What sentinel installed on one detector for its attachments."""

    def __init__(self, detector: LocalEventDetector) -> None:
        self.detector = detector
        self.now = clock_of(detector)  # fired_at: on the clock of the occurrences' at
        self.attachments: list[Attachment] = []
        self.plans: dict[type, Any] = {}
        #: Occurrences of detection scopes that are not session transactions, by
        #: scope id, until their commit or abort says how to log them.
        self.foreign: dict[Any, list[Occurrence]] = {}
        self._listening = False
        #: Some attachment records rule runs whose condition was false.
        self.log_condition_false = False
        #: Scope ids of transactions ended (rolled back, committed, closed) while
        #: rules of theirs ran: the run fails (see :meth:`observe`). Each entry
        #: goes with its scope object (a weak reference's callback), so one no
        #: rule run took (a plain subscriber ended the transaction) is not kept.
        self.ended_in_rule: dict[Any, weakref.ref[Any]] = {}
        #: What sentinel listens to on the detector's events
        #: (:mod:`sentinel.detector.events`), besides ``occurrence`` while some
        #: attachment logs (:meth:`refresh_listener`). The first two take over
        #: (``insert=True``): the first listener alone answers them.
        self.listeners: tuple[tuple[str, Callable[..., Any], bool], ...] = (
            ("run_detached", self.execute_detached, True),  # through the outbox
            ("object_scope", self.scope_of, True),  # an object's session transaction
            ("rule_run", self.observe, False),  # the rule-firing log
            ("expired", self.on_expired, False),  # archived occurrences, marked in the log
            ("define_rule", check_importable, False),  # detached actions importable
            ("classes_attached", self.classes_attached, False),  # database events
        )

    # installation ---------------------------------------------------------------------
    def install(self) -> None:
        det = self.detector
        for name, fn, insert in self.listeners:
            events.listen(det, name, fn, insert=insert)
        define_db_events(det, attached_classes(det))

    def uninstall(self) -> None:
        det = self.detector
        for name, fn, _ in self.listeners:
            events.remove(det, name, fn)
        if self._listening:
            events.remove(det, "occurrence", self.on_occurrence)
            self._listening = False

    def refresh_listener(self) -> None:
        self.log_condition_false = any(a.log_condition_false for a in self.attachments)
        want = any(a.sink is not None for a in self.attachments)
        if want and not self._listening:
            events.listen(self.detector, "occurrence", self.on_occurrence)
            self._listening = True
        elif not want and self._listening:
            events.remove(self.detector, "occurrence", self.on_occurrence)
            self._listening = False

    @property
    def primary(self) -> Attachment | None:
        """The attachment that logs what belongs to no session transaction."""
        for a in self.attachments:
            if a.sink is not None:
                return a
        return self.attachments[0] if self.attachments else None

    def classes_attached(self, classes: list[type]) -> None:
        self.plans.clear()
        define_db_events(self.detector, classes)

    # the per-event hooks --------------------------------------------------------------
    def scope_of(self, obj: Any) -> Any:
        """The reactive layer's scope hook: the scope of ``obj``'s session's
        transaction (begun now, as SQLAlchemy's autobegin would, when the session
        has none), or ``None``."""
        try:
            state = obj.__dict__["_sa_instance_state"]
        except (AttributeError, KeyError, TypeError):
            return None
        session = state.session
        if session is None:
            return None
        st = session.info.get(KEY)
        if st is None:
            if _attachment_of(session) is None or not session.autobegin:
                return None
            autobegin = getattr(session, "_autobegin_t", None)
            if autobegin is None:  # pragma: no cover - guards a SQLAlchemy change
                return None
            autobegin()
            st = session.info.get(KEY)
            if st is None:
                return None
        if st.attachment.detector is not self.detector:
            return None
        if st.pre_committed:
            PreCommit.note_change(st)
        return st.scope

    def on_occurrence(self, occ: Occurrence) -> None:
        """The occurrence listener (under the detector's lock): buffer ``occ``
        for the log. Parameters that are not loggable are made so, or raise
        :class:`~sentinel.params.UnloggableParameter` (the signal fails), unless
        the log policy of the attachment that logs ``occ`` leaves them out; an
        occurrence no attachment logs is left alone."""
        ref = LIVE.get(occ[6])
        st = None if ref is None else ref()
        if st is not None:
            sink = st.attachment.sink
        else:
            primary = self.primary
            sink = None if primary is None else primary.sink
        if sink is None:
            return
        params = occ[5]
        if params:
            for k, v in params.items():
                if k not in _NAMES_OK:
                    _check_name(occ[0], k, v)
                t = type(v)
                if t is str:
                    if len(v) > MAX_STRING:
                        _refuse_logged(sink.writer.policy, occ[0], params, (k,))
                elif t is int:
                    if not -_INT_CAP < v < _INT_CAP:
                        _refuse_logged(sink.writer.policy, occ[0], params, (k,))
                elif t is MappingProxyType:
                    if occ[4] is None:
                        # an explicit event's own mapping (a database event's
                        # and a method's were normalized by their layers)
                        _normalize_mapping(sink.writer.policy, occ[0], params, k)
                        continue
                    # a database event's column values (``new``, ``old``)
                    for k2, v2 in v.items():
                        t2 = type(v2)
                        if (t2 is str and len(v2) > MAX_STRING) or (
                            t2 in _CAPPED and too_large(v2)
                        ):
                            _refuse_logged(sink.writer.policy, occ[0], params, (k, k2))
                elif t not in _LOGGABLE:
                    _make_loggable(sink.writer.policy, occ[0], params)
                    break
        if st is not None:
            st.occurrences.append(occ)
            return
        scope = occ[6]
        if scope == self.detector.process_scope.id:
            sink.add_late(("occ", occ, None))
            return
        pending = self.foreign.setdefault(scope, [])
        pending.append(occ)
        name = occ[0]
        if name == "txn:commit" or name == "txn:abort":
            del self.foreign[scope]
            outcome = "committed" if name == "txn:commit" else "aborted"
            for o in pending:
                sink.add_late(("occ", o, outcome))

    def on_expired(self, expired: list[Any]) -> None:
        """The bitemporal archive listener: mark the expired occurrences in the
        log (written with the late rows, after the rows themselves)."""
        primary = self.primary
        if primary is None or primary.sink is None:
            return
        for e in expired:
            occ = e.occurrence
            primary.sink.add_late(("expired", (str(occ[6]), occ[1], e.at)))

    def observe(self, rule: Rule, occ: Any, status: str, error: BaseException | None) -> None:
        """The scheduler's rule observer: buffer the firing; a failure dooms the
        transaction it happened in. A rule run that ended its own transaction
        fails (raises :class:`~sentinel.errors.RuleError`)."""
        if self.ended_in_rule:
            error = self._ended_by(rule, occ, error)
            if error is not None:
                status = "failed"
        if status == "condition_false" and not self.log_condition_false:
            return  # the common case of a guard rule: one comparison
        try:
            scope = occ.scope
        except Exception:  # pragma: no cover - an occurrence without constituents
            return
        ref = LIVE.get(scope)
        st = None if ref is None else ref()
        if st is not None and st.commit_refused is not None:
            error, status = self._refused_commit(rule, st), "failed"
        att = st.attachment if st is not None else self.primary
        if att is None:
            return
        if status == "condition_false" and not att.log_condition_false:
            return
        if st is not None:
            if att.sink is not None:
                st.firings.append((rule, occ, status, error, self.now()))
            if status == "failed" and isinstance(error, SentinelError):
                st.doom(rule.name, error)
        elif att.sink is not None:
            att.sink.add_late(("firing", firing_of((rule, occ, status, error, self.now()))))
        if status == "failed" and getattr(error, "ended_transaction", False):
            raise error  # type: ignore[misc]

    def note_ended(self, scope_id: Any, scope: Any) -> None:
        """Record that the transaction of ``scope_id`` ended while rules of
        its ran; the record goes when ``scope`` (its scope object) does."""
        ended = self.ended_in_rule

        def forget(_: object) -> None:
            ended.pop(scope_id, None)

        ended[scope_id] = weakref.ref(scope, forget)

    def _ended_by(self, rule: Rule, occ: Any, error: BaseException | None) -> Any:
        """The error of a rule run whose transaction ended while it ran (its
        action called ``rollback()``, ``commit()`` or ``close()`` on the session),
        or ``None``: the call that triggered the rule would otherwise go on in
        the session's next transaction, unnoticed."""
        try:
            scope = occ.scope
        except Exception:  # pragma: no cover - an occurrence without constituents
            return None
        if self.ended_in_rule.pop(scope, None) is None:
            return None
        if error is not None:
            return None  # it failed anyway: that error says more
        cause = ScopeError(
            "the transaction it ran in was ended while it ran (session.rollback(), "
            "commit() or close() in its action, or in a listener of the same event); "
            "the call that triggered it would go on in the session's next transaction. "
            "To abort the transaction, raise an exception in the action"
        )
        err = RuleError(rule.name, "action", cause)
        err.__cause__ = cause
        err.ended_transaction = True  # type: ignore[attr-defined]
        return err

    @staticmethod
    def _refused_commit(rule: Rule, st: TxnState) -> RuleError:
        """The error of a rule run that called ``session.commit()`` while its
        transaction committed (a deferred rule; see
        :func:`sentinel.orm.commit.commit_refused`): it fails, naming the rule,
        whatever it did with the refusal."""
        cause = st.commit_refused
        assert cause is not None
        st.commit_refused = None
        err = RuleError(rule.name, "action", cause)
        err.__cause__ = cause
        err.ended_transaction = True  # type: ignore[attr-defined]
        return err

    def execute_detached(self, rule: Rule, occ: Any, committed: bool) -> None:
        """The detector's detached executor: after a transaction ended (or at
        once, for a trigger outside any transaction)."""
        ref = LIVE.get(occ.scope)
        st = None if ref is None else ref()
        att = st.attachment if st is not None else self.primary
        if att is None:  # pragma: no cover - detached while a transaction ended
            return
        att._detached(rule, occ, committed, st)


def _scope_id() -> str:
    """A new transaction scope id: 32 hex digits, the time in nanoseconds then
    random bits. Unique like a UUID, and increasing, so the log's index on
    ``(scope, t_occ)`` grows at its end (a random id would touch a page anywhere
    in it at every commit)."""
    return f"{time.time_ns():016x}{uuid.uuid4().int & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def _attachment_of(session: Session) -> Attachment | None:
    for cls in type(session).__mro__:
        att = _ATTACHED.get(cls)
        if att is not None:
            return att
    return None


#: Seconds before a worker looks for the outbox entry of a detached rule that
#: an outer transaction's commit triggered (its ``commit`` event comes just
#: before the database commit, which makes the entry visible).
_OUTER_SUBMIT_DELAY = 0.5

#: Connections whose transaction sessions committed into (see
#: :meth:`Attachment._hand_over`), with what waits for its end. Each gets one
#: pair of listeners, for its life (a listener cannot be removed while its
#: event runs).
_OUTER: weakref.WeakKeyDictionary[Connection, list[Callable[[Connection, bool], None]]] = (
    weakref.WeakKeyDictionary()
)


def _joins_outer(transaction: SessionTransaction, connection: Connection) -> bool:
    """True when the root session transaction ``transaction`` uses ``connection``
    inside a transaction begun outside the session, so that its commit is not
    the database's: a savepoint of its own (``join_transaction_mode=
    "create_savepoint"``), or the connection's transaction joined without
    committing it (``"rollback_only"``), or its open savepoint."""
    entry = transaction._connections.get(connection)
    if entry is None:  # pragma: no cover - after_begin registers it first
        return False
    _, trans, should_commit, _ = entry
    return not should_commit or trans is not connection.get_transaction()


def _await_outer(conn: Connection, callback: Callable[[Connection, bool], None]) -> None:
    """Call ``callback(conn, committed)`` when ``conn``'s transaction commits
    (in its ``commit`` event) or rolls back (``rollback``)."""
    with _LOCK:
        waiting = _OUTER.get(conn)
        if waiting is None:
            waiting = _OUTER[conn] = []
            sa_event.listen(conn, "commit", _outer_committed)
            sa_event.listen(conn, "rollback", _outer_rolled_back)
        waiting.append(callback)


def _outer_committed(conn: Connection) -> None:
    _outer_ended(conn, True)


def _outer_rolled_back(conn: Connection) -> None:
    _outer_ended(conn, False)


def _outer_ended(conn: Connection, committed: bool) -> None:
    with _LOCK:
        waiting = _OUTER.get(conn)
        if not waiting:
            return
        todo = waiting[:]
        waiting.clear()
    error: BaseException | None = None
    for callback in todo:
        try:
            callback(conn, committed)
        except BaseException as err:  # the others still end; the first one fails the commit
            error = error or err
    if error is not None:
        raise error


# -- the attachment --------------------------------------------------------------------


class Attachment:
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
        outbox: bool,
        flush_every: int,
        log_empty: bool,
        log_condition_false: bool,
        runner_options: dict[str, Any],
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
        self.outbox = outbox
        self.flush_every = flush_every
        self.log_empty = log_empty
        self.log_condition_false = log_condition_false
        self.runner = Runner(self, **runner_options)
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
        """Stop following the sessions: remove the session listeners (and, with
        the detector's last attachment, the detector hooks), write the late log
        rows, and stop the worker pool (entries it had not started stay pending
        in the outbox). Transactions in progress are no longer followed: their
        occurrences are not logged. Idempotent."""
        with _LOCK:
            if not self._attached:
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
        self.runner.close(timeout)
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
                det.notify(det.channel("txn:begin"), {}, scope=st.scope)
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

    def _on_flush(self, session: Session, flush_context: Any) -> None:
        st = session.info.get(KEY)
        if st is None or st.scope is None or not st.scope.active:
            return
        integ = _INTEGRATIONS.get(self.detector)
        if integ is None:  # pragma: no cover - detached meanwhile
            return
        if st.pre_committed:
            PreCommit.note_change(st)
        signal_flush(self.detector, integ.plans, session, st.scope, flush_context)

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

    def _skip(self, st: TxnState) -> bool:
        return not self.log_empty and st.written == 0 and only_transaction_events(st)

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
        # a rule triggered in this transaction is running: its action ends it
        in_rule = st.scope is not None and st.scope.depth > 0
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

    # -- a session inside a transaction begun outside it -------------------------------
    def _hand_over(self, st: TxnState) -> bool:
        """The session committed, but into transactions begun outside it
        (``st.outer``: it joined a connection's transaction with
        ``join_transaction_mode="create_savepoint"`` or ``"rollback_only"``, or
        inside a savepoint): its commit released a savepoint, or did nothing, and
        its work commits or rolls back with theirs. Its log rows are written in
        them already (the pre-commit step). ``txn:commit`` (and the rules it
        triggers, the detached rules handed to the workers) waits for their
        commit and is written in it (:meth:`_outer_commit`); their rollback
        aborts the transaction (:meth:`_outer_rollback`). Until then the state
        stays live and its scope active. False (nothing handed over) when none of
        them is still in a transaction."""
        outer = [c for c in st.outer if not c.closed and c.in_transaction()]
        if not outer:
            return False
        st.handed_over = True
        st.outer_waiting = len(outer)
        for conn in outer:
            _await_outer(conn, partial(self._outer_ended, st))
        return True

    def _outer_ended(self, st: TxnState, conn: Connection, committed: bool) -> None:
        """A connection ``st`` was handed over to commits (in its ``commit``
        event: before the database commit) or rolls back."""
        scope = st.scope
        if scope is None or not scope.active or not st.handed_over:
            return  # ended already (another connection rolled back; detached)
        if not committed:
            self._outer_rollback(st)
            return
        st.outer_waiting -= 1
        if st.outer_waiting <= 0:
            self._outer_commit(st, conn)

    def _outer_commit(self, st: TxnState, conn: Connection) -> None:
        """The outer transaction commits: ``txn:commit`` now, its rows and the
        rows of the rules it ran written on ``conn``, in that transaction, so
        that they commit with it. A failed write fails that commit (raised
        from the connection's ``commit`` event, before the database commit)."""
        assert st.scope is not None
        st.committed = True
        try:
            self.detector.commit(st.scope)
        except Exception:
            log.exception("sentinel: a rule on txn:commit of %s failed", st.scope_id)
        finally:
            unregister(st)
        sink = self.sink
        if sink is None or (not self.log_empty and st.written == 0 and only_transaction_events(st)):
            return
        sink.write_transaction([conn], st, [], [])

    def _outer_rollback(self, st: TxnState) -> None:
        """The outer transaction rolls back (in its ``rollback`` event, before the
        database rollback): the transaction aborts; what it logged goes with the
        rollback and is logged again as aborted, with the late rows (written
        later, in transactions of their own)."""
        scope = st.scope
        assert scope is not None
        st.ended = True  # detached rules of an abort are enqueued at once
        try:
            self.detector.abort(scope)
        except Exception:
            log.exception("sentinel: a rule on txn:abort of %s failed", st.scope_id)
        finally:
            unregister(st)
        if self.sink is not None and not self._skip(st):
            self._late_aborted(st.occurrences, st.firings, st.rolled_back)

    def _late_aborted(
        self,
        occs: list[Occurrence],
        firings: list[Any],
        rolled_back: list[tuple[str, list[Occurrence], list[Any]]],
    ) -> None:
        """Log a transaction's occurrences and rule runs as aborted, with the
        late rows."""
        sink = self.sink
        assert sink is not None
        for occ in occs:
            sink.add_late(("occ", occ, "aborted"))
        for r in firings:
            sink.add_late(("firing", firing_of(r)))
        for path, sp_occs, sp_firings in rolled_back:
            for occ in sp_occs:
                sink.add_late(("occ", occ, "aborted", path))
            for r in sp_firings:
                sink.add_late(("firing", firing_of(r, savepoint=path)))

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

    def _resolve(self, st: TxnState) -> bool | None:
        """Did the transaction of ``st``, which ended without SQLAlchemy's
        ``after_commit``, commit after all? Only asked of a transaction whose
        pre-commit step wrote rows in it (``st.witness``): a commit whose reply
        was lost (the connection cut after COMMIT reached the database) leaves
        them in the database, a rollback does not. True or False as the
        database answers (three tries, on fresh connections); None when it
        does not answer."""
        assert st.witness is not None
        engine, key = st.witness
        tables = self.writer.tables
        if key is None:
            ev = tables.events
            query = sa.select(ev.c.scope).where(ev.c.scope == st.scope_id).limit(1)
        else:
            ob = tables.outbox
            query = sa.select(ob.c.idempotency_key).where(ob.c.idempotency_key == key)
        for delay in (0.0, 0.05, 0.25):
            time.sleep(delay)
            try:
                with engine.connect() as conn:
                    found = conn.execute(query).first() is not None
            except Exception as err:
                error: Exception = err
                continue
            if found:
                log.warning(
                    "sentinel: the commit of transaction %s failed in the driver, but the "
                    "database holds its rows: it committed (the reply to COMMIT was "
                    "lost); txn:commit is signalled",
                    st.scope_id,
                )
            return found
        log.error(
            "sentinel: the commit of transaction %s failed and the database does not "
            "answer (%s): whether it committed is unknown; see 'A commit whose reply is "
            "lost' in docs/operations.md",
            st.scope_id,
            error,
        )
        return None

    def _in_doubt(self, st: TxnState) -> None:
        """The transaction of ``st`` ended without a commit that sentinel saw,
        and the database could not say whether it committed: its scope ends
        without ``txn:commit`` or ``txn:abort`` (no rule runs on a guess), and
        nothing more is logged for it (its rows written in the transaction are
        in the log exactly if it committed)."""
        scope = st.scope
        if scope is not None and scope.active:
            scope.status = "aborted"
            self.detector.flush(scope)

    def _abort(self, session: Session, st: TxnState) -> None:
        scope = st.scope
        if scope is None:
            return
        aborted = st.aborted_outbox
        try:
            if scope.active:
                self.detector.abort(scope)
        except Exception:
            log.exception("sentinel: a rule on txn:abort of %s failed", st.scope_id)
        if not aborted and (self.sink is None or self._skip(st)):
            return
        try:
            home = self._home_of(session)
        except Exception:
            if aborted or not st.engines:
                log.exception("sentinel: no engine to log aborted transaction %s", st.scope_id)
                return
            home = st.engines[0]  # no outbox entry: any database the transaction used
        if self.sink is not None:
            copies = [e for e in st.engines if e is not home]
            self.sink.write_aborted(home, st, aborted, copies=copies)
        elif aborted:
            try:
                with home.begin() as conn:
                    self.writer.write(conn, (), outbox=aborted)
            except Exception:
                log.exception("sentinel's outbox: detached rules of %s not enqueued", st.scope_id)
                return
        for entry in aborted:
            self.runner.submit(entry.idempotency_key)

    def _abandoned(
        self,
        scope_id: str,
        scope_ref: Any,
        occs: list[Occurrence],
        firings: list[Any],
        rolled_back: list[tuple[str, list[Occurrence], list[Any]]],
    ) -> None:
        """A transaction of this attachment whose session was garbage-collected
        before it ended (the database rolled it back when its connection went
        back to the pool): its detection scope went with it (or is ended now,
        without ``txn:abort``: no rule runs for a garbage collection) and what it
        signalled is logged as aborted, with the late rows."""
        scope = None if scope_ref is None else scope_ref()
        if scope is not None and scope.status in ("active", "abandoned"):
            scope.status = "aborted"
            self.detector.flush(scope)
        log.warning(
            "sentinel: the session of transaction %s was garbage-collected before the "
            "transaction ended (close() it); it counts as aborted, without txn:abort",
            scope_id,
        )
        sink = self.sink
        if sink is None:
            return
        if (
            not self.log_empty
            and not firings
            and not rolled_back
            and all(o[0] in TXN_EVENTS for o in occs)
        ):
            return
        self._late_aborted(occs, firings, rolled_back)

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
            # signals txn:commit just before the database commits
            self.runner.submit(key, _OUTER_SUBMIT_DELAY if st.handed_over else 0.0)
            return
        entry = entry_for(rule, occ, committed=committed)
        pending = (
            [
                Firing.of(
                    rule.name,
                    occ,
                    coupling=str(rule.coupling),
                    status=FiringStatus.PENDING,
                    fired_at=clock_datetime(self.detector),
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


# -- attach / detach -------------------------------------------------------------------


def _collect_abandoned() -> None:
    for att, scope_id, scope_ref, occs, firings, rolled_back in take_abandoned():
        try:
            att._abandoned(scope_id, scope_ref, occs, firings, rolled_back)
        except Exception:  # pragma: no cover - never let one harm a new transaction
            log.exception("sentinel: cleaning up an abandoned transaction failed")


def _writer(
    log: Any, schema: str | None, prefix: str, commit_order: bool
) -> tuple[LogWriter, bool]:
    if isinstance(log, LogWriter):
        if commit_order:
            log.commit_order = True
        return log, True
    if isinstance(log, LogPolicy):
        return LogWriter(schema=schema, prefix=prefix, policy=log, commit_order=commit_order), True
    if log is True:
        return LogWriter(schema=schema, prefix=prefix, commit_order=commit_order), True
    if log is False or log is None:
        return LogWriter(schema=schema, prefix=prefix), False
    raise AttachError(
        f"attach(log=...) takes True, False, a LogWriter or a LogPolicy, not {log!r:.60}",
        target=log,
    )


def _signer(writer: LogWriter, log: Any, outbox_key: Any) -> OutboxSigner | None:
    """The signer ``writer`` must get: from ``attach(outbox_key=...)``, else
    from the environment (for a writer that has none of its own); ``None``:
    leave the writer as it is."""
    if outbox_key is None:
        outbox_key = key_from_env()
        if outbox_key is None or writer.signer is not None:
            return None
    elif isinstance(log, LogWriter):
        raise AttachError(
            "attach(outbox_key=...) together with log=LogWriter(...): give the key to the "
            "writer instead (LogWriter(outbox_key=...)), which writes the outbox rows",
            target=log,
        )
    if isinstance(outbox_key, OutboxSigner):
        return outbox_key
    try:
        return OutboxSigner(outbox_key)
    except (TypeError, ValueError) as err:
        raise AttachError(f"attach(outbox_key=...): {err}") from None


def attach(
    target: Any,
    *,
    detector: LocalEventDetector | None = None,
    log: bool | LogWriter | LogPolicy = True,
    schema: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    outbox: bool = True,
    workers: int = 2,
    max_attempts: int = 5,
    backoff: float = 0.5,
    max_backoff: float = 60.0,
    lease: float = 60.0,
    flush_every: int = 10_000,
    log_empty: bool = False,
    log_condition_false: bool = False,
    session_factory: Callable[[], Session] | None = None,
    log_bind: Any = None,
    context: Callable[[], AbstractContextManager[Any]] | None = None,
    outbox_key: str | bytes | OutboxSigner | None = None,
    commit_order: bool = False,
) -> Attachment:
    """Attach sentinel to the sessions ``target`` makes: a ``sessionmaker``, a
    ``scoped_session``, a ``Session`` subclass, or their asyncio counterparts
    (``async_sessionmaker``, ``async_scoped_session``, an ``AsyncSession``
    subclass; see :mod:`sentinel.orm.binds`).

    From now on each root transaction of those sessions is a detection scope of
    ``detector`` (default: :func:`sentinel.default_detector`): method events of
    objects in a session belong to its transaction, its flushes signal database
    events (:mod:`sentinel.orm.db_events`), its commit runs the deferred rules
    and writes the event log in the same transaction, and detached rules run after
    it (see the module docs and ``docs/orm.md``).

    ``log``
        ``True`` (log every occurrence, in the tables ``schema`` / ``prefix``),
        a :class:`~sentinel.log.LogPolicy` (the same, with parameters excluded or
        redacted), a :class:`~sentinel.log.LogWriter`, or ``False`` (no event log;
        the outbox still needs the tables).
    ``outbox``
        detached rules go through the durable outbox (``False``: they do not run).
    ``workers``
        threads running detached rules in this process (0: none; run
        ``sentinel worker`` or :meth:`Attachment.drain`). ``max_attempts``,
        ``backoff`` / ``max_backoff`` (seconds, doubled per attempt) and ``lease``
        (how long a claim outlives its worker's last heartbeat: a running rule's
        claim is renewed every ``lease / 3`` seconds) tune them.
    ``flush_every``
        a transaction with more unwritten occurrences than this writes them at
        its next flush (outside savepoints), bounding memory.
    ``log_empty``
        also log transactions in which nothing happened but their own
        ``txn:*`` events (by default a read-only unit of work writes nothing,
        so a ``with Session.begin():`` around queries stays read-only).
    ``log_condition_false``
        also record rule runs whose condition was false in the rule-firing log
        (by default only rules that fired or failed are recorded).
    ``session_factory``
        makes the sessions of detached rules (default: ``target``; an asyncio
        target needs a synchronous one for its detached rules).
    ``log_bind``
        the *home* database (an ``Engine``, or ``AsyncEngine``) of sessions bound
        to several: the outbox and the late log rows go there (default: the
        factory's default bind). Each transaction's log is written on every
        database it used.
    ``context``
        a callable returning a context manager that each detached rule runs in,
        with its claim and commit (Flask: ``context=app.app_context``).
    ``outbox_key``
        signs the outbox rows this attachment writes, and makes its workers
        refuse rows without a valid signature (:mod:`sentinel.log.signing`);
        default: the ``SENTINEL_OUTBOX_KEY`` environment variable, if set. With
        ``log=`` a :class:`~sentinel.log.LogWriter`, give the key to the writer.
    ``commit_order``
        numbers each transaction that writes log rows in commit order
        (``events.commit_seq``), which a global detector needs to read this
        process's events (``docs/global.md``). Off by default: the number is
        taken under a lock held until the commit, so the log-writing commits of
        all processes wait for each other from their last log write on.

    Raises :class:`~sentinel.errors.AttachError` for a target that is not a
    session factory or is already attached (directly, or through a subclass or
    base class of its sessions), or whose databases could not keep the log atomic
    with the data (:func:`sentinel.orm.binds.check_binds`),
    :class:`~sentinel.errors.DetachedActionError`
    if a detached rule on the detector has an action a worker could not import,
    and the :class:`~sentinel.errors.LogSchemaError` family when the target is
    bound to an engine whose log tables are missing or outdated. Nothing is
    attached when it raises.

    >>> Session = sessionmaker(engine)                      # doctest: +SKIP
    >>> attachment = sentinel.attach(Session, detector=det)  # doctest: +SKIP
    """
    det = detector
    if det is None:
        from sentinel.default import default_detector

        det = default_detector()
    if not isinstance(det, LocalEventDetector):
        raise AttachError(
            f"attach(detector=...) takes a LocalEventDetector, not {type(det).__name__}",
            target=det,
        )
    for name, value, low in (
        ("workers", workers, 0),
        ("max_attempts", max_attempts, 1),
        ("flush_every", flush_every, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise AttachError(f"attach({name}=...) must be an int >= {low}, not {value!r}")
    for name, num in (("backoff", backoff), ("max_backoff", max_backoff), ("lease", lease)):
        if isinstance(num, bool) or not isinstance(num, (int, float)) or num < 0:
            raise AttachError(f"attach({name}=...) must be a number of seconds >= 0, not {num!r}")
    if context is not None and not callable(context):
        raise AttachError(
            f"attach(context=...) takes a callable returning a context manager (such as "
            f"app.app_context), not {context!r:.60}",
            target=context,
        )
    writer, logging_on = _writer(log, schema, prefix, commit_order)
    signer = _signer(writer, log, outbox_key)
    with _LOCK:
        resolved = resolve_target(target, session_factory)
        try:
            return _attach_resolved(
                target,
                resolved,
                det,
                writer,
                logging_on,
                log_bind,
                signer,
                outbox=outbox,
                flush_every=flush_every,
                log_empty=log_empty,
                log_condition_false=log_condition_false,
                runner_options={
                    "workers": workers,
                    "max_attempts": max_attempts,
                    "backoff": float(backoff),
                    "max_backoff": float(max_backoff),
                    "lease": float(lease),
                    "context": context,
                },
            )
        except BaseException:
            if resolved.undo is not None:
                resolved.undo()
            raise


def _attach_resolved(
    target: Any,
    resolved: Target,
    det: LocalEventDetector,
    writer: LogWriter,
    logging_on: bool,
    log_bind: Any,
    signer: OutboxSigner | None,
    **options: Any,
) -> Attachment:
    session_class = resolved.session_class
    listen_on = resolved.listen_on
    outbox = options["outbox"]
    for cls, other in _ATTACHED.items():
        if issubclass(session_class, cls) or issubclass(cls, session_class):
            same = cls is session_class
            raise AttachError(
                f"{target!r:.80} is already attached"
                + (
                    ""
                    if same
                    else f" through {other.target!r:.80} (its sessions are also "
                    f"{cls.__name__} sessions)"
                )
                + "; detach it first (attachment.detach())",
                target=target,
            )
    for r in det.rules.values():
        check_importable(r)
    home, engines = check_binds(target, resolved.kw, log_bind, logging_on=logging_on, outbox=outbox)
    if signer is not None:
        writer.signer = signer
    sink = LogSink(writer) if logging_on else None
    att = Attachment(target, resolved, det, writer, sink, home=home, **options)
    if logging_on or outbox:
        # missing or outdated tables: fail now, not at a commit (through a
        # synchronous engine only: an asyncio one answers inside its event loop)
        checked = [att._engine] if att.is_async else (engines if logging_on else [home])
        for e in checked:
            if e is not None:
                writer.check(e)
    if sink is not None and att._engine is not None:
        sink.engine = att._engine
    integ = _INTEGRATIONS.get(det)
    fresh = integ is None
    if integ is None:
        integ = _INTEGRATIONS[det] = _Integration(det)
    try:
        if fresh:
            integ.install()
        integ.attachments.append(att)
        integ.refresh_listener()
        for name, fn in att._handlers:
            sa_event.listen(listen_on, name, fn)
    except BaseException:
        for name, fn in att._handlers:
            if sa_event.contains(listen_on, name, fn):
                sa_event.remove(listen_on, name, fn)
        if att in integ.attachments:
            integ.attachments.remove(att)
        if fresh:
            integ.uninstall()
            _INTEGRATIONS.pop(det, None)
        else:
            integ.refresh_listener()
        raise
    _ATTACHED[session_class] = att
    att._attached = True
    return att


def detach(target: Any) -> None:
    """Detach sentinel from ``target`` (what was given to :func:`attach`, or the
    :class:`Attachment`). Raises :class:`~sentinel.errors.AttachError` if it is
    not attached."""
    if isinstance(target, Attachment):
        target.detach()
        return
    try:
        session_class = resolve_target(target, None, install=False).session_class
    except AttachError:
        raise AttachError(f"{target!r:.80} is not attached", target=target) from None
    att = _ATTACHED.get(session_class)
    if att is None:
        raise AttachError(f"{target!r:.80} is not attached", target=target)
    att.detach()


def attachments() -> list[Attachment]:
    """Every attachment in force (for inspection and tests)."""
    with _LOCK:
        return list(_ATTACHED.values())
