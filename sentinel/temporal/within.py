"""``within`` and ``not_within``: shorthands for the most common temporal
questions.

``within(e1, e2, t)`` is ``WITHIN(e1, e2, [t])``
    "e2 within t of e1": it occurs at each e2 while an e1 is younger than t (by
    occurrence times). The e1s take part in its detections for t: that is their
    lifespan in this node (the bitemporal layer's lifespan mechanism,
    :mod:`sentinel.bitemporal.lifespan`), so there is no timer, and an e1 that
    never meets an e2 is purged at the first clock tick after its window.
``not_within(e1, e2, t)`` is ``NOT(e2)[e1, e1 + [t]]``
    "e1 not followed by e2 within t": it occurs at e1 + [t], when the clock
    reaches the deadline, with no further event needed (a timer: something must
    happen when the window ends).

Both are plain expressions (``str(...)`` prints the Snoop text above), so they
combine with every operator and detect in every parameter context. WITHIN
follows A's algorithms with each e1 closing its own window:

- **recent** (the default): the latest e1 opens the window; a newer e1 replaces
  it. This is exactly "within t of the latest e1".
- **chronicle**: each e2 pairs with the oldest e1 whose window is open,
  consuming it; **continuous, unrestricted**: each e2 with every e1 whose window
  is open; **cumulative**: the first open e1 with the first e2.
- ``key=`` partitions the expression (``... by key``): only e1 and e2 with equal
  keys meet ("order paid within 30 minutes", keyed by the order).

Times: the window of an e1 is ``[t(e1), t(e1) + t)`` in occurrence time, so an
e2 exactly t after e1 is *not* within t, nor an e2 (reported late) that occurred
before the e1; ``not_within`` fires at e1 + t unless
e2 came strictly earlier.
"""

from __future__ import annotations

from datetime import timedelta

from sentinel.algebra.bitemporal import Within
from sentinel.algebra.expressions import Expression, KeySpec, Not
from sentinel.algebra.temporal import Duration, Relative

__all__ = ["not_within", "within"]


def within(
    e1: Expression,
    e2: Expression,
    t: Duration | timedelta | str | float,
    *,
    key: KeySpec | None = None,
) -> Expression:
    """``WITHIN(e1, e2, [t])`` (partitioned by ``key`` when given): e2 within t
    of e1. See the module docs for each context.

    >>> from sentinel import Primitive
    >>> str(within(Primitive("placed"), Primitive("paid"), "00:30:00"))
    'WITHIN(placed, paid, [00:30:00])'
    """
    expr: Expression = Within(e1, e2, t)
    return expr.by(key) if key is not None else expr


def not_within(
    e1: Expression,
    e2: Expression,
    t: Duration | timedelta | str | float,
    *,
    key: KeySpec | None = None,
) -> Expression:
    """``NOT(e2)[e1, e1 + [t]]`` (partitioned by ``key`` when given): e1 not
    followed by e2 within t; occurs at the deadline. See the module docs.

    >>> from sentinel import Primitive
    >>> str(not_within(Primitive("placed"), Primitive("shipped"), "2d", key="order"))
    'NOT(shipped)[placed, placed + [2d]] by order'
    """
    expr: Expression = Not(e2, e1, Relative(e1, t))
    return expr.by(key) if key is not None else expr
