"""What sentinel keeps per session transaction, and how to find it.

Each root :class:`~sqlalchemy.orm.SessionTransaction` of an attached session gets
one :class:`TxnState`: its detection scope, the occurrences and rule firings
signalled in it (waiting to be written to the log), its open savepoints, and
whether a failed rule marked it for rollback. The session holds it in
``session.info`` under :data:`KEY` while the transaction is in progress, and
nothing else holds it strongly: :func:`live` finds it by scope id for the
listeners that only see an occurrence (the log, the rule observer, the detached
executor) through a weak reference, so a session dropped without ``close()`` is
collected exactly as without sentinel, its state and detection scope with it
(:func:`register` says what is then left to do: :func:`take_abandoned`).

This module imports nothing from the rest of the ORM layer.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from sqlalchemy.orm import SessionTransaction

    from sentinel.detector import Scope
    from sentinel.errors import SentinelError
    from sentinel.log import Firing, OutboxEntry
    from sentinel.occurrence import Occurrence
    from sentinel.orm.attach import Attachment
    from sentinel.rules import Rule

__all__ = [
    "ABANDONED",
    "DEPTH_KEY",
    "KEY",
    "LIVE",
    "Abandoned",
    "FiringRecord",
    "Savepoint",
    "TxnState",
    "clock_datetime",
    "clock_of",
    "depth_below",
    "live",
    "register",
    "scope_of",
    "session_of",
    "take_abandoned",
    "unregister",
]

#: ``session.info`` key of the current transaction's state.
KEY = "_sentinel_txn"

#: ``session.info`` key of how many detached runs deep a worker's session is
#: (an outbox entry's ``depth``): the entries its transaction triggers are one
#: deeper, and a worker refuses one deeper than the detector's cascade limit.
DEPTH_KEY = "sentinel.detached_depth"


def depth_below(session: Session | None) -> int:
    """The ``depth`` of an outbox entry triggered in ``session``'s transaction."""
    return 1 + (0 if session is None else int(session.info.get(DEPTH_KEY, 0)))


#: scope id -> weak reference to the state, for every session transaction in
#: progress (all attachments). Read it with :func:`live`.
LIVE: dict[str, weakref.ref[TxnState]] = {}

#: One rule run: (rule, occurrence, status, error, POSIX time on the detector's clock).
FiringRecord = tuple["Rule", Any, str, "BaseException | None", float]


def clock_of(detector: Any) -> Callable[[], float]:
    """The detector's wall clock as a function returning POSIX seconds: what its
    occurrences' ``at`` come from, so the rule-firing log's ``fired_at`` and
    ``finished_at`` are on the same clock (a virtual one in tests, a replay's)."""
    clock = detector.wall_clock
    now = getattr(clock, "now", None)
    return now if callable(now) else clock  # type: ignore[no-any-return]


def clock_datetime(detector: Any) -> datetime:
    """:func:`clock_of`'s time now, as an aware UTC datetime."""
    return datetime.fromtimestamp(clock_of(detector)(), UTC)


@dataclass(eq=False, slots=True)
class Savepoint:
    """An open ``begin_nested()`` inside a transaction: the detection scope's
    token, how much of each buffer predates it, and its ``path``: its number in
    the transaction (``sp<n>``, in the order savepoints began) after those of
    the savepoints open around it, ``sp1/sp3``. The log names a rolled-back
    savepoint's rows with it."""

    transaction: SessionTransaction
    token: object
    occurrences: int
    firings: int
    detached: int
    path: str = ""
    released: bool = False


@dataclass(eq=False, slots=True, weakref_slot=True)
class TxnState:
    """One root session transaction, as sentinel follows it.

    ``occurrences`` and ``firings`` hold what was signalled and run in the
    transaction's scope, in ``t_occ`` order; the first ``written`` occurrences
    (and ``firings_written`` firings) are already in the log, in this
    transaction. ``rolled_back`` holds what savepoints that were rolled back
    took with them, as ``(savepoint path, occurrences, firings)``: it is logged
    as aborted, in the transaction's scope, marked with the path; the first
    ``rolled_back_written`` entries are in the log already. ``doomed`` is
    ``(savepoint depth, rule name, error)`` once a rule failed in the
    transaction (see :class:`~sentinel.errors.RollbackOnlyError`).
    """

    attachment: Attachment
    transaction: SessionTransaction
    session_ref: weakref.ref[Session]
    scope_id: str
    scope: Scope | None = None
    occurrences: list[Occurrence] = field(default_factory=list)
    written: int = 0
    firings: list[FiringRecord] = field(default_factory=list)
    firings_written: int = 0
    savepoints: list[Savepoint] = field(default_factory=list)
    rolled_back: list[tuple[str, list[Occurrence], list[FiringRecord]]] = field(
        default_factory=list
    )
    rolled_back_written: int = 0
    #: Once rows were written at a flush (a long transaction), how many
    #: occurrences and firings each database (by engine) has: one the
    #: transaction uses only later has none of them yet.
    partial: dict[Any, tuple[int, int]] = field(default_factory=dict)
    #: How many savepoints began in the transaction (numbers their paths).
    savepoints_begun: int = 0
    doomed: tuple[int, str, SentinelError] | None = None
    #: Idempotency keys of the outbox entries written in this transaction.
    outbox_keys: set[str] = field(default_factory=set)
    committed: bool = False
    ended: bool = False
    #: sentinel's ``before_commit`` ran for the commit in progress.
    commit_seen: bool = False
    #: The deferred rules are running (``txn:pre_commit``).
    pre_committing: bool = False
    #: A ``session.commit()`` refused while they ran, until a rule run takes
    #: it (see :func:`sentinel.orm.commit.commit_refused`).
    commit_refused: SentinelError | None = None
    pre_committed: bool = False
    #: Something happened in the transaction after its pre-commit step and
    #: outside a commit (a commit attempt failed after the step and the
    #: application went on): the deferred rules cannot see it.
    changed_after_pre_commit: bool = False
    #: The engines the transaction holds a connection to, in order of first use.
    engines: list[Any] = field(default_factory=list)
    #: Outbox entries of independent detached rules of an aborted transaction
    #: (written with its aborted log).
    aborted_outbox: list[OutboxEntry] = field(default_factory=list)
    #: Their ``pending`` firings (written with them, as a commit writes its own).
    aborted_pending: list[Firing] = field(default_factory=list)
    #: Where the database keeps proof that the transaction committed, once its
    #: pre-commit step wrote rows in it: ``(engine, None)`` for its log rows
    #: (its scope's rows in the events table), ``(engine, key)`` for an outbox
    #: entry when it has no log. A commit that raised is looked up there (see
    #: :meth:`~sentinel.orm.Attachment` "A commit whose reply is lost").
    witness: tuple[Any, str | None] | None = None
    #: The session's connections whose transaction is not its own: it joined a
    #: transaction begun outside it (``Session(bind=connection)`` with
    #: ``join_transaction_mode`` ``"create_savepoint"`` or ``"rollback_only"``,
    #: or a savepoint already open): its commit is not the database's.
    outer: list[Any] = field(default_factory=list)
    #: The session committed into ``outer``: the outcome is theirs (see
    #: ``Attachment._hand_over``); how many of them still have to commit.
    handed_over: bool = False
    outer_waiting: int = 0
    #: The database events of the flush under way, made in ``after_flush``,
    #: signalled in ``after_flush_postexec`` (``detector.emit``'s arguments).
    flush_events: list[tuple[Any, ...]] = field(default_factory=list)
    #: Flushes in a row inside a commit that the rules on the last one's
    #: database events left changes for (see ``Attachment._check_flush_chain``).
    rule_flushes: int = 0
    #: The attributes set to SQL expressions before the flush under way
    #: (:func:`~sentinel.orm.db_events.note_expressions`).
    flush_expressions: dict[Any, dict[str, Any]] | None = None
    #: The detached rules the outer transaction's commit enqueued in it,
    #: ``(rule, occurrence, dependent)``: if the database refuses that COMMIT,
    #: the independent ones are enqueued again, as an abort's.
    outer_detached: list[tuple[Any, Any, bool]] = field(default_factory=list)

    @property
    def session(self) -> Session | None:
        return self.session_ref()

    def doom(self, rule: str, error: SentinelError) -> None:
        """A rule failed: the innermost open savepoint (or the transaction) may no
        longer commit. The first failure is kept."""
        if self.doomed is None:
            self.doomed = (len(self.savepoints), rule, error)


#: What is left of a transaction whose session was garbage-collected before it
#: ended: (attachment, scope id, weak reference to the scope, occurrences,
#: firings, what its rolled-back savepoints took). The scope went with the
#: session (unless something else, a pending timer, holds it). The callback
#: that records this runs inside the garbage collector, so it only appends here;
#: the attachment finishes the job at its next transaction.
Abandoned = tuple[
    Any,
    str,
    "weakref.ref[Scope] | None",
    list[Any],
    list[FiringRecord],
    list[tuple[str, list[Any], list[FiringRecord]]],
]
ABANDONED: deque[Abandoned] = deque()


def live(scope_id: Any) -> TxnState | None:
    """The state of the transaction in progress whose scope id is ``scope_id``."""
    ref = LIVE.get(scope_id)
    return None if ref is None else ref()


def register(st: TxnState) -> None:
    """Make ``st`` findable by :func:`live` until :func:`unregister`, without
    keeping it alive. Should it be collected first (its session was dropped
    without ``close()``), what it held is queued for :func:`take_abandoned`."""
    scope_id = st.scope_id
    scope = st.scope
    abandoned = (
        st.attachment,
        scope_id,
        None if scope is None else weakref.ref(scope),
        st.occurrences,
        st.firings,
        st.rolled_back,
    )

    def lost(ref: weakref.ref[TxnState], _append: Callable[..., None] = ABANDONED.append) -> None:
        if LIVE.get(scope_id) is ref:
            del LIVE[scope_id]
        # The scope is the ambient scope of the thread (or task) that began the
        # transaction: let it go with the session where this runs (usually that
        # thread), and mark it so that signals elsewhere go to the next one
        # (EventDetector._settle).
        gone = None if abandoned[2] is None else abandoned[2]()
        if gone is not None:
            if gone.status == "active":
                gone.status = "abandoned"
            abandoned[0].detector.leave_ambient(gone)
        _append(abandoned)

    LIVE[scope_id] = weakref.ref(st, lost)


def unregister(st: TxnState) -> None:
    """``st``'s transaction ended: forget it (its weak reference's callback with
    it)."""
    LIVE.pop(st.scope_id, None)


def take_abandoned() -> list[Abandoned]:
    """The abandoned transactions recorded since the last call."""
    out = []
    popleft = ABANDONED.popleft
    while True:
        try:
            out.append(popleft())
        except IndexError:
            return out


def session_of(occurrence: Any) -> Session | None:
    """The live session whose transaction ``occurrence`` (or detection) belongs
    to, or ``None`` when it is not a transaction of an attached session or the
    transaction has ended.

    Immediate and deferred rules use it to work in the triggering transaction::

        def restock(occ):
            session = sentinel.orm.session_of(occ)
            session.add(Order(item=occ.source.key[0], qty=10))
    """
    st = live(occurrence.scope)
    return None if st is None else st.session


def scope_of(session: Session) -> Scope | None:
    """The detection scope of ``session``'s transaction in progress, or ``None``
    (no transaction, or a session sentinel is not attached to). Signal explicit
    events into it with ``detector.use_scope(scope)``."""
    st = session.info.get(KEY)
    return None if st is None else st.scope
