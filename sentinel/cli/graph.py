"""``sentinel graph``: the event graph an application's rules compile to."""

from __future__ import annotations

from typing import Any

import click

from sentinel.cli.common import errors, load_reference

__all__ = ["graph_command"]


@click.command(name="graph")
@click.option(
    "--rules",
    "rules_ref",
    required=True,
    help="The application's rules: 'package.module:attribute' naming a LocalEventDetector "
    "or a zero-argument callable returning one.",
)
@click.option("--dot", is_flag=True, help="Print the graph in Graphviz DOT instead.")
@errors
def graph_command(rules_ref: str, dot: bool) -> None:
    """Show the event graph RULES compile to: one node per distinct sub-expression
    and parameter context in use, shared by the rules that need it.

    Pipe ``--dot`` into ``dot -Tsvg`` to draw it."""
    from sentinel.rules import LocalEventDetector

    det: LocalEventDetector = load_reference(rules_ref, (LocalEventDetector,))
    graph = det.graph
    graph.ensure()
    if dot:
        click.echo(_dot(det))
        return
    click.echo(f"{len(det.rules)} rule(s), {len(graph.handlers)} node(s) in use")
    for line in graph.describe():
        click.echo("  " + line)
    for rule in det.rules.values():
        state = "" if rule.enabled else " (disabled)"
        click.echo(
            f"  rule {rule.name}{state}: {rule.detected_expression} "
            f"[{rule.context}, {rule.coupling}, priority {rule.priority}]"
        )


def _dot(det: Any) -> str:
    """The graph as Graphviz DOT: primitive events, operator nodes per context,
    rules."""
    from sentinel.algebra import expressions as ex

    lines = ["digraph sentinel {", "  rankdir=BT;", '  node [fontname="Helvetica"];']

    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    ids: dict[Any, str] = {}
    for key, h in det.graph.handlers.items():
        expr, mode, _region = key
        ids[key] = f"h{h.hid}"
        label = f"{expr.op} ({mode.context}{'' if mode.flush else ', process-wide'})"
        lines.append(f"  h{h.hid} [shape=box, label={q(label)}, tooltip={q(str(expr))}];")
    leaves: set[str] = set()

    def source(child: Any, mode: Any, region: Any) -> str | None:
        if isinstance(child, ex.Keyed):
            inner = child.expression
            return (
                source(inner, mode, (*region, child))
                if not isinstance(inner, ex.Primitive)
                else source(inner, mode, region)
            )
        if isinstance(child, ex.Primitive):
            name = f"p_{abs(hash(child))}"
            if name not in leaves:
                leaves.add(name)
                lines.append(f"  {name} [shape=ellipse, label={q(child.label)}];")
            return name
        return ids.get((child, mode, region))

    for key in det.graph.handlers:
        expr, mode, region = key
        for slot, child in enumerate(expr.children):
            src = source(child, mode, region)
            if src is not None:
                lines.append(f"  {src} -> {ids[key]} [label={slot}];")
    for rule in det.rules.values():
        sub = rule._subscription
        name = f"r_{abs(hash(rule.name))}"
        lines.append(f"  {name} [shape=note, label={q('rule ' + rule.name)}];")
        src = source(sub.expression, sub.mode, ())
        if src is not None:
            lines.append(f"  {src} -> {name};")
    lines.append("}")
    return "\n".join(lines)
