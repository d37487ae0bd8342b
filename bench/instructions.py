"""CPU instructions per event on the hot paths, counted with callgrind.

Run: ``python bench/instructions.py`` (needs ``valgrind``; ``--quick`` for fewer
events; ``--only PREFIX`` for the workloads so named). Wall-clock rates on a shared machine
move by a factor of two from one run to the next; instruction counts do not, so
this is how a change to the hot path is judged before and after. Each workload
runs ``n`` events after a warm-up, all workloads in one process under
``valgrind --tool=callgrind`` counting only while they run (see :func:`counts`);
the count divided by ``n`` is printed. To compare two versions of sentinel, run
it once with each on ``PYTHONPATH`` (``PYTHONPATH=/path/to/other/tree``). A
count leaves out most of what the cyclic garbage collector costs: its full
collections, which traverse every object kept (each detection the keyed
workload keeps), are rare and fall in a short window or not;
``bench/detector.py`` shows that cost in wall-clock time.

Workloads: the keyed "A then B" rule (each detection kept), the tuple loop
for it and its two hand-fused floors (``bench/_floor.py``), the 20-rule graph
of ``bench/detector.py``, the paper's X (recent), and a decorated method:
nothing listening, a rule listening with its condition false, the event log's
listener alone; and for the method, a bare call and the
hand-fused floor of ``bench/wrapper.py`` (the least a listened call must do);
and ``bench/orm.py``'s ORM workload on SQLite (``synchronous=OFF``) bare, with
the hand-written audit listener, and with sentinel (its rules and log), printed
per transaction with the two ratios to bare: issue 31's targets counted in
instructions (``--only ORM`` runs those three).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: The ORM workloads' database (each its own SQLite file, synchronous=OFF).
ORM_SETUP = """
import tempfile, orm as o
ORM_UNIT = 200
engine, Session = o.setup(f"sqlite:///{tempfile.mkdtemp()}/orm.db", "off")
"""

#: The keyed rule's hand-fused floor (``bench/_floor.py``), its parameters kept
#: in the keyword dict or in a tuple.
KEYED_FLOOR = """
import detector as d, _floor
events = d.keyed_events(N + WARM, 1000)
found = []
signal = _floor.keyed_floor(found.append, untracked={untracked})
def go(lo, hi):
    for name, key in events[lo:hi]:
        signal(name, key=key)
"""

SETUP = {
    "keyed A then B": """
import detector as d
events = d.keyed_events(N + WARM, 1000)
found = []
det = d.keyed_detector(found.append)
signal = det.signal
def go(lo, hi):
    for name, key in events[lo:hi]:
        signal(name, key=key)
""",
    "keyed tuple loop": """
import detector as d
events = d.keyed_events(N + WARM, 1000)
found = []
def go(lo, hi):
    d.tuple_loop(events[lo:hi], found.append)
""",
    "keyed floor, dict": KEYED_FLOOR.format(untracked=False),
    "keyed floor, tuple": KEYED_FLOOR.format(untracked=True),
    "20 rules": """
import random, detector as d
from sentinel import Context, LocalEventDetector
rng = random.Random(7)
events = [f"E{rng.randrange(10)}" for _ in range(N + WARM)]
det = LocalEventDetector()
for i in range(10):
    det.explicit(f"E{i}")
for i, text in enumerate(d.RULES_20):
    for ctx in (Context.RECENT, Context.CHRONICLE):
        det.rule(f"r{i}-{ctx.value}", text, action=d._noop, context=ctx)
signal = det.signal
def go(lo, hi):
    for name in events[lo:hi]:
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
events = ["E1", "E1", "E2", "E3", "E2", "E4", "E3", "E4"] * ((N + WARM) // 8)
def go(lo, hi):
    for name in events[lo:hi]:
        signal(name)
""",
    "method, nothing listening": """
import wrapper as w
from sentinel import LocalEventDetector
obj = w.reactive_class(LocalEventDetector())()
def go(lo, hi):
    for _ in range(lo, hi):
        obj.set_price(1.5)
""",
    "method, rule listening, condition false": """
import wrapper as w
from sentinel import LocalEventDetector
det = LocalEventDetector()
cls = w.reactive_class(det)
det.rule("r", cls.set_price.end, lambda occ: False, action=w._noop)
obj = cls()
def go(lo, hi):
    for _ in range(lo, hi):
        obj.set_price(1.5)
""",
    "method, hand-fused floor": """
import wrapper as w
obj = w.HandFused()
def go(lo, hi):
    for _ in range(lo, hi):
        obj.set_price(1.5)
""",
    "method, bare": """
import wrapper as w
obj = w.Bare()
def go(lo, hi):
    for _ in range(lo, hi):
        obj.set_price(1.5)
""",
    "method, event log listener only": """
import wrapper as w
from sentinel import LocalEventDetector
from sentinel.detector.events import listen
det = LocalEventDetector()
cls = w.reactive_class(det)
listen(det, "occurrence", w._noop)
obj = cls()
def go(lo, hi):
    for _ in range(lo, hi):
        obj.set_price(1.5)
""",
    # bench/orm.py's workload, SQLite with synchronous=OFF, in instructions:
    # one counted "event" is 1/200 of a transaction (10 accounts loaded, 50
    # decorated calls, 10 rows updated, the commit), so N = 20,000 runs 100
    # transactions; the figures are printed per transaction.
    "ORM transaction, bare": ORM_SETUP
    + """
def go(lo, hi):
    o.TRANSACTIONS = (hi - lo) // ORM_UNIT
    o.workload(Session, 0)
""",
    "ORM transaction, hand-written audit": ORM_SETUP
    + """
def go(lo, hi):
    o.TRANSACTIONS = (hi - lo) // ORM_UNIT
    o.sa.event.listen(Session, "after_flush", o.audit_listener)
    o.workload(Session, 0)
    o.sa.event.remove(Session, "after_flush", o.audit_listener)
""",
    "ORM transaction, sentinel": ORM_SETUP
    + """
import sentinel
o.det.rule("overdraft", "Account.deposit:end | Account.withdraw:end", o.overdraft,
           action=lambda occ: None)
o.det.rule("deposits", "Account.deposit:end", action=lambda occ: None,
           coupling="deferred", context="cumulative")
sentinel.attach(Session, detector=o.det, workers=0)
def go(lo, hi):
    o.TRANSACTIONS = (hi - lo) // ORM_UNIT
    o.workload(Session, 0)
""",
}

#: Counted events per transaction of the ORM workloads.
ORM_UNIT = 200

#: Events run before counting (the graph is wired, partitions exist).
WARM = 1_000


def counts(names: list[str], n: int) -> dict[str, float]:
    """Instructions per event of each workload, all in one process under
    callgrind: collection is on only inside ``sys.call_tracing`` (the C function
    ``sys_call_tracing``), which runs each workload's ``n`` counted events, and
    callgrind writes one profile per workload."""
    lines = [f"import sys; sys.path.insert(0, {str(HERE)!r}); N, WARM = {n}, {WARM}"]
    for name in names:
        body = SETUP[name].replace("\n", "\n    ")
        lines.append(f"def workload():\n    {body}\n    return go")
        lines.append("go = workload(); go(0, WARM); sys.call_tracing(go, (WARM, WARM + N))")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--toggle-collect=sys_call_tracing",
                "--dump-after=sys_call_tracing",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-c",
                "\n".join(lines),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            # not the caller's directory: ``-c`` puts it first on sys.path, where
            # a checkout's sentinel/ would shadow the one PYTHONPATH names
            cwd=tmp,
            check=False,
        )
        if proc.returncode:
            sys.exit(f"callgrind failed\n{proc.stderr[-3000:]}")
        totals = []
        for i in range(1, len(names) + 1):
            text = Path(f"{out}.{i}").read_text()
            m = re.search(r"^totals: (\d+)", text, re.M)
            if m is None:
                sys.exit(f"no totals in callgrind's profile {i}")
            totals.append(int(m.group(1)) / n)
    return dict(zip(names, totals, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 events")
    parser.add_argument("-n", type=int, default=20_000, help="events per workload")
    parser.add_argument(
        "--only", help="the workloads whose name starts with this (e.g. 'ORM', 'method')"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    n = 5_000 if args.quick else args.n
    from _common import machine

    print(f"CPU instructions per event (callgrind, {n:,} events after {WARM:,} uncounted)")
    print(machine())
    names = [name for name in SETUP if name.startswith(args.only or "")]
    if not names:
        sys.exit(f"no workload starts with {args.only!r}; they are: {', '.join(SETUP)}")
    got = counts(names, n)
    for name, per in got.items():
        if name.startswith("ORM "):
            print(f"   {name:<42} {per * ORM_UNIT:>10,.0f} per transaction")
        else:
            print(f"   {name:<42} {per:>10,.0f}")
    bare = got.get("ORM transaction, bare")
    for name in ("ORM transaction, sentinel", "ORM transaction, hand-written audit"):
        if bare and name in got:
            label = f"{name.split(', ')[1]} / bare"
            print(f"   {label:<42} {got[name] / bare:>10.3f}")


if __name__ == "__main__":
    main()
