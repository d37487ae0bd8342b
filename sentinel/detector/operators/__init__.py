"""Detection strategies: one class per operator and parameter context.

Each strategy class says which operator it detects in which contexts with the
:func:`~sentinel.detector.operators.base.strategy` decorator, in its own module
(``seq.py`` has ``SeqRecent``, ``SeqChronicle``, ...); each expression class
names that module (``Expression.strategies``). :func:`handler_class` picks the
strategy once, when the graph is built, so the per-event path never re-decides
the context. Other layers register theirs with :func:`register` or the
decorator.
"""

from __future__ import annotations

# Snoop's operators, imported here so that their strategies are registered with
# the package; the others (masks: ``mask.py``) are imported the first time the
# graph meets them, through their classes' ``strategies``.
from sentinel.detector.operators import aperiodic, conj, disj, negation, seq
from sentinel.detector.operators.base import (
    Entry,
    Handler,
    composite,
    handler_class,
    register,
    strategy,
)

__all__ = ["Entry", "Handler", "composite", "handler_class", "register", "strategy"]

del aperiodic, conj, disj, negation, seq
