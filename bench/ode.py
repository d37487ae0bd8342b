"""Ode events: throughput through compiled automata, automaton sizes, attribute rows.

Run: ``python bench/ode.py`` (``--quick`` for a short run). Prints:

1. "B after A with the same key", 100,000 events over 1,000 keys, through the real
   signalling path: a keyed Snoop SEQ rule ``(A ; B) by key`` (recent: every B
   after an A) against the Ode events that detect the same (``prior(A, B)``, with
   records), plus ``sequence(A, B)``, a masked letter, and a wider universe; the
   ratio of each to the Snoop rule (target: within 1.5x, i.e. ratio >= 0.67),
   and the strongest plain loop for the same pattern (one tuple per event, the
   latest A per key in a dict, each detection kept as a pair of tuples) as the
   baseline of all of them; rounds of the variants interleaved;
2. the automata of the paper's examples: states (minimal, and with the
   registers that record why), symbols, registers, compile time;
3. ``complete(I) = prior(order(I), perform(I))`` holding 100,000 accounts at once:
   memory per value, and events per second while they are held.

Throughputs are the median and range of 5 interleaved rounds (3 with ``--quick``),
each ratio taken within a round.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, machine, median_range, ratios

from sentinel import LocalEventDetector, ode
from sentinel.ode import compile as ode_compile


def keyed_events(n: int, keys: int, seed: int = 11) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    return [
        ("A" if rng.random() < 0.5 else "B", rng.randrange(keys), rng.randrange(2000))
        for _ in range(n)
    ]


def bench_rule(
    expression: Callable[[LocalEventDetector], Any], events: list[tuple[str, int, int]]
) -> tuple[Callable[[], tuple[int, float]], list[Any]]:
    found: list[Any] = []

    def run() -> tuple[int, float]:
        found.clear()
        det = LocalEventDetector()
        det.explicit("A")
        det.explicit("B")
        det.explicit("C")
        det.rule("r", expression(det), action=found.append)
        signal = det.signal
        start = time.perf_counter()
        for name, key, amount in events:
            signal(name, key=key, amount=amount)
        return len(events), time.perf_counter() - start

    return run, found


def bench_tuple_loop(
    events: list[tuple[str, int, int]],
) -> tuple[Callable[[], tuple[int, float]], list[Any]]:
    """The plain version of "B after A with the same key" (recent: every B with
    the latest A of its key)."""
    found: list[Any] = []

    def run() -> tuple[int, float]:
        found.clear()
        keep = found.append
        latest: dict[int, tuple[str, int, int]] = {}
        get = latest.get
        start = time.perf_counter()
        for ev in events:
            if ev[0] == "A":
                latest[ev[1]] = ev
            else:
                a = get(ev[1])
                if a is not None:
                    keep((a, ev))
        return len(events), time.perf_counter() - start

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
    parser.add_argument("--quick", action="store_true", help="fewer events and rounds")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (5; 3 with --quick)")
    args = parser.parse_args()
    n, values = (20_000, 20_000) if args.quick else (100_000, 100_000)
    rounds = args.rounds or (3 if args.quick else 5)
    print(f"sentinel Ode benchmark ({'quick' if args.quick else 'full'} run)")
    print(f"{machine()}; {rounds} interleaved rounds: median (range)\n")

    events = keyed_events(n, 1_000)
    print(f"1. B after A with the same key: {n:,} events, 1,000 keys, each detection kept")
    benches = {name: bench_rule(shape, events) for name, shape in SHAPES}
    benches["tuple loop (baseline)"] = bench_tuple_loop(events)
    rates = interleaved({name: run for name, (run, _) in benches.items()}, rounds)
    snoop = rates[SHAPES[0][0]]
    hand = rates["tuple loop (baseline)"]
    base_found = len(benches[SHAPES[0][0]][1])
    for name, (_run, found) in benches.items():
        if name.startswith("Ode prior(A, B) by") or name.startswith("tuple"):
            assert len(found) == base_found, (name, len(found), base_found)
        extra = f"  / tuple loop {median_range(ratios(rates[name], hand), '.3f')}"
        if name != SHAPES[0][0] and not name.startswith("tuple"):
            extra += f"  / Snoop {median_range(ratios(rates[name], snoop), '.2f')}"
        print(f"   {name:<40} {median_range(rates[name])} events/s ({len(found):,} found){extra}")

    print("\n2. Automata of the paper's examples")
    sizes()

    print(f"\n3. complete(I) holding {values:,} accounts")
    attribute_rows(values)


if __name__ == "__main__":
    main()
