"""Running detached rules from the outbox: one entry, a drain, a thread pool.

:class:`Runner` is an attachment's executor of outbox entries. After a trigger
commits, the attachment hands the entry's idempotency key to the runner's
bounded pool of threads; :meth:`Runner.drain` runs every due entry in the
calling thread (after a restart, or from ``sentinel worker``). Running one entry
(:meth:`Runner.run_one`) follows :mod:`sentinel.orm.outbox`: claim, run in a
new session and transaction from the attachment's session factory and mark the
row done in that transaction, or record the failure and retry later with
exponential backoff, up to ``max_attempts``.

Inside the detached condition and action, :func:`detached_context` gives the
session to work in, the entry's idempotency key (the same on every attempt: use
it to make effects outside the database idempotent) and the attempt number.
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
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy.orm import Session

from sentinel.errors import OutboxError, RuleError, SentinelError
from sentinel.log import Firing, FiringStatus
from sentinel.orm.outbox import Claimed, OutboxStore, import_function, rebuild
from sentinel.orm.state import KEY

if TYPE_CHECKING:
    from sentinel.orm.attach import Attachment

__all__ = ["DetachedContext", "DrainReport", "Runner", "detached_context", "load_target", "serve"]

log = logging.getLogger("sentinel.orm")


@dataclass(frozen=True, slots=True)
class DetachedContext:
    """What a detached rule's condition and action can know about their run.

    ``session``
        the session of the detached transaction (from the attached session
        factory): work in it; it commits together with the outbox entry's
        ``done`` mark, so database effects happen exactly once.
    ``idempotency_key``
        the outbox entry's key, the same on every attempt and in every worker:
        pass it to external systems (payment APIs, mail queues) so a retried
        attempt is recognised as the same request.
    ``attempt``
        1 on the first attempt, then 2, 3, ...
    ``committed``
        whether the triggering transaction committed (always true for causally
        dependent rules; independent ones also run after an abort).
    ``rule``, ``trigger_scope``, ``trigger_t_occ``
        the rule, and the scope and ``t_occ`` of the triggering detection.
    """

    rule: str
    idempotency_key: str
    attempt: int
    committed: bool
    session: Session
    trigger_scope: str
    trigger_t_occ: int


_CONTEXT: ContextVar[DetachedContext | None] = ContextVar("sentinel_detached", default=None)


def detached_context() -> DetachedContext:
    """The :class:`DetachedContext` of the detached rule running in this thread.

    Raises :class:`~sentinel.errors.OutboxError` outside a detached rule's
    condition or action.

    >>> def notify_hq(occ):                                   # doctest: +SKIP
    ...     ctx = sentinel.orm.detached_context()
    ...     ctx.session.add(Notice(unit=occ.source.key[0]))
    ...     mailer.send(..., idempotency_key=ctx.idempotency_key)
    """
    ctx = _CONTEXT.get()
    if ctx is None:
        raise OutboxError(
            "detached_context() is only available inside a detached rule's condition or "
            "action (run by sentinel's outbox worker)"
        )
    return ctx


@dataclass
class DrainReport:
    """What a :meth:`Runner.drain` did: entries done (action committed, or
    condition false), retried later, failed for good, and skipped (claimed by
    someone else meanwhile)."""

    done: int = 0
    retried: int = 0
    failed: int = 0
    skipped: int = 0
    keys: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.done + self.retried + self.failed


class _RuleRef(NamedTuple):
    """Stands for a rule in firing records when the worker only has its name."""

    name: str
    coupling: str


class Runner:
    """Runs one attachment's outbox entries (see the module docs).

    ``workers`` threads (started on first use; 0: never run entries in this
    process, only :meth:`drain` does); ``max_attempts`` per entry; failed
    attempts wait ``backoff * 2 ** (attempt - 1)`` seconds, at most
    ``max_backoff``; a claim lasts ``lease`` seconds (after which another worker
    may take an entry whose worker died). Thread-safe.
    """

    def __init__(
        self,
        attachment: Attachment,
        *,
        workers: int,
        max_attempts: int,
        backoff: float,
        max_backoff: float,
        lease: float,
    ) -> None:
        self.attachment = attachment
        self.store = OutboxStore(attachment.writer.tables)
        self.workers = workers
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.lease = lease
        #: How this process's claims are signed in the outbox.
        self.id = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._stopping = False

    # -- the pool ----------------------------------------------------------------------
    def submit(self, key: str, delay: float = 0.0) -> None:
        """Run the entry ``key`` in the pool after ``delay`` seconds (not at all
        when the runner has no workers: a drain will)."""
        if self.workers <= 0:
            return
        with self._cond:
            if self._stopping:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), key))
            if len(self._threads) < self.workers and self._busy >= len(self._threads):
                t = threading.Thread(
                    target=self._loop, name=f"sentinel-outbox-{len(self._threads)}", daemon=True
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
                _, _, key = heapq.heappop(self._heap)
                self._busy += 1
            try:
                self.run_one(key)
            except Exception:
                log.exception("sentinel's outbox: entry %s could not be run", key[:12])
            finally:
                with cond:
                    self._busy -= 1
                    cond.notify_all()

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

    def close(self, timeout: float = 10.0) -> None:
        """Stop the pool: entries still queued stay in the outbox (pending) for a
        later drain; running ones get ``timeout`` seconds to finish."""
        with self._cond:
            self._stopping = True
            self._heap.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    # -- running entries ---------------------------------------------------------------
    def drain(self, *, limit: int | None = None) -> DrainReport:
        """Run every outbox entry that is due now (pending, or running with an
        expired claim), oldest first, in this thread; return what happened.
        Entries that fail and are retried later are not run again in this call."""
        report = DrainReport()
        engine = self.attachment.engine()
        seen: set[str] = set()
        while limit is None or report.total < limit:
            with engine.connect() as conn:
                keys = [k for k in self.store.due(conn, limit=100) if k not in seen]
            if not keys:
                break
            for key in keys:
                if limit is not None and report.total >= limit:
                    break
                seen.add(key)
                outcome = self.run_one(key)
                setattr(report, outcome, getattr(report, outcome) + 1)
                if outcome != "skipped":
                    report.keys.append(key)
        return report

    def _retry_delay(self, attempts: int) -> float:
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, attempts - 1)))

    def run_one(self, key: str) -> str:
        """Claim, run and finish the entry ``key``; returns ``"done"``,
        ``"retried"`` (failed, will run again), ``"failed"`` (failed for good) or
        ``"skipped"`` (not claimable: done, failed, claimed by a live worker,
        not due)."""
        att = self.attachment
        engine = att.engine()
        with engine.begin() as conn:
            claimed = self.store.claim(conn, key, self.id, self.lease)
        if claimed is None:
            return "skipped"
        try:
            cond, action, rule_ref, event = self._resolve(claimed)
        except Exception as err:
            return self._failed(claimed, _RuleRef(claimed.rule, "detached"), None, err)
        occ = rebuild(claimed.constituents, claimed.extra, claimed.t_occ, event)
        committed = bool(claimed.extra.get("committed", True))
        session = att.session_factory()
        try:
            with session.begin():
                token = _CONTEXT.set(
                    DetachedContext(
                        claimed.rule,
                        claimed.key,
                        claimed.attempts,
                        committed,
                        session,
                        claimed.scope,
                        claimed.t_occ,
                    )
                )
                try:
                    status = self._run_rule(claimed.rule, cond, action, occ)
                finally:
                    _CONTEXT.reset(token)
                self.store.finish(
                    session.connection(bind_arguments={"bind": engine}), claimed, self.id
                )
                st = session.info.get(KEY)
                if st is not None and att.sink is not None:
                    st.firings.append((rule_ref, occ, status, None, time.time()))
        except OutboxError as err:
            if err.key == claimed.key:  # our claim was taken over: not our failure
                log.warning("%s", err)
                return "skipped"
            return self._failed(claimed, rule_ref, occ, err)
        except Exception as err:
            return self._failed(claimed, rule_ref, occ, err)
        finally:
            session.close()
        return "done"

    def _resolve(self, claimed: Claimed) -> tuple[Any, Callable[[Any], Any], Any, Any]:
        """The condition, action, rule (or a stand-in) and event of an entry: the
        rule of that name on the attachment's detector, else the functions named
        in the entry."""
        det = self.attachment.detector
        rule = det.rules.get(claimed.rule)
        if rule is not None:
            return rule.condition, rule.action, rule, rule.event
        extra = claimed.extra
        path = extra.get("action")
        if not path:
            raise OutboxError(
                f"outbox entry {claimed.key[:12]}…: rule {claimed.rule!r} is not defined on "
                "this worker's detector and the entry names no action",
                key=claimed.key,
            )
        try:
            action = import_function(path)
            cond_path = extra.get("condition")
            cond = import_function(cond_path) if cond_path else None
        except Exception as err:
            raise OutboxError(
                f"outbox entry {claimed.key[:12]}…: rule {claimed.rule!r} is not defined on "
                f"this worker's detector and its action {path} cannot be imported: {err}",
                key=claimed.key,
            ) from err
        return cond, action, _RuleRef(claimed.rule, str(extra.get("coupling", "detached"))), None

    def _run_rule(self, name: str, cond: Any, action: Callable[[Any], Any], occ: Any) -> str:
        det = self.attachment.detector
        if cond is not None:
            try:
                with det.muted():
                    ok = cond(occ)
            except SentinelError:
                raise
            except Exception as e:
                raise RuleError(name, "condition", e) from e
            if not ok:
                return FiringStatus.CONDITION_FALSE.value
        try:
            action(occ)
        except SentinelError:
            raise
        except Exception as e:
            raise RuleError(name, "action", e) from e
        return FiringStatus.DONE.value

    def _failed(self, claimed: Claimed, rule_ref: Any, occ: Any, err: BaseException) -> str:
        """Record a failed attempt (and its firing) in a short transaction; queue
        the retry. Returns ``"retried"`` or ``"failed"``."""
        att = self.attachment
        text = f"{type(err).__name__}: {err}"
        final = claimed.attempts >= self.max_attempts
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
            with att.engine().begin() as conn:
                if not self.store.fail(conn, claimed, self.id, text, retry_at=retry_at):
                    return "skipped"
                if att.sink is not None:
                    now = datetime.now(UTC)
                    att.writer.write_firings(
                        conn,
                        [
                            Firing(
                                rule=claimed.rule,
                                scope=claimed.scope,
                                t_occ=claimed.t_occ,
                                constituents=tuple(
                                    (c.scope, c.t_occ) for c in claimed.constituents
                                ),
                                coupling=str(getattr(rule_ref, "coupling", "detached")),
                                status=FiringStatus.FAILED.value,
                                error=f"attempt {claimed.attempts}: {text}"[:4000],
                                fired_at=now,
                                finished_at=now,
                            )
                        ],
                    )
        except Exception:
            log.exception(
                "sentinel's outbox: the failure of entry %s was not recorded", claimed.key
            )
            return "retried"
        if final:
            return "failed"
        self.submit(claimed.key, delay)
        return "retried"


def serve(
    attachment: Attachment,
    *,
    poll: float = 1.0,
    once: bool = False,
    stop: threading.Event | None = None,
    report: Callable[[DrainReport], None] | None = None,
) -> DrainReport:
    """Drain ``attachment``'s outbox until ``stop`` is set (or once, with
    ``once``), waiting ``poll`` seconds between drains that found nothing due;
    return the totals. ``report(drain)`` is called after each drain that did
    something. What ``sentinel worker`` runs."""
    total = DrainReport()
    stop = stop or threading.Event()
    while not stop.is_set():
        done = attachment.drain()
        for name in ("done", "retried", "failed", "skipped"):
            setattr(total, name, getattr(total, name) + getattr(done, name))
        total.keys.extend(done.keys)
        if report is not None and (done.total or done.skipped):
            report(done)
        if once:
            break
        if not done.total:
            stop.wait(poll)
    return total


def load_target(reference: str) -> Any:
    """What ``sentinel worker --rules package.module:attribute`` names: a
    :class:`~sentinel.LocalEventDetector`, an
    :class:`~sentinel.orm.Attachment`, or a zero-argument callable returning
    one. Raises :class:`~sentinel.errors.RuleReferenceError` saying which step
    failed."""
    from sentinel.orm.attach import Attachment
    from sentinel.rules import LocalEventDetector
    from sentinel.rules.reference import import_reference

    return import_reference(reference, (LocalEventDetector, Attachment))
