"""Ode events: throughput through compiled automata, automaton sizes, attribute rows.

Run: ``python bench/ode.py`` (``--quick`` for a short run). Prints:

1. "B after A with the same key", 100,000 events over 1,000 keys, through the real
   signalling path: a keyed Snoop SEQ rule ``(A ; B) by key`` (recent: every B
   after an A) against the Ode events that detect the same (``prior(A, B)``, with
   records), plus ``sequence(A, B)``, a masked letter, and a wider universe; the
   ratio of each to the Snoop rule (target: within 1.5x, i.e. ratio >= 0.67),
   rounds of the variants interleaved;
2. the automata of the paper's examples: states (minimal, and with the
   registers that record why), symbols, registers, compile time;
3. ``complete(I) = prior(order(I), perform(I))`` holding 100,000 accounts at once:
   memory per value, and events per second while they are held.

Figures are the best of several runs (less noise from a shared machine).
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from sentinel import LocalEventDetector, ode
from sentinel.ode import compile as ode_compile


def best_rates(runs: list[Callable[[], int]], repeat: int) -> list[float]:
    """Events per second of each run's fastest round; rounds are interleaved, so
    a slow spell of a shared machine hits every variant alike."""
    best = [0.0] * len(runs)
    for _ in range(repeat):
        for i, run in enumerate(runs):
            gc.collect()
            start = time.perf_counter()
            n = run()
            best[i] = max(best[i], n / (time.perf_counter() - start))
    return best


def keyed_events(n: int, keys: int, seed: int = 11) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    return [
        ("A" if rng.random() < 0.5 else "B", rng.randrange(keys), rng.randrange(2000))
        for _ in range(n)
    ]


def bench_rule(
    expression: Callable[[LocalEventDetector], Any], events: list[tuple[str, int, int]]
) -> tuple[Callable[[], int], list[int]]:
    found: list[int] = []

    def run() -> int:
        found.clear()
        det = LocalEventDetector()
        det.explicit("A")
        det.explicit("B")
        det.explicit("C")
        count = found.append
        det.rule("r", expression(det), action=lambda occ: count(1))
        signal = det.signal
        for name, key, amount in events:
            signal(name, key=key, amount=amount)
        return len(events)

    return run, found


SHAPES: list[tuple[str, Callable[[LocalEventDetector], Any]]] = [
    ("Snoop (A ; B) by key", lambda det: "(A ; B) by key"),
    ("Ode prior(A, B) by key", lambda det: "ode{prior(A, B)} by key"),
    ("Ode sequence(A, B) by key", lambda det: "ode{sequence(A, B)} by key"),
    ("Ode prior(A[amount > 999], B) by key", lambda det: "ode{prior(A[amount > 999], B)} by key"),
    ("Ode prior(A, B) over (A, B, C) by key", lambda det: "ode{prior(A, B) over (A, B, C)} by key"),
]

PAPER = {
    "2.4.1 <5>deposit": "<5> deposit",
    "2.4.1 sequence(deposit, withdraw)": "sequence(deposit, withdraw)",
    "2.4.1 prior(deposit, withdraw)": "prior(deposit, withdraw)",
    "2.4.1 no intervening interest": "relative(deposit, !before(interest)) ^ withdraw",
    "2.4.1 E ^ !prior(!E, E)": "E ^ !prior(!E, E) over (E, other)",
    "2.4.2 cut, relative": "relative(relative(D, !prior(I, D) ^ D), !prior(I, D) ^ D)",
    "2.4.2 cut, pipe": "(I || D) | sequence(D, D, D)",
    "2.4.2 cut, variable": "exists d3: relative(D, prior(D, D = d3) ^ !prior(I, d3))",
    "7.1 H1 || H2 || H3": (
        "Twice := sequence(floor, floor) || sequence(front, front) || sequence(floor, front);"
        " sequence(s1 || s2, !front) || (!wall | (first ^ !front) /+ (h1 || h2))"
        " || (!wall | (Twice | first) /+ (h1 || h2 || s1 || s2))"
        " over (s1, s2, h1, h2, floor, front, wall)"
    ),
    "7.1 !prefix(rally), anchored": (
        "one := sequence(h2 ^ first, front, h1, front);"
        " two := sequence(floor ^ first, h2, front, h1, front);"
        " three := sequence(h2 ^ first, front, floor, h1, front);"
        " four := sequence(floor ^ first, h2, front, floor, h1, front);"
        " (!wall | !prefix(relative+(one || two || three || four))) /+ sequence(s1, front)"
        " over (s1, s2, h1, h2, floor, front, wall)"
    ),
    "7.2 ELAB(I)": (
        "(!happened(LA(plane = I)) /+ EA(plane = I))"
        " ^ (((LB(plane = I) ^ !before(LA(plane = I))) | first) /+ EA(plane = I))"
        " over (EA, EB, LA, LB)"
    ),
    "5 E": "exists x: prior(b = x, c) ^ !relative(x, prior(a, c)) ^ relative(x, prior(d, c))",
    "6.2 complete(I)": "prior(order(account = I), perform(account = I))",
}


def sizes() -> None:
    print(f"   {'expression':<36} {'states':>7} {'w/ rec':>7} {'symbols':>8} {'regs':>5} {'ms':>7}")
    for name, text in PAPER.items():
        ode_compile._CACHE.clear()
        start = time.perf_counter()
        e = ode.event(text)
        ms = (time.perf_counter() - start) * 1000
        m = e.automaton
        print(f"   {name:<36} {m.plain().n:>7} {m.n:>7} {m.k:>8} {m.nregs:>5} {ms:>7.1f}")


def _complete() -> tuple[LocalEventDetector, list[int]]:
    det = LocalEventDetector()
    det.explicit("order")
    det.explicit("perform")
    found: list[int] = []
    det.rule(
        "complete",
        "ode{prior(order(account = I), perform(account = I))}",
        action=lambda occ: found.append(1),
    )
    det.signal("order", account=-1, qty=0)  # the table exists before measuring
    return det, found


def attribute_rows(values: int) -> None:
    # Memory, with tracemalloc (which slows allocation down: not timed).
    det, _ = _complete()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(values):
        det.signal("order", account=i, qty=i % 50)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    handler = next(iter(det.graph.handlers.values()))
    (table,) = det.process_scope.store[handler.hid]
    rows = len(table)
    # A row keeps the order occurrence it will name in complete(i)'s record.
    probe = det.signal("order", account=-2, qty=0)
    occurrence = sys.getsizeof(probe) + sys.getsizeof(dict(probe.params))
    del det, table
    # Speed, without tracemalloc.
    det, found = _complete()
    signal = det.signal
    gc.collect()
    start = time.perf_counter()
    for i in range(values):
        signal("order", account=i, qty=i % 50)
    orders = values / (time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(values):
        signal("perform", account=i, qty=1)
    performs = values / (time.perf_counter() - start)
    print(f"   values held            {rows:>12,}")
    print(f"   memory per value       {held / values:>12,.0f} bytes (row, table entry, the order)")
    print(f"   of which the order     {occurrence:>12,} bytes (occurrence and its parameters)")
    print(f"   orders (new values)    {orders:>12,.0f} events/s")
    print(f"   performs (detections)  {performs:>12,.0f} events/s ({len(found):,} found)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and repeats")
    args = parser.parse_args()
    n, repeat, values = (20_000, 2, 20_000) if args.quick else (100_000, 5, 100_000)
    print(f"sentinel Ode benchmark ({'quick' if args.quick else 'full'} run)\n")

    events = keyed_events(n, 1_000)
    print(f"1. B after A with the same key: {n:,} events, 1,000 keys")
    benches = [(name, *bench_rule(shape, events)) for name, shape in SHAPES]
    rates = best_rates([run for _, run, _ in benches], repeat)
    base, base_found = rates[0], len(benches[0][2])
    for (name, _run, found), rate in zip(benches, rates, strict=True):
        if name.startswith("Ode prior(A, B) by"):
            assert len(found) == base_found, (len(found), base_found)
        ratio = "" if rate is base else f"  ratio {rate / base:.2f}"
        print(f"   {name:<40} {rate:>10,.0f} events/s  ({len(found):,} detections){ratio}")

    print("\n2. Automata of the paper's examples")
    sizes()

    print(f"\n3. complete(I) holding {values:,} accounts")
    attribute_rows(values)


if __name__ == "__main__":
    main()
