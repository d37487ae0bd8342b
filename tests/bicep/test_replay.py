"""Replaying a BiCEPL program over the event log gives the live run's actions."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from examples.grocery import HERE
from sentinel import attach
from sentinel.bicep import Processor
from sentinel.bicep.replay import logged_actions, replay
from sentinel.bicep.sources import load_stream, read_stream
from sentinel.bicep.times import seconds
from sentinel.errors import ReplayError
from sentinel.rules import LocalEventDetector


@pytest.mark.parametrize("backend", ["sqlite"])
def test_replay_of_the_log_fires_what_the_live_run_fired(migrated: sa.Engine) -> None:
    det = LocalEventDetector()
    Session = sessionmaker(migrated)
    attachment = attach(Session, detector=det, workers=0)
    text = (HERE / "program.bicepl").read_text()
    try:
        proc = Processor(text, Session, name="grocery", chronon="15m", require_actions=False)
        proc.install()
        records = sorted(read_stream(HERE / "events.jsonl"), key=lambda r: seconds(r["det"]))
        # the live run reads the stream in three chunks; the last chunk holds an
        # announcement detected before the ticks already run (a straggler)
        chunks = [records[:4], records[4:9], records[9:]]
        straggler = dict(chunks[2][0], det="2014-04-07T15:00", occ="2014-04-07T14:55")
        straggler.update({"class": "ResourceLow", "resource": "Cream", "amountLeft": 0.5})
        straggler.pop("amount", None)
        chunks[2].append(straggler)
        for chunk, until in zip(
            chunks, ["2014-04-07T12:00", "2014-04-07T17:00", "2014-04-08T09:00"], strict=True
        ):
            load_stream(proc, chunk)
            proc.run_until(until)
        live = logged_actions(migrated, proc.program)
        assert len(live) == 8 and any(c.key == {"resource": "Cream"} for c in live)
        replayed = replay(migrated, text, name="grocery", chronon="15m")
        assert replayed.actions == live
        assert replayed.announcements == len(records) + 1
    finally:
        attachment.detach()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_replay_needs_the_programs_ticks_in_the_log(migrated: sa.Engine) -> None:
    proc = Processor(
        (HERE / "program.bicepl").read_text(),
        migrated,
        name="grocery",
        detector=LocalEventDetector(),
        require_actions=False,
    )
    proc.install()
    with pytest.raises(ReplayError, match="no tick of program 'grocery'"):
        replay(migrated, proc.program)
