"""A commit feeder's detection state as bytes (what the Spark streaming job
keeps per bucket of keys): a feeder loaded from its dump detects what the
dumped one would have; under a lifespan the dump holds only what has not
expired; and a feeder given one bucket's rows numbers them as one given all."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from sentinel.errors import GlobalDetectorError
from sentinel.global_detector.detect import CommitFeeder
from sentinel.global_detector.order import LogRow
from sentinel.global_detector.state import dump, dumpable, load, retained
from sentinel.params import dumps
from tests.global_detector import rules


def _rows(commits: int, seed: int, customers: int = 20) -> list[tuple[LogRow, int]]:
    """Committed rows and their ranks: 1 to 4 occurrences per commit, each a
    little later than the one before (a lifespan's purge can fall inside a commit)."""
    rnd = random.Random(seed)
    out, ts, rid = [], 1000.0, 0
    for seq in range(1, commits + 1):
        for rank in range(rnd.randint(1, 4)):
            rid += 1
            ts += rnd.choice([0.1, 0.3, 0.7, 1.5])
            event = rnd.choice(["order", "payment", "other"])
            params = dumps({"customer": rnd.randint(1, customers)})
            out.append(
                (LogRow(rid, seq, f"t{seq}", rank, event, ts, ts, None, None, params, None), rank)
            )
    return out


def _feed(feeder: CommitFeeder, rows: list[tuple[LogRow, int]]) -> list[tuple[Any, ...]]:
    found = feeder.feed([r for r, _ in rows], [k for _, k in rows])
    return [
        (d.rule, d.commit_seq, d.occurrence.t_occ, [c.t_occ for c in d.occurrence.constituents])
        for d in found
    ]


def _commits(rows: list[tuple[LogRow, int]], size: int) -> list[list[tuple[LogRow, int]]]:
    """``rows`` cut into runs of ``size`` whole commits."""
    out: list[list[tuple[LogRow, int]]] = []
    last = None
    n = 0
    for row in rows:
        if row[0].commit_seq != last:
            last = row[0].commit_seq
            if n % size == 0:
                out.append([])
            n += 1
        out[-1].append(row)
    return out


@pytest.mark.parametrize("rule_set", ["detector", "lived"])
def test_a_feeder_loaded_from_its_dump_detects_what_it_would_have(rule_set: str) -> None:
    det = getattr(rules, rule_set)
    rows = _rows(1500, seed=7)
    expected = _feed(CommitFeeder(det), rows)
    feeder, found = CommitFeeder(det), []
    for part in _commits(rows, 97):
        found += _feed(feeder, part)
        feeder = load(det, dump(feeder))  # each run by a new feeder, from the bytes
    assert found == expected
    assert len(expected) > 50


def test_under_a_lifespan_the_state_holds_only_what_has_not_expired() -> None:
    """Orders nobody pays: without a lifespan every one stays in the state; with
    one (5 s of log time), only the last few seconds' do, however long the log."""
    sizes: dict[str, list[tuple[int, int]]] = {"detector": [], "lived": []}
    for name, sizes_of in sizes.items():
        det = getattr(rules, name)
        feeder = CommitFeeder(det)
        for seq in range(1, 3001):
            params = dumps({"customer": seq % 200})
            row = LogRow(
                seq,
                seq,
                f"t{seq}",
                0,
                "order",
                1000.0 + seq,
                1000.0 + seq,
                None,
                None,
                params,
                None,
            )
            feeder.feed([row], [0])
            if seq % 1000 == 0:
                feeder = load(det, dump(feeder))
                sizes_of.append((retained(feeder), len(dump(feeder))))
    assert [n for n, _ in sizes["detector"]] == [1000, 2000, 3000]
    held = [n for n, _ in sizes["lived"]]
    assert all(n <= 6 for n in held), held  # the orders of the last 5 seconds
    kept = [size for _, size in sizes["lived"]]
    assert max(kept) < 2 * min(kept), kept  # flat, not growing with the log


@pytest.mark.parametrize("rule_set", ["detector", "lived"])
def test_a_feeder_of_one_bucket_numbers_rows_as_one_fed_every_row(rule_set: str) -> None:
    """The streaming job gives each bucket of keys a detector of its own: a
    lifespan's purge falls at other rows there than in one detector of the
    whole log, and must not renumber the rows after it."""
    det = getattr(rules, rule_set)
    rows = _rows(1500, seed=3)
    expected = sorted(_feed(CommitFeeder(det), rows))
    found = []
    for bucket in range(3):
        mine = [
            (r, k)
            for r, k in rows
            if r.event != "other" and json.loads(r.params)["customer"] % 3 == bucket
        ]
        found += _feed(CommitFeeder(det), mine)
    assert sorted(found) == expected


def test_a_bucket_given_the_log_clock_purges_as_one_fed_every_row() -> None:
    """Writers' clocks disagree, so commit order is not time order: under a
    lifespan a bucket's detector must purge by the log's clock (the largest
    detection time of every row before, any key's, any event's), which
    :meth:`CommitFeeder.feed`'s ``clocks`` and :meth:`CommitFeeder.advance`
    give it, across dumps; by its own rows' times alone it pairs orders the
    whole log's detector forgot."""
    det = rules.lived
    rnd = random.Random(9)
    rows = [
        (r._replace(ts=t, detected_ts=t), k)
        for r, k in _rows(1500, seed=4)
        for t in [r.ts + rnd.choice([0.0, -4.0, 3.0, 6.0])]
    ]
    expected = sorted(_feed(CommitFeeder(det), rows))
    clocks: list[tuple[float | None, float]] = []  # the log's clock before and after each row
    clock: float | None = None
    for r, _ in rows:
        after = r.detected_ts if clock is None else max(clock, r.detected_ts)
        clocks.append((clock, after))
        clock = after
    numbered = list(range(len(rows)))

    def bucket(b: int, given: bool) -> list[tuple[Any, ...]]:
        feeder, found = CommitFeeder(det), []
        for run in _commits([(rows[i][0], i) for i in numbered], 97):
            mine = [
                i
                for _, i in run
                if rows[i][0].event != "other"
                and json.loads(rows[i][0].params)["customer"] % 3 == b
            ]
            got = feeder.feed(
                [rows[i][0] for i in mine],
                [rows[i][1] for i in mine],
                [clocks[i][0] for i in mine] if given else None,
            )
            found += [
                (
                    d.rule,
                    d.commit_seq,
                    d.occurrence.t_occ,
                    [c.t_occ for c in d.occurrence.constituents],
                )
                for d in got
            ]
            if given:
                feeder.advance(clocks[run[-1][1]][1])
            feeder = load(det, dump(feeder))
        return found

    assert sorted(f for b in range(3) for f in bucket(b, given=True)) == expected
    assert sorted(f for b in range(3) for f in bucket(b, given=False)) != expected
    assert len(expected) > 50


def test_rules_with_timers_cannot_be_dumped() -> None:
    assert dumpable(rules.detector) and dumpable(rules.lived)
    assert not dumpable(rules.temporal)
    with pytest.raises(GlobalDetectorError, match="temporal events"):
        dump(CommitFeeder(rules.temporal))


def test_a_state_is_loaded_only_by_rules_of_the_same_layout() -> None:
    """A state holds each node's entries by the node's number: loaded by rules
    defined otherwise (a rule added before another, a lifespan given), one
    rule's waiting orders were read as another's and it detected pairs its
    events can never form. Such a load is refused, naming what to do."""
    from sentinel.rules import LocalEventDetector

    feeder = CommitFeeder(rules.detector)
    _feed(feeder, _rows(50, seed=2))
    blob = dump(feeder)
    assert retained(load(rules.detector, blob)) == retained(feeder)  # the same rules

    changed = LocalEventDetector()
    rules.events(changed)
    changed.explicit("refund")
    changed.rule(  # defined first: it takes the node numbers "paid" had
        "refunded",
        "(payment ; refund) by customer",
        action=rules.record,
        coupling="detached",
        context="chronicle",
        flush=False,
    )
    changed.rule(
        "paid",
        "(order ; payment) by customer",
        action=rules.record,
        coupling="detached",
        context="chronicle",
        flush=False,
    )
    for other in (changed, rules.lived):
        with pytest.raises(GlobalDetectorError, match="saved for other rules"):
            load(other, blob)
