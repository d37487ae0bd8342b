"""Live detections == local replay == Spark replay, over random ORM workloads
with nested savepoints (issue 11).

A hypothesis state machine drives sessions of the ORM test model: method calls
in and out of nested savepoints (released and rolled back, up to three deep),
flushes (database events), commits, rollbacks, conditions that raise (a rule
error dooms the innermost savepoint, or the transaction), conditions that are
false; the rules cover four contexts, the three coupling modes,
``flush=False`` and an Ode event. After each example, on SQLite and on PostgreSQL:

- the detections the actions saw (an independent record) are the rule-firing
  log's ``fired`` rows;
- the rule-firing log (every run, ``log_condition_false=True``) equals local
  replay of the event log, as multisets of (rule, scope, t_occ, constituents,
  the constituents' parameters, the condition's result);
- every constituent the firing log names is a row of the event log.

At the end of each test the whole log (every example) is exported and replayed
on Spark, which must give the same multiset. Rules with ``flush=False`` are
keyed by the source object and each example has stocks of its own, so examples
never combine each other's occurrences.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import hypothesis.strategies as st
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sentinel import SOURCE, LocalEventDetector, db_events
from sentinel.errors import RuleError, SentinelError
from sentinel.log import LogReader
from sentinel.params import dumps
from sentinel.replay import export_log, replay
from tests.orm.conftest import ORM, orm  # noqa: F401 - the fixture, used by name
from tests.orm.models import make_model

STOCKS = 2
#: Prices: 13 makes conditions raise, above 900 makes them false.
PRICES = st.sampled_from([1.0, 2.0, 5.0, 13.0, 950.0])
#: Detections the actions saw: (rule, scope, t_occ, constituents, parameters).
SEEN: list[tuple[Any, ...]] = []


def check(occ: Any) -> bool:
    """The rules' condition: raises on a price of 13, false above 900."""
    prices = [c.params.get("price") for c in occ.constituents]
    prices += [c.params["new"].get("price") for c in occ.constituents if "new" in c.params]
    if 13.0 in prices:
        raise ValueError("unlucky price")
    return not any(p is not None and p > 900 for p in prices)


def _params(occ: Any) -> tuple[Any, ...]:
    return tuple(json.loads(dumps(dict(c.params))) for c in occ.constituents)


def _canon(values: Any) -> str:
    return json.dumps(values, sort_keys=True)


def seen(name: str) -> Any:
    """The action of rule ``name`` (immediate or deferred): note the detection."""

    def action(occ: Any) -> None:
        SEEN.append(
            (
                name,
                str(occ.scope),
                occ.t_occ,
                tuple((str(c.scope), c.t_occ) for c in occ.constituents),
                _canon(_params(occ)),
            )
        )

    return action


def cheap(occ: Any) -> bool:
    """A condition that never raises: false above 900."""
    return not any(c.params.get("price", 0) > 900 for c in occ.constituents)


#: (name, expression, options): four contexts, three couplings, flush=False.
#: The conditions that raise have the lowest priority and only rules that flush
#: have them: a condition that raises stops the instant's other rules online,
#: and replay runs rules with flush=False in a pass of their own (docs/replay.md).
RAISES = {"priority": -1, "condition": check}
RULES: list[tuple[str, str, dict[str, Any]]] = [
    ("seq", "Stock.e2 ; Stock.e1", RAISES),
    ("seq_chronicle", "Stock.e2 ; Stock.e1", {"context": "chronicle", "condition": cheap}),
    ("and_continuous", "Stock.e1 ^ Stock.e3", {"context": "continuous", **RAISES}),
    ("updated", "Stock.e2 ; Stock:update", {"context": "cumulative", **RAISES}),
    ("deferred", "Stock.e1", {"coupling": "deferred", "context": "cumulative"}),
    ("detached", "Stock.e2 ; Stock.e1", {"coupling": "detached"}),
    ("independent", "Stock.e3 ; Stock.e1", {"coupling": "detached_independent"}),
    ("spans", "Stock.e2 ; Stock.e1", {"context": "chronicle", "flush": False, "key": SOURCE}),
    ("spans_recent", "Stock.e3 ; Stock.e1", {"flush": False, "key": SOURCE, "condition": cheap}),
    ("ode", "ode{prior(Stock.e2, Stock.e1) over (Stock.e2, Stock.e1, Stock.e3)}", {}),
]


def define_rules(det: LocalEventDetector) -> LocalEventDetector:
    import sentinel.ode  # noqa: F401 - the ode{...} syntax
    from tests.orm import actions

    for name, expr, options in RULES:
        detached = str(options.get("coupling", "")).startswith("detached")
        action = actions.record if detached else seen(name)
        det.rule(name, expr, action=action, **options)
    return det


def replay_rules() -> LocalEventDetector:
    """The rules for replay (Spark's workers import this)."""
    det = LocalEventDetector()
    _ = db_events(make_model(det).Stock).update  # defines the name Stock:update
    return define_rules(det)


def _runs(rows: Any, since: int = 0) -> Counter[tuple[Any, ...]]:
    """Replay output as a multiset of detections (detached: no condition), from
    ``t_occ`` ``since`` on."""
    return Counter(
        (
            r["rule"],
            r["scope"],
            r["t_occ"],
            tuple(zip(r["constituent_scopes"], r["constituent_t_occs"], strict=True)),
            _canon(json.loads(r["params"])),
            None if r["coupling"].startswith("detached") else r["condition"],
        )
        for r in rows
        if r["t_occ"] >= since
    )


_CONDITION = {"fired": True, "condition_false": False, "failed": None}


class Logged:
    """The log of one test's database: firings and event ids (the runs of
    detections from ``t_occ`` ``since`` on)."""

    def __init__(self, world: ORM, since: int = 0) -> None:
        for att in world.attached:
            att.flush_log()
        with LogReader(world.engine) as reader:
            rows = list(reader.occurrences())
            firings = list(reader.firings())
            outbox = list(reader.outbox())
        self.ids = Counter((r.occurrence.scope, r.occurrence.t_occ) for r in rows)
        params = {
            (r.occurrence.scope, r.occurrence.t_occ): json.loads(dumps(dict(r.occurrence.params)))
            for r in rows
        }
        # one row per rule run: immediate and deferred as they ended (the
        # firing log), detached as they were enqueued (the outbox: an aborted
        # transaction's independent ones have no "pending" firing)
        self.runs: Counter[tuple[Any, ...]] = Counter()
        self.fired: Counter[tuple[Any, ...]] = Counter()
        self.constituents: set[tuple[str, int]] = set()
        for f in firings:
            if f.t_occ < since:
                continue
            self.constituents.update(f.constituents)
            if f.status not in _CONDITION or f.coupling.startswith("detached"):
                continue
            cons = tuple(f.constituents)
            p = _canon([params.get(c) for c in cons])
            self.runs[(f.rule, f.scope, f.t_occ, cons, p, _CONDITION[f.status])] += 1
            if f.status == "fired":
                self.fired[(f.rule, f.scope, f.t_occ, cons, p)] += 1
        for e in outbox:
            if e.t_occ < since:
                continue
            cons = tuple((str(c.scope), c.t_occ) for c in e.constituents)
            self.constituents.update(cons)
            p = _canon([params.get(c) for c in cons])
            self.runs[(e.rule, e.scope, e.t_occ, cons, p, None)] += 1


class Workload(RuleBasedStateMachine):
    """One example: stocks of its own, then sessions, savepoints and calls."""

    def __init__(self, world: ORM, runs: list[int]) -> None:
        super().__init__()
        runs[0] += 1
        self.world = world
        #: This example's occurrences and detections have t_occ from here on.
        self.since = world.det.clock + 1
        self.ids = world.add_stocks(*(f"x{runs[0]}.{i}" for i in range(STOCKS)))
        self.session: Any = None
        self.savepoints: list[Any] = []

    # -- helpers -------------------------------------------------------------------
    def _session(self) -> Any:
        if self.session is None:
            self.session = self.world.Session()
        return self.session

    def _end(self, commit: bool) -> None:
        s, self.session, self.savepoints = self.session, None, []
        try:
            if commit:
                s.commit()
        except (SentinelError, sa.exc.SQLAlchemyError):
            s.rollback()
        finally:
            s.close()

    def _doomed(self) -> None:
        """A rule failed: roll back what it doomed (the innermost savepoint, or
        the transaction)."""
        if self.savepoints:
            self.savepoints.pop().rollback()
        else:
            self._end(commit=False)

    # -- the workload ----------------------------------------------------------------
    @rule(k=st.integers(0, STOCKS - 1), price=PRICES)
    def set_price(self, k: int, price: float) -> None:
        try:
            self._session().get(self.world.model.Stock, self.ids[k]).set_price(price)
        except RuleError:
            self._doomed()

    @rule(k=st.integers(0, STOCKS - 1), qty=st.integers(1, 3))
    def sell(self, k: int, qty: int) -> None:
        try:
            self._session().get(self.world.model.Stock, self.ids[k]).sell_stock(qty)
        except RuleError:
            self._doomed()

    @precondition(lambda self: self.session is not None)
    @rule()
    def flush(self) -> None:
        try:
            self.session.flush()
        except (SentinelError, sa.exc.SQLAlchemyError):
            self._end(commit=False)

    @precondition(lambda self: self.session is not None and len(self.savepoints) < 3)
    @rule()
    def begin_nested(self) -> None:
        try:
            self.savepoints.append(self.session.begin_nested())
        except (SentinelError, sa.exc.SQLAlchemyError):  # its flush failed
            self._end(commit=False)

    @precondition(lambda self: bool(self.savepoints))
    @rule()
    def release(self) -> None:
        try:
            self.savepoints.pop().commit()
        except (SentinelError, sa.exc.SQLAlchemyError):
            self._end(commit=False)

    @precondition(lambda self: bool(self.savepoints))
    @rule()
    def rollback_savepoint(self) -> None:
        self.savepoints.pop().rollback()

    @precondition(lambda self: self.session is not None)
    @rule()
    def commit(self) -> None:
        self._end(commit=True)

    @precondition(lambda self: self.session is not None)
    @rule()
    def rollback(self) -> None:
        self._end(commit=False)

    def teardown(self) -> None:
        if self.session is not None:
            self._end(commit=True)
        since = self.since
        logged = Logged(self.world, since)
        # every constituent the firing log names is a row of the event log
        assert logged.constituents <= set(logged.ids)
        assert all(n == 1 for n in logged.ids.values())
        # what the actions saw is what the firing log says fired
        assert Counter(d for d in SEEN if d[2] >= since) == logged.fired
        # local replay finds every run the firing log holds, and nothing else
        result = replay(self.world.engine, self.world.det)
        assert _runs(result.rows(), since) == logged.runs


EXAMPLES = {"sqlite": 25, "postgresql": 10}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_live_equals_replay_under_savepoints(orm: ORM, spark: Any, tmp_path: Any) -> None:  # noqa: F811
    define_rules(orm.det)
    orm.attach(log_condition_false=True)
    SEEN.clear()
    runs = [0]
    run_state_machine_as_test(
        lambda: Workload(orm, runs),
        settings=settings(
            max_examples=EXAMPLES[orm.backend],
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
    # the whole log, every example, on Spark
    logged = Logged(orm)
    export_log(orm.engine, tmp_path / "export", buckets=3)
    on_spark = replay(
        tmp_path / "export",
        "tests.replay.test_savepoint_stateful:replay_rules",
        engine="spark",
        spark=spark,
        partitions=2,
    )
    assert _runs(on_spark.rows()) == logged.runs
    assert sum(logged.runs.values()) > 50  # the workload did detect
