"""Silence is free: temporal rules add no work to the signals of other events.

Proved with call counts (timings on a shared machine prove nothing): the same
signals make exactly the same Python calls whether or not temporal rules are
defined on the detector, and whether or not the timer service exists."""

from __future__ import annotations

import gc
import re
import sys
from collections import Counter
from typing import Any

from sentinel import LocalEventDetector, VirtualClock


def _noop(occ: Any) -> None:
    pass


def calls(temporal: bool, *, transaction: bool) -> Counter[str]:
    det = LocalEventDetector(clock=VirtualClock(0.0))
    for name in ("E1", "E2", "T"):
        det.explicit(name)
    det.rule("seq", "E1 ; E2", action=_noop)
    if temporal:
        det.rule("t", "T + [00:01:00]", action=_noop, context="chronicle")
        det.rule("p", "P*(T, [00:00:01], T)", action=_noop, flush=False)
        det.rule("a", "<(17:00:00)*/*/*>", action=_noop)
    with det.transaction():  # warm up (process-scope views, lazy state)
        det.signal("E1")
    det.signal("E1")
    counted: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            # generated functions (compiled leaves) are numbered: count them by kind
            where = f"{frame.f_code.co_filename}:{frame.f_code.co_name}"
            counted[re.sub(r"\d+", "#", where) if where.startswith("<") else where] += 1
        elif event == "c_call":
            counted[f"C:{getattr(arg, '__qualname__', arg)}"] += 1

    gc.collect()
    gc.disable()  # a collection's callbacks (weak sets) are not the signals' work
    sys.setprofile(profile)
    try:
        if transaction:
            with det.transaction():
                det.signal("E1")
                det.signal("E2")
        else:
            for _ in range(50):
                det.signal("E1")
                det.signal("E2")
    finally:
        sys.setprofile(None)
        gc.enable()
    return counted


def test_signals_of_other_events_make_the_same_calls() -> None:
    without, with_temporal = calls(False, transaction=False), calls(True, transaction=False)
    assert sum(without.values()) > 500
    assert with_temporal == without


def test_a_transaction_pays_one_flush_hook_call() -> None:
    # Ending a scope tells the timer service (the detector's ``flush`` event:
    # its dispatch, one call), which cancels the scope's timers (here there are
    # none: one dict lookup).
    without, with_temporal = calls(False, transaction=True), calls(True, transaction=True)
    extra = with_temporal - without
    assert not without - with_temporal
    assert {k.rsplit("/", 1)[-1]: n for k, n in extra.items()} == {
        "events.py:__call__": 1,
        "service.py:_flushed": 1,
        "C:id": 1,
        "C:dict.pop": 1,
    }
