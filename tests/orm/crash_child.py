"""A process that commits a transaction triggering a detached rule, then dies
(``python -m tests.orm.crash_child URL MODE``):

``after-commit``
    exits (``os._exit``) right after the commit: the outbox entry is pending and
    nothing ran (the attachment has no worker threads);
``in-action``
    runs the entry in a worker thread, whose action kills the process with
    SIGKILL after an effect outside the database and before its transaction
    commits (``actions.external`` with ``SENTINEL_TEST_CRASH=action``).
"""

from __future__ import annotations

import os
import sys
import time

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sentinel import LocalEventDetector
from sentinel.orm import attach

from . import actions
from .models import make_model


def main(url: str, mode: str) -> None:
    det = LocalEventDetector()
    model = make_model(det)
    Session = sessionmaker(sa.create_engine(url))
    attach(Session, detector=det, workers=0 if mode == "after-commit" else 1, lease=0.5)
    det.rule("R", "Stock.e2", action=actions.external, coupling="detached")
    with Session.begin() as s:
        stock = model.Stock(name="IBM")
        s.add(stock)
        s.flush()
        stock.set_price(42.0)
    if mode == "after-commit":
        os._exit(0)
    time.sleep(60)  # the worker thread kills the process before this ends
    os._exit(3)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
