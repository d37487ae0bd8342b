"""``sentinel graph``: the event graph an application's rules compile to."""

from __future__ import annotations

from click.testing import CliRunner

from sentinel import LocalEventDetector
from sentinel.cli import main


def shared_rules() -> LocalEventDetector:
    det = LocalEventDetector()
    for name in ("E1", "E2", "E3"):
        det.explicit(name)
    det.rule("a", "E1 ; E2", action=print, context="chronicle")
    det.rule("b", "(E1 ; E2) ^ E3", action=print, context="chronicle")
    det.rule("c", "E1 ; E2", action=print, enabled=False)
    return det


def test_lists_shared_nodes_and_rules() -> None:
    result = CliRunner().invoke(main, ["graph", "--rules", "tests.test_cli_graph:shared_rules"])
    assert result.exit_code == 0, result.output
    assert "3 rule(s), 2 node(s) in use" in result.output  # E1 ; E2 is one node for a and b
    assert "SeqChronicle" in result.output and "(refs 2)" in result.output
    assert "rule c (disabled)" in result.output


def test_dot_output_draws_edges_to_rules() -> None:
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:shared_rules", "--dot"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("digraph sentinel {")
    assert result.output.count("shape=note") == 3
    assert "SEQ (chronicle)" in result.output


def test_a_bad_reference_is_one_line() -> None:
    result = CliRunner().invoke(main, ["graph", "--rules", "tests.no_such_module:x"])
    assert result.exit_code == 1
    assert "cannot import module 'tests.no_such_module'" in result.output
