"""A BiCEPL program replayed on Spark fires what the live run fired (the Spark
wiring of sentinel.bicep.spark around its plain batch function)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from examples.grocery import HERE
from sentinel import attach
from sentinel.bicep import Processor
from sentinel.bicep.replay import logged_actions
from sentinel.bicep.sources import load_stream, read_stream
from sentinel.log import migrate
from sentinel.rules import LocalEventDetector

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _live(url: str) -> tuple[str, list[Any]]:
    engine = sa.create_engine(url)
    migrate.upgrade(engine)
    Session = sessionmaker(engine)
    attachment = attach(Session, detector=LocalEventDetector(), workers=0)
    text = (HERE / "program.bicepl").read_text()
    try:
        proc = Processor(text, Session, name="grocery", require_actions=False)
        proc.install()
        load_stream(proc, read_stream(HERE / "events.jsonl"))
        proc.run_until("2014-04-08T09:00")
        return text, logged_actions(engine, proc.program)
    finally:
        attachment.detach()
        engine.dispose()


def test_spark_replay_equals_the_live_run(spark: Any, tmp_path: Path) -> None:
    from sentinel.bicep.spark import replay_spark

    url = f"sqlite:///{tmp_path / 'live.db'}"
    text, live = _live(url)
    rows = replay_spark(spark, url, text, name="grocery", chronon="15m").collect()
    assert len(live) == 7
    assert [(r["tick"], r["action"], json.loads(r["key"]), r["statement"]) for r in rows] == [
        (int(c.tick.timestamp()), c.action, dict(c.key), c.statement) for c in live
    ]
