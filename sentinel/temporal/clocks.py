"""Clocks: where a detector's time comes from and where its timers wait.

A clock tells the time (:meth:`Clock.now`, POSIX seconds; calling the clock does
the same, so a clock can stand wherever a plain time function did) and runs
timers. Three kinds:

:class:`SystemClock`
    the real time. A scheduler thread (started with the first timer) fires each
    timer when it is due, from that thread. :meth:`SystemClock.close` stops it.
    Local time zone by default.
:class:`VirtualClock`
    time moves only when told (:meth:`~VirtualClock.advance`,
    :meth:`~VirtualClock.set`); timers due on the way fire synchronously, in order
    of due time (then of scheduling; absolute events after the other timers of
    their instant), each with the clock reading its due time.
    UTC by default. For tests and simulations: deterministic.
:class:`ReplayClock`
    timers never fire. A detector that replays the event log runs on one: the log
    already holds every temporal occurrence the online run produced.

Timers are kept in a binary heap: scheduling and firing cost O(log n).
Cancelling is O(1) (the entry is left in the heap and skipped when it surfaces);
the heap is compacted when more than half of it is cancelled, so memory stays
proportional to the live timers.

Thread-safe: timers may be scheduled and cancelled from any thread. A clock never
holds its own lock while a timer runs.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

from sentinel.errors import TemporalError

__all__ = ["Clock", "ReplayClock", "SystemClock", "Timer", "VirtualClock"]

log = logging.getLogger("sentinel.temporal")

_COMPACT_MIN = 1024
_LATE = 1 << 62

TimeZone = tzinfo | str | None


@dataclass(eq=False, slots=True)
class Timer:
    """Something a clock runs at ``due`` (POSIX seconds).

    ``seq`` is positive while the timer is armed (scheduled, neither fired nor
    cancelled), 0 when it is not. When it is due the clock sets ``seq`` to
    ``-seq`` ("firing") and calls :meth:`fire` with the ``seq`` it was armed with;
    the timer must ignore the call unless its ``seq`` is still ``-seq`` (it may
    have been cancelled or re-armed in between, from another thread).
    """

    due: float
    seq: int = field(default=0, init=False)
    #: Among timers due at the same time, those with ``late`` fire after the
    #: others (absolute events: the ticks of an interval they close come first).
    late: ClassVar[bool] = False

    @property
    def armed(self) -> bool:
        return self.seq > 0

    def fire(self, seq: int) -> None:
        """Called by the clock when the timer is due (from the clock's thread)."""
        raise NotImplementedError


class _Call(Timer):
    __slots__ = ("fn",)

    def __init__(self, due: float, fn: Callable[[], Any]) -> None:
        super().__init__(due)
        self.fn = fn

    def fire(self, seq: int) -> None:
        if self.seq == -seq:
            self.seq = 0
            self.fn()


def _zone(tz: TimeZone) -> tzinfo | None:
    if isinstance(tz, str):
        return UTC if tz.upper() == "UTC" else ZoneInfo(tz)
    if tz is not None and not isinstance(tz, tzinfo):
        raise TypeError(f"a time zone is a tzinfo, a zone name or None (local), not {tz!r}")
    return tz


def _seconds(value: float | timedelta, what: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is a number of seconds or a timedelta, not {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds):
        # NaN would fire every timer at once and leave the clock reading nan
        raise TemporalError(f"{what} is a finite number of seconds, not {value!r}")
    return seconds


class Clock:
    """Base of the clocks: the time, a time zone, and a heap of timers.

    ``tz`` is the time zone absolute events are evaluated in (a tzinfo, a zone
    name such as ``"Europe/Paris"``, or ``None`` for the system's local zone).
    """

    def __init__(self, tz: TimeZone = None) -> None:
        self.tz: tzinfo | None = _zone(tz)
        self._lock = threading.Lock()
        #: Signalled when the earliest due time may have changed (the scheduler
        #: thread of a SystemClock waits on it).
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count(1)
        self._live = 0
        self._closed = False

    # -- time ----------------------------------------------------------------------
    def now(self) -> float:
        """The current time, POSIX seconds."""
        raise NotImplementedError

    def __call__(self) -> float:
        return self.now()

    def datetime(self) -> datetime:
        """The current time as an aware datetime in the clock's time zone."""
        now = self.now()
        if self.tz is None:
            return datetime.fromtimestamp(now).astimezone()
        return datetime.fromtimestamp(now, self.tz)

    # -- timers --------------------------------------------------------------------
    def schedule(self, timer: Timer) -> None:
        """Arm ``timer`` for ``timer.due`` (a past due time fires at the first
        opportunity). Re-arming an armed timer replaces its previous schedule.
        Raises :class:`~sentinel.errors.TemporalError` after :meth:`close`."""
        with self._lock:
            if self._closed:
                raise TemporalError(f"{type(self).__name__} is closed; it cannot run timers")
            if timer.seq > 0:
                self._live -= 1  # the old entry becomes stale
            seq = next(self._seq)
            if timer.late:
                seq += _LATE  # orders after every ordinary timer of the same due time
            timer.seq = seq
            self._live += 1
            self._push(timer.due, seq, timer)

    def _push(self, due: float, seq: int, timer: Timer) -> None:
        heapq.heappush(self._heap, (due, seq, timer))

    def cancel(self, timer: Timer) -> None:
        """Disarm ``timer`` (O(1); its heap entry is dropped later). Also what a
        timer that has fired (or was consumed otherwise) calls to say it is done."""
        with self._lock:
            seq = timer.seq
            if seq < 0:  # firing: its entry has left the heap already
                timer.seq = 0
            elif seq:
                timer.seq = 0
                self._live -= 1
                heap = self._heap
                if len(heap) > _COMPACT_MIN and self._live * 2 < len(heap):
                    self._heap = [e for e in heap if e[2].seq == e[1]]
                    heapq.heapify(self._heap)

    def call_at(self, due: float, fn: Callable[[], Any]) -> Timer:
        """Run ``fn()`` at ``due``; returns the timer (``clock.cancel(timer)``)."""
        timer = _Call(due, fn)
        self.schedule(timer)
        return timer

    @property
    def pending(self) -> int:
        """How many timers are armed."""
        return self._live

    @property
    def next_due(self) -> float | None:
        """When the earliest armed timer is due (None without timers)."""
        with self._lock:
            self._drop_stale()
            return self._heap[0][0] if self._heap else None

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and heap[0][2].seq != heap[0][1]:
            heapq.heappop(heap)

    def _pop_due(self, limit: float) -> tuple[int, Timer] | None:
        """The next armed timer due at or before ``limit`` (under the lock)."""
        heap = self._heap
        while heap:
            due, seq, timer = heap[0]
            if timer.seq != seq:
                heapq.heappop(heap)
                continue
            if due > limit:
                return None
            heapq.heappop(heap)
            self._live -= 1
            timer.seq = -seq
            return seq, timer
        return None

    def close(self) -> None:
        """Stop running timers; later :meth:`schedule` calls raise."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def replay(self) -> ReplayClock:
        """A clock with this one's time zone whose timers never fire."""
        return ReplayClock(tz=self.tz)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.datetime().isoformat()} pending={self.pending}>"


class VirtualClock(Clock):
    """A clock that moves only when told. For deterministic tests.

    ``start`` is the initial time (POSIX seconds, or a datetime; a naive one is
    read in ``tz``); ``tz`` defaults to UTC.

    >>> clock = VirtualClock(datetime(2024, 1, 1, tzinfo=UTC))
    >>> fired = []
    >>> _ = clock.call_at(clock.now() + 10, lambda: fired.append(clock.now()))
    >>> clock.advance(9); fired
    0
    []
    >>> clock.advance(1); fired == [clock.now()]
    1
    True
    """

    def __init__(self, start: float | datetime = 0.0, *, tz: TimeZone = UTC) -> None:
        super().__init__(tz)
        if isinstance(start, datetime):
            if start.tzinfo is None:
                start = start.replace(tzinfo=self.tz) if self.tz else start.astimezone()
            self._now = start.timestamp()
        else:
            self._now = _seconds(start, "start")
        self._moving: int | None = None

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float | timedelta) -> int:
        """Move ``seconds`` forward (0 fires what is already due), firing every timer
        due on the way, in order. Returns how many fired.

        While a timer fires, the clock reads its due time. A timer that raises stops
        the move there (the clock keeps that time; later timers stay pending) and
        the exception propagates. Raises :class:`~sentinel.errors.TemporalError`
        for a negative amount or when called from a timer of this clock.
        """
        step = _seconds(seconds, "advance()")
        if step < 0:
            raise TemporalError(f"a virtual clock only moves forward; advance({seconds!r})")
        return self._move_to(self._now + step)

    def set(self, when: float | datetime) -> int:
        """Move to ``when`` (POSIX seconds or a datetime), firing due timers as
        :meth:`advance` does. Raises :class:`~sentinel.errors.TemporalError` when
        ``when`` is earlier than now."""
        if isinstance(when, datetime):
            if when.tzinfo is None:
                when = when.replace(tzinfo=self.tz) if self.tz else when.astimezone()
            target = when.timestamp()
        else:
            target = _seconds(when, "set()")
        if target < self._now:
            raise TemporalError(
                f"a virtual clock only moves forward: it reads {self._now}, set() asked for "
                f"{target}"
            )
        return self._move_to(target)

    def _move_to(self, target: float) -> int:
        me = threading.get_ident()
        if self._moving == me:
            raise TemporalError("the virtual clock was moved from one of its own timers")
        fired = 0
        self._moving = me
        try:
            while True:
                with self._lock:
                    nxt = self._pop_due(target)
                    if nxt is None:
                        self._now = target
                        return fired
                    seq, timer = nxt
                    if timer.due > self._now:
                        self._now = timer.due
                timer.fire(seq)
                fired += 1
                nxt = timer = None  # type: ignore[assignment]  # as SystemClock._run
        finally:
            self._moving = None


class SystemClock(Clock):
    """The real time, with a scheduler thread that fires timers when due.

    ``tz`` (default: the system's local time zone) is where absolute events are
    evaluated. ``on_error(exc)`` is called when a timer raises (by default the
    error is logged on the ``sentinel.temporal`` logger; the scheduler goes on).
    ``max_wait`` bounds how long the thread sleeps between checks of the time, so
    a wall-clock adjustment is noticed within that many seconds.

    The thread starts with the first timer and is a daemon thread; it ends after
    ``idle`` seconds without a pending timer (the next timer starts another), and
    :meth:`close` (or leaving a ``with SystemClock() as clock:`` block) stops it
    and waits for it. Timers fire from that thread, so rules triggered by
    temporal events run there.
    """

    def __init__(
        self,
        *,
        tz: TimeZone = None,
        on_error: Callable[[BaseException], Any] | None = None,
        max_wait: float = 1.0,
    ) -> None:
        super().__init__(tz)
        self.on_error = on_error
        self.max_wait = max_wait
        #: Seconds the scheduler thread waits without a pending timer before it ends.
        self.idle = 30.0
        self._thread: threading.Thread | None = None

    def now(self) -> float:
        return time.time()

    def _push(self, due: float, seq: int, timer: Timer) -> None:
        heap = self._heap
        heapq.heappush(heap, (due, seq, timer))
        if heap[0][1] == seq:  # a new earliest timer: the thread may sleep too long
            self._wake.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sentinel-timers", daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        """True while the scheduler thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        cond = self._wake
        while True:
            with cond:
                while True:
                    if self._closed:
                        return
                    self._drop_stale()
                    heap = self._heap
                    if not heap:
                        cond.wait(self.idle)
                        if not self._heap and not self._closed:
                            # idle: the thread ends (the next timer starts
                            # another), so a clock nobody uses any more, and
                            # its detector's, leaves no thread behind
                            self._thread = None
                            return
                        continue
                    wait = heap[0][0] - time.time()
                    if wait > 0:
                        cond.wait(min(wait, self.max_wait))
                        continue
                    nxt = self._pop_due(heap[0][0])
                    if nxt is not None:
                        break
            seq, timer = nxt
            try:
                timer.fire(seq)
            except BaseException as exc:  # the scheduler must survive a failing timer
                try:
                    if self.on_error is not None:
                        self.on_error(exc)
                    else:
                        log.error("a timer of %r failed", self, exc_info=exc)
                except BaseException:  # SystemExit from the handler must not end the thread
                    log.exception("the on_error handler of %r failed", self)
                del exc
            # while it sleeps the thread holds no timer: a fired timer's handler
            # would keep its detector alive after the application dropped it
            nxt = timer = None  # type: ignore[assignment]

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the scheduler thread (pending timers never fire) and wait up to
        ``timeout`` seconds for it; later :meth:`schedule` calls raise. Safe to
        call twice, and from a timer (it then does not wait for itself)."""
        super().close()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def __enter__(self) -> SystemClock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReplayClock(Clock):
    """A clock whose timers never fire: replay feeds the temporal occurrences the
    log holds instead. ``now`` is ``start`` when given, else the system time.

    Timers are armed and cancelled as usual (so a detector's pending timers can be
    inspected and matched with logged ticks) but are not kept in a heap.
    """

    def __init__(self, start: float | None = None, *, tz: TimeZone = UTC) -> None:
        super().__init__(tz)
        self._fixed = start

    def now(self) -> float:
        return time.time() if self._fixed is None else self._fixed

    def schedule(self, timer: Timer) -> None:
        with self._lock:
            if timer.seq <= 0:
                self._live += 1
            timer.seq = next(self._seq)

    @property
    def next_due(self) -> float | None:
        return None
