"""The grocery scenario of the BiCEP thesis (Burgstaller 2014, 1.3), run on SQLite.

``python -m examples.grocery`` compiles ``program.bicepl``, installs it in a fresh
SQLite database, reads the announcements of ``events.jsonl`` (late, changed and
revoked ones among them) and processes the clock ticks of two and a half days
with a 15-minute chronon, printing each action when it fires: at which tick,
with which parameters, for which event, and the statement that fired it.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime
from pathlib import Path
from typing import TextIO

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from sentinel.bicep import ActionCall, Processor, TickResult
from sentinel.bicep.sources import load_stream, read_stream
from sentinel.log import migrate
from sentinel.rules import LocalEventDetector

HERE = Path(__file__).parent
ACTIONS = ("orderResource", "order1Day", "informOwner", "twitterEarlyDelivery")
UNTIL = "2014-04-09T18:00"


def _time(t: datetime | None) -> str:
    return "-" if t is None else t.strftime("%a %H:%M")


def run(out: TextIO = sys.stdout, database: str | None = None) -> list[ActionCall]:
    """Run the scenario; print to ``out``; return every action that fired."""
    fired: list[ActionCall] = []

    def act(call: ActionCall) -> None:
        fired.append(call)
        key = ", ".join(str(v) for v in call.key.values())
        print(
            f"  {call.tick:%a %H:%M}  {call}\n"
            f"              for {call.event_class} {key} (occurred {_time(call.occ_time)}, "
            f"detected {_time(call.det_time)})\n"
            f"              because {call.statement}",
            file=out,
        )

    def tick(result: TickResult) -> None:
        for r in result.rejected:
            key = ", ".join(str(v) for v in r.key.values())
            print(f"  {result.tick:%a %H:%M}  rejected {r.event_class} {key}: {r.reason}", file=out)

    # an in-memory SQLite database (one connection, shared); any URL works
    engine = (
        sa.create_engine(database)
        if database
        else sa.create_engine("sqlite://", poolclass=StaticPool)
    )
    logging.getLogger("sentinel.bicep").setLevel(logging.ERROR)  # rejections printed below
    try:
        migrate.upgrade(engine)
        proc = Processor(
            (HERE / "program.bicepl").read_text(encoding="utf-8"),
            engine,
            name="grocery",
            chronon="15m",
            detector=LocalEventDetector(),
        )
        proc.install()
        for name in ACTIONS:
            proc.action(name, act)
        count = load_stream(proc, read_stream(HERE / "events.jsonl"))
        print(
            f"grocery: {len(proc.program.classes)} event classes, chronon 15 minutes, "
            f"{count} announcements; ticks up to {UNTIL}\n",
            file=out,
        )
        results = proc.run_until(UNTIL, on_tick=tick)
        print(
            f"\n{len(results)} of the ticks had work; {len(fired)} actions fired.",
            file=out,
        )
    finally:
        engine.dispose()
    return fired


def main() -> None:
    run()
