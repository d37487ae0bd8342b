"""Running detached rules from the outbox: one entry, a drain, a thread pool.

:class:`Runner` is an attachment's executor of outbox entries. After a trigger
commits, the attachment hands the entry's idempotency key to the runner's
bounded pool of threads; :meth:`Runner.drain` runs every due entry in the
calling thread (after a restart, or from ``sentinel worker``). Running one entry
(:meth:`Runner.run_one`) follows :mod:`sentinel.log.outbox`: claim (an
attempt, refused once ``max_attempts`` were made), run in a new session and
transaction from the attachment's session factory while a heartbeat
(:mod:`sentinel.orm.heartbeat`) keeps the claim, and mark the row done in that
transaction; or record the failure and retry later with exponential backoff.

The rule is looked up by the entry's rule name in the attachment's own
detector; an entry naming anything else, a rule that is not detached, or (when
the log has a signing key, :mod:`sentinel.log.signing`) carrying no valid
signature, is refused: marked ``failed`` at once, nothing run.

Whatever a condition or action raises is that attempt's failure, recorded as
the entry's ``last_error`` and in the rule-firing log, and counted against
``max_attempts``: exceptions, and also ``SystemExit``,
``KeyboardInterrupt``, ``GeneratorExit`` and any other ``BaseException``. None
of them ends a worker thread or leaves an entry ``running``. The one exception:
a ``KeyboardInterrupt`` in the main thread (Ctrl-C during :meth:`Runner.drain`)
is re-raised once the attempt is recorded, so a drain can still be interrupted.

Inside the detached condition and action, :func:`detached_context` gives the
session to work in, the entry's idempotency key (the same on every attempt: use
it to make effects outside the database idempotent) and the attempt number.
The session's transaction is the worker's: a condition or action that commits
it is refused (a :class:`~sentinel.errors.RuleError` from its ``commit()``,
nothing committed), and one that rolls it back or closes the session fails;
either way the entry fails at once, without retries (see
:class:`_TransactionGuard`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session

from sentinel.errors import CascadeLimitError, OutboxError, RuleError, SentinelError
from sentinel.log import Firing, FiringStatus, OutboxEntry, OutboxStatus
from sentinel.log.outbox import (
    Claimed,
    ClaimLost,
    Exhausted,
    OutboxStore,
    Unreadable,
    rebuild,
)
from sentinel.orm.detached import (
    _CONTEXT,
    DetachedContext,
    _enter,
    _TransactionGuard,
    detached_context,
)
from sentinel.orm.heartbeat import Heartbeat, Lease
from sentinel.orm.outbox import DETACHED
from sentinel.orm.serving import DrainReport, serve
from sentinel.orm.state import DEPTH_KEY, KEY, clock_datetime, clock_of
from sentinel.orm.together import run_together

if TYPE_CHECKING:
    from sentinel.orm.attach import Attachment
    from sentinel.orm.attachment import OutboxOptions
    from sentinel.rules import Rule

__all__ = ["DetachedContext", "DrainReport", "Runner", "detached_context", "serve"]

log = logging.getLogger("sentinel.orm")


@dataclass(frozen=True)
class _Batch:
    """A pool job: a read batch's entries, claimed already (:meth:`Runner.submit_claimed`)."""

    claims: tuple[tuple[str, Claimed | Exhausted | None], ...]


@dataclass(frozen=True)
class _Awaited:
    """A pool job: an entry written in a transaction that may not have committed
    yet (an outer transaction's: its commit comes after the event sentinel acts
    on), looked for again, at doubling waits, until ``until`` (monotonic)."""

    key: str
    until: float
    wait: float


class _Stopped(Exception):
    """Raised before an entry's condition and action when the runner was asked
    to stop (:attr:`Runner.stop_event`): the entry is handed back, its claim
    released and its attempt not counted (:meth:`Runner._release`)."""


class Runner:
    """Runs one attachment's outbox entries (see the module docs), as its
    :class:`~sentinel.orm.attachment.OutboxOptions` say:

    ``workers`` threads (started on first use; 0: never run entries in this
    process, only :meth:`drain` does); ``max_attempts`` per entry; failed
    attempts wait ``backoff * 2 ** (attempt - 1)`` seconds, at most
    ``max_backoff``; a claim lasts ``lease`` seconds past its last heartbeat
    (after which another worker may take an entry whose worker died);
    ``context``, if given, is called for each entry and its context manager is
    entered around the entry's claim, condition, action and commit (Flask:
    ``app.app_context``). Thread-safe.
    """

    def __init__(self, attachment: Attachment, options: OutboxOptions) -> None:
        self.attachment = attachment
        self.store = OutboxStore(attachment.writer.tables)
        self.workers = options.workers
        self.max_attempts = options.max_attempts
        self.backoff = options.backoff
        self.max_backoff = options.max_backoff
        self.lease = options.lease
        self.context = options.context
        #: How this process's claims are signed in the outbox.
        self.id = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.heartbeat = Heartbeat(self.store, self.id, self.lease)
        #: Queued jobs: ``(due, seq, job)``, a job being an entry's key (claimed
        #: when it runs) or a batch of entries claimed already (:meth:`submit_claimed`).
        self._heap: list[tuple[float, int, str | _Batch | _Awaited]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._stopping = False
        #: How many due entries a drain reads at a time.
        self.batch = 100
        #: Seconds between two looks (by a drain) for entries of unknown status.
        self.unknown_every = 30.0
        #: Seconds a pool thread waits before it tries again an entry it could
        #: not claim (the database away, or locked past SQLite's busy
        #: timeout): ``max_backoff`` by default; ``sentinel global
        #: --retry-delay`` sets it.
        self.claim_retry = self.max_backoff
        #: At most this many entries in one pool job made of queued batches
        #: (:meth:`submit_claimed`; a batch larger than it stays whole).
        self.merge_limit = 5000
        self._unknown_at = 0.0
        #: Attempts that failed in this runner since it was made: ``retried``
        #: (to run again) and ``failed`` (for good: refused, out of attempts).
        #: ``sentinel global --until-idle`` exits 1 when any failed for good.
        self.failures = DrainReport()
        self._failures_lock = threading.Lock()
        #: Set (by :func:`serve`, by the global detector's ``run``) to stop
        #: between entries: once it is set, an entry not started yet is handed
        #: back (pending again, its attempt not counted) instead of run, and a
        #: drain stops reading; the one running finishes.
        self.stop_event: threading.Event | None = None

    def stopping(self) -> bool:
        """Whether :attr:`stop_event` is set."""
        stop = self.stop_event
        return stop is not None and stop.is_set()

    # -- the pool ----------------------------------------------------------------------
    def submit(self, key: str, delay: float = 0.0) -> None:
        """Run the entry ``key`` in the pool after ``delay`` seconds (not at all
        when the runner has no workers: a drain will)."""
        self._push(key, delay)

    def submit_awaited(self, key: str, delay: float, within: float) -> None:
        """Run the entry ``key`` in the pool after ``delay`` seconds, looking for
        it again (at doubling waits, at most 5 s apart) while it is not in the
        outbox, for at most ``within`` seconds: an entry of a transaction whose
        commit is still under way (an outer transaction's, which a slow COMMIT
        keeps invisible). One that never appears (the COMMIT failed) is left;
        one that appears later is run by a drain (``sentinel worker``)."""
        self._push(_Awaited(key, time.monotonic() + within, max(delay, 0.05)), delay)

    def submit_claimed(self, claims: Sequence[tuple[str, Claimed | Exhausted | None]]) -> None:
        """Run entries claimed by :meth:`claim_enqueued` (whose transaction
        has committed) in the pool, as one job: in one transaction
        (:meth:`run_claimed_together`), as the caller's thread would with no
        workers; with the batches queued behind it when a thread takes it
        (at most :attr:`merge_limit` entries). Not at all when the runner has no
        workers (their claims then
        expire, and a drain runs them). A job that raises before its
        transaction (the ``context`` or the engine failing) is queued again
        with the same claims after :attr:`claim_retry` seconds."""
        if claims:
            self._push(_Batch(tuple(claims)), 0.0)

    def _push(self, job: str | _Batch | _Awaited, delay: float) -> None:
        if self.workers <= 0:
            return
        with self._cond:
            if self._stopping:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), job))
            # a thread that ended anyway (it should not) no longer counts
            self._threads = [t for t in self._threads if t.is_alive()]
            if len(self._threads) < self.workers and self._busy >= len(self._threads):
                t = threading.Thread(
                    target=self._loop, name=f"sentinel-outbox-{next(self._seq)}", daemon=True
                )
                self._threads.append(t)
                t.start()
            self._cond.notify()

    def _loop(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while True:
                    if self._stopping:
                        return
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        cond.wait(wait)
                    else:
                        cond.wait()
                _, _, job = heapq.heappop(self._heap)
                if isinstance(job, _Batch):
                    job = self._merge(job)
                self._busy += 1
            try:
                if isinstance(job, _Batch):
                    self.run_batch(job.claims)
                elif isinstance(job, _Awaited):
                    self._run_awaited(job)
                else:
                    self.run_one(job)
            except BaseException:  # nothing an entry does may end a worker thread
                # claiming failed (the database is away, no engine, the context
                # raised): the entry is still pending, or still claimed by this
                # runner (a batch); try it again later
                log.exception(
                    "sentinel's outbox: %s could not be run; trying again in %g s",
                    f"entry {job[:12]}"
                    if isinstance(job, str)
                    else f"entry {job.key[:12]}"
                    if isinstance(job, _Awaited)
                    else f"a batch of {len(job.claims)} claimed entries",
                    self.claim_retry,
                )
                self._push(job, self.claim_retry)
            finally:
                with cond:
                    self._busy -= 1
                    cond.notify_all()

    def _merge(self, job: _Batch) -> _Batch:
        """``job`` and the batches queued behind it that are due now, as one
        job (the caller holds the lock): when the actions fall behind the
        reading, one transaction acts on every batch waiting, not one each."""
        heap = self._heap
        if not heap or not isinstance(heap[0][2], _Batch):
            return job
        claims = list(job.claims)
        now = time.monotonic()
        while heap and len(claims) < self.merge_limit:
            due, _, nxt = heap[0]
            if due > now or not isinstance(nxt, _Batch):
                break
            heapq.heappop(heap)
            claims.extend(nxt.claims)
        return _Batch(tuple(claims))

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the pool has nothing queued or running (retries included);
        return False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._heap or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is None else min(left, 0.05))
            return True

    def close(self, timeout: float = 10.0) -> bool:
        """Stop the pool: entries still queued stay in the outbox (pending) for a
        later drain; running ones get ``timeout`` seconds to finish. Returns
        whether every worker thread ended in that time."""
        with self._cond:
            self._stopping = True
            self._heap.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        # a rule of this pool closing it: its own thread cannot be waited for
        others = [t for t in self._threads if t is not threading.current_thread()]
        for t in others:
            t.join(max(0.0, deadline - time.monotonic()))
        self.heartbeat.close(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in others)

    # -- running entries ---------------------------------------------------------------
    def _entered(self) -> AbstractContextManager[Any]:
        return self.context() if self.context is not None else nullcontext()

    def drain(self, *, limit: int | None = None) -> DrainReport:
        """Run every outbox entry that is due now (pending, or running with an
        expired claim), oldest first, in this thread; return what happened.
        Entries that fail and are retried later are not run again in this call.

        Raises what reading the outbox raises (the database is unreachable, the
        tables are missing); a ``KeyboardInterrupt`` in the main thread is
        re-raised once the attempt it interrupted is recorded. Stops between
        two entries once :attr:`stop_event` is set."""
        report = DrainReport()
        if time.monotonic() >= self._unknown_at:
            self._unknown_at = time.monotonic() + self.unknown_every
            report.failed += self.refuse_unknown()
        last: int | None = None
        while limit is None or report.total < limit:
            with self._entered():
                engine = self.attachment.engine()
                with engine.connect() as conn:
                    # after the last entry read: entries this drain ran may be
                    # due again (a retry without backoff), and must not hide the rest
                    rows = self.store.due_rows(conn, limit=self.batch, after=last)
            if not rows or self.stopping():
                break
            for row_id, key in rows:
                if (limit is not None and report.total >= limit) or self.stopping():
                    break
                last = row_id
                outcome = self.run_one(key)
                setattr(report, outcome, getattr(report, outcome) + 1)
                if outcome != "skipped":
                    report.keys.append(key)
        return report

    def refuse_unknown(self) -> int:
        """Mark ``failed``, and report on the logger, the entries whose status
        is none of ``pending``, ``running``, ``done``, ``failed`` (a row
        changed by hand: no worker would ever claim, run or report it); return
        how many. ``requeue`` (``sentinel worker --retry-failed``) runs them
        again once they are known to be genuine."""
        store = self.store
        n = 0
        with self._entered():
            engine = self.attachment.engine()
            with engine.begin() as conn:
                for row_id, rule, status in store.unknown_statuses(conn):
                    if store.fail_unknown(conn, row_id, status):
                        n += 1
                        log.error(
                            "sentinel's outbox: entry %d of rule %r has the unknown status "
                            "%r (changed by hand); marked failed, not run",
                            row_id,
                            rule[:80],
                            status[:40],
                        )
        return n

    def _retry_delay(self, attempts: int) -> float:
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, attempts - 1)))

    def _run_awaited(self, job: _Awaited) -> None:
        """:meth:`submit_awaited`'s job: run the entry, or, while it is not in
        the outbox yet, look for it again later."""
        if self.run_one(job.key) != "skipped":
            return
        t = self.store.table
        with self.attachment.engine().connect() as conn:
            seen = conn.execute(sa.select(t.c.id).where(t.c.idempotency_key == job.key)).first()
        if seen is not None:
            return  # claimed by another worker, done, not due: as any skip
        wait = min(job.wait * 2, 5.0)
        if time.monotonic() + wait <= job.until:
            self._push(_Awaited(job.key, job.until, wait), wait)
        else:
            log.warning(
                "sentinel: detached entry %s is not in the outbox yet: its transaction has "
                "not committed (or its COMMIT failed); a drain (`sentinel worker`) runs it "
                "if it appears",
                job.key[:12],
            )

    def run_one(self, key: str) -> str:
        """Claim, run and finish the entry ``key``; returns ``"done"``,
        ``"retried"`` (failed, will run again), ``"failed"`` (failed for good, or
        refused) or ``"skipped"`` (not claimable: done, failed, claimed by a live
        worker, not due; or the claim was lost while the attempt ran).

        Whatever the rule raises, ``BaseException`` included, is the attempt's
        failure (see the module docs). Raises what claiming raises (the database
        is unreachable), and a ``KeyboardInterrupt`` of the main thread after
        recording the attempt it interrupted."""
        with self._entered():
            engine = self.attachment.engine()
            with engine.begin() as conn:
                got = self.store.claim(conn, key, self.id, self.lease, self.max_attempts)
            return self._run_claimed(engine, key, got)

    def claim_in(self, conn: Connection, key: str) -> Claimed | Exhausted | None:
        """Claim the entry ``key`` for this runner in the caller's transaction
        (:meth:`~sentinel.log.outbox.OutboxStore.claim`; the claim holds once
        that transaction commits): a caller that enqueues entries and runs them
        itself saves the claim's own commit. Pass the result, after the commit,
        to :meth:`run_claimed`."""
        return self.store.claim(conn, key, self.id, self.lease, self.max_attempts)

    def claim_enqueued(self, conn: Connection, keys: Sequence[str]) -> list[tuple[str, Any]]:
        """:meth:`claim_in` for entries the caller's transaction has just
        enqueued, all at once (:meth:`OutboxStore.claim_enqueued
        <sentinel.log.outbox.OutboxStore.claim_enqueued>`): ``(key, claim or
        None)`` in the order of ``keys``."""
        got = self.store.claim_enqueued(conn, keys, self.id, self.lease)
        return [(k, got.get(k)) for k in keys]

    def run_claimed(self, key: str, got: Claimed | Exhausted | None) -> str:
        """Run and finish an entry claimed by :meth:`claim_in` (whose transaction
        has committed); returns as :meth:`run_one` does."""
        with self._entered():
            return self._run_claimed(self.attachment.engine(), key, got)

    def run_claimed_together(
        self, claims: Sequence[tuple[str, Claimed | Exhausted | None]]
    ) -> list[str]:
        """Run entries claimed by :meth:`claim_in` (whose transaction has
        committed) in one transaction, each in a savepoint, with one commit
        for all (:mod:`sentinel.orm.together`); return their outcomes."""
        return run_together(self, claims)

    def run_batch(self, claims: Sequence[tuple[str, Claimed | Exhausted | None]]) -> None:
        """Act on a read batch's entries claimed by :meth:`claim_enqueued`
        (whose transaction has committed): those claimed in one transaction
        (:meth:`run_claimed_together`; alone when there is one), then those
        it could not claim (``None``: not due by this runner's clock) each
        by :meth:`run_one`."""
        due = [(key, got) for key, got in claims if got is not None]
        if len(due) > 1:
            self.run_claimed_together(due)
        else:
            for key, one in due:
                self.run_claimed(key, one)
        for key, _ in (c for c in claims if c[1] is None):
            self.run_one(key)

    def _run_claimed(self, engine: Engine, key: str, got: Claimed | Exhausted | None) -> str:
        if got is None:
            return "skipped"
        if isinstance(got, Exhausted):
            log.error(
                "sentinel: detached rule %r, entry %s failed: %s", got.rule, key[:12], got.error
            )
            self._record_exhausted(engine, got)
            self._count("failed")
            return "failed"
        lease = self.heartbeat.hold(engine, got)
        try:
            return self._attempt(got, lease)
        finally:
            self.heartbeat.release(lease)

    def _attempt(self, claimed: Claimed, lease: Lease) -> str:
        try:
            rule, constituents, extra, occ = self._prepare(claimed)
        except OutboxError as err:  # refused for good: it would fail the same way again
            return self._failed(claimed, None, (), err, final=True)
        depth = extra.get("depth", 1)
        if type(depth) is not int:  # a row written by hand: as an ordinary trigger's
            depth = 1
        limit = self.attachment.detector.scheduler.cascade_limit
        if depth > limit:
            # detached rules triggering each other through their own transactions
            # (one on txn:commit triggers itself): stop, as immediate rules stop
            return self._failed(
                claimed, rule, constituents, CascadeLimitError(rule.name, limit), final=True
            )
        try:
            session = self._new_session()
        except BaseException as err:
            return self._failed_or_raise(claimed, rule, constituents, err)
        session.info[DEPTH_KEY] = depth
        try:
            with session.begin() as transaction:
                token = _enter(rule.name, claimed, bool(extra.get("committed", True)), session)
                guard = _TransactionGuard(session, transaction, rule.name)
                try:
                    try:
                        status = self._run_rule(rule, occ, guard)
                    except BaseException:
                        guard.check()  # an ended transaction says more than what followed
                        raise
                    guard.check()
                finally:
                    guard.remove()
                    _CONTEXT.reset(token)
                if lease.lost:
                    raise ClaimLost("the heartbeat found the claim gone", key=claimed.key)
                # the entry lives on the home database (several binds: the
                # outbox is not on every database the rule's session uses)
                home = session.connection(bind_arguments={"bind": self.attachment.engine()})
                self.store.finish(home, claimed, self.id)
                # the row is ours and locked until the commit: no renewal needed,
                # and one blocked behind the commit must not report a lost claim
                self.heartbeat.release(lease)
                st = session.info.get(KEY)
                att = self.attachment
                if st is not None and att.sink is not None:
                    st.firings.append((rule, occ, status, None, clock_of(att.detector)()))
        except ClaimLost as err:
            log.warning("%s", err)
            return "skipped"
        except BaseException as err:
            return self._failed_or_raise(claimed, rule, constituents, err)
        finally:
            session.close()
        return "done"

    def _prepare(self, claimed: Claimed) -> tuple[Rule, tuple[Any, ...], Mapping[str, Any], Any]:
        """The rule an entry names (from this worker's rule set, by name), its
        decoded constituents and extra values, and the occurrence its action
        receives; raises :class:`~sentinel.errors.OutboxError` for an
        entry that must not run: unsigned or badly signed when the log has a
        signing key, naming no detached rule of this worker, unreadable."""
        where = f"outbox entry {claimed.key[:12]}… (rule {claimed.rule!r})"
        payload = claimed.payload
        if isinstance(payload, Unreadable):
            raise OutboxError(
                f"{where}: its payload cannot be read as JSON ({payload.error})", key=claimed.key
            )
        if not isinstance(payload, Mapping):
            raise OutboxError(f"{where}: its payload is not a JSON object", key=claimed.key)
        signer = self.attachment.writer.signer
        if signer is not None:
            try:
                why = signer.verify(
                    claimed.rule, claimed.key, claimed.scope, claimed.t_occ, payload
                )
            except RecursionError:
                why = "its payload cannot be read (nested too deeply)"
            if why is not None:
                raise OutboxError(
                    f"{where} refused: {why}; this worker runs only entries signed with its "
                    "outbox key (written by an application attached with the same key)",
                    key=claimed.key,
                )
        rule = self.attachment.detector.rules.get(claimed.rule)
        if rule is None:
            raise OutboxError(
                f"{where} refused: this worker's rule set defines no rule of that name; a "
                "worker runs only its own detached rules, looked up by name (deploy the "
                "rule to the workers, then run `sentinel worker ... --retry-failed`)",
                key=claimed.key,
            )
        if rule.coupling not in DETACHED:
            raise OutboxError(
                f"{where} refused: {rule.name!r} is not a detached rule of this worker (its "
                f"coupling is {rule.coupling})",
                key=claimed.key,
            )
        try:
            constituents, extra = OutboxEntry.decode_payload(payload)
            occ = rebuild(constituents, extra, claimed.t_occ, rule.event)
        except Exception as err:  # RecursionError included
            raise OutboxError(
                f"{where}: its payload cannot be read ({type(err).__name__}: {err})",
                key=claimed.key,
            ) from err
        return rule, constituents, extra, occ

    def _new_session(self) -> Session:
        factory = self.attachment.session_factory
        try:
            return factory()
        except Exception as err:
            raise OutboxError(
                f"sentinel's outbox: the session factory {factory!r:.80} could not make a "
                f"session for a detached rule ({type(err).__name__}: {err}); give attach() "
                "one that can be called without arguments: attach(..., session_factory=...) "
                "(with Flask-SQLAlchemy: attach(db.session, ...), see docs/operations.md)"
            ) from err

    def _run_rule(self, rule: Rule, occ: Any, guard: _TransactionGuard) -> str:
        if self.stopping():  # before the entry's condition and action: handed back
            raise _Stopped(rule.name)
        det = self.attachment.detector
        cond = rule.condition
        if cond is not None:
            guard.phase = "condition"
            try:
                with det.muted():
                    ok = bool(cond(occ))
                guard.check()
            except SentinelError:
                raise
            except BaseException as e:  # SystemExit, GeneratorExit, ... are failures too
                raise RuleError(rule.name, "condition", e) from e
            if not ok:
                return FiringStatus.CONDITION_FALSE.value
            guard.phase = "action"
        try:
            rule.action(occ)
        except SentinelError:
            raise
        except BaseException as e:
            raise RuleError(rule.name, "action", e) from e
        return FiringStatus.DONE.value

    def _failed_or_raise(
        self, claimed: Claimed, rule: Rule, constituents: Sequence[Any], err: BaseException
    ) -> str:
        """Record a failed attempt (for good when the rule ended the worker's
        transaction: every attempt would); then re-raise a ``KeyboardInterrupt``
        that reached the main thread (how Ctrl-C arrives while ``drain`` runs there).
        An entry not started because the runner is stopping is handed back instead."""
        if isinstance(err, _Stopped):
            return self._release(claimed)
        final = getattr(err, "ended_transaction", False) is True
        outcome = self._failed(claimed, rule, constituents, err, final=final)
        cause = err.__cause__ if isinstance(err, RuleError) else err
        if isinstance(cause, KeyboardInterrupt) and (
            threading.current_thread() is threading.main_thread()
        ):
            raise cause
        return outcome

    def _failed(
        self,
        claimed: Claimed,
        rule: Rule | None,
        constituents: Sequence[Any],
        err: BaseException,
        *,
        final: bool = False,
    ) -> str:
        """Record a failed attempt (and its firing) in a short transaction; queue
        the retry. Returns ``"retried"``, ``"failed"``, or ``"skipped"`` when the
        claim is no longer this worker's."""
        text = f"{type(err).__name__}: {err}"
        final = final or claimed.attempts >= self.max_attempts
        delay = self._retry_delay(claimed.attempts)
        retry_at = None if final else datetime.now(UTC) + timedelta(seconds=delay)
        log.log(
            logging.ERROR if final else logging.WARNING,
            "sentinel: detached rule %r, attempt %d of %d, failed%s: %s",
            claimed.rule,
            claimed.attempts,
            self.max_attempts,
            "" if final else f" (retry in {delay:g} s)",
            text,
        )
        try:
            with self.attachment.engine().begin() as conn:
                if not self.store.fail(conn, claimed, self.id, text, retry_at=retry_at):
                    return "skipped"
                self._write_firing(
                    conn,
                    claimed,
                    rule,
                    constituents,
                    f"attempt {claimed.attempts}: {text}",
                )
        except Exception:
            # the entry stays `running` until its lease runs out; then it is
            # claimable again (an attempt that did not finish): the pool must
            # come back to it, or nothing in this process ever would
            wait = max(delay, self.lease)
            log.exception(
                "sentinel's outbox: the failure of entry %s was not recorded; trying it "
                "again in %g s, once its claim has expired",
                claimed.key,
                wait,
            )
            self.submit(claimed.key, wait)
            return self._count("retried")
        if final:
            return self._count("failed")
        self.submit(claimed.key, delay)
        return self._count("retried")

    def _release(self, claimed: Claimed) -> str:
        """Hand back an entry claimed and not started (the runner is stopping):
        ``pending`` and due again, its attempt not counted; ``"skipped"``. When
        that cannot be written, its claim expires after the lease, as a dead
        worker's does."""
        t = self.store.table
        try:
            with self.attachment.engine().begin() as conn:
                conn.execute(
                    sa.update(t)
                    .where(
                        t.c.id == claimed.id,
                        t.c.status == OutboxStatus.RUNNING.value,
                        t.c.claimed_by == self.id,
                        t.c.attempts == claimed.attempts,
                    )
                    .values(
                        status=OutboxStatus.PENDING.value,
                        attempts=claimed.attempts - 1,
                        claimed_by=None,
                        next_attempt_at=self.store.clock(),
                    )
                )
        except Exception:
            log.warning(
                "sentinel's outbox: entry %s, not run (stopping), was not handed back; it "
                "runs again once its claim expires",
                claimed.key[:12],
                exc_info=True,
            )
        return "skipped"

    def _count(self, outcome: str) -> str:
        with self._failures_lock:
            if outcome == "failed":
                self.failures.failed += 1
            else:
                self.failures.retried += 1
        return outcome

    def _record_exhausted(self, engine: Engine, got: Exhausted) -> None:
        """The rule-firing row of an entry failed at its claim (no attempts left)."""
        try:
            constituents, _ = OutboxEntry.decode_payload(got.payload)
        except Exception:
            constituents = ()
        rule = self.attachment.detector.rules.get(got.rule)
        try:
            with engine.begin() as conn:
                self._write_firing(conn, got, rule, constituents, got.error)
        except Exception:
            log.exception("sentinel's outbox: the failure of entry %s was not logged", got.key)

    def _write_firing(
        self,
        conn: Connection,
        entry: Claimed | Exhausted,
        rule: Rule | None,
        constituents: Sequence[Any],
        error: str,
    ) -> None:
        att = self.attachment
        if att.sink is None:
            return
        now = clock_datetime(att.detector)  # the clock of the log's `at`
        att.writer.write_firings(
            conn,
            [
                Firing(
                    rule=entry.rule,
                    scope=entry.scope,
                    t_occ=entry.t_occ,
                    constituents=tuple((c.scope, c.t_occ) for c in constituents),
                    coupling=str(rule.coupling) if rule is not None else "detached",
                    status=FiringStatus.FAILED.value,
                    error=error[:4000],
                    fired_at=now,
                    finished_at=now,
                    partition=rule.partition_of(constituents) if rule is not None else (),
                )
            ],
        )
