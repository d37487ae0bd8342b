"""Detector throughput: primitive events per second on the real signalling path.

Run: ``python bench/detector.py`` (``--quick`` for a short run). Prints:

1. the paper's X = (E1 ^ E2) ; E3 ; (E2 ^ E4) in each context;
2. a graph of 20 rules mixing SEQ, AND, OR, A*, NOT over 10 event types in two
   contexts (recent and chronicle), every rule's action a no-op (target: one
   million events per second);
3. "A then B with the same key": 100,000 events over 1,000 keys, chronicle,
   partitioned by key, each detection kept by the rule's action, against the
   strongest plain loop a user would write for the same pattern (one tuple per
   event, a dict of deques, local variables, each detection kept as a pair of
   tuples), and their ratio (target: 0.10). Two hand-fused floors of the same
   signals (``bench/_floor.py``: what sentinel's guarantees cost at least, in
   one frame) show where the cost lies: one keeps each occurrence's parameters
   in the keyword dict, as today's occurrence does, the other in a tuple, which
   CPython's cyclic garbage collector can leave untracked. Extra rows, labelled
   so: sentinel with the collector disabled while it runs (its share), and the
   softer loop earlier versions of this benchmark compared against (a function
   call per event with keyword arguments, as ``signal`` takes them). Each
   variant runs in a fresh process each round: how often the collector's full
   collections come depends on how many objects the process holds already;
4. the memory held per pending occurrence (``--memory``, or by default in a full
   run): 5,000,000 events over 100,000 keys (500,000 over 10,000 with
   ``--quick``), each variant in a fresh process, traced with ``tracemalloc``
   (what the run allocated and still holds, divided by the As waiting for a B),
   sentinel against the tuple loop (target: at most 1.2 times). The events are
   made as they arrive, one ``(name, key)`` tuple each, so the tuple loop is
   charged for the tuples it keeps. A third variant, the floor, is the tuple
   loop keeping what any occurrence must hold (event, ``t_occ``, time, source,
   scope, the key) in one plain tuple per event.

Every variant runs once per round, the rounds interleaved (5 rounds, 3 with
``--quick``); each figure is the median of the rounds and their range, and a ratio
is taken within each round. Events go through ``LocalEventDetector.signal``
exactly as an application's do: clock, occurrence, graph propagation, rule
scheduling, action call.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, machine, median_range, ratios
from _floor import keyed_floor

from sentinel import Context, LocalEventDetector

X = "(E1 ^ E2) ; E3 ; (E2 ^ E4)"
Run = Callable[[], tuple[int, float]]


def bench_x(context: Context, n: int) -> Run:
    history = ["E1", "E1", "E2", "E3", "E2", "E4", "E3", "E4"]

    def run() -> tuple[int, float]:
        det = LocalEventDetector()
        for name in ("E1", "E2", "E3", "E4"):
            det.explicit(name)
        det.rule("X", X, action=_noop, context=context)
        signal = det.signal
        start = time.perf_counter()
        for _ in range(n // len(history)):
            for name in history:
                signal(name)
            if context is Context.UNRESTRICTED:
                det.flush()  # keep the unrestricted history bounded
        return n // len(history) * len(history), time.perf_counter() - start

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


def bench_20_rules(n: int, seed: int = 7) -> Run:
    rng = random.Random(seed)
    events = [f"E{rng.randrange(10)}" for _ in range(n)]

    def run() -> tuple[int, float]:
        det = LocalEventDetector()
        for i in range(10):
            det.explicit(f"E{i}")
        for i, text in enumerate(RULES_20):
            for ctx in (Context.RECENT, Context.CHRONICLE):
                det.rule(f"r{i}-{ctx.value}", text, action=_noop, context=ctx)
        signal = det.signal
        start = time.perf_counter()
        for name in events:
            signal(name)
        return len(events), time.perf_counter() - start

    return run


def keyed_events(n: int, keys: int, seed: int = 11) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [("A" if rng.random() < 0.5 else "B", rng.randrange(keys)) for _ in range(n)]


def keyed_detector(action: Callable[[object], object]) -> LocalEventDetector:
    det = LocalEventDetector()
    det.explicit("A")
    det.explicit("B")
    det.rule("a_then_b", "(A ; B) by key", action=action, context=Context.CHRONICLE)
    return det


def bench_keyed(events: list[tuple[str, int]], counts: dict[str, int], gc_off: bool = False) -> Run:
    """sentinel: the rule's action keeps each detection (a composite occurrence).
    ``gc_off``: with the cyclic garbage collector disabled while it runs (not a
    setting to use; it shows the collector's share)."""

    def run() -> tuple[int, float]:
        detected: list[object] = []
        signal = keyed_detector(detected.append).signal
        if gc_off:
            gc.disable()
        try:
            start = time.perf_counter()
            for name, key in events:
                signal(name, key=key)
            seconds = time.perf_counter() - start
        finally:
            gc.enable()
        counts["detections"] = len(detected)
        return len(events), seconds

    return run


def bench_keyed_floor(
    events: list[tuple[str, int]], counts: dict[str, int], untracked: bool
) -> Run:
    """The hand-fused floor of the same signals (``bench/_floor.py``)."""

    def run() -> tuple[int, float]:
        detected: list[object] = []
        signal = keyed_floor(detected.append, untracked=untracked)
        start = time.perf_counter()
        for name, key in events:
            signal(name, key=key)
        seconds = time.perf_counter() - start
        counts["detections"] = len(detected)
        return len(events), seconds

    return run


def tuple_loop(
    events: Iterable[tuple[str, int]], found: Callable[[object], object]
) -> dict[int, deque]:  # type: ignore[type-arg]
    """The strongest plain version: one tuple per event, pending As per key in a
    deque, the oldest paired with each B (chronicle); ``found`` gets each pair.
    Returns what is still pending."""
    pending: dict[int, deque] = {}  # type: ignore[type-arg]
    get = pending.get
    for ev in events:
        name, key = ev
        if name == "A":
            q = get(key)
            if q is None:
                pending[key] = deque((ev,))
            else:
                q.append(ev)
        else:
            q = get(key)
            if q:
                found((q.popleft(), ev))
                if not q:
                    del pending[key]
    return pending


def floor_loop(
    events: Iterable[tuple[str, int]], found: Callable[[object], object]
) -> dict[int, deque]:  # type: ignore[type-arg]
    """The tuple loop keeping, for each event, what any occurrence must hold:
    the event, a logical clock (``t_occ``), the time, the source and the scope,
    with the key as the one parameter, in one plain tuple: the memory floor of
    a detector that keeps occurrences (no dict per occurrence, no per-key
    object beyond the loop's own deque)."""
    pending: dict[int, deque] = {}  # type: ignore[type-arg]
    get = pending.get
    now = time.time
    for t, (name, key) in enumerate(events, 1):
        ev = (name, t, now(), None, key, "process")
        if name == "A":
            q = get(key)
            if q is None:
                pending[key] = deque((ev,))
            else:
                q.append(ev)
        else:
            q = get(key)
            if q:
                found((q.popleft(), ev))
                if not q:
                    del pending[key]
    return pending


def bench_tuple_loop(events: list[tuple[str, int]], counts: dict[str, int]) -> Run:
    def run() -> tuple[int, float]:
        detected: list[object] = []
        start = time.perf_counter()
        tuple_loop(events, detected.append)
        seconds = time.perf_counter() - start
        counts["detections"] = len(detected)
        return len(events), seconds

    return run


def bench_soft_loop(events: list[tuple[str, int]], counts: dict[str, int]) -> Run:
    """The softer loop of earlier versions: a function call per event with keyword
    arguments packed into a dict (as ``signal`` takes them)."""

    def run() -> tuple[int, float]:
        detected: list[object] = []
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
                    found((q.popleft(), params))
                    if not q:
                        del pending[key]  # type: ignore[arg-type]

        start = time.perf_counter()
        for name, key in events:
            on_event(name, key=key)
        seconds = time.perf_counter() - start
        counts["detections"] = len(detected)
        return len(events), seconds

    return run


#: The keyed workload's variants (section 3), each run in a fresh process.
KEYED: dict[str, Callable[[list[tuple[str, int]], dict[str, int]], Run]] = {
    "keyed sentinel": bench_keyed,
    "keyed tuple": bench_tuple_loop,
    "keyed soft": bench_soft_loop,
    "keyed floor dict": lambda events, counts: bench_keyed_floor(events, counts, False),
    "keyed floor tuple": lambda events, counts: bench_keyed_floor(events, counts, True),
    "keyed sentinel gc off": lambda events, counts: bench_keyed(events, counts, gc_off=True),
}


def keyed_variant(name: str) -> dict[str, float]:
    """One run of a keyed variant in this process: events per second and the
    detections kept."""
    events = keyed_events(100_000, 1_000)
    counts: dict[str, int] = {}
    gc.collect()
    items, seconds = KEYED[name](events, counts)()
    return {"rate": items / seconds, "detections": counts["detections"]}


def keyed_rounds(rounds: int, counts: dict[str, int]) -> dict[str, list[float]]:
    """The keyed variants, interleaved as :func:`interleaved` does, each run in a
    fresh process. The variants keep every detection, so the cyclic garbage
    collector's full collections weigh: how often they come depends on how many
    objects the process already holds, so in one process each variant's figure
    would depend on what ran before it."""
    names = list(KEYED)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            proc = subprocess.run(
                [sys.executable, __file__, "--keyed-variant", name],
                check=True,
                capture_output=True,
                text=True,
            )
            out = json.loads(proc.stdout)
            rates[name].append(out["rate"])
            counts[name] = out["detections"]
    return rates


def _noop(occ: object) -> None:
    pass


# -- memory per pending occurrence, one variant per process ----------------------------
def memory_variant(variant: str, n: int, keys: int) -> dict[str, float]:
    """Bytes allocated by the run and still held afterwards (tracemalloc), and the
    As still waiting for their B. Actions count detections without keeping them,
    so what is held is the pending state alone."""

    def events() -> Iterator[tuple[str, int]]:
        # Made as they arrive, as an application's events are: each variant
        # holds (and is charged for) what it keeps of them; in the tuple loop
        # the event's own tuple.
        rnd = random.Random(5).random
        for _ in range(n):
            x = rnd()
            yield ("A" if x < 0.5 else "B", int(x * 2 * keys) % keys)

    count = [0]

    def found(_: object) -> None:
        count[0] += 1

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    if variant == "sentinel":
        det = keyed_detector(found)
        signal = det.signal
        for name, key in events():
            signal(name, key=key)
        pending = det.stored()
    else:
        state = (floor_loop if variant == "floor" else tuple_loop)(events(), found)
        pending = sum(len(q) for q in state.values())
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {"held": held, "pending": pending, "detections": count[0]}


def memory(n: int, keys: int) -> None:
    out = {}
    for variant in ("tuple loop", "floor", "sentinel"):
        proc = subprocess.run(
            [sys.executable, __file__, "--memory-variant", json.dumps([variant, n, keys])],
            check=True,
            capture_output=True,
            text=True,
        )
        out[variant] = json.loads(proc.stdout)
    for variant in ("floor", "sentinel"):
        assert out["tuple loop"]["pending"] == out[variant]["pending"], out
        assert out["tuple loop"]["detections"] == out[variant]["detections"], out
    print(f"\n4. memory held per pending A: {n:,} events over {keys:,} keys (tracemalloc)")
    per = {}
    for variant, r in out.items():
        per[variant] = r["held"] / r["pending"]
        print(
            f"   {variant:<12} {r['held'] / 1e6:>+8.1f} MB for {r['pending']:,} pending As:"
            f" {per[variant]:>6,.0f} bytes each"
        )
    ratio = per["sentinel"] / per["tuple loop"]
    print(f"   ratio        {ratio:>8.2f}   (target <= 1.2: {'met' if ratio <= 1.2 else 'MISSED'})")
    print(
        f"   the floor (an occurrence's fields in a plain tuple) / tuple loop"
        f" {per['floor'] / per['tuple loop']:.2f}; sentinel / floor"
        f" {per['sentinel'] / per['floor']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and rounds")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (5; 3 with --quick)")
    parser.add_argument(
        "--memory", choices=["yes", "no", "only"], help="part 4 (default: yes, no with --quick)"
    )
    parser.add_argument("--memory-variant", help=argparse.SUPPRESS)
    parser.add_argument("--keyed-variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.keyed_variant:
        print(json.dumps(keyed_variant(args.keyed_variant)))
        return
    if args.memory_variant:
        variant, n_mem, keys = json.loads(args.memory_variant)
        print(json.dumps(memory_variant(variant, n_mem, keys)))
        return
    n = 20_000 if args.quick else 200_000
    rounds = args.rounds or (3 if args.quick else 5)
    mem = args.memory or ("no" if args.quick else "yes")

    print(f"sentinel detector benchmark ({'quick' if args.quick else 'full'} run)")
    print(f"{machine()}; {rounds} interleaved rounds: median (range)\n")
    if mem != "only":
        variants: dict[str, Run] = {}
        for ctx in Context:
            m = n // 10 if ctx is Context.UNRESTRICTED else n
            variants[f"X {ctx.value}"] = bench_x(ctx, m)
        variants["20 rules"] = bench_20_rules(n)
        rates = interleaved(variants, rounds)
        counts: dict[str, int] = {}
        rates.update(keyed_rounds(rounds, counts))
        detections = set(counts.values())
        assert len(detections) == 1, counts

        print(f"1. X = {X}")
        for ctx in Context:
            print(f"   {ctx.value:>12}: {median_range(rates[f'X {ctx.value}'])} events/s")
        print(f"\n2. 20 rules ({len(RULES_20)} expressions x recent, chronicle), 10 event types")
        print(f"   {median_range(rates['20 rules'])} events/s   (target >= 1,000,000)")
        print(
            "\n3. A then B with the same key: 100,000 events, 1,000 keys, chronicle, by key,"
            f" each of the {detections.pop():,} detections kept"
        )

        def row(label: str, name: str, note: str = "") -> None:
            ratio = ratios(rates[name], rates["keyed tuple"])
            print(
                f"   {label:<34}{median_range(rates[name]):>36} events/s"
                f"   {median_range(ratio, '.3f')}{note}"
            )

        print(f"   {'':<34}{'events/s':>36}            / tuple loop")
        row("sentinel", "keyed sentinel", "   (target >= 0.10)")
        row("tuple loop (baseline)", "keyed tuple")
        row("floor, parameters in a dict", "keyed floor dict")
        row("floor, parameters in a tuple", "keyed floor tuple")
        row("extra: sentinel, cyclic GC off", "keyed sentinel gc off")
        row("extra: keyword loop", "keyed soft", "   (the old, softer baseline)")
    if mem != "no":
        memory(*((500_000, 10_000) if args.quick else (5_000_000, 100_000)))


if __name__ == "__main__":
    main()
