"""Live == replay with late, revised and revoked events: the occurrences the
online run logged (announcements with their revisions, due notices, clock ticks)
go through replay's own batch step and give the same detections, rule by rule,
in the same order: timing primitives, FIRED, lifespans, WITHIN and
occurrence-time order included."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sentinel import (
    FIRED,
    LocalEventDetector,
    Occurrence,
    VirtualClock,
    announce,
    event_class,
    revoke,
)

pa = __import__("pytest").importorskip("pyarrow")

from sentinel.detector.events import listen  # noqa: E402
from sentinel.occurrence import finished  # noqa: E402
from sentinel.replay import log_table, replay_batches  # noqa: E402

RULES: list[tuple[str, str, dict[str, Any]]] = [
    ("changes", "CHANGE(D)", {"condition": ~FIRED}),
    ("ontime", "ONTIME(D)", {}),
    ("gone", "CANCELLATION(D) | REVOCATION(D)", {}),
    ("late", "LATE(E, [00:00:02], [00:00:10])", {}),
    ("future", "FUTURE(CHANGE(D)) ; E", {"context": "chronicle", "flush": False}),
    ("ordered", "E ; ANNOUNCEMENT(D)", {"flush": False, "order": "occurrence", "lateness": 2}),
    ("life", "(E ; R) by k", {"flush": False, "lifespan": 4, "context": "chronicle"}),
    ("window", "WITHIN(E, R, [00:00:03])", {"flush": False, "context": "continuous"}),
]

OPS = st.lists(
    st.tuples(
        st.sampled_from(["D", "D", "revoke", "E", "R"]),
        st.integers(0, 2),  # key
        st.sampled_from([0.0, 0.5, 1.0, 2.5]),  # clock step
        st.integers(-4, 4),  # occurrence time - now
    ),
    min_size=1,
    max_size=40,
)


def online(
    ops: list[Any], chronon: float | None
) -> tuple[LocalEventDetector, dict[str, list[Any]], list[Occurrence]]:
    clock = VirtualClock(1000.0)
    det = LocalEventDetector(clock=clock, chronon=chronon)
    event_class(det, "D", key="k", lifespan=30)
    event_class(det, "R", key=None, mutable=False, lifespan=None)
    det.explicit("E")
    log: list[Occurrence] = []
    listen(det, "occurrence", lambda o: log.append(finished(o)))
    seen: dict[str, list[Any]] = {}
    for name, text, kw in RULES:
        out = seen[name] = []
        det.rule(name, text, action=lambda o, out=out: out.append(_ids(o)), **kw)
    alive: set[int] = set()
    pending: set[int] = set()
    for op, k, step, offset in ops:
        clock.advance(step)
        now = clock.now()
        if op == "D":
            announce(det, "D", now + offset, k=k)
            (pending if chronon else alive).add(k)
        elif op == "revoke":
            if k in alive or k in pending:
                revoke(det, "D", k=k)
                alive.discard(k)
                pending.discard(k)
        elif op == "E":
            det.signal_at("E", now + offset, k=k)
        else:
            announce(det, "R", now + offset, k=k)
        if chronon and step:
            alive |= pending
            pending.clear()
    clock.advance(60)
    return det, seen, log


def _ids(occ: Any) -> tuple[tuple[str, int], ...]:
    return tuple((str(c.scope), c.t_occ) for c in occ.constituents)


#: Every rule detects something here.
EVERY_RULE = [
    ("E", 1, 1.0, 0),
    ("R", 1, 1.0, 0),  # life, window
    ("D", 2, 1.0, 5),  # FUTURE
    ("D", 2, 1.0, 6),  # a change into the future: changes
    ("E", 0, 1.0, 0),  # future ; E
    ("D", 2, 1.0, 7),  # FIRED already for this instance
    ("E", 1, 0.5, -3),  # late by 3 s
    ("revoke", 2, 1.0, 0),  # gone
    ("D", 0, 1.0, -1),  # ordered: E ; ANNOUNCEMENT(D)
    ("D", 1, 1.0, 2),  # ontime when its time comes
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, chronon=st.sampled_from([None, 1.0]))
@example(ops=EVERY_RULE, chronon=None)
@example(ops=EVERY_RULE, chronon=1.0)
def test_live_equals_replay(ops: list[Any], chronon: float | None) -> None:
    det, seen, log = online(ops, chronon)
    if ops == EVERY_RULE:
        assert all(seen.values()), {k: len(v) for k, v in seen.items()}
    table = log_table([(o, None) for o in log])
    replayed: dict[str, list[Any]] = {name: [] for name in seen}
    for batch in replay_batches(table.to_batches(), det, order="t_occ"):
        for row in batch.to_pylist():
            if row["condition"] is False:
                continue
            ids = tuple(zip(row["constituent_scopes"], row["constituent_t_occs"], strict=True))
            replayed[row["rule"]].append(ids)
    for name in seen:
        assert replayed[name] == seen[name], name


def test_the_log_holds_both_times_and_the_revision() -> None:
    _det, _seen, log = online([("D", 1, 1.0, 3), ("D", 1, 1.0, -2), ("revoke", 1, 1.0, 0)], None)
    ds = [o for o in log if o.event == "D"]
    assert [(o.timestamp - 1000, o.detected_timestamp - 1000) for o in ds] == [
        (4.0, 1.0),  # announced for 4, detected at 1
        (0.0, 2.0),  # changed to 0, detected at 2 (its old time 4 had not come)
        (3.0, 3.0),  # revoked at 3
    ]
    revs = [o.params["$revision"] for o in ds]
    assert [(r["kind"], r["n"], r.get("old_ts")) for r in revs] == [
        ("announce", 1, None),
        ("revise", 2, 1004.0),
        ("revoke", 3, 1000.0),
    ]
