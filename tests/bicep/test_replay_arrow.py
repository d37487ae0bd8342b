"""The batch function of the Spark replay, without Spark: log rows in, the
live run's actions out."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from examples.grocery import HERE
from sentinel import attach
from sentinel.bicep import Processor
from sentinel.bicep.replay import logged_actions
from sentinel.bicep.sources import load_stream, read_stream
from sentinel.rules import LocalEventDetector

pa = pytest.importorskip("pyarrow")


@pytest.mark.parametrize("backend", ["sqlite"])
def test_replay_arrow_fires_the_logged_actions(migrated: sa.Engine) -> None:
    from sentinel.bicep.spark import replay_arrow
    from sentinel.log import LogReader
    from sentinel.params import dumps

    Session = sessionmaker(migrated)
    attachment = attach(Session, detector=LocalEventDetector(), workers=0)
    text = (HERE / "program.bicepl").read_text()
    try:
        proc = Processor(text, Session, name="grocery", require_actions=False)
        proc.install()
        load_stream(proc, read_stream(HERE / "events.jsonl"))
        proc.run_until("2014-04-07T21:00")
        live = logged_actions(migrated, proc.program)
    finally:
        attachment.detach()
    with LogReader(migrated) as reader:
        occs = [r.occurrence for r in reader.occurrences()]
    batch = pa.RecordBatch.from_pydict(
        {
            "scope": [o.scope for o in occs],
            "t_occ": [o.t_occ for o in occs],
            "event": [o.event for o in occs],
            "params": [dumps(dict(o.params)) for o in occs],
        }
    )
    out: list[dict[str, Any]] = []
    for b in replay_arrow(iter([batch]), text=text, name="grocery", chronon="15m"):
        out += b.to_pylist()
    assert len(live) == 6
    assert [(r["tick"], r["action"], json.loads(r["key"])) for r in out] == [
        (int(c.tick.timestamp()), c.action, dict(c.key)) for c in live
    ]
