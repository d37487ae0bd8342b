"""``within`` and ``not_within``: shorthands for the most common temporal
questions, defined in terms of Snoop's operators.

``within(e1, e2, t)`` is ``A(e1, e2, e1 + [t])``
    "e2 within t of e1": A occurs at each e2 inside the interval that e1 opens
    and its own relative event e1 + [t] closes.
``not_within(e1, e2, t)`` is ``NOT(e2)[e1, e1 + [t]]``
    "e1 not followed by e2 within t": it occurs at e1 + [t], when the clock
    reaches the deadline, with no further event needed.

Both are plain expressions (``str(within(...))`` prints the Snoop text above), so
they combine with every operator and detect in every parameter context with the
operators' own algorithms. What that means per context:

- **recent** (the default): the latest e1 opens the window; a newer e1 restarts it
  (the relative event's pending timer is replaced). This is exactly "within t of
  the latest e1".
- **chronicle, continuous, cumulative**: A and NOT close *every* open interval at
  their E3, so the deadline of one e1 closes the windows of all e1 pending then.
  For "each e1 has its own window" pass ``key=``: the expression is partitioned by
  that parameter (``... by key``), and with one e1 per key at a time every
  context gives each e1 its own deadline ("order not shipped within 2 days",
  keyed by the order).

Times: at one clock reading, a timer fires before the events signalled at that
reading, so an e2 exactly t after e1 is *not* within t (the window is
``[e1, e1 + t)`` in clock time), and ``not_within`` fires at e1 + t unless e2
came strictly earlier.
"""

from __future__ import annotations

from datetime import timedelta

from sentinel.algebra.expressions import A, Expression, KeySpec, Not
from sentinel.algebra.temporal import Duration, Relative

__all__ = ["not_within", "within"]


def within(
    e1: Expression,
    e2: Expression,
    t: Duration | timedelta | str | float,
    *,
    key: KeySpec | None = None,
) -> Expression:
    """``A(e1, e2, e1 + [t])`` (partitioned by ``key`` when given): e2 within t of
    e1. See the module docs for each context.

    >>> from sentinel import Primitive
    >>> str(within(Primitive("placed"), Primitive("paid"), "00:30:00"))
    'A(placed, paid, placed + [00:30:00])'
    """
    expr: Expression = A(e1, e2, Relative(e1, t))
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
