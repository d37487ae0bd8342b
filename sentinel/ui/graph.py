"""The event graph as an SVG picture, laid out in Python (no Graphviz, no script).

:func:`graph_of` reads a detector's graph as ``sentinel graph --dot`` does:
one node per primitive event, one per operator node in use (an operator in one
parameter context), one per rule, and an edge from each operand to the node
that uses it (labelled with the operand's slot). :func:`layout` places them in
layers, a simple form of Sugiyama's method: each node one layer below its
lowest operand (events on top, rules at the bottom), then the nodes of each
layer ordered by the mean position of their neighbours, a few sweeps down and
up, to uncross edges. :func:`svg` draws the result; each node carries its
sub-expression's text in a ``data-text`` attribute, and the language of that
text in ``data-lang``, which the page shows when the node is clicked: Snoop
text (as ``sentinel graph`` prints it; an Ode event inside it as its
``ode{...}`` block), or, for an Ode event's own node, its Ode text. BiCEPL
classes are not nodes of this graph (they run as SQL on the application's
database); the events their actions raise are primitive events here.

Every text in the SVG is escaped here (the SVG is inserted into the page as
markup), so a rule or event named ``<script>`` is drawn as those characters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from markupsafe import Markup, escape

from sentinel.rules.rule import expression_text

__all__ = ["Graph", "Node", "graph_of", "layout", "svg"]

#: Nodes drawn at most; a larger graph is cut, and the picture says so.
MAX_NODES = 400
_CHAR = 7.2  # width of a character of the node font, in SVG units
_PAD = 18
_HEIGHT = 30
_GAP_X = 22
_GAP_Y = 64
_MARGIN = 16
_SWEEPS = 4


@dataclass
class Node:
    """A node of the picture: ``kind`` is ``event``, ``operator`` or ``rule``;
    ``label`` is drawn, ``text`` (in ``language``) shown when the node is clicked."""

    id: str
    kind: str
    label: str
    text: str
    disabled: bool = False
    language: str = "Snoop"
    layer: int = 0
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0


@dataclass
class Graph:
    """Nodes (in the order met) and edges ``(source id, target id, slot)``."""

    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[tuple[str, str, int | None]] = field(default_factory=list)
    cut: int = 0  #: nodes left out (over :data:`MAX_NODES`)


def graph_of(det: Any) -> Graph:
    """The graph ``det``'s rules compile to (a
    :class:`~sentinel.rules.LocalEventDetector`), nodes in a stable order."""
    from sentinel.algebra import expressions as ex
    from sentinel.detector.regions import ROOT

    g = Graph()
    graph = det.graph
    graph.ensure()
    ids: dict[Any, str] = {}
    handlers = sorted(graph.handlers.items(), key=lambda kv: kv[1].hid)
    for key, h in handlers:
        expr, mode, region = key
        ids[key] = f"h{h.hid}"
        where = "" if mode.flush else ", process-wide"
        language, text = _language(expr, partial(_snoop_text, graph, expr, mode, region))
        g.nodes[ids[key]] = Node(
            ids[key],
            "operator",
            f"#{h.hid} {expr.op} ({mode.context}{where})",
            text,
            language=language,
        )
    leaves: dict[Any, str] = {}

    def source(child: Any, mode: Any, region: Any) -> str | None:
        while isinstance(child, ex.Keyed):  # a loop: partitions nested to any depth
            inner = child.expression
            if not isinstance(inner, ex.Primitive):
                region = region.inside(child)
            child = inner
        if isinstance(child, ex.Primitive):
            name = leaves.get(child)
            if name is None:
                name = leaves[child] = f"p{len(leaves)}"
                g.nodes[name] = Node(name, "event", child.label, str(child))
            return name
        return ids.get((child, mode, region))

    for key, _h in handlers:
        expr, mode, region = key
        for slot, child in enumerate(expr.children):
            src = source(child, mode, region)
            if src is not None:
                g.edges.append((src, ids[key], slot))
    for n, rule in enumerate(det.rules.values()):
        name = f"r{n}"
        sub = rule._subscription
        text = (
            f"rule {rule.name}: {expression_text(rule)}\n"
            f"{rule.context} context, {rule.coupling} coupling, priority {rule.priority}"
            + ("" if rule.enabled else ", disabled")
        )
        g.nodes[name] = Node(name, "rule", f"rule {rule.name}", text, disabled=not rule.enabled)
        src = source(sub.expression, sub.mode, ROOT) if rule.enabled else None
        if src is not None:
            g.edges.append((src, name, None))
    if len(g.nodes) > MAX_NODES:
        keep = dict(list(g.nodes.items())[:MAX_NODES])
        g.cut = len(g.nodes) - len(keep)
        g.nodes = keep
        g.edges = [e for e in g.edges if e[0] in keep and e[1] in keep]
    return g


def _snoop_text(graph: Any, expr: Any, mode: Any, region: Any) -> str:
    """A node's Snoop text as ``sentinel graph`` prints it, with the partitions
    it sits in (``in (A ; B) by k``)."""
    return f"{graph.text(expr, mode, region)}{graph.where(mode, region)}"


def _language(expr: Any, snoop: Callable[[], str]) -> tuple[str, str]:
    """The language a node's sub-expression reads best in, and its text there:
    an Ode event's own Ode text, else Snoop text (``snoop()``)."""
    if getattr(expr, "op", None) == "ODE":
        from sentinel.ode.event import OdeEvent
        from sentinel.ode.syntax import event_text

        if isinstance(expr, OdeEvent):
            return "Ode", event_text(expr.term, expr.over)
    return "Snoop", snoop()


def layout(g: Graph) -> tuple[float, float]:
    """Place ``g``'s nodes (their ``layer``, ``x``, ``y``, ``width``); return the
    picture's width and height."""
    preds: dict[str, list[str]] = {n: [] for n in g.nodes}
    succs: dict[str, list[str]] = {n: [] for n in g.nodes}
    for a, b, _slot in g.edges:
        preds[b].append(a)
        succs[a].append(b)
    # Layers: longest path from the events (nodes come operands first: handler
    # ids grow with creation, and an operand's node is created before its user's,
    # but a loop until nothing moves does not rely on it).
    changed = True
    rounds = 0
    while changed and rounds <= len(g.nodes):
        changed = False
        rounds += 1
        for n, node in g.nodes.items():
            want = max((g.nodes[p].layer + 1 for p in preds[n]), default=0)
            if want != node.layer:
                node.layer = want
                changed = True
    bottom = max((n.layer for n in g.nodes.values() if n.kind != "rule"), default=-1) + 1
    for node in g.nodes.values():
        if node.kind == "rule":
            node.layer = bottom
        elif node.kind == "event":
            node.layer = 0
    layers: list[list[str]] = [[] for _ in range(bottom + 1)]
    for n, node in g.nodes.items():
        layers[node.layer].append(n)
    pos = {n: float(i) for layer in layers for i, n in enumerate(layer)}
    for sweep in range(_SWEEPS):
        down = sweep % 2 == 0
        order = layers[1:] if down else list(reversed(layers[:-1]))
        for layer in order:
            near = preds if down else succs

            def centre(n: str, near: dict[str, list[str]] = near) -> float:
                others = near[n]
                return sum(pos[o] for o in others) / len(others) if others else pos[n]

            layer.sort(key=centre)
            for i, n in enumerate(layer):
                pos[n] = float(i)
    widths = []
    for layer in layers:
        w = 0.0
        for n in layer:
            node = g.nodes[n]
            node.width = max(60.0, len(node.label) * _CHAR + 2 * _PAD)
            w += node.width + _GAP_X
        widths.append(max(0.0, w - _GAP_X))
    full = max(widths, default=0.0)
    for i, layer in enumerate(layers):
        x = _MARGIN + (full - widths[i]) / 2
        for n in layer:
            node = g.nodes[n]
            node.x = x
            node.y = _MARGIN + i * (_HEIGHT + _GAP_Y)
            x += node.width + _GAP_X
    return full + 2 * _MARGIN, len(layers) * (_HEIGHT + _GAP_Y) - _GAP_Y + 2 * _MARGIN


def svg(g: Graph) -> Markup:
    """``g`` laid out and drawn as an ``<svg>`` element (escaped markup)."""
    if not g.nodes:
        return Markup("")
    width, height = layout(g)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" id="graph" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        'role="img" aria-label="the event graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/>'
        "</marker></defs>",
    ]
    for a, b, slot in g.edges:
        s, t = g.nodes[a], g.nodes[b]
        x1, y1 = s.x + s.width / 2, s.y + _HEIGHT
        x2, y2 = t.x + t.width / 2, t.y
        mid = (y1 + y2) / 2
        parts.append(
            f'<path class="edge" d="M {x1:.1f} {y1:.1f} C {x1:.1f} {mid:.1f} {x2:.1f} '
            f'{mid:.1f} {x2:.1f} {y2:.1f}" marker-end="url(#arrow)"/>'
        )
        if slot is not None:
            parts.append(
                f'<text class="slot" x="{(x1 + x2) / 2 + 4:.1f}" y="{mid:.1f}">{slot}</text>'
            )
    for node in g.nodes.values():
        cls = f"node {node.kind}" + (" disabled" if node.disabled else "")
        rx = 14 if node.kind == "event" else 3
        parts.append(
            f'<g class="{cls}" data-node="{escape(node.id)}" data-text="{escape(node.text)}" '
            f'data-lang="{escape(node.language)}" '
            f'tabindex="0"><title>{escape(node.text)}</title>'
            f'<rect x="{node.x:.1f}" y="{node.y:.1f}" width="{node.width:.1f}" '
            f'height="{_HEIGHT}" rx="{rx}"/>'
            f'<text x="{node.x + node.width / 2:.1f}" y="{node.y + _HEIGHT / 2 + 4:.1f}">'
            f"{escape(node.label)}</text></g>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
