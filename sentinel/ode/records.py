"""Why an Ode event occurred: reading a detection's record.

A detection of an Ode event is a :class:`~sentinel.CompositeOccurrence` whose
``parts`` are its *record* (the paper's occurrence tuple, section 4, in the shape
of the expression): primitive occurrences where the operands were satisfied, and
composites labelled with a sub-expression (:class:`~sentinel.ode.OdePart`) for
the points a sub-expression was satisfied before the detection: the split point
of each ``relative`` (the latest one that works), the delimiter of ``/+`` and
``/``, the occurrences counted by ``<n>``, a correlation variable's point. Negated
operands contribute nothing (an absence has no witness). ``constituents``
flattens the record; the firing log and replay store those.
"""

from __future__ import annotations

from typing import Any

from sentinel.occurrence import CompositeOccurrence, Occurrence

__all__ = ["binding", "explain", "occurrence_tuple"]


def binding(detection: Any) -> dict[str, Any]:
    """The attribute value a detection is for (``{"I": 121}`` for
    ``complete(I)``), or ``{}``."""
    from sentinel.ode.attributes import Bound

    expr = detection.expression if isinstance(detection, CompositeOccurrence) else None
    if isinstance(expr, Bound):
        return {expr.variable: expr.value}
    return {}


def occurrence_tuple(detection: Any) -> tuple[tuple[str, Occurrence], ...]:
    """The record as ``(sub-expression, terminating occurrence)`` pairs in
    pre-order: first the detected expression at its terminator, then each
    labelled part (a sub-expression at the point it was satisfied), primitive
    parts as their event's name."""
    out: list[tuple[str, Occurrence]] = []

    def walk(occ: Any, label: str) -> None:
        if len(occ) == 8:
            out.append((label, occ))
            return
        comp = occ if isinstance(occ, CompositeOccurrence) else CompositeOccurrence(*occ)
        out.append((label, comp.terminator))
        for p in comp.parts:
            walk(p, p.event)

    walk(
        detection,
        str(detection.expression) if not isinstance(detection, Occurrence) else detection.event,
    )
    return tuple(out)


def explain(detection: Any) -> str:
    """The record as an indented tree (one line per part, with ``t_occ``)."""
    lines: list[str] = []

    def walk(occ: Any, depth: int) -> None:
        pad = "  " * depth
        if len(occ) == 8:
            lines.append(f"{pad}{occ.event} @{occ.t_occ}")
            return
        comp = occ if isinstance(occ, CompositeOccurrence) else CompositeOccurrence(*occ)
        lines.append(f"{pad}{comp.event} @{comp.t_occ}")
        for p in comp.parts:
            walk(p, depth + 1)

    walk(detection, 0)
    return "\n".join(lines)
