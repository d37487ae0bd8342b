"""The service's writer thread: a read batch's transaction commits while the
next batch is read and detected (:meth:`GlobalDetector.run
<sentinel.global_detector.GlobalDetector.run>`).

One batch at most is in flight: the next batch's transaction is handed over
only once the one before committed (:meth:`BehindWriter.settle`), and every
other write of the service settles it first, so the cursor's moves commit in
order, each from the position the one before left. A batch that fails drops
the service's detector, whose memory already holds the next batch: the next
step rebuilds it from the committed position and reads both again.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from sentinel.errors import LeaseLost

if TYPE_CHECKING:
    from sentinel.global_detector.detect import CommitFeeder
    from sentinel.global_detector.order import LogRow
    from sentinel.global_detector.service import GlobalDetector

__all__ = ["BehindWriter"]

log = logging.getLogger("sentinel.global")


class BehindWriter:
    """Commits ``service``'s batches in a thread of its own (module docs).
    Called from the service's thread only."""

    def __init__(self, service: GlobalDetector) -> None:
        self.service = service
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: Future[None] | None = None

    def commit(self, feeder: CommitFeeder, rows: list[LogRow], runner: Any) -> list[str]:
        """Feed ``rows`` to ``feeder`` and make their entries here, wait for
        the batch before (:meth:`settle`), then hand this one's transaction
        (the cursor's move, the entries and, with ``runner``, their claims,
        handed to ``runner``'s pool after the commit) to the thread; return
        the entries' keys."""
        s = self.service
        old = feeder.position
        try:
            entries = s.enqueuer.entries(feeder.feed(rows))
        except BaseException:
            s._feeder = None  # its memory is ahead of the committed position
            raise
        self.settle()
        keys = s.enqueuer.keys(entries)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="sentinel-global-writer")
        self._inflight = self._pool.submit(
            self._write, old, feeder.position, feeder.log_time, entries, runner
        )
        return keys

    def _write(
        self, old: int, new: int, log_time: float | None, entries: list[Any], runner: Any
    ) -> None:
        """The thread's part: the batch's transaction, as
        :meth:`GlobalDetector._commit_batch` writes it, then the claims to
        ``runner``'s pool."""
        s = self.service
        claims: list[tuple[str, Any]] = []
        try:
            with s.engine.begin() as conn:
                s.cursor.advance(conn, s.id, old, new, s.lease, log_time)
                if entries:
                    keys = s.enqueuer.write(conn, entries)
                    if runner is not None:
                        claims = runner.claim_enqueued(conn, keys)
        except LeaseLost:
            raise
        except Exception as err:
            if s._still_holds():
                raise
            raise s.cursor.lost(s.id, old) from err
        s._renew_at = time.monotonic() + s.lease / 3
        if claims:
            runner.submit_claimed(claims)

    def settle(self) -> None:
        """Wait for the batch in flight, if any; when it failed, drop the
        service's detector (its memory is ahead of the committed position)
        and raise the failure (:class:`LeaseLost`: the instance stands by)."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        try:
            inflight.result()
        except BaseException as err:
            self.service._feeder = None
            if isinstance(err, LeaseLost):
                self.service._leader = False
            raise

    def settle_quietly(self, *, reraise: bool = False) -> None:
        """:meth:`settle`, a failure logged (re-raised with ``reraise``,
        except a lost lease)."""
        try:
            self.settle()
        except LeaseLost as err:
            log.warning("%s", err)
        except Exception:
            if reraise:
                raise
            log.exception("sentinel global %r: the last batch did not commit", self.service.name)

    def close(self) -> None:
        """Settle (quietly) and stop the thread."""
        self.settle_quietly()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
