"""Temporal events: the cost of pending timers.

Run: ``python bench/temporal.py`` (``--quick`` for a short run; ``-n`` to change
the number of timers, 100,000 by default). On a virtual clock, so the figures
measure sentinel, not waiting. Prints:

1. **One relative event per transaction.** ``n`` transactions, each signalling
   ``placed``; a process-wide rule (``flush=False``) on ``placed + [2d]`` keeps a
   timer pending across each commit. Reports transactions per second with the
   timers being scheduled, against the same loop with a rule on ``placed``
   alone (no timer); the memory each pending timer holds (traced allocations
   after the loop, divided by ``n``: the timer record, its heap entry, the
   service's bookkeeping and the reference occurrence it keeps); and ticks per
   second when the clock then moves two days and all ``n`` fire (each tick is a
   full occurrence: ``t_occ``, listeners, propagation, the rule's action).
2. **"Order not shipped within 2 days"**: ``NOT(shipped)[placed, placed + [2d]]
   by order``, ``n`` orders in their own transactions, every other one shipped;
   memory per pending order and ticks per second at the deadlines (partitions
   released as they empty).
3. **The clock alone**: ``n`` timers scheduled then fired on a ``VirtualClock``
   against a hand-written ``heapq`` loop doing the same, and the cost of
   cancelling.
4. **Silence is free**: the Python calls per signal of a non-temporal rule on a
   detector without and with temporal rules defined (counted with cProfile: they
   must be equal), and the signal rates (equal within the machine's noise; on a
   shared machine that noise is large, hence the call counts).

Parts 1 to 3 each have a hand-written baseline measured in the same run: a
``heapq`` of ``(due, sequence, event tuple)`` entries for the timers of part 1; a
dict of pending orders and a ``heapq`` of deadlines for part 2 (a shipment
removes its order, a deadline finding its order still pending reports it); a bare
``heapq`` loop for part 3. Each rate is the median (and range) of interleaved
rounds, 5 of them (``--rounds``; 3 with ``--quick``); memory is traced once.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, machine, median_range

from sentinel import LocalEventDetector, VirtualClock, not_within, timers

TWO_DAYS = 2 * 86_400


def _noop(occ: object) -> None:
    pass


def traced(run: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes that ``run()`` allocated and still holds afterwards, and its result."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = run()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, kept


def hand_timers(n: int) -> tuple[list[Any], float]:
    """Part 1 by hand: one timer per transaction, a heap entry holding the event."""
    heap: list[tuple[float, int, tuple[str, int, float]]] = []
    push = heapq.heappush
    now = 1_700_000_000.0
    start = time.perf_counter()
    for i in range(n):
        push(heap, (now + TWO_DAYS, i, ("placed", i, now)))
    return heap, time.perf_counter() - start


def hand_fire(heap: list[Any], action: Callable[[Any], None]) -> tuple[int, float]:
    pop = heapq.heappop
    start = time.perf_counter()
    fired = 0
    while heap:
        action(pop(heap)[2])
        fired += 1
    return fired, time.perf_counter() - start


class HandOrders:
    """Part 2 by hand: pending orders in a dict, deadlines in a heap."""

    def __init__(self) -> None:
        self.pending: dict[int, float] = {}
        self.heap: list[tuple[float, int]] = []
        self.late: list[int] = []

    def place(self, n: int) -> float:
        pending, heap, push = self.pending, self.heap, heapq.heappush
        now = 1_700_000_000.0
        start = time.perf_counter()
        for i in range(n):
            due = now + TWO_DAYS
            pending[i] = due
            push(heap, (due, i))
            if i % 2:
                del pending[i]  # shipped
        return time.perf_counter() - start

    def fire(self) -> tuple[int, float]:
        pending, heap, pop, late = self.pending, self.heap, heapq.heappop, self.late
        start = time.perf_counter()
        fired = 0
        while heap:
            due, order = pop(heap)
            fired += 1
            if pending.get(order) == due:
                del pending[order]
                late.append(order)
        return fired, time.perf_counter() - start


def _transactions(det: LocalEventDetector, n: int, keyed: bool = False) -> float:
    begin, pre_commit, commit, signal = det.begin, det.pre_commit, det.commit, det.signal
    use = det.use_scope
    start = time.perf_counter()
    for i in range(n):
        scope = begin()
        with use(scope):
            if keyed:
                signal("placed", order=i)
            else:
                signal("placed")
        pre_commit(scope)
        commit(scope)
    return time.perf_counter() - start


def relative_per_transaction(n: int, rounds: int) -> dict[str, Any]:
    def setup(temporal: bool) -> tuple[LocalEventDetector, VirtualClock]:
        clock = VirtualClock(1_700_000_000.0)
        det = LocalEventDetector(clock=clock)
        det.explicit("placed")
        expr = "placed + [2d]" if temporal else "placed"
        det.rule("r", expr, action=_noop, flush=False, context="chronicle")
        return det, clock

    def schedule(temporal: bool) -> Callable[[], tuple[int, float]]:
        def run() -> tuple[int, float]:
            det, _ = setup(temporal)
            return n, _transactions(det, n)

        return run

    def fire() -> tuple[int, float]:
        det, clock = setup(True)
        _transactions(det, n)
        start = time.perf_counter()
        fired = clock.advance(TWO_DAYS)
        seconds = time.perf_counter() - start
        assert fired == n and timers(det).pending() == 0
        return fired, seconds

    def hand_schedule() -> tuple[int, float]:
        return n, hand_timers(n)[1]

    def hand_ticks() -> tuple[int, float]:
        return hand_fire(hand_timers(n)[0], _noop)

    rates = interleaved(
        {
            "with": schedule(True),
            "without": schedule(False),
            "hand": hand_schedule,
            "ticks": fire,
            "hand ticks": hand_ticks,
        },
        rounds,
    )
    det, _ = setup(True)
    held, _ = traced(lambda: _transactions(det, n))
    assert timers(det).pending() == n
    hand_held, _heap = traced(lambda: hand_timers(n))
    return {**rates, "bytes": held / n, "hand bytes": hand_held / n}


def orders_not_shipped(n: int, rounds: int) -> dict[str, Any]:
    def setup() -> tuple[LocalEventDetector, VirtualClock, list[object]]:
        clock = VirtualClock(1_700_000_000.0)
        det = LocalEventDetector(clock=clock)
        placed, shipped = det.explicit("placed"), det.explicit("shipped")
        late: list[object] = []
        det.rule(
            "late",
            not_within(placed, shipped, TWO_DAYS, key="order"),
            action=late.append,
            flush=False,
        )
        return det, clock, late

    def place(det: LocalEventDetector) -> float:
        begin, commit, signal, use = det.begin, det.commit, det.signal, det.use_scope
        start = time.perf_counter()
        for i in range(n):
            scope = begin()
            with use(scope):
                signal("placed", order=i)
                if i % 2:
                    signal("shipped", order=i)
            commit(scope)
        return time.perf_counter() - start

    def run_place() -> tuple[int, float]:
        det, _, _ = setup()
        return n, place(det)

    def fire() -> tuple[int, float]:
        det, clock, late = setup()
        place(det)
        start = time.perf_counter()
        fired = clock.advance(TWO_DAYS)
        seconds = time.perf_counter() - start
        assert fired == n and len(late) == n // 2 + n % 2
        assert det.stored() == 0  # the partitions were released
        return fired, seconds

    def hand_place() -> tuple[int, float]:
        return n, HandOrders().place(n)

    def hand_fire_orders() -> tuple[int, float]:
        h = HandOrders()
        h.place(n)
        fired = h.fire()
        assert len(h.late) == n // 2 + n % 2
        return fired

    rates = interleaved(
        {
            "placing": run_place,
            "hand placing": hand_place,
            "ticks": fire,
            "hand ticks": hand_fire_orders,
        },
        rounds,
    )
    det, _, _ = setup()
    held, _ = traced(lambda: place(det))  # every order holds a timer until its deadline
    hand = HandOrders()
    hand_held, _ = traced(lambda: hand.place(n))
    return {**rates, "bytes": held / n, "hand bytes": hand_held / n}


def clock_alone(n: int, repeat: int) -> dict[str, list[float]]:
    due = [1_000.0 + (i * 7919) % n for i in range(n)]

    def sentinel_clock() -> tuple[int, float]:
        clock = VirtualClock(0.0)
        call_at = clock.call_at
        start = time.perf_counter()
        for d in due:
            call_at(d, _nothing)
        clock.advance(10 * n)
        return n, time.perf_counter() - start

    def hand_written() -> tuple[int, float]:
        heap: list[tuple[float, int, Callable[[], None]]] = []
        push, pop = heapq.heappush, heapq.heappop
        start = time.perf_counter()
        for i, d in enumerate(due):
            push(heap, (d, i, _nothing))
        while heap:
            pop(heap)[2]()
        return n, time.perf_counter() - start

    def cancelling() -> tuple[int, float]:
        clock = VirtualClock(0.0)
        handles = [clock.call_at(d, _nothing) for d in due]
        cancel = clock.cancel
        start = time.perf_counter()
        for h in handles:
            cancel(h)
        return n, time.perf_counter() - start

    return interleaved(
        {"clock": sentinel_clock, "heapq": hand_written, "cancel": cancelling}, repeat
    )


def _nothing() -> None:
    pass


def _silent_detector(temporal: bool) -> LocalEventDetector:
    det = LocalEventDetector(clock=VirtualClock(0.0))
    for name in ("E1", "E2", "T"):
        det.explicit(name)
    det.rule("seq", "E1 ; E2", action=_noop)
    if temporal:
        det.rule("t", "T + [00:01:00]", action=_noop)
        det.rule("p", "P(T, [00:00:01], T)", action=_noop)
    det.signal("E1")  # warm up
    return det


def silence(n: int, repeat: int) -> dict[str, float]:
    import cProfile
    import pstats

    def run(temporal: bool) -> Callable[[], tuple[int, float]]:
        def go() -> tuple[int, float]:
            signal = _silent_detector(temporal).signal
            start = time.perf_counter()
            for _ in range(n // 2):
                signal("E1")
                signal("E2")
            return n // 2 * 2, time.perf_counter() - start

        return go

    def calls(temporal: bool) -> float:
        signal = _silent_detector(temporal).signal
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            signal("E1")
            signal("E2")
        prof.disable()
        return float(pstats.Stats(prof).total_calls) / 1000

    # Interleaved, best of several: the two must be equal within the machine's noise.
    rates = {"without": 0.0, "with": 0.0}
    for _ in range(max(repeat, 3)):
        for key, temporal in (("without", False), ("with", True)):
            items, seconds = run(temporal)()
            rates[key] = max(rates[key], items / seconds)
    rates["calls_without"], rates["calls_with"] = calls(False), calls(True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="pending timers (default 100000)")
    parser.add_argument("--quick", action="store_true", help="10,000 timers, 3 rounds")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (5; 3 with --quick)")
    args = parser.parse_args()
    n = 10_000 if args.quick else args.n
    rounds = args.rounds or (3 if args.quick else 5)
    med = statistics.median
    print(f"{machine()}; {rounds} interleaved rounds: median (range)\n")

    def rate(values: list[float]) -> str:
        return f"{median_range(values):>34}"

    r = relative_per_transaction(n, rounds)
    print(f"1. one relative event per transaction ({n:,} pending timers, flush=False):")
    print(f"   transactions/s with a timer each    {rate(r['with'])}")
    print(
        f"   transactions/s, same rule, no timer {rate(r['without'])}"
        f"   (timer overhead {1e6 / med(r['with']) - 1e6 / med(r['without']):.1f} us/txn)"
    )
    print(f"   hand-written heapq pushes/s         {rate(r['hand'])}")
    print(f"   memory per pending timer            {r['bytes']:>12,.0f} bytes"
          f"   (hand-written heap entry: {r['hand bytes']:,.0f})")  # fmt: skip
    print(f"   ticks/s when all {n:,} fire          {rate(r['ticks'])}")
    print(f"   hand-written heap pops/s            {rate(r['hand ticks'])}")

    o = orders_not_shipped(n, rounds)
    print(f"2. NOT(shipped)[placed, placed + [2d]] by order ({n:,} orders, half shipped):")
    print(f"   orders/s (a transaction each)       {rate(o['placing'])}")
    print(f"   hand-written dict + heapq orders/s  {rate(o['hand placing'])}")
    print(f"   memory per pending order            {o['bytes']:>12,.0f} bytes"
          f"   (hand-written: {o['hand bytes']:,.0f})")  # fmt: skip
    print(f"   deadlines/s                         {rate(o['ticks'])}")
    print(f"   hand-written deadlines/s            {rate(o['hand ticks'])}")

    c = clock_alone(n, rounds)
    print(f"3. the clock alone ({n:,} timers scheduled, then fired):")
    print(f"   VirtualClock timers/s               {rate(c['clock'])}")
    ratio = [h / s for h, s in zip(c["heapq"], c["clock"], strict=True)]
    print(
        f"   hand-written heapq loop/s           {rate(c['heapq'])}"
        f"   (ratio {median_range(ratio, '.1f')}x)"
    )
    print(f"   cancels/s                           {rate(c['cancel'])}")

    s = silence(max(n, 100_000), rounds)
    print("4. a non-temporal rule's signals:")
    print(
        f"   Python calls per signal             {s['calls_without']:>12.2f} without temporal"
        f" rules, {s['calls_with']:.2f} with"
    )
    print(f"   signals/s, no temporal rule         {s['without']:>12,.0f}")
    print(f"   signals/s, temporal rules defined   {s['with']:>12,.0f}   (noise only)")


if __name__ == "__main__":
    main()
