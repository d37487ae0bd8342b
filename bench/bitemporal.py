"""The bitemporal model: lifespans, WITHIN and occurrence-time order.

Run: ``python bench/bitemporal.py`` (``--quick`` for a short run; ``-n`` sets the
number of events of part 1, 5,000,000 by default). On a virtual clock that moves
0.1 s every 100 events (1,000 events per second of virtual time), so the figures
measure sentinel, not waiting. Prints:

1. **A keyed stream with 10% never terminated.** ``A ; B`` by key, chronicle,
   signalled outside transactions: each key gets an A, and nine keys in ten a B; ``n`` events in
   all. Without a lifespan the unanswered As pile up; with ``lifespan=60 s``
   (chronon 1 s) they are purged. Each variant runs in a fresh process, the two
   interleaved, several times; reported: the best events per second, the
   per-event cost with a lifespan relative to the same rule without one (target:
   at most 1.3), and the process's resident memory at ten points of the run
   (flat with a lifespan).
2. **WITHIN** against a plain keyed SEQ: ``WITHIN(A, B, [00:01:00]) by k`` and
   ``A ; B by k``, chronicle, on the same stream (target: at most 1.3 times the
   cost of the SEQ).
3. **Occurrence-time order**, lateness 1 s (chronon 0.1 s), against arrival order,
   same rule (``A ; B`` by key, chronicle, process-wide) and the same stream of
   ``signal_at`` calls: occurrence times 1 ms apart, each reported 0 to 0.5 s
   late, fed in order of arrival (target: at least half the throughput of
   arrival order). Arrival order pairs a B that arrives before its A with
   nothing; occurrence order pairs every B.

Baselines, measured in the same runs: the strongest plain loop a user would
write for each part (one tuple per event, a dict of deques of the As waiting per
key; with a lifespan, or for WITHIN, a deque of the As in arrival order whose
head is purged as the clock passes its expiry; for occurrence-time order, a heap
of the arrivals released to that loop in occurrence-time order once the clock is
past their time plus the lateness). Each rate is the median and range of the
interleaved rounds (5, or 2 with ``--quick``).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import random
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, machine, median_range, ratios

from sentinel import LocalEventDetector, VirtualClock, within

START = 1_700_000_000.0
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


def _noop(occ: object) -> None:
    pass


def stream(n: int, seed: int = 7) -> list[tuple[str, int]]:
    """``n`` events: keys in order, each an A followed a little later by its B,
    except one key in ten (never answered)."""
    rnd = random.Random(seed)
    out: list[tuple[str, int]] = []
    waiting: list[int] = []
    key = 0
    while len(out) < n:
        out.append(("A", key))
        if key % 10:
            waiting.append(key)
        key += 1
        if len(waiting) > 20 or (waiting and rnd.random() < 0.5):
            out.append(("B", waiting.pop(rnd.randrange(len(waiting)))))
    return out[:n]


# -- the baseline ----------------------------------------------------------------------
class HandKeyed:
    """``A ; B`` by key, chronicle, by hand: the As waiting per key in a deque (the
    oldest paired with each B); with a lifespan, the As in arrival order in one
    more deque, purged from its head as the clock passes their expiry."""

    def __init__(self, lifespan: float | None) -> None:
        self.pending: dict[int, deque[tuple[str, int, float]]] = {}
        self.order: deque[tuple[float, int, tuple[str, int, float]]] = deque()
        self.lifespan = lifespan
        self.found = 0

    def purge(self, now: float) -> None:
        order, pending = self.order, self.pending
        while order and order[0][0] <= now:
            _, k, a = order.popleft()
            q = pending.get(k)
            if q and q[0] is a:  # not paired yet: the oldest of its key
                q.popleft()
                if not q:
                    del pending[k]

    def on(self, name: str, k: int, now: float) -> None:
        pending = self.pending
        if name == "A":
            a = (name, k, now)
            q = pending.get(k)
            if q is None:
                pending[k] = deque((a,))
            else:
                q.append(a)
            if self.lifespan is not None:
                self.order.append((now + self.lifespan, k, a))
        else:
            q = pending.get(k)
            if q:
                q.popleft()
                self.found += 1
                if not q:
                    del pending[k]

    def held(self) -> int:
        return sum(len(q) for q in self.pending.values())


def hand_stream(events: list[tuple[str, int]], lifespan: float | None) -> HandKeyed:
    """Part 1's stream through :class:`HandKeyed` (the clock as in
    :func:`keyed_variant`: 0.1 s every 100 events, purges each second)."""
    h = HandKeyed(lifespan)
    on, now = h.on, START
    for i, (name, k) in enumerate(events):
        if i % 100 == 0:
            now += 0.1
            if lifespan is not None and i % 1000 == 0:
                h.purge(now - 1.0)  # at the chronon's tick, as the lifespan's purge
        on(name, k, now)
    return h


# -- part 1, one variant per process ---------------------------------------------------
def hand_variant(n: int, lifespan: float | None) -> dict[str, Any]:
    events = stream(n)
    h = HandKeyed(lifespan)
    on, now = h.on, START
    samples: list[tuple[int, float, int]] = []
    every = max(n // 10, 1)
    gc.collect()
    base = rss_mb()
    elapsed = 0.0
    for lo in range(0, n, every):
        chunk = events[lo : lo + every]
        start = time.perf_counter()
        for i, (name, k) in enumerate(chunk, lo):
            if i % 100 == 0:
                now += 0.1
                if lifespan is not None and i % 1000 == 0:
                    h.purge(now - 1.0)
            on(name, k, now)
        elapsed += time.perf_counter() - start
        samples.append((lo + len(chunk), rss_mb() - base, h.held()))
    return {"rate": n / elapsed, "samples": samples}


def keyed_variant(n: int, lifespan: float | None) -> dict[str, Any]:
    clock = VirtualClock(START)
    det = LocalEventDetector(clock=clock, chronon=1.0)
    det.explicit("A")
    det.explicit("B")
    det.rule("ab", "A ; B", key="k", context="chronicle", lifespan=lifespan, action=_noop)
    events = stream(n)
    signal, advance = det.signal, clock.advance
    samples: list[tuple[int, float, int]] = []
    every = max(n // 10, 1)
    gc.collect()
    base = rss_mb()
    elapsed = 0.0
    for lo in range(0, n, every):
        chunk = events[lo : lo + every]
        start = time.perf_counter()
        for i, (name, k) in enumerate(chunk, lo):
            if i % 100 == 0:
                advance(0.1)
            signal(name, k=k)
        elapsed += time.perf_counter() - start
        samples.append((lo + len(chunk), rss_mb() - base, det.stored()))
    return {"rate": n / elapsed, "samples": samples}


VARIANTS = {
    "no lifespan": (False, None),
    "lifespan 60 s": (False, 60.0),
    "hand, no purge": (True, None),
    "hand, 60 s purge": (True, 60.0),
}


def keyed_stream(n: int, repeat: int) -> None:
    rates: dict[str, list[float]] = {label: [] for label in VARIANTS}
    last: dict[str, Any] = {}
    labels = list(VARIANTS)
    for r in range(repeat):  # variants interleaved; every rate, the last memory
        k = r % len(labels)
        for label in labels[k:] + labels[:k]:
            out = subprocess.run(
                [sys.executable, __file__, "--variant", json.dumps([n, *VARIANTS[label]])],
                check=True,
                capture_output=True,
                text=True,
            )
            res = last[label] = json.loads(out.stdout)
            rates[label].append(res["rate"])
    print(f"1. A ; B by key, chronicle, {n:,} events, 10% of the As never answered")
    for label, res in last.items():
        print(f"   {label:>16}: {median_range(rates[label])} events/s")
        line = "  ".join(f"{mb:+6.0f}" for _, mb, _ in res["samples"])
        print(f"   {'':>16}  memory (MB over the start) at each tenth: {line}")
        held = "  ".join(f"{s:>6,}" for _, _, s in res["samples"])
        print(f"   {'':>16}  occurrences held:                      {held}")
    ratio = ratios(rates["no lifespan"], rates["lifespan 60 s"])
    print(f"   per-event cost with a lifespan / without: {median_range(ratio, '.2f')}"
          "   (target <= 1.3)")  # fmt: skip
    for label in ("no lifespan", "lifespan 60 s"):
        hand = "hand, no purge" if label == "no lifespan" else "hand, 60 s purge"
        print(f"   sentinel / hand-written, {label}: "
              f"{median_range(ratios(rates[label], rates[hand]), '.3f')}")  # fmt: skip


# -- parts 2 and 3 ---------------------------------------------------------------------
def run_signals(
    setup: Callable[[], tuple[LocalEventDetector, VirtualClock]], events: list[Any], timed: bool
) -> float:
    det, clock = setup()
    signal, signal_at, advance = det.signal, det.signal_at, clock.advance
    gc.collect()
    start = time.perf_counter()
    if timed:
        # (arrival, occurrence time, event, key), in arrival order; the clock
        # moves in steps of 0.1 s as the arrivals pass them.
        step = START
        for arrival, o, name, k in events:
            if arrival >= step:
                clock.set(arrival)
                step = arrival + 0.1
            signal_at(name, o, k=k)
    else:
        for i, (name, k) in enumerate(events):
            if i % 100 == 0:
                advance(0.1)
            signal(name, k=k)
    clock.advance(10)  # what occurrence-time order still holds is released
    return len(events) / (time.perf_counter() - start)


def rates_of(variants: dict[str, Callable[[], float]], repeat: int) -> dict[str, list[float]]:
    """Each variant's rate in each of ``repeat`` interleaved rounds."""
    return interleaved({k: (lambda f=f: (1, 1 / f())) for k, f in variants.items()}, repeat)


def run_hand(events: list[Any], lifespan: float | None) -> float:
    """Part 2's baseline: the arrival-order stream through :class:`HandKeyed`."""
    start = time.perf_counter()
    hand_stream(events, lifespan)
    return len(events) / (time.perf_counter() - start)


def run_hand_timed(events: list[tuple[float, float, str, int]], lateness: float) -> float:
    """Part 3's baseline: arrivals wait in a heap by occurrence time and reach
    :class:`HandKeyed` once the clock (moving as the arrivals pass 0.1 s steps) is
    ``lateness`` past them."""
    h = HandKeyed(None)
    on = h.on
    heap: list[tuple[float, int, str, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    start = time.perf_counter()
    step = START
    for seq, (arrival, o, name, k) in enumerate(events):
        if arrival >= step:
            step = arrival + 0.1
            horizon = arrival - lateness
            while heap and heap[0][0] <= horizon:
                t, _, n, key = pop(heap)
                on(n, key, t)
        push(heap, (o, seq, name, k))
    while heap:
        t, _, n, key = pop(heap)
        on(n, key, t)
    return len(events) / (time.perf_counter() - start)


def keyed(
    expr: Any, *, chronon: float = 1.0, **rule_kw: Any
) -> Callable[[], tuple[LocalEventDetector, VirtualClock]]:
    def setup() -> tuple[LocalEventDetector, VirtualClock]:
        clock = VirtualClock(START)
        det = LocalEventDetector(clock=clock, chronon=chronon)
        a, b = det.explicit("A"), det.explicit("B")
        det.rule("r", expr(a, b), context="chronicle", action=_noop, **rule_kw)
        return det, clock

    return setup


def within_vs_seq(n: int, repeat: int) -> None:
    events = stream(n)
    rates = rates_of(
        {
            "A ; B by k": lambda: run_signals(keyed(lambda a, b: (a >> b).by("k")), events, False),
            "WITHIN(A, B, 60 s) by k": lambda: run_signals(
                keyed(lambda a, b: within(a, b, 60, key="k")), events, False
            ),
            "hand, 60 s purge": lambda: run_hand(events, 60.0),
        },
        repeat,
    )
    print(f"\n2. WITHIN against a plain keyed SEQ, chronicle, {n:,} events")
    for name, r in rates.items():
        print(f"   {name:>24}: {median_range(r)} events/s")
    ratio = ratios(rates["A ; B by k"], rates["WITHIN(A, B, 60 s) by k"])
    print(f"   per-event cost WITHIN / SEQ: {median_range(ratio, '.2f')}   (target <= 1.3)")
    hand = ratios(rates["WITHIN(A, B, 60 s) by k"], rates["hand, 60 s purge"])
    print(f"   WITHIN / hand-written loop with a purge: {median_range(hand, '.3f')}")


def late_stream(n: int, seed: int = 11) -> list[tuple[float, float, str, int]]:
    """:func:`stream` with occurrence times 1 ms apart, each reported up to 0.5 s
    late: ``(arrival, occurrence time, event, key)`` in arrival order (so a B may
    arrive before its A)."""
    rnd = random.Random(seed)
    out = []
    for i, (name, k) in enumerate(stream(n)):
        o = START + i / 1000
        out.append((o + rnd.choice((0.0, 0.1, 0.25, 0.5)), o, name, k))
    out.sort()
    return out


def occurrence_order(n: int, repeat: int) -> None:
    events = late_stream(n)
    rates = rates_of(
        {
            "hand, occurrence order": lambda: run_hand_timed(events, 1.0),
            "arrival order": lambda: run_signals(
                keyed(lambda a, b: a >> b, key="k", flush=False, chronon=0.1), events, True
            ),
            "occurrence order, L = 1 s": lambda: run_signals(
                keyed(
                    lambda a, b: a >> b,
                    key="k",
                    flush=False,
                    chronon=0.1,
                    order="occurrence",
                    lateness=1.0,
                ),
                events,
                True,
            ),
        },
        repeat,
    )
    print(f"\n3. occurrence-time order, A ; B by key, chronicle, {n:,} events (signal_at)")
    for name, r in rates.items():
        print(f"   {name:>26}: {median_range(r)} events/s")
    ratio = ratios(rates["occurrence order, L = 1 s"], rates["arrival order"])
    print(f"   throughput occurrence / arrival order: {median_range(ratio, '.2f')}"
          "   (target >= 0.5)")  # fmt: skip
    hand = ratios(rates["occurrence order, L = 1 s"], rates["hand, occurrence order"])
    print(f"   occurrence order / hand-written heap: {median_range(hand, '.3f')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("-n", type=int, default=None, help="events of part 1")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--only", type=int, choices=(1, 2, 3), help="run one part")
    parser.add_argument("--repeat", type=int, default=None, help="runs of each variant of part 1")
    args = parser.parse_args()
    if args.variant:
        n, hand, life = json.loads(args.variant)
        print(json.dumps((hand_variant if hand else keyed_variant)(n, life)))
        return
    n1 = args.n or (300_000 if args.quick else 5_000_000)
    n2 = 100_000 if args.quick else 400_000
    repeat = 3 if args.quick else 5
    print("sentinel bitemporal benchmark" + (" (quick run)" if args.quick else ""))
    print(machine() + "\n")
    if args.only in (None, 1):
        keyed_stream(n1, args.repeat or (2 if args.quick else 5))
    if args.only in (None, 2):
        within_vs_seq(n2, repeat)
    if args.only in (None, 3):
        occurrence_order(n2, repeat)


if __name__ == "__main__":
    main()
