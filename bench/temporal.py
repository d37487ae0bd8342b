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

Each rate is the best of several runs.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import time
import tracemalloc
from collections.abc import Callable

from sentinel import LocalEventDetector, VirtualClock, not_within, timers

TWO_DAYS = 2 * 86_400


def _noop(occ: object) -> None:
    pass


def best(run: Callable[[], tuple[int, float]], repeat: int) -> float:
    """The best rate (items per second) of ``repeat`` runs; ``run`` returns
    (items, seconds)."""
    rate = 0.0
    for _ in range(repeat):
        gc.collect()
        n, seconds = run()
        rate = max(rate, n / seconds)
    return rate


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


def relative_per_transaction(n: int, repeat: int) -> dict[str, float]:
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

    with_timers = best(schedule(True), repeat)
    without = best(schedule(False), repeat)

    # memory held by the pending timers
    det, _ = setup(True)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    _transactions(det, n)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert timers(det).pending() == n
    per_timer = (after - before) / n

    def fire() -> tuple[int, float]:
        det, clock = setup(True)
        _transactions(det, n)
        start = time.perf_counter()
        fired = clock.advance(TWO_DAYS)
        seconds = time.perf_counter() - start
        assert fired == n and timers(det).pending() == 0
        return fired, seconds

    ticks = best(fire, repeat)
    return {"with": with_timers, "without": without, "bytes": per_timer, "ticks": ticks}


def orders_not_shipped(n: int, repeat: int) -> dict[str, float]:
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

    placing = best(run_place, repeat)

    det, _, _ = setup()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    place(det)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per_order = (after - before) / n  # every order holds a timer until its deadline

    def fire() -> tuple[int, float]:
        det, clock, late = setup()
        place(det)
        start = time.perf_counter()
        fired = clock.advance(TWO_DAYS)
        seconds = time.perf_counter() - start
        assert fired == n and len(late) == n // 2 + n % 2
        assert det.stored() == 0  # the partitions were released
        return fired, seconds

    ticks = best(fire, repeat)
    return {"placing": placing, "bytes": per_order, "ticks": ticks}


def clock_alone(n: int, repeat: int) -> dict[str, float]:
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

    return {
        "clock": best(sentinel_clock, repeat),
        "heapq": best(hand_written, repeat),
        "cancel": best(cancelling, repeat),
    }


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
            rates[key] = max(rates[key], best(run(temporal), 1))
    rates["calls_without"], rates["calls_with"] = calls(False), calls(True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="pending timers (default 100000)")
    parser.add_argument("--quick", action="store_true", help="10,000 timers, one run each")
    args = parser.parse_args()
    n, repeat = (10_000, 1) if args.quick else (args.n, 3)

    r = relative_per_transaction(n, repeat)
    print(f"1. one relative event per transaction ({n:,} pending timers, flush=False):")
    print(f"   transactions/s with a timer each    {r['with']:>12,.0f}")
    print(
        f"   transactions/s, same rule, no timer {r['without']:>12,.0f}"
        f"   (timer overhead {1e6 / r['with'] - 1e6 / r['without']:.1f} us/txn)"
    )
    print(f"   memory per pending timer            {r['bytes']:>12,.0f} bytes")
    print(f"   ticks/s when all {n:,} fire          {r['ticks']:>12,.0f}")

    o = orders_not_shipped(n, repeat)
    print(f"2. NOT(shipped)[placed, placed + [2d]] by order ({n:,} orders, half shipped):")
    print(f"   orders/s (a transaction each)       {o['placing']:>12,.0f}")
    print(f"   memory per pending order            {o['bytes']:>12,.0f} bytes")
    print(f"   deadlines/s                         {o['ticks']:>12,.0f}")

    c = clock_alone(n, repeat)
    print(f"3. the clock alone ({n:,} timers scheduled, then fired):")
    print(f"   VirtualClock timers/s               {c['clock']:>12,.0f}")
    print(
        f"   hand-written heapq loop/s           {c['heapq']:>12,.0f}"
        f"   (ratio {c['heapq'] / c['clock']:.1f}x)"
    )
    print(f"   cancels/s                           {c['cancel']:>12,.0f}")

    s = silence(max(n, 100_000), repeat)
    print("4. a non-temporal rule's signals:")
    print(
        f"   Python calls per signal             {s['calls_without']:>12.2f} without temporal"
        f" rules, {s['calls_with']:.2f} with"
    )
    print(f"   signals/s, no temporal rule         {s['without']:>12,.0f}")
    print(f"   signals/s, temporal rules defined   {s['with']:>12,.0f}   (noise only)")


if __name__ == "__main__":
    main()
