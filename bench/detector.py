"""Detector throughput: primitive events per second on the real signalling path.

Run: ``python bench/detector.py`` (``--quick`` for a short run). Prints:

1. the paper's X = (E1 ^ E2) ; E3 ; (E2 ^ E4) in each context;
2. a graph of 20 rules mixing SEQ, AND, OR, A*, NOT over 10 event types in two
   contexts (recent and chronicle), every rule's action a no-op;
3. "A then B with the same key": 100,000 events over 1,000 keys, chronicle,
   partitioned by key, against a hand-written loop for the same pattern (a dict of
   deques, one function call per event), measured in the same run, and their ratio.

Each figure is the best of several runs (less noise from a shared machine). Events
go through ``LocalEventDetector.signal`` exactly as an application's do: clock,
occurrence, graph propagation, rule scheduling, action call.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections import deque
from collections.abc import Callable

from sentinel import Context, LocalEventDetector

X = "(E1 ^ E2) ; E3 ; (E2 ^ E4)"


def best_rate(run: Callable[[], int], repeat: int) -> float:
    """Events per second of the fastest of ``repeat`` runs."""
    best = 0.0
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        n = run()
        elapsed = time.perf_counter() - start
        best = max(best, n / elapsed)
    return best


def bench_x(context: Context, n: int) -> Callable[[], int]:
    history = ["E1", "E1", "E2", "E3", "E2", "E4", "E3", "E4"]

    def run() -> int:
        det = LocalEventDetector()
        for name in ("E1", "E2", "E3", "E4"):
            det.explicit(name)
        det.rule("X", X, action=_noop, context=context)
        signal = det.signal
        for _ in range(n // len(history)):
            for name in history:
                signal(name)
            if context is Context.UNRESTRICTED:
                det.flush()  # keep the unrestricted history bounded
        return n // len(history) * len(history)

    return run


RULES_20 = [
    "E0 ; E1",
    "E1 ^ E2",
    "E2 | E3",
    "(E3 ; E4) ^ E5",
    "A*(E0, E6, E7)",
    "NOT(E8)[E1, E9]",
    "(E0 | E5) ; E6",
    "E4 ^ E7 ; E8",
    "A*(E2, E3 | E4, E9)",
    "NOT(E5)[E6, E7]",
]


def bench_20_rules(n: int, seed: int = 7) -> Callable[[], int]:
    rng = random.Random(seed)
    events = [f"E{rng.randrange(10)}" for _ in range(n)]

    def run() -> int:
        det = LocalEventDetector()
        for i in range(10):
            det.explicit(f"E{i}")
        for i, text in enumerate(RULES_20):
            for ctx in (Context.RECENT, Context.CHRONICLE):
                det.rule(f"r{i}-{ctx.value}", text, action=_noop, context=ctx)
        signal = det.signal
        for name in events:
            signal(name)
        return len(events)

    return run


def keyed_events(n: int, keys: int, seed: int = 11) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [("A" if rng.random() < 0.5 else "B", rng.randrange(keys)) for _ in range(n)]


def bench_keyed(events: list[tuple[str, int]]) -> tuple[Callable[[], int], list[int]]:
    detected: list[int] = []

    def run() -> int:
        detected.clear()
        det = LocalEventDetector()
        det.explicit("A")
        det.explicit("B")
        det.rule(
            "a_then_b",
            "(A ; B) by key",
            action=lambda occ: detected.append(1),
            context=Context.CHRONICLE,
        )
        signal = det.signal
        for name, key in events:
            signal(name, key=key)
        return len(events)

    return run, detected


def bench_hand_written(events: list[tuple[str, int]]) -> tuple[Callable[[], int], list[int]]:
    """The same pattern by hand: pending A's per key in a deque, the oldest paired
    with each B (chronicle), one function call per event."""
    detected: list[int] = []

    def run() -> int:
        detected.clear()
        pending: dict[int, deque[dict[str, object]]] = {}
        found = detected.append

        def on_event(name: str, **params: object) -> None:
            key = params["key"]
            if name == "A":
                q = pending.get(key)  # type: ignore[arg-type]
                if q is None:
                    q = pending[key] = deque()  # type: ignore[index]
                q.append(params)
            else:
                q = pending.get(key)  # type: ignore[arg-type]
                if q:
                    first = q.popleft()
                    found((first, params))  # type: ignore[arg-type]
                    if not q:
                        del pending[key]  # type: ignore[arg-type]

        for name, key in events:
            on_event(name, key=key)
        return len(events)

    return run, detected


def _noop(occ: object) -> None:
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and repeats")
    args = parser.parse_args()
    n, repeat = (20_000, 2) if args.quick else (200_000, 5)

    print(f"sentinel detector benchmark ({'quick' if args.quick else 'full'} run)\n")
    print(f"1. X = {X}")
    for ctx in Context:
        m = n // 10 if ctx is Context.UNRESTRICTED else n
        print(f"   {ctx.value:>12}: {best_rate(bench_x(ctx, m), repeat):>12,.0f} events/s")

    print(f"\n2. 20 rules ({len(RULES_20)} expressions x recent, chronicle) over 10 event types")
    rate20 = best_rate(bench_20_rules(n), repeat)
    print(f"   {rate20:>12,.0f} events/s   (target >= 300,000)")

    events = keyed_events(100_000, 1_000)
    ours, ours_found = bench_keyed(events)
    hand, hand_found = bench_hand_written(events)
    rate_ours = best_rate(ours, repeat)
    rate_hand = best_rate(hand, repeat)
    assert len(ours_found) == len(hand_found), (len(ours_found), len(hand_found))
    print("\n3. A then B with the same key: 100,000 events, 1,000 keys, chronicle, by key")
    print(f"   sentinel     {rate_ours:>12,.0f} events/s   ({len(ours_found):,} detections)")
    print(f"   hand-written {rate_hand:>12,.0f} events/s   ({len(hand_found):,} detections)")
    print(f"   ratio        {rate_ours / rate_hand:>12.3f}          (target >= 0.15)")


if __name__ == "__main__":
    main()
