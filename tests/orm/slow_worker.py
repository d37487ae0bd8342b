"""A worker process for the race tests (``python -m tests.orm.slow_worker URL
DIR LEASE MAX_ATTEMPTS``): the toy model's rule ``Slow`` (``actions.slow``) on a
detector of its own, drained until no entry is pending or running.

It writes ``DIR/ready.<pid>`` and waits for ``DIR/go`` before its first drain,
so that the workers start together.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sentinel import LocalEventDetector
from sentinel.orm import attach

from . import actions
from .conftest import sqlite_savepoints
from .models import make_model


def main(url: str, directory: str, lease: float, max_attempts: int) -> None:
    det = LocalEventDetector()
    make_model(det)
    det.rule("Slow", "Stock.e2", action=actions.slow, coupling="detached")
    engine = sa.create_engine(url)
    if engine.dialect.name == "sqlite":
        sqlite_savepoints(engine, {"sql": "BEGIN IMMEDIATE"})
    here = Path(directory)
    (here / f"ready.{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while not (here / "go").exists():
        if time.monotonic() > deadline:
            sys.exit("no go")
        time.sleep(0.01)
    att = attach(
        sessionmaker(engine),
        detector=det,
        workers=0,
        lease=lease,
        max_attempts=max_attempts,
        backoff=0.05,
        max_backoff=0.2,
    )
    unfinished = sa.text(
        "SELECT count(*) FROM sentinel_outbox WHERE status IN ('pending', 'running')"
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        att.drain()
        with engine.connect() as conn:
            if conn.execute(unfinished).scalar() == 0:
                break
        time.sleep(0.05)
    att.detach()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
