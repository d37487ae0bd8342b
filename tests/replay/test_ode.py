"""Ode events and masks replay on Spark exactly as they ran online (their local
replay: tests/ode/test_replay.py). Here because the Spark session and its rules
file are this directory's fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from sentinel.replay import log_table, replay
from tests.ode.test_replay import _online, rule_specs
from tests.replay.test_equivalence import steps
from tests.replay.workload import RuleSpec, replayed, write_specs


@pytest.mark.spark
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(rule_specs(), steps.filter(lambda s: len(s) > 10))
def test_spark_replay_of_ode_events_finds_what_ran_online(
    spark: Any, rules_file: Path, specs: list[RuleSpec], workload: list[Any]
) -> None:
    online = _online(specs, workload)
    write_specs(rules_file, specs)
    result = replay(
        log_table(online.rows), "tests.replay.workload:spec_detector", engine="spark", spark=spark
    )
    assert replayed(result.rows()) == sorted(online.detections)
