"""The replay tests' SparkSession and rules file, for tests/ode/test_replay.py."""

from tests.replay.conftest import pytest_configure, rules_file, spark

__all__ = ["pytest_configure", "rules_file", "spark"]
