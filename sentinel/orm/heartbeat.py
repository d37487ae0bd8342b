"""The heartbeat that keeps a running detached rule's claim on its outbox entry.

A worker claims an outbox entry for a *lease* (``lease`` seconds); while the
rule's condition and action run, one thread per :class:`~sentinel.orm.worker.Runner`
renews the lease of every entry the runner is running, every ``lease / 3``
seconds, each renewal a short transaction of its own
(:meth:`~sentinel.log.outbox.OutboxStore.renew`). So a slow action keeps its
entry however long it takes, and only an entry whose worker stopped renewing
(the process died, hung, or lost the database for longer than the lease) can be
taken over by another worker.

A renewal that matches no row means the claim is gone (another worker took the
entry, or someone changed the row): the lease is marked :attr:`Lease.lost` and
the attempt will not commit. A renewal that fails with a database error is
retried at the next beat; it does not end the attempt: the attempt's commit
checks the claim itself (``UPDATE ... WHERE claimed_by = me AND attempts = n`` in
the action's transaction), so a worker whose lease ran out without a takeover
still commits exactly once, and one whose entry was taken over rolls back.

On SQLite a write transaction locks the whole database, so a renewal waits
while any transaction writes (the action's own included); a lease must be longer
than the longest write transaction of any worker (see ``docs/operations.md``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

if TYPE_CHECKING:
    from sentinel.log.outbox import Claimed, OutboxStore

__all__ = ["Heartbeat", "Lease"]

log = logging.getLogger("sentinel.orm")


class Lease:
    """One running attempt's claim, as the heartbeat keeps it.

    ``lost`` becomes true when a renewal found the claim gone; ``renewed`` is
    the monotonic time of the claim or of its last successful renewal.
    """

    __slots__ = ("claimed", "due", "engine", "lost", "released", "renewed", "warned")

    def __init__(self, engine: Engine, claimed: Claimed, due: float) -> None:
        self.engine = engine
        self.claimed = claimed
        self.renewed = time.monotonic()
        self.due = due
        self.lost = False
        self.released = False
        self.warned = False


class Heartbeat:
    """Renews the leases of one worker's running attempts (see the module docs).

    ``worker`` is the worker's id in ``claimed_by``; ``lease`` the length of a
    claim in seconds (0: no heartbeat; every claim is expired at once). The
    thread starts with the first :meth:`hold` and is a daemon thread;
    :meth:`close` stops it. Thread-safe.
    """

    def __init__(self, store: OutboxStore, worker: str, lease: float) -> None:
        self.store = store
        self.worker = worker
        self.lease = lease
        self.interval = lease / 3
        self._leases: set[Lease] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def hold(self, engine: Engine, claimed: Claimed) -> Lease:
        """Start renewing the lease of ``claimed`` (claimed just now through
        ``engine``); returns the :class:`Lease` to :meth:`release` when the
        attempt ends."""
        lease = Lease(engine, claimed, time.monotonic() + self.interval)
        if self.interval <= 0:
            return lease
        with self._cond:
            if self._closed:
                return lease
            self._leases.add(lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sentinel-outbox-heartbeat", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return lease

    def release(self, lease: Lease) -> None:
        """Stop renewing ``lease`` (its attempt finished, one way or another)."""
        with self._cond:
            lease.released = True
            self._leases.discard(lease)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread (leases still held are no longer renewed)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                batch = self._next_batch()
                if batch is None:
                    return
                for lease in batch:
                    self._renew(lease)
            except BaseException:  # the heartbeat must outlive anything one beat meets
                log.exception("sentinel's outbox: a heartbeat failed")
                time.sleep(min(self.interval, 1.0))

    def _next_batch(self) -> list[Lease] | None:
        cond = self._cond
        with cond:
            while True:
                if self._closed:
                    return None
                if not self._leases:
                    cond.wait()
                    continue
                now = time.monotonic()
                wait = min(lease.due for lease in self._leases) - now
                if wait <= 0:
                    break
                cond.wait(wait)
            batch = [lease for lease in self._leases if lease.due <= now]
            for lease in batch:
                lease.due = now + self.interval
            return batch

    def _renew(self, lease: Lease) -> None:
        if lease.released:
            return
        claimed = lease.claimed
        try:
            with lease.engine.begin() as conn:
                ok = self.store.renew(conn, claimed, self.worker, self.lease)
        except Exception as err:
            overdue = time.monotonic() - lease.renewed
            if overdue > self.lease and not lease.warned and not lease.released:
                lease.warned = True
                log.warning(
                    "sentinel's outbox: worker %s could not renew its claim of entry %s "
                    "(rule %r) for %.1f s (%s: %s); another worker may take the entry over, "
                    "and this attempt would then be rolled back",
                    self.worker,
                    claimed.key[:12],
                    claimed.rule,
                    overdue,
                    type(err).__name__,
                    err,
                )
            return
        if lease.released:
            return  # the attempt ended meanwhile (its commit made the row "done")
        if ok:
            lease.renewed = time.monotonic()
            lease.warned = False
            return
        lease.lost = True
        log.warning(
            "sentinel's outbox: worker %s lost its claim of entry %s (rule %r, attempt %d): "
            "another worker took it, or the row was changed; this attempt will be rolled back",
            self.worker,
            claimed.key[:12],
            claimed.rule,
            claimed.attempts,
        )
