"""What the open pages poll (``/api/live``), read once for all of them.

Each open page asks every :data:`POLL_MS` milliseconds (and not while its tab
is hidden). The answer, the newest firing's id and a count of the newest
firings (:meth:`~sentinel.ui.queries.LogView.firing_signal`), the outbox's
counts and the global cursors, costs a few index reads (``bench/ui.py``: about a millisecond).
:class:`LiveSnapshot` keeps it for :data:`FRESH_S` seconds, so however many
pages are open, the log is read at most once in that time: the cost of live
updates on the database is bounded by the clock, not by the number of viewers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sentinel.ui.queries import LogView

__all__ = ["FRESH_S", "POLL_MS", "LiveSnapshot"]

#: How often the pages poll ``/api/live``, in milliseconds.
POLL_MS = 2000
#: How long one reading of the log answers every poll, in seconds.
FRESH_S = 1.0


class LiveSnapshot:
    """The live figures of ``view``, read at most once per ``fresh`` seconds of
    ``clock`` (``time.monotonic``), whatever the number of callers and threads."""

    def __init__(
        self,
        view: LogView,
        *,
        fresh: float = FRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = view
        self.fresh = fresh
        self.clock = clock
        self._lock = threading.Lock()
        self._at: float | None = None
        self._value: dict[str, Any] = {}

    def get(self) -> dict[str, Any]:
        with self._lock:
            now = self.clock()
            if self._at is None or now - self._at >= self.fresh:
                started = time.time()
                signal = self.view.firing_signal()
                self._value = {
                    "now": datetime.now(UTC).isoformat(),
                    # when this reading began (seconds since the epoch, this
                    # host's clock): a page loaded after it ignores it, as
                    # older than what it shows
                    "read_at": started,
                    "latest_firing": signal["latest"],
                    "firings": {"from": signal["from"], "count": signal["count"]},
                    "outbox": self.view.outbox_counts(),
                    "cursors": self.view.cursors(),
                }
                self._at = now
            return self._value
