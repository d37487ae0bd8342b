"""Detection strategies: one class per operator and parameter context.

:func:`handler_class` picks the strategy once, when the graph is built, so the
per-event path never re-decides the context.
"""

from __future__ import annotations

from sentinel.algebra import expressions as ex
from sentinel.detector.contexts import Context
from sentinel.detector.operators import aperiodic, conj, disj, negation, seq
from sentinel.detector.operators.base import Entry, Handler, composite

__all__ = ["Entry", "Handler", "composite", "handler_class"]

R, CH, CO, CU, U = (
    Context.RECENT,
    Context.CHRONICLE,
    Context.CONTINUOUS,
    Context.CUMULATIVE,
    Context.UNRESTRICTED,
)

_STRATEGIES: dict[type[ex.Expression], dict[Context, type[Handler]]] = {
    ex.Seq: {
        R: seq.SeqRecent,
        CH: seq.SeqChronicle,
        CO: seq.SeqContinuous,
        CU: seq.SeqCumulative,
        U: seq.SeqUnrestricted,
    },
    ex.And: {
        R: conj.AndRecent,
        CH: conj.AndChronicle,
        CO: conj.AndContinuous,
        CU: conj.AndCumulative,
        U: conj.AndUnrestricted,
    },
    ex.Any: {
        R: conj.AnyRecent,
        CH: conj.AnyChronicle,
        CO: conj.AnyContinuous,
        CU: conj.AnyCumulative,
        U: conj.AnyUnrestricted,
    },
    ex.Or: dict.fromkeys(Context, disj.OrHandler),
    ex.A: {
        R: aperiodic.ARecent,
        CH: aperiodic.AChronicle,
        CO: aperiodic.AContinuous,
        CU: aperiodic.ACumulative,
        U: aperiodic.AUnrestricted,
    },
    ex.Astar: {
        R: aperiodic.AstarRecent,
        CH: aperiodic.AstarChronicle,
        CO: aperiodic.AstarContinuous,
        CU: aperiodic.AstarCumulative,
        U: aperiodic.AstarUnrestricted,
    },
    ex.Not: {
        R: negation.NotRecent,
        CH: negation.NotChronicle,
        CO: negation.NotContinuous,
        CU: negation.NotCumulative,
        U: negation.NotUnrestricted,
    },
}


def register(expr_type: type[ex.Expression], strategies: dict[Context, type[Handler]]) -> None:
    """Register the strategies of an operator defined by another layer (temporal)."""
    _STRATEGIES[expr_type] = dict(strategies)


def handler_class(expr: ex.Expression, context: Context) -> type[Handler]:
    """The strategy detecting ``expr``'s operator in ``context``."""
    kind = type(expr)
    try:
        return _STRATEGIES[kind][context]
    except KeyError:
        raise TypeError(f"no detection strategy for {kind.__name__} in {context}") from None
