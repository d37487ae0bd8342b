"""Independent models of the bitemporal definitions, written from the thesis
(2.2, Example 2.2; Listing 4.2 for LATE's delay) and ``docs/bitemporal.md``,
not from sentinel's code: what the tests compare sentinel against."""

from __future__ import annotations

import math
from typing import Any


def chronon_of(t: float, chronon: float | None) -> float:
    return math.floor(t / chronon) if chronon else t


def timing(
    kind: str,
    o: float,
    d: float,
    old: float | None,
    chronon: float | None,
) -> tuple[set[str], float | None]:
    """The timing primitives an announcement matches, and LATE's delay (seconds).

    ``kind``: "announce" (first of its key), "revise", "revoke" or "due"; ``o``
    the (new) occurrence time, ``d`` the detection time, ``old`` the previous
    occurrence time of a revision or revocation.
    """
    if kind == "due":
        return {"ONTIME"}, None

    def when(t: float) -> str:
        a, b = chronon_of(t, chronon), chronon_of(d, chronon)
        return "future" if a > b else "now" if a == b else "past"

    def delay() -> float:
        if chronon:
            return (chronon_of(d, chronon) - chronon_of(o, chronon)) * chronon
        return d - o

    def by_time(first: str) -> tuple[set[str], float | None]:
        w = when(o)
        if w == "future":
            return {first, "FUTURE"}, None
        if w == "now":
            return {first, "ONTIME"}, None
        return {first, "LATE"}, delay()

    if kind == "announce":
        return by_time("ANNOUNCEMENT")
    assert old is not None
    old_happened = when(old) != "future"  # the old occurrence time has come
    if kind == "revise":
        if not old_happened:
            return by_time("CHANGE")
        return (
            {"CHANGE", "POSTPONE"} if when(o) == "future" else {"CHANGE", "RETROACTIVECHANGE"}
        ), None
    assert kind == "revoke"
    return ({"CANCELLATION", "REVOCATION"} if old_happened else {"CANCELLATION"}), None


def matches(
    wanted: set[str], late: tuple[float, float] | None, got: set[str], delay: float | None
) -> bool:
    """Whether a leaf asking for ``wanted`` (and LATE's bounds) takes an occurrence
    that matches ``got`` with ``delay``."""
    if not wanted <= got:
        return False
    if late is None:
        return True
    return delay is not None and late[0] <= delay <= late[1]


def sorted_stream(arrivals: list[tuple[str, float, Any]]) -> list[tuple[str, float, Any]]:
    """An arrival sequence in occurrence-time order (ties: arrival order)."""
    return [a for _, a in sorted(enumerate(arrivals), key=lambda ia: (ia[1][1], ia[0]))]
