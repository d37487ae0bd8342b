"""CPU instructions per event on the hot paths, counted with callgrind.

Run: ``python bench/instructions.py`` (needs ``valgrind``; ``--quick`` for fewer
events; ``--only NAME`` for one workload). Wall-clock rates on a shared machine
move by a factor of two from one run to the next; instruction counts do not, so
this is how a change to the hot path is judged before and after. Each workload
runs twice under ``valgrind --tool=callgrind``, once signalling its ``n`` events
and once not (same imports, same set-up, the same events made); the difference
divided by ``n`` is printed.

Workloads: the keyed "A then B" rule (each detection kept) and the tuple loop
for it, the 20-rule graph of ``bench/detector.py``, the paper's X (recent), and
a decorated method: nothing listening, a rule listening with its condition
false, the event log's listener alone.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SETUP = {
    "keyed A then B": """
import detector as d
events = d.keyed_events(N, 1000)
found = []
det = d.keyed_detector(found.append)
signal = det.signal
def go():
    for name, key in events:
        signal(name, key=key)
""",
    "keyed tuple loop": """
import detector as d
events = d.keyed_events(N, 1000)
found = []
def go():
    d.tuple_loop(events, found.append)
""",
    "20 rules": """
import random, detector as d
from sentinel import Context, LocalEventDetector
rng = random.Random(7)
events = [f"E{rng.randrange(10)}" for _ in range(N)]
det = LocalEventDetector()
for i in range(10):
    det.explicit(f"E{i}")
for i, text in enumerate(d.RULES_20):
    for ctx in (Context.RECENT, Context.CHRONICLE):
        det.rule(f"r{i}-{ctx.value}", text, action=d._noop, context=ctx)
signal = det.signal
def go():
    for name in events:
        signal(name)
""",
    "X recent": """
import detector as d
from sentinel import LocalEventDetector
det = LocalEventDetector()
for name in ("E1", "E2", "E3", "E4"):
    det.explicit(name)
det.rule("X", d.X, action=d._noop)
signal = det.signal
history = ["E1", "E1", "E2", "E3", "E2", "E4", "E3", "E4"] * (N // 8)
def go():
    for name in history:
        signal(name)
""",
    "method, nothing listening": """
import wrapper as w
from sentinel import LocalEventDetector
obj = w.reactive_class(LocalEventDetector())()
def go():
    for _ in range(N):
        obj.set_price(1.5)
""",
    "method, rule listening, condition false": """
import wrapper as w
from sentinel import LocalEventDetector
det = LocalEventDetector()
cls = w.reactive_class(det)
det.rule("r", cls.set_price.end, lambda occ: False, action=w._noop)
obj = cls()
def go():
    for _ in range(N):
        obj.set_price(1.5)
""",
    "method, event log listener only": """
import wrapper as w
from sentinel import LocalEventDetector
det = LocalEventDetector()
cls = w.reactive_class(det)
det.add_listener(w._noop)
obj = cls()
def go():
    for _ in range(N):
        obj.set_price(1.5)
""",
}


def count(name: str, n: int, run: bool) -> int:
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); N = {n}\n{SETUP[name]}\nif {run}: go()\n"
    )
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=False,
    )
    m = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode or m is None:
        sys.exit(f"{name}: callgrind failed\n{proc.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 events")
    parser.add_argument("-n", type=int, default=20_000, help="events per workload")
    parser.add_argument("--only", choices=list(SETUP), help="one workload")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    n = 5_000 if args.quick else args.n
    print(f"CPU instructions per event (callgrind, {n:,} events less none)")
    for name in [args.only] if args.only else list(SETUP):
        per = (count(name, n, True) - count(name, n, False)) / n
        print(f"   {name:<42} {per:>10,.0f}")


if __name__ == "__main__":
    main()
