"""``sentinel graph``: the event graph an application's rules compile to."""

from __future__ import annotations

from typing import Any

import click

from sentinel.cli.common import EnvOption, errors, load_reference

__all__ = ["graph_command"]


@click.command(name="graph")
@click.option(
    "--rules",
    "rules_ref",
    cls=EnvOption,
    envvar="SENTINEL_RULES",
    required=True,
    help="The application's rules: 'package.module:attribute' naming a LocalEventDetector "
    "or a zero-argument callable returning one. Or set SENTINEL_RULES.",
)
@click.option("--dot", is_flag=True, help="Print the graph in Graphviz DOT instead.")
@click.option(
    "--svg",
    "svg",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Draw the graph into this SVG file (needs Graphviz's dot program).",
)
@click.option(
    "--code",
    is_flag=True,
    help="Print the Python each listened event runs (the leaf compiler's generated source).",
)
@errors
def graph_command(rules_ref: str, dot: bool, svg: str | None, code: bool) -> None:
    """Show the event graph RULES compile to: one node per distinct sub-expression
    and parameter context in use, shared by the rules that need it.

    \b
    Each node line reads
      #id OperatorContext h=height [buffered] [process-wide]: expression (refs n)
    \b
    - #id: the node's number;
    - OperatorContext: its operator in one parameter context (SeqChronicle);
    - h: its height: an occurrence reaches nodes in increasing height, so a node
      has all its inputs of one instant before it runs;
    - buffered: one occurrence can reach the node along several paths, so it
      collects them before it runs;
    - process-wide: for rules with flush=False, its state outlives transactions;
    - refs: how many rules use the node;
    - expression: the node's sub-expression; in a long one, each long operand
      is written as the #id of its own node's line.

    Then one line per rule: the expression it detects (a deferred rule's is
    wrapped in A*(txn:begin, ..., txn:pre_commit)), its context, coupling and
    priority. A disabled rule has no nodes: a long expression of one is cut
    after a line's worth, with the number of events it names. --dot prints
    Graphviz DOT; --svg FILE draws it with Graphviz; --code prints, for each
    listened event, the function the detector generated to run for it (the
    nodes' code inlined up to the rules), and says which events reach their
    rules without it.
    """
    from sentinel.rules import LocalEventDetector

    chosen = [o for o, on in (("--dot", dot), ("--svg", svg is not None), ("--code", code)) if on]
    if len(chosen) > 1:
        raise click.UsageError(f"{' and '.join(chosen)} are alternatives: give one")
    det: LocalEventDetector = load_reference(rules_ref, (LocalEventDetector,))
    graph = det.graph
    graph.ensure()
    if dot:
        click.echo(_dot(det))
        return
    if code:
        leaves = graph.code()
        click.echo(f"# {len(leaves)} leaf function(s) for {len(det.rules)} rule(s)")
        for heading, text in leaves:
            click.echo(f"\n# -- {heading}")
            click.echo(text.rstrip("\n"))
        return
    if svg is not None:
        _draw(_dot(det), svg)
        click.echo(f"drew {len(graph.handlers)} node(s) and {len(det.rules)} rule(s) into {svg}")
        return
    click.echo(f"{len(det.rules)} rule(s), {len(graph.handlers)} node(s) in use")
    click.echo("  (#id OperatorContext h=height: expression (refs: rules using it); see --help)")
    for line in graph.describe():
        click.echo("  " + line)
    from sentinel.rules.rule import expression_text

    for rule in det.rules.values():
        state = "" if rule.enabled else " (disabled)"
        click.echo(
            f"  rule {rule.name}{state}: {expression_text(rule)} "
            f"[{rule.context}, {rule.coupling}, priority {rule.priority}]"
        )


def _draw(source: str, path: str) -> None:
    """Render DOT ``source`` as SVG into ``path`` with Graphviz's ``dot``."""
    import shutil
    import subprocess

    exe = shutil.which("dot")
    if exe is None:
        raise click.ClickException(
            "--svg needs Graphviz's dot program, which is not installed (Debian: apt-get "
            "install graphviz; macOS: brew install graphviz); --dot prints the graph as DOT "
            "to draw elsewhere"
        )
    done = subprocess.run(
        [exe, "-Tsvg", "-o", path], input=source, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise click.ClickException(f"Graphviz's dot failed: {done.stderr.strip()}")


def _dot(det: Any) -> str:
    """The graph as Graphviz DOT: primitive events, operator nodes per context,
    rules."""
    from sentinel.algebra import expressions as ex
    from sentinel.detector.regions import ROOT

    lines = ["digraph sentinel {", "  rankdir=BT;", '  node [fontname="Helvetica"];']

    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    ids: dict[Any, str] = {}
    for key, h in det.graph.handlers.items():
        expr, mode, region = key
        ids[key] = f"h{h.hid}"
        label = f"{expr.op} ({mode.context}{'' if mode.flush else ', process-wide'})"
        tip = det.graph.text(expr, mode, region) + det.graph.where(mode, region)
        lines.append(f"  h{h.hid} [shape=box, label={q(label)}, tooltip={q(tip)}];")
    # Names made from the order nodes are met in (never from ``hash``: string
    # hashes differ from process to process, and the output must not).
    leaves: dict[Any, str] = {}

    def source(child: Any, mode: Any, region: Any) -> str | None:
        # A loop, not recursion: partitions nested to any depth.
        while isinstance(child, ex.Keyed):
            inner = child.expression
            if not isinstance(inner, ex.Primitive):
                region = region.inside(child)
            child = inner
        if isinstance(child, ex.Primitive):
            name = leaves.get(child)
            if name is None:
                name = leaves[child] = f"p{len(leaves)}"
                lines.append(f"  {name} [shape=ellipse, label={q(child.label)}];")
            return name
        return ids.get((child, mode, region))

    for key in det.graph.handlers:
        expr, mode, region = key
        for slot, child in enumerate(expr.children):
            src = source(child, mode, region)
            if src is not None:
                lines.append(f"  {src} -> {ids[key]} [label={slot}];")
    for n, rule in enumerate(det.rules.values()):
        sub = rule._subscription
        name = f"r{n}"
        if not rule.enabled:  # no nodes of its own: drawn apart, dashed, with no edge
            label = q(f"rule {rule.name} (disabled)")
            lines.append(f"  {name} [shape=note, style=dashed, label={label}];")
            continue
        lines.append(f"  {name} [shape=note, label={q('rule ' + rule.name)}];")
        src = source(sub.expression, sub.mode, ROOT)
        if src is not None:
            lines.append(f"  {src} -> {name};")
    lines.append("}")
    return "\n".join(lines)
