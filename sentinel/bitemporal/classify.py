"""Which timing primitives an occurrence matches (``docs/bitemporal.md``).

An occurrence has an occurrence time ``o`` (``timestamp``) and a detection time
``d`` (``detected_timestamp``). With a chronon of ``c`` seconds both are read as
the chronon they fall in (``floor(t / c)``); without one, as they are. An
occurrence of an event class carries its revision (parameter ``$revision``:
``kind`` ``announce``, ``revise``, ``revoke`` or ``due``, and for a revision or
revocation the previous occurrence time ``old_ts``); any other occurrence is an
announcement.

============  ===========================  ===========================================
kind          when                         timing primitives
============  ===========================  ===========================================
announce      o after d                    ANNOUNCEMENT, FUTURE
announce      o in d's chronon             ANNOUNCEMENT, ONTIME
announce      o before d                   ANNOUNCEMENT, LATE
revise        old o after d                CHANGE and FUTURE, ONTIME or LATE (new o)
revise        old o not after d, new after CHANGE, POSTPONE
revise        old o not after d, new not   CHANGE, RETROACTIVECHANGE
revoke        old o after d                CANCELLATION
revoke        old o not after d            CANCELLATION, REVOCATION
due           a FUTURE occurrence's        ONTIME
              chronon has come
============  ===========================  ===========================================

LATE's delay is ``d - o``; with a chronon, the number of chronons between them
times the chronon (what ``LATE(E, [min], [max])`` compares, bounds included, in
arrival order and in occurrence-time order alike: :func:`late_delay`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import floor
from typing import Any, Final

from sentinel.algebra.bitemporal import BIT, TimingSelector
from sentinel.detector.operators import Entry
from sentinel.detector.scopes import Store
from sentinel.occurrence import param

__all__ = ["REVISION", "classify", "late_delay", "make_dispatcher"]

#: The parameter holding an event class occurrence's revision.
REVISION: Final = "$revision"

ANN, CHG, CAN = BIT["ANNOUNCEMENT"], BIT["CHANGE"], BIT["CANCELLATION"]
FUT, ONT, LAT = BIT["FUTURE"], BIT["ONTIME"], BIT["LATE"]
RET, POS, REV = BIT["RETROACTIVECHANGE"], BIT["POSTPONE"], BIT["REVOCATION"]


def revision_of(occ: Any) -> Any:
    """The ``$revision`` mapping of a primitive occurrence, or ``None``."""
    return param(occ, REVISION)


def classify(occ: Any, chronon: float | None) -> tuple[int, int | None]:
    """``(bits, delay)``: the timing primitives ``occ`` matches (a mask of
    :data:`~sentinel.algebra.bitemporal.BIT`) and, when it is LATE, its delay in
    microseconds."""
    rev = revision_of(occ)
    kind = "announce" if rev is None else rev["kind"]
    if kind == "due":
        return ONT, None
    o, d = occ[2], occ[3]
    if chronon:
        co, cd = floor(o / chronon), floor(d / chronon)
    else:
        co, cd = o, d
    if kind == "announce" or (kind == "revise" and _chronon(rev["old_ts"], chronon) > cd):
        first = ANN if kind == "announce" else CHG
        if co > cd:
            return first | FUT, None
        if co == cd:
            return first | ONT, None
        return first | LAT, late_delay(occ, chronon)
    if kind == "revise":
        return CHG | (POS if co > cd else RET), None
    if kind == "revoke":
        past = _chronon(rev["old_ts"], chronon) <= cd
        return CAN | (REV if past else 0), None
    return 0, None  # an unknown kind (a newer log): matches no primitive


def late_delay(occ: Any, chronon: float | None) -> int:
    """The delay ``LATE(E, [min], [max])`` compares, in microseconds: ``d - o``;
    with a chronon, the number of chronons between them times the chronon. The
    one definition for both orders (occurrence-time order hands LATE the
    occurrences too late for its watermark, and bounds them by this too)."""
    o: float = occ[2]
    d: float = occ[3]
    delay = (floor(d / chronon) - floor(o / chronon)) * chronon if chronon else d - o
    return round(delay * 1_000_000)


def _chronon(t: float, chronon: float | None) -> float:
    return floor(t / chronon) if chronon else t


def make_dispatcher(
    plain: Sequence[Entry],
    timing: Sequence[tuple[TimingSelector, Sequence[Entry]]],
    chronon: float | None,
    on_future: Callable[[Any], None] | None,
) -> Entry:
    """The one entry a channel with timing primitives calls for every signal:
    ``plain`` are the entries of the event itself (a due notice, which is not an
    occurrence of the event, skips them); each of ``timing`` is called when the
    occurrence matches its selector. ``on_future(occ)`` is told of FUTURE
    occurrences of events without revisions (so that they become ONTIME when
    their time comes)."""
    plain = tuple(plain)
    table = tuple(
        (s.mask, s.late_min, s.late_max if s.late_max is not None else 0, tuple(fns))
        for s, fns in timing
    )

    def dispatch(store: Store, occ: Any) -> None:
        rev = revision_of(occ)
        if rev is None or rev["kind"] != "due":
            for f in plain:
                f(store, occ)
        bits, delay = classify(occ, chronon)
        if on_future is not None and bits & FUT and rev is None:
            on_future(occ)
        for mask, lo, hi, fns in table:
            if bits & mask == mask and (lo is None or (delay is not None and lo <= delay <= hi)):
                for f in fns:
                    f(store, occ)

    return dispatch
