"""A processor that dies inside a tick (``python -m tests.bicep.kill_child URL
OUT``): its immediate action ``f`` appends ``f <k>`` to the file OUT and, for
k = 2, kills the process with SIGKILL before the tick commits."""

from __future__ import annotations

import os
import signal
import sys

import sqlalchemy as sa

from sentinel.bicep import ActionCall, Processor
from sentinel.rules import LocalEventDetector

PROGRAM = """
CREATE MUTABLE SUBSCRIBED EVENT CLASS D (k INTEGER) ID (k) LIFESPAN(1d)
  ON ANNOUNCEMENT DO f(new.k);
CREATE COMPLEX EVENT CLASS C (k INTEGER) ID (k) LIFESPAN(1d)
  AS SELECT k FROM D OCCURRING AT D.occTime ON ANNOUNCEMENT DO g(new.k);
"""
T = 1_400_000_400


def processor(url: str, out: str, *, die: bool) -> Processor:
    proc = Processor(
        PROGRAM, sa.create_engine(url), name="killed", chronon=600, detector=LocalEventDetector()
    )

    def f(call: ActionCall) -> None:
        with open(out, "a") as fh:
            fh.write(f"f {call.args[0]}\n")
        if die and call.args == (2,):
            os.kill(os.getpid(), signal.SIGKILL)

    proc.action("f", f)
    proc.action("g", lambda call: None)
    return proc


if __name__ == "__main__":
    proc = processor(sys.argv[1], sys.argv[2], die=True)
    proc.run_until(T + 600)
    sys.exit("the tick was not killed")
