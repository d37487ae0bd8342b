"""The global event detector service: tail the log in commit order, detect,
enqueue, act.

One iteration (:meth:`GlobalDetector.step`):

1. hold the cursor's lease (:mod:`~sentinel.global_detector.cursor`); an
   instance without it is a standby and does nothing else;
2. read the committed rows after the cursor's position, whole commits, in
   commit order (:mod:`~sentinel.global_detector.order`), up to the last
   commit number handed out: rows numbered beyond it (forged, imported, left by
   a reset of the counter) are reported and not read
   (:attr:`GlobalDetector.ahead`), so the cursor never passes a number no
   genuine commit has reached;
3. feed them to the detector (:class:`~sentinel.global_detector.detect.CommitFeeder`);
4. in **one transaction**: move the cursor past the rows (only if the lease is
   still this instance's, else :class:`~sentinel.errors.LeaseLost` and the
   instance stands by; the cursor's row then stays locked until the commit)
   and write an outbox entry per detection;
5. after the commit, hand the entries, claimed in that transaction, to the
   outbox runner, which runs the rules' conditions and actions in a
   transaction that also marks the entries done (:mod:`sentinel.orm.worker`),
   one transaction for the batch's entries (:mod:`sentinel.orm.together`), in
   this thread (``workers=0``) or as one job of the runner's pool: database
   effects exactly once.

Whatever fails in 2-4 (a lost lease, the database going away, a ``kill -9``)
leaves the position and the entries as they were: the detector's memory is
rebuilt by feeding it the log up to the committed position again (without
acting: those detections' entries were written with it), and the rows after it
are read again. Entries written but not yet run are found by the next instance
(:meth:`GlobalDetector.pending_keys`) and run then, after their claims expire if
a worker died while running them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sentinel.errors import GlobalDetectorError, LeaseLost
from sentinel.global_detector.cursor import Cursor
from sentinel.global_detector.detect import CLOCK_EVENT, CommitFeeder, check_rules
from sentinel.global_detector.enqueue import Enqueuer
from sentinel.global_detector.order import CommitReader, LogRow, Poller, waiter
from sentinel.global_detector.replay import replay_committed, resolve_rules
from sentinel.global_detector.switches import Switchboard
from sentinel.log import LogWriter
from sentinel.log.tables import DEFAULT_PREFIX, SCOPE_LENGTH, OutboxStatus, log_tables
from sentinel.occurrence import Occurrence
from sentinel.rules import LocalEventDetector

__all__ = ["ActionsFactory", "GlobalDetector", "StepReport", "replay_committed"]

log = logging.getLogger("sentinel.global")

#: The longest name of a global detector (its cursor's): its clock rows' scope,
#: ``global:<name>:<32 hex digits>``, must fit a log scope.
NAME_MAX = SCOPE_LENGTH - len("global::") - 32

#: The longest wait between two tries of a failing step (the database away).
_MAX_RETRY_WAIT = 30.0


@dataclass
class StepReport:
    """What one :meth:`GlobalDetector.step` did: whether this instance held the
    lease, whether it committed a clock row (temporal events were due), the
    rows read, the detections (entries written), the position after it and the
    keys of the entries written."""

    leader: bool = False
    clock: bool = False
    rows: int = 0
    detections: int = 0
    position: int = 0
    keys: list[str] = field(default_factory=list)


class ActionsFactory(Protocol):
    """What :class:`GlobalDetector` calls (once, in its constructor) to get the
    runner of its rules' actions: :func:`sentinel.orm.global_actions`. It
    returns an object with an outbox ``runner``
    (:class:`sentinel.orm.worker.Runner`) and a ``detach()``, called by
    :meth:`GlobalDetector.close`."""

    def __call__(
        self,
        rules: LocalEventDetector,
        bind: Engine,
        *,
        schema: str | None,
        prefix: str,
        workers: int,
        lease: float,
        max_attempts: int,
        session_factory: Callable[[], Any] | None,
    ) -> Any: ...


def _engine(bind: str | Engine, busy_timeout: float) -> Engine:
    """``bind`` as an Engine: one made from a URL waits ``busy_timeout``
    seconds for SQLite's write lock."""
    if not isinstance(bind, str):
        return bind
    if sa.engine.make_url(bind).get_backend_name() == "sqlite":
        return sa.create_engine(bind, connect_args={"timeout": busy_timeout})
    return sa.create_engine(bind)


class GlobalDetector:
    """Rules over every process's committed occurrences (see the module docs).

    ``rules``
        a :class:`~sentinel.LocalEventDetector` whose enabled rules are all
        detached, or ``"package.module:attribute"`` naming one (or an
        :class:`~sentinel.orm.Attachment`, or a callable returning either).
    ``bind``
        a URL or Engine of the database holding the log.
    ``name``
        the cursor's name: instances with the same name share one position and
        one lease (standbys); different names are independent detectors.
    ``lease``
        seconds the lease outlives the holder's last renewal (every iteration,
        at least every ``max_wait`` seconds); a standby takes over after that.
    ``min_wait``, ``max_wait``
        polling back-off between empty reads (SQLite, MariaDB); on PostgreSQL
        the service waits for ``NOTIFY`` instead, at most ``max_wait`` seconds.
    ``actions``
        what runs the rules' actions in this process:
        :func:`sentinel.orm.global_actions` (this package does not depend on
        the ORM layer, so the caller hands it in), or any callable taking the
        same arguments and returning an object with an outbox ``runner`` and a
        ``detach()``. Required unless ``run_actions=False``, which only
        enqueues (a ``sentinel worker`` with the same rules runs them).
    ``workers``, ``max_attempts``, ``action_lease``
        passed to ``actions``: the threads running the actions (0: in the
        service's thread, after each batch; more: a batch is one job of the
        pool, and the service reads on meanwhile; either way the batch's
        entries are claimed with the cursor's move and its actions run in one
        transaction: ``Runner.run_batch``), the attempts per entry and how long
        a claim outlives its worker's last heartbeat.
    ``batch``
        about how many occurrences a step reads (whole commits, at most
        ``batch // 20`` of them): the detections of a step's rows are
        enqueued, with the cursor's move, in one transaction.
    ``session_factory``
        passed to ``actions``: where actions get their session (default: a
        ``sessionmaker`` on ``bind``).
    ``clock_grace``
        temporal events: when a timer is due and nothing commits, the service
        commits a clock row moving the detector's clock to this machine's time
        minus ``clock_grace`` seconds (see :mod:`~sentinel.global_detector.detect`);
        a row committed later with an earlier detection time is *late* for
        the timers already fired. Make it longer than your transactions.
    ``max_ahead``, ``max_late``
        rules with temporal events: a row whose detection time is more than
        ``max_ahead`` seconds ahead of this machine's clock, or more than
        ``max_late`` seconds behind the log's clock, is reported and skipped
        (:class:`~sentinel.global_detector.detect.CommitFeeder`); ``None``
        lifts a bound.
    ``busy_timeout``
        SQLite, ``bind`` given as a URL: seconds a statement waits for
        another connection's write lock before it fails (the driver's
        ``timeout``; its own default is 5 s). Busy writers hold the lock one
        commit at a time: a longer wait fails fewer of the service's
        statements. Ignored for an Engine (set it where the engine is made:
        ``connect_args={"timeout": ...}``) and on other databases.
    ``retry_delay``
        seconds a worker thread (``workers`` > 0) waits before it tries
        again an entry it could not claim, or a batch it could not start
        (the database away, or locked past ``busy_timeout``); the outbox
        runner's own default is its longest back-off, 60 s.

    Not thread-safe: one thread runs :meth:`run` (or calls :meth:`step`).
    """

    def __init__(
        self,
        rules: Any,
        bind: str | Engine,
        *,
        name: str = "global",
        schema: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        lease: float = 30.0,
        min_wait: float = 0.05,
        max_wait: float = 1.0,
        batch: int = 5000,
        workers: int = 0,
        max_attempts: int = 5,
        action_lease: float = 60.0,
        run_actions: bool = True,
        actions: ActionsFactory | None = None,
        session_factory: Callable[[], Any] | None = None,
        clock_grace: float = 1.0,
        clock: Callable[[], float] = time.time,
        max_ahead: float | None = 300.0,
        max_late: float | None = 86_400.0,
        busy_timeout: float = 30.0,
        retry_delay: float = 1.0,
    ) -> None:
        if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX:
            raise GlobalDetectorError(
                f"a global detector's name is 1 to {NAME_MAX} characters (its clock rows' "
                f"scope, global:<name>:<32 hex digits>, holds at most {SCOPE_LENGTH}), "
                f"not {str(name)[:60]!r}"
            )
        self.rules = resolve_rules(rules)
        check_rules(self.rules)
        self.max_ahead, self.max_late = max_ahead, max_late
        CommitFeeder(self.rules, max_ahead=max_ahead, max_late=max_late)  # checks the bounds
        if lease <= 0 or min_wait <= 0 or max_wait < min_wait or batch < 1:
            raise GlobalDetectorError(
                "lease and min_wait must be positive, max_wait at least min_wait, batch >= 1"
            )
        if not busy_timeout >= 0 or not retry_delay >= 0:  # NaN too
            raise GlobalDetectorError(
                f"busy_timeout and retry_delay are seconds, 0 or more (got {busy_timeout!r} "
                f"and {retry_delay!r})"
            )
        self.engine = _engine(bind, busy_timeout)
        self._owns_engine = isinstance(bind, str)
        self.tables = log_tables(schema, prefix)
        self.writer = LogWriter(schema=schema, prefix=prefix, commit_order=True)
        #: Makes and writes each batch's outbox entries.
        self.enqueuer = Enqueuer(self.rules, self.writer, self.engine.dialect.name)
        self.reader = CommitReader(self.tables)
        self.cursor = Cursor(self.tables, name)
        self.name = name
        self.lease = lease
        self.batch = batch
        #: Occurrences per log row in the last read (a step reads about
        #: ``batch`` occurrences: ``batch / _per_row`` log rows).
        self._per_row = 100.0
        self.id = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.waiter: Poller = waiter(self.engine, self.tables, min_wait=min_wait, max_wait=max_wait)
        self.max_wait = max_wait
        self._feeder: CommitFeeder | None = None
        self._leader = False
        self._renew_at = 0.0
        #: What runs the actions (``actions``' result: an ORM attachment with
        #: its outbox ``runner``), or ``None`` with ``run_actions=False``.
        self.attachment: Any = None
        self.run_actions = run_actions
        if run_actions:
            if actions is None:
                raise GlobalDetectorError(
                    "GlobalDetector runs the rules' actions through an action runner: pass "
                    "actions=sentinel.orm.global_actions, or run_actions=False to only "
                    "enqueue them (a `sentinel worker` with the same rules runs them)"
                )
            self.attachment = actions(
                self.rules,
                self.engine,
                schema=schema,
                prefix=prefix,
                workers=workers,
                lease=action_lease,
                max_attempts=max_attempts,
                session_factory=session_factory,
            )
            runner = getattr(self.attachment, "runner", None)
            if runner is not None:
                runner.claim_retry = retry_delay
        self._stop = threading.Event()
        #: What failed in :meth:`close` (empty after a clean stop).
        self.close_errors: list[str] = []
        #: Seconds between two looks for rows without a commit number (when idle).
        self.unnumbered_every = 30.0
        self._unnumbered_at = 0.0
        self._unnumbered_after: int | None = None
        #: At the last look: the feeder, its position and rows read, the largest id.
        self._looked: tuple[CommitFeeder, int, int, int] | None = None
        self.clock_grace = clock_grace
        self.clock = clock
        #: The last commit number known to have been handed out (see
        #: :meth:`~sentinel.global_detector.order.CommitReader.handed_out`).
        self._handed = 0
        #: ``(id, commit_seq)`` of the rows the last read found numbered ahead
        #: of every number handed out, which the service does not read (see
        #: ``docs/global.md``, "Rows it cannot read"); empty when it found none.
        self.ahead: list[tuple[int, int]] = []
        #: Seconds between two reports of the same rows in :attr:`ahead`.
        self.ahead_every = 30.0
        #: PostgreSQL, MariaDB: seconds a step waits for a hole in the commit numbers
        #: (a commit numbered after it visible, not yet one numbered at it)
        #: when nothing can be read before it (see
        #: :meth:`~sentinel.global_detector.order.CommitReader.horizon`); the
        #: loop then looks again every ``min_wait`` seconds while it is there.
        self.gap_wait = 0.1
        self.min_wait = min_wait
        self._ahead_at = 0.0
        #: Rule switches: applied at read-batch boundaries, replayed on rebuilds.
        self.switches = Switchboard(self.engine, self.tables, name)

    # -- one iteration -----------------------------------------------------------------
    def _rebuild(self, position: int) -> CommitFeeder:
        """A detector in the state of having seen every commit up to ``position``
        (its detections were acted on before: they are dropped)."""
        feeder = CommitFeeder(
            self.rules, max_ahead=self.max_ahead, max_late=self.max_late, now=self.clock
        )
        with self.engine.connect() as conn:
            self.switches.load(conn, feeder, position)  # at their recorded positions
            self._handed = max(self._handed, self.reader.handed_out(conn))
            if position > self._handed:
                log.error(
                    "sentinel global %r: its cursor stands at %d, ahead of the last commit "
                    "number handed out (%d): the commits numbered up to %d will not be "
                    "read. A row numbered ahead of the counter moved it there (before "
                    "sentinel refused such rows), or the counter was reset; set the "
                    "cursor's position back to the last genuine commit it read "
                    "(Cursor.reset)",
                    self.name,
                    position,
                    self._handed,
                    position,
                )
            after = 0
            while after < position:
                rows = [
                    r
                    for r in self.reader.read(conn, after, parsed=True)
                    if r.commit_seq <= position
                ]
                if not rows:
                    break
                feeder.feed(rows)
                after = rows[-1].commit_seq
        feeder.position = position
        return feeder

    def step(self) -> StepReport:
        """Run one iteration (module docs); return what it did. Raises
        database errors (after which the next step starts from the committed
        position again)."""
        report = StepReport()
        if self._unnumbered_after is None:  # rows from here on must have numbers
            with self.engine.connect() as conn:
                self._unnumbered_after = self.reader.last_id(conn)
        feeder = self._feeder
        if feeder is None or not self._leader or self._renew_at <= time.monotonic():
            # a write: on SQLite, one more commit; so at most every lease/3 s (a
            # batch's cursor update renews it too, and finds out if it was lost)
            renewed = time.monotonic()
            with self.engine.begin() as conn:
                state = self.cursor.acquire(conn, self.id, self.lease)
            if state is None:
                if self._leader:
                    log.warning("sentinel global %r: lease lost; standing by", self.name)
                self._leader = False
                self._feeder = None
                return report
            self._renew_at = renewed + self.lease / 3
            position = state.position
        else:
            position = feeder.position
        report.leader = self._leader = True
        if feeder is None or feeder.position != position:
            feeder = self._feeder = self._rebuild(position)
            if self.run_actions:
                self.run_pending()
        self.switches.apply(self, feeder)  # pending requests, before this step's rows
        old = feeder.position
        report.position = old
        with self.engine.connect() as conn:
            # about `batch` occurrences: as many log rows as that makes at
            # the size of the last read's (a log row holds a transaction's),
            # at most batch/20 (larger reads measured no faster: the step's
            # commit is amortised by then)
            log_rows = max(1, min(self.batch // 20, round(self.batch / self._per_row)))
            # before the rows: every number up to it is visible, or never will be
            # (as many numbers as the read takes rows at most, and one more)
            upto = self.reader.horizon(conn, old, wait=self.gap_wait, span=log_rows + 1)
            rows = self.reader.read(conn, old, limit=self.batch, rows=log_rows, parsed=True)
            if rows:
                self._per_row = max(1.0, len(rows) / max(1, self.reader.log_rows))
            if upto is not None:
                # every number up to the horizon was handed out then
                self._handed = max(self._handed, self.reader.handed)
            if rows and rows[-1].commit_seq > self._handed:
                # read after the rows: at least the number of every row that
                # committed with a number taken from the counter
                self._handed = self.reader.handed_out(conn)
            if upto is not None and rows and rows[-1].commit_seq > upto:
                # past a hole (PostgreSQL, MariaDB): what comes after it waits for it;
                # rows numbered ahead of the counter are refused below
                rows = [r for r in rows if r.commit_seq <= upto or r.commit_seq > self._handed]
            if rows and rows[-1].commit_seq > self._handed:
                rows = self._refuse_ahead(rows)
            else:
                self.ahead = []
        if not rows:
            report.clock = self._move_clock(feeder)
            self._look_for_unnumbered()
            return report
        runner: Any = self.attachment.runner if self.run_actions else None
        # The entries are claimed in the transaction that enqueues them (one
        # commit less per detection; a crash after it leaves them claimed, and
        # run again once the claim expires, as after any claim), and the
        # batch's actions run in one transaction: here, in this thread
        # (workers=0), or as one job of the runner's pool.
        inline = runner is not None and runner.workers == 0
        pooled = (
            runner is not None
            and runner.workers > 0
            and getattr(runner, "submit_claimed", None) is not None
        )
        keys, claims = self._commit_batch(feeder, rows, claim=runner if inline or pooled else None)
        report.rows = len(rows)
        report.detections = len(keys)
        report.position = feeder.position
        report.keys = keys
        if pooled:
            runner.submit_claimed(claims)
        elif inline:
            batch = getattr(runner, "run_batch", None)
            if batch is not None:
                batch(claims)  # one transaction for the batch's actions
            else:
                for key, got in claims:
                    if got is None:  # not due yet by the runner's clock
                        runner.run_one(key)
                    else:
                        runner.run_claimed(key, got)
        elif self.run_actions and keys:
            self._act(keys)
        return report

    def _commit_batch(
        self, feeder: CommitFeeder, rows: list[LogRow], *, claim: Any = None
    ) -> tuple[list[str], list[tuple[str, Any]]]:
        """Feed ``rows`` to ``feeder`` and, in one transaction, move the cursor
        past them and write an outbox entry per detection (claimed for
        ``claim``, an outbox runner, when given); return the entries' keys and
        the claims. The cursor's ``UPDATE`` comes first: it names this instance and
        the position it expects, so it fails (:class:`LeaseLost`) before any
        entry is written when another instance took the lease over, and it
        locks the cursor's row until the commit, so no other instance takes
        the lease over (nor writes these detections' entries) meanwhile. A
        failure after it (an entry with the same idempotency key, a deadlock)
        is reported as :class:`LeaseLost` when the cursor's lease is another
        instance's by then. Whatever fails, the feeder is dropped (its memory
        may be ahead of the committed position: the next step rebuilds it)."""
        old = feeder.position
        keys: list[str] = []
        claims: list[tuple[str, Any]] = []
        try:
            entries = self.enqueuer.entries(feeder.feed(rows))
            try:
                with self.engine.begin() as conn:
                    self.cursor.advance(
                        conn, self.id, old, feeder.position, self.lease, feeder.log_time
                    )
                    if entries:
                        keys = self.enqueuer.write(conn, entries)
                        if claim is not None:
                            many = getattr(claim, "claim_enqueued", None)
                            if many is not None:  # two statements for them all
                                claims = many(conn, keys)
                            else:
                                claims = [(k, claim.claim_in(conn, k)) for k in keys]
            except LeaseLost:
                raise
            except Exception as err:
                if self._still_holds():
                    raise
                raise self.cursor.lost(self.id, old) from err
            self._renew_at = time.monotonic() + self.lease / 3
        except BaseException as err:
            self._feeder = None  # its memory is ahead of the committed position
            if isinstance(err, LeaseLost):
                self._leader = False
            raise
        return keys, claims

    def _still_holds(self) -> bool:
        """Whether the cursor's lease is still this instance's, read after a
        batch failed (``True`` when it cannot be read: the failure is then
        reported as it is; so is one after which the cursor is still this
        instance's at another position, a commit whose outcome was lost)."""
        try:
            with self.engine.connect() as conn:
                state = self.cursor.read(conn)
        except Exception:
            return True
        return state is not None and state.holder == self.id

    def _catch_up(self) -> None:
        """At a clean stop, after the actions' late log rows were written (their
        ``txn:commit``): read the commits numbered up to the last number handed
        out, as a step does, writing their entries without acting (the next
        instance, or a ``sentinel worker``, runs them), so that the lag reads 0
        when nothing else committed."""
        feeder = self._feeder
        if feeder is None or not self._leader:
            return
        with self.engine.connect() as conn:
            upto = self.reader.horizon(conn, feeder.position, wait=self.gap_wait)
            handed = self.reader.handed_out(conn)
            if upto is not None:
                handed = min(handed, upto)
            rows = [
                r
                for r in self.reader.read(conn, feeder.position, limit=self.batch, parsed=True)
                if r.commit_seq <= handed
            ]
        if rows:
            self._commit_batch(feeder, rows)

    def _refuse_ahead(self, rows: list[LogRow]) -> list[LogRow]:
        """The rows of ``rows`` numbered at most the last commit number handed
        out; those numbered beyond it are reported (on the first sight of a
        new one, then at most every :attr:`ahead_every` seconds) and recorded
        in :attr:`ahead`, not read: moving the cursor to a number the counter
        has not reached would skip every genuine commit numbered up to it."""
        handed = self._handed
        cut = next(i for i, r in enumerate(rows) if r.commit_seq > handed)
        # a log row's occurrences share its id: each row is reported once, by
        # its first occurrence
        first: dict[int, LogRow] = {}
        for r in rows[cut:]:
            first.setdefault(r.id, r)
        ahead = [(r.id, r.commit_seq) for r in first.values()]
        now = time.monotonic()
        if not set(ahead) <= set(self.ahead) or now >= self._ahead_at:
            self._ahead_at = now + self.ahead_every
            for r in list(first.values())[:10]:
                log.error(
                    "sentinel global %r: log row %d (%s in scope %s) is numbered %d, ahead "
                    "of the last commit number handed out (%d): written by hand, imported, "
                    "or left behind by a reset of the commit counter. The global detector "
                    "does not read it, nor move its cursor past %d, until the row is "
                    "deleted or renumbered, or the counter reaches its number",
                    self.name,
                    r.id,
                    r.event,
                    r.scope,
                    r.commit_seq,
                    handed,
                    handed,
                )
            if len(ahead) > 10:
                log.error(
                    "sentinel global %r: %d more log row(s) numbered ahead of %d (at least)",
                    self.name,
                    len(ahead) - 10,
                    handed,
                )
        self.ahead = ahead
        return rows[:cut]

    def _look_for_unnumbered(self) -> None:
        """Warn (at most every :attr:`unnumbered_every` seconds, when idle) about
        rows written since the service started (or since the last look) that it
        will never read: rows without a commit number (a process writes the
        log without ``attach(commit_order=True)``, and its events are invisible
        here), and rows numbered at or behind commits it had already read
        (forged, or written with a stale ``commit_seq``)."""
        now = time.monotonic()
        if now < self._unnumbered_at or self._unnumbered_after is None:
            return
        self._unnumbered_at = now + self.unnumbered_every
        feeder = self._feeder
        looked = self._looked
        with self.engine.connect() as conn:
            after = self._unnumbered_after
            n, top = self.reader.unnumbered(conn, after)
            behind = 0
            if feeder is not None and looked is not None and looked[0] is feeder:
                # what the log holds now up to the position, against what was read
                _, was, read, after = looked
                seen = self.reader.behind(conn, after, was, feeder.position)
                behind = seen - (feeder.rows - read)
        self._unnumbered_after = top
        if feeder is not None:
            self._looked = (feeder, feeder.position, feeder.rows, top)
        if n:
            log.warning(
                "sentinel global %r: %d log row(s) written without a commit number since "
                "the last look: a process writes the log without attach(commit_order=True), "
                "and the global detector does not see its events",
                self.name,
                n,
            )
        if behind > 0:
            log.error(
                "sentinel global %r: %d log row(s) written since the last look are numbered "
                "at or behind commits it had already read (forged, or written with a stale "
                "commit_seq): the global detector does not read them (its position: %d)",
                self.name,
                behind,
                self._looked[1] if self._looked is not None else 0,
            )

    def _move_clock(self, feeder: CommitFeeder) -> bool:
        """Commit a clock row when a timer is due by this machine's clock minus
        the grace (the next step reads it, like every row)."""
        due = feeder.next_due()
        if due is None:
            return False
        now = self.clock() - self.clock_grace
        if due > now:
            return False
        scope = f"global:{self.name}:{uuid.uuid4().hex}"
        with self.engine.begin() as conn:
            self.writer.write(conn, [Occurrence(CLOCK_EVENT, 1, now, scope=scope)], outcome=None)
        return True

    def _act(self, keys: list[str]) -> None:
        runner = self.attachment.runner
        if runner.workers > 0:
            for key in keys:
                runner.submit(key)
        else:
            for key in keys:
                runner.run_one(key)

    def pending_keys(self) -> list[str]:
        """Keys of this detector's outbox entries that are due (pending, or
        running with an expired claim), oldest first."""
        store = self.attachment.runner.store
        names = list(self.rules.rules)
        t = store.table
        with self.engine.connect() as conn:
            q = (
                sa.select(t.c.idempotency_key)
                .where(
                    t.c.rule.in_(names),
                    t.c.status.in_([OutboxStatus.PENDING.value, OutboxStatus.RUNNING.value]),
                    store._claimable(conn, store.clock()),
                )
                .order_by(t.c.id)
            )
            return [str(k) for k in conn.execute(q).scalars()]

    def run_pending(self) -> int:
        """Run this detector's due outbox entries (after a restart); return how
        many were due."""
        runner = self.attachment.runner
        if time.monotonic() >= runner._unknown_at:  # entries no worker would run
            runner._unknown_at = time.monotonic() + runner.unknown_every
            runner.refuse_unknown()
        keys = self.pending_keys()
        for key in keys:
            if runner.stopping():  # asked to stop: the rest wait for the next run
                break
            runner.run_one(key)
        return len(keys)

    # -- the loop ----------------------------------------------------------------------
    def run(
        self,
        *,
        stop: threading.Event | None = None,
        report: Callable[[StepReport], None] | None = None,
        until_idle: bool = False,
    ) -> None:
        """Run until ``stop`` is set (or :meth:`stop` is called), or, with
        ``until_idle``, until a step as leader finds nothing new. A failing step
        (database away, lease lost) is logged and retried after a wait. Once
        ``stop`` is set, the action running finishes and the entries not
        started yet are handed back (pending, run by the next instance or a
        ``sentinel worker``); the step's read batch is committed already."""
        stop = stop or self._stop
        # the actions run here stop between entries too: once ``stop`` is set,
        # the one running finishes, and those not started are handed back
        runner = getattr(self.attachment, "runner", None)
        before = getattr(runner, "stop_event", None)
        if runner is not None:
            runner.stop_event = stop
        try:
            self._run(stop, report, until_idle)
        finally:
            if runner is not None:
                runner.stop_event = before

    def _run(
        self,
        stop: threading.Event,
        report: Callable[[StepReport], None] | None,
        until_idle: bool,
    ) -> None:
        last_pending = time.monotonic()
        failures = 0
        while not stop.is_set():
            try:
                r = self.step()
            except LeaseLost as err:  # not a failure: another instance leads now
                log.warning("%s", err)
                continue
            except Exception as err:
                if until_idle:
                    raise
                failures += 1
                # waits doubling to 30 s; the traceback once, then one line a try
                delay = min(self.max_wait * 2 ** min(failures - 1, 16), _MAX_RETRY_WAIT)
                if failures == 1:
                    log.exception(
                        "sentinel global %r: a step failed; retrying in %.3g s", self.name, delay
                    )
                else:
                    log.warning(
                        "sentinel global %r: still failing (%d tries), retrying in %.3g s: %s: %s",
                        self.name,
                        failures,
                        delay,
                        type(err).__name__,
                        str(err).splitlines()[0] if str(err) else "",
                    )
                stop.wait(delay)
                continue
            if failures:
                log.warning(
                    "sentinel global %r: working again after %d failed tries", self.name, failures
                )
                failures = 0
            if report is not None and (r.rows or r.detections):
                report(r)
            if r.rows or r.clock:
                self.waiter.reset()
                continue
            if r.leader and self.reader.waiting:
                # a number handed out and not visible (PostgreSQL): its
                # transaction may commit any moment, or may have rolled back
                stop.wait(self.min_wait)
                continue
            if not self.waiter.ready:
                # PostgreSQL: say it is about to sleep (writers notify from
                # now on), then read once more before sleeping
                self.waiter.prepare()
                if self.waiter.ready:
                    continue
            if until_idle and r.leader:
                return
            if r.leader and self.run_actions and time.monotonic() - last_pending > self.lease:
                last_pending = time.monotonic()
                try:
                    self.run_pending()  # entries whose worker died mid-action
                except Exception:
                    log.exception("sentinel global %r: pending entries not run", self.name)
            # the leader renews its lease at least every lease/3 s; a standby
            # looks that often whether the lease is free
            self.waiter.wait(stop, self.lease / 3)

    def stop(self) -> None:
        """Make :meth:`run` return after the current step."""
        self._stop.set()

    def close(self) -> None:
        """Stop the action runner (writing its late log rows) and the listener,
        read past the commits handed out so far (the actions' own, see
        :meth:`_catch_up`), and release the lease (a standby takes over at once).
        What failed of that is logged and listed in :attr:`close_errors` (the
        CLI then exits with status 1)."""
        self.waiter.close()
        if self.attachment is not None:
            # writes the actions' late log rows (their txn:commit), read below
            self.attachment.detach()
        if self._leader:
            try:
                self._catch_up()
            except LeaseLost as err:
                log.warning("%s", err)
            except Exception as err:
                self.close_errors.append(f"the last commits were not read: {err}")
                log.exception(
                    "sentinel global %r: the last commits were not read at the stop", self.name
                )
        if self._leader:
            try:
                with self.engine.begin() as conn:
                    self.cursor.release(conn, self.id)
            except Exception as err:
                self.close_errors.append(f"the lease was not released: {err}")
                log.exception("sentinel global %r: the lease was not released", self.name)
            self._leader = False
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> GlobalDetector:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self._feeder = None  # a failure: read nothing more at the close
        self.close()
