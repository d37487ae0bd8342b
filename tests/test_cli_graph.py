"""``sentinel graph``: the event graph an application's rules compile to."""

from __future__ import annotations

import re
from typing import Any

import pytest
from click.testing import CliRunner

from sentinel import LocalEventDetector, parse
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


def keyed_rules() -> LocalEventDetector:
    det = LocalEventDetector()
    det.explicit("order")
    det.explicit("payment")
    det.rule("per_order", "(order ; payment) by order_id", action=print)
    det.rule("any_order", "order ; payment", action=print)
    det.rule("off", "payment ; order", action=print, enabled=False)
    return det


def test_dot_draws_a_disabled_rule_apart_and_names_a_nodes_partition() -> None:
    """A disabled rule was drawn as an active one, with an edge from its
    event; a node inside a partition had the same tooltip as the same
    expression outside it."""
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:keyed_rules", "--dot"]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (off,) = [line for line in lines if "rule off" in line]
    assert "style=dashed" in off and "(disabled)" in off
    name = off.split()[0]
    assert not [line for line in lines if line.rstrip(";").endswith(f"-> {name}")]
    tips = [line for line in lines if "tooltip=" in line]
    assert any('tooltip="order ; payment in (order ; payment) by order_id"' in t for t in tips)
    assert any('tooltip="order ; payment"' in t for t in tips)


@pytest.mark.parametrize(
    ("extra", "named"),
    [(["--dot", "--code"], "--dot and --code"), (["--dot", "--svg", "g.svg"], "--dot and --svg")],
)
def test_output_forms_are_alternatives(extra: list[str], named: str) -> None:
    """Two of --dot, --svg and --code: a usage error (the second was ignored)."""
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:shared_rules", *extra]
    )
    assert result.exit_code == 2, result.output
    assert f"{named} are alternatives: give one" in result.output


def test_a_bad_reference_is_one_line() -> None:
    result = CliRunner().invoke(main, ["graph", "--rules", "tests.no_such_module:x"])
    assert result.exit_code == 1
    assert "cannot import module 'tests.no_such_module'" in result.output


DEEP = 2000


def deep_rules(n: int = DEEP, lean: str = "left") -> LocalEventDetector:
    """One rule on e0 ; e1 ; ... (n - 1 sequences), left- or right-nested, inside
    a partition, and a short rule beside it."""
    det = LocalEventDetector()
    es = [det.explicit(f"e{i}") for i in range(n)]
    expr = es[0]
    if lean == "left":
        for e in es[1:]:
            expr = expr >> e
    else:
        expr = es[-1]
        for e in reversed(es[:-1]):
            expr = e >> expr
    det.rule("deep", (expr | es[0]).by("k"), action=print)
    det.rule("short", es[0] >> es[1], action=print)
    return det


def right_rules() -> LocalEventDetector:
    return deep_rules(lean="right")


def expand(output: str) -> dict[int, str]:
    """Each node's full text, its operands' #ids replaced by their own text (the
    reader's way through the listing), operands before the nodes that use them."""
    texts = dict(
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"^  #(\d+) \S+ h=\d+[^:]*: (.*) \(refs \d+\)$", output, re.M)
    )
    used = {hid: [int(r) for r in re.findall(r"#(\d+)", text)] for hid, text in texts.items()}
    full: dict[int, str] = {}
    for root in texts:
        on_path: set[int] = set()
        stack = [(root, False)]
        while stack:
            hid, operands_done = stack.pop()
            if operands_done:
                on_path.discard(hid)
                full[hid] = re.sub(
                    r"#(\d+)", lambda m: "(" + full[int(m.group(1))] + ")", texts[hid]
                )
                continue
            if hid in full:
                continue
            assert hid in texts, f"a reference to no node: #{hid}"
            assert hid not in on_path, f"a cycle through #{hid}"
            on_path.add(hid)
            stack.append((hid, True))
            stack.extend((r, False) for r in used[hid] if r not in full)
    return full


@pytest.mark.parametrize("rules", ["deep_rules", "right_rules"])
def test_a_deep_expression_is_listed_in_linear_size(rules: str) -> None:
    # Each node's line printed its whole sub-expression: about DEEP**2 / 2 event
    # names in all (millions of characters here).
    result = CliRunner().invoke(main, ["graph", "--rules", f"tests.test_cli_graph:{rules}"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # A header, one line per node (DEEP - 1 sequences, the OR, the short rule's
    # sequence), one per rule.
    assert len(lines) == 2 + DEEP + 1 + 2
    assert len(result.output) < 100 * DEEP
    assert max(map(len, lines)) < 400
    # What the listing says is the expression: expanded, the rule's node's
    # text parses to the rule's expression.
    det = deep_rules(lean="right" if rules == "right_rules" else "left")
    full = expand(result.output)
    rule_line = next(x for x in lines if x.startswith("  rule deep: "))
    ref = re.match(r"  rule deep: #(\d+) by k \[", rule_line)
    assert ref is not None, rule_line
    assert parse(full[int(ref.group(1))]) == parse(str(det.rules["deep"].event.expression))
    # The short rule reads as before.
    assert "  rule short: e0 ; e1 [recent, immediate, priority 0]" in lines


def test_a_deep_expression_draws_in_linear_size() -> None:
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:deep_rules", "--dot"]
    )
    assert result.exit_code == 0, result.output
    assert len(result.output) < 200 * DEEP


def partitioned_rules(n: int = 500) -> LocalEventDetector:
    """x(i+1) = (x(i) ; e1) by k: each level one partition deeper than the last."""
    det = LocalEventDetector()
    e0, e1 = det.explicit("e0"), det.explicit("e1")
    expr = e0
    for _ in range(n):
        expr = (expr >> e1).by("k")
    det.rule("deep", expr, action=print)
    return det


def test_nodes_in_deeply_nested_partitions_are_listed_in_linear_size() -> None:
    # A node n partitions deep listed every partition around it, each in full.
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:partitioned_rules"]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2 + 500 + 1
    assert max(map(len, lines)) < 400
    innermost = next(x for x in lines if x.endswith(": e0 ; e1 (refs 1)"))
    # The outermost partition (by the #id of what it partitions), how many
    # between, the innermost.
    assert re.search(r" in #\d+ by k / \.\.\. \(498 more\) / \(e0 ; e1\) by k: ", innermost)


def disabled_rules() -> LocalEventDetector:
    """The deep rule of :func:`deep_rules`, disabled, and one on an expression
    that uses each of its operands twice, 16 levels deep: 16 operators, whose text
    names an event 65,536 times."""
    det = deep_rules()
    det.rules["deep"].disable()
    e0 = det.explicit("x")
    shared: Any = e0
    for _ in range(16):
        shared = shared >> shared
    det.rule("doubled", shared, action=print, enabled=False)
    det.rule("small", "e0 ; e2", action=print, enabled=False)
    return det


def test_disabled_rules_are_listed_in_linear_size() -> None:
    # A disabled rule's nodes are not in the graph, so its line printed its
    # whole expression: 2000 events on one line, and 65,536 for the doubled one.
    result = CliRunner().invoke(main, ["graph", "--rules", "tests.test_cli_graph:disabled_rules"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) < 400
    deep = next(x for x in lines if x.startswith("  rule deep (disabled): "))
    doubled = next(x for x in lines if x.startswith("  rule doubled (disabled): "))
    # A prefix of the expression's text, then how much was left out and where
    # to see it whole.
    det = disabled_rules()
    for line, name, events in ((deep, "deep", 2001), (doubled, "doubled", 2**16)):
        text = str(det.rules[name].detected_expression)
        shown = re.match(rf"  rule {name} \(disabled\): (.*) \.\.\. \(", line)
        assert shown is not None, line
        assert text.startswith(shown.group(1)) and len(shown.group(1)) > 20
        assert f"{events:,} events in all" in line
        assert f"str(detector.rules['{name}'].detected_expression)" in line
    # Short expressions are printed whole.
    assert "  rule small (disabled): e0 ; e2 [recent, immediate, priority 0]" in lines


def chained_partition_rules() -> LocalEventDetector:
    """(e0 ; e1) by k0 by k1 ... by k1999: partitions straight inside each other."""
    det = LocalEventDetector()
    e0, e1 = det.explicit("e0"), det.explicit("e1")
    expr: Any = e0 >> e1
    for i in range(DEEP):
        expr = expr.by(f"k{i}")
    det.rule("deep", expr, action=print)
    return det


def test_thousands_of_chained_partitions_draw() -> None:
    # Finding a node's source went down the partitions recursively.
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:chained_partition_rules", "--dot"]
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"^  h1 -> r\d+;$", result.output, re.M), result.output


def code_rules() -> LocalEventDetector:
    det = LocalEventDetector()
    for name in ("A", "B", "C"):
        det.explicit(name)
    det.rule("a_then_b", "(A ; B) by key", action=print, context="chronicle")
    det.rule("big", "C", lambda occ: occ.params["x"] > 3, action=print)
    return det


def test_code_prints_each_leaf_the_detector_runs() -> None:
    """``--code`` shows the generated source of every listened event's leaf,
    the constants it names, and which events reach their rules directly; the
    source printed is the source that runs (it compiles, and the partition
    key it reads is the rule's)."""
    result = CliRunner().invoke(
        main, ["graph", "--rules", "tests.test_cli_graph:code_rules", "--code"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("# 3 leaf function(s) for 2 rule(s)")
    sections = result.output.split("\n# -- ")[1:]
    assert [s.splitlines()[0] for s in sections] == [
        "A",
        "B",
        "C: delivered straight to 'big'; the leaf below is not called",
    ]
    for section in sections:
        body = section.split("\n", 1)[1]
        compile(body, "<leaf>", "exec")  # the printed source is whole Python
    assert "# _c0 = 'key'" in sections[0]
    assert "occ[5].get(_c0, _MISSING)" in sections[0]  # partitioned by the key


def test_code_of_an_uncompiled_leaf_names_the_handlers() -> None:
    det = code_rules()
    det.graph.compile = False
    det.graph.rewire()
    leaves = dict(det.graph.code())
    assert leaves["A"].startswith("# calls ")
    assert "delivered straight" not in " ".join(leaves)  # no direct lists without the compiler
