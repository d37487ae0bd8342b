"""A global rule whose action is slow (``SENTINEL_TEST_ACTION_SECONDS``, 2 s by
default) and notes each start in the file ``SENTINEL_TEST_STARTED``: for
stopping ``sentinel global`` and ``sentinel worker`` while actions run."""

from __future__ import annotations

import os
import time
from typing import Any

from sentinel import LocalEventDetector


def slow(occ: Any) -> None:
    with open(os.environ["SENTINEL_TEST_STARTED"], "a") as f:
        f.write("started\n")
    time.sleep(float(os.environ.get("SENTINEL_TEST_ACTION_SECONDS", "2")))


detector = LocalEventDetector()
detector.explicit("order")
detector.explicit("payment")
detector.rule(
    "paid", "(order ; payment) by customer", action=slow, coupling="detached", flush=False
)
