"""Online detections == local replay == Spark replay.

Hypothesis draws rules (random expressions over E1..E4 and the transaction
events, in every context and coupling mode, some with ``flush=False``) and
workloads (interleaved transactions that commit, abort, or abort after
pre-commit, and events outside any transaction); the detections a detector made
online must be exactly those replay finds in the log it wrote. The fixed large
log is in ``test_large_log.py``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel import A, Astar, Context, Coupling, Not, Primitive
from sentinel import Any as AnyOf
from sentinel.algebra import expressions as ex
from sentinel.log import migrate
from sentinel.replay import log_table, replay
from tests.replay.workload import (
    CONDITIONS,
    EVENTS,
    Online,
    RuleSpec,
    build,
    matrix_detector,
    random_steps,
    replayed,
    run_steps,
    write_specs,
)

leaves = st.sampled_from([*EVENTS, *EVENTS, "txn:begin", "txn:commit"]).map(Primitive)


def _extend(children: st.SearchStrategy[ex.Expression]) -> st.SearchStrategy[ex.Expression]:
    pair = st.tuples(children, children)
    triple = st.tuples(children, children, children)
    return st.one_of(
        pair.map(lambda p: p[0] | p[1]),
        pair.map(lambda p: p[0] & p[1]),
        pair.map(lambda p: p[0] >> p[1]),
        triple.map(lambda t: A(*t)),
        triple.map(lambda t: Astar(*t)),
        triple.map(lambda t: Not(t[1], t[0], t[2])),
        st.lists(children, min_size=2, max_size=3, unique=True).flatmap(
            lambda cs: st.integers(1, len(cs)).map(lambda m: AnyOf(m, *cs))
        ),
        children.map(lambda c: c.by("k")),
    )


expressions = st.recursive(leaves, _extend, max_leaves=4)


@st.composite
def rule_specs(draw: st.DrawFn) -> list[RuleSpec]:
    specs = []
    for i in range(draw(st.integers(1, 4))):
        coupling = draw(st.sampled_from(list(Coupling)))
        context = draw(st.sampled_from(list(Context)))
        flush = coupling is Coupling.DEFERRED or draw(st.booleans()) or draw(st.booleans())
        specs.append(
            RuleSpec(
                f"r{i}",
                str(draw(expressions)),
                context.value,
                coupling.value,
                draw(st.sampled_from(list(CONDITIONS))),
                flush=flush,
                priority=draw(st.integers(-1, 1)),
            )
        )
    return specs


slots = st.integers(-1, 3)
steps = st.lists(
    st.one_of(
        st.just(("begin",)),
        st.tuples(
            st.just("signal"),
            slots,
            st.sampled_from(EVENTS),
            st.integers(0, 2),
            st.integers(0, 9),
            st.booleans(),
        ),
        st.tuples(st.just("end"), slots, st.sampled_from(["commit", "abort", "late_abort"])),
    ),
    max_size=40,
)


def _online(specs: list[RuleSpec], workload: list[Any]) -> Online:
    online = Online(build(specs))
    run_steps(online, workload)
    return online


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule_specs(), steps)
def test_local_replay_finds_what_ran_online(specs: list[RuleSpec], workload: list[Any]) -> None:
    online = _online(specs, workload)
    result = replay(log_table(online.rows), build(specs))
    assert replayed(result.rows()) == sorted(online.detections)


def test_replay_from_each_database_backend(engine: sa.Engine) -> None:
    """Every context and coupling mode, through the log tables of SQLite,
    PostgreSQL and MariaDB (written with LogWriter as the run went)."""
    migrate.upgrade(engine)
    online = Online(matrix_detector(), engine)
    run_steps(online, random_steps(random.Random(7), 60, size=15))
    assert len({s for _, _, s, *_ in online.detections}) > 30
    result = replay(engine, "tests.replay.workload:matrix_detector", chunk_size=97)
    assert result.events == len(online.rows)
    assert replayed(result.rows()) == sorted(online.detections)


@pytest.mark.spark
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(rule_specs(), steps.filter(lambda s: len(s) > 10))
def test_spark_replay_finds_what_ran_online(
    spark: Any, rules_file: Path, specs: list[RuleSpec], workload: list[Any]
) -> None:
    online = _online(specs, workload)
    write_specs(rules_file, specs)
    result = replay(
        log_table(online.rows), "tests.replay.workload:spec_detector", engine="spark", spark=spark
    )
    assert replayed(result.rows()) == sorted(online.detections)
