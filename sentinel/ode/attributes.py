"""Events with attributes: one automaton state per attribute value (Ode 6.2,
appendix 3).

``complete(I) = prior(order(I, Q), perform(I, A))`` stands for one expression per
account number i. In sentinel the letters bind a parameter to the attribute
variable (``order.where(account=I)``, text ``order(account = I)``), and the
event is detected separately for each value: ``complete(121)`` occurs when
``prior(order[account == 121], perform[account == 121])`` does, over the whole
history (events of other accounts are points of it, like any other event).

As the appendix suggests, the automaton is compiled once, over an alphabet in
which "the bound parameter holds this machine's value" is one more mask bit; a
value's machine is a row of a table (value -> ``[state, registers...]``), not a
copy of the automaton. Unseen values share one row (the appendix's M_c). Per
point:

- each value the occurrence carries (in a bound parameter) reads the symbol with
  its bits set; a value seen for the first time starts from the shared row;
- every other row reads the symbol with no bit set. Rows in a *steady* state
  (one that such a symbol leaves unchanged, not accepting) need no work, so only
  the rows that are still moving are visited;
- a row back in the shared row's state, with the same registers, is dropped (the
  value behaves like an unseen one again).

An expression that could occur for a value never seen (satisfiable without any
event carrying the value, such as ``!order(account = I)``) is refused: it would
stand for infinitely many detections. One attribute variable per expression;
constants are masks (``order(account = 121)``); inequalities between variables
are not supported.

This module holds the values (the member expression :class:`Bound`, the
:class:`Table` of rows) and the check; the strategy that steps the rows is
:class:`sentinel.ode.handlers.AttributeHandler`, beside the automaton's own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sentinel.algebra.expressions import Expression
from sentinel.algebra.structural import arg
from sentinel.errors import ExpressionError

if TYPE_CHECKING:
    from sentinel.ode.event import OdeEvent

__all__ = ["Bound", "Table", "check_bound"]


class Bound(Expression):
    """One member of an attribute expression's family: the Ode event with its
    attribute variable bound to ``value`` (the expression of its detections)."""

    __slots__ = ()
    op = "bound"

    def __init__(self, event: Expression, variable: str, value: Any) -> None:
        self._init(event, variable, value)

    event: Expression = arg(0)
    variable: str = arg(1)
    value: Any = arg(2)

    def with_children(self, children: Sequence[Expression]) -> Expression:
        return self

    @property
    def children(self) -> tuple[Expression, ...]:
        return ()

    def to_text(self, text: Callable[[Expression], str]) -> str:
        return f"{text(self.event)} with {self.variable} = {self.value!r}"


def check_bound(event: OdeEvent) -> None:
    """Refuse an attribute expression that unseen values would satisfy."""
    m = event.automaton
    other = sorted(event.alphabet.other())
    seen = {0}
    todo = deque([0])
    while todo:
        q = todo.popleft()
        for s in other:
            r = m.delta[q][s]
            if m.acc[r]:
                var = event.attribute.name if event.attribute else "?"
                raise ExpressionError(
                    f"{event.term} can occur without any event whose bound parameter holds "
                    f"the value of {var}, so it would occur for every value never seen; "
                    f"make it need an event bound to {var} (for example prior(x({var}), ...) "
                    f"rather than !x({var}))"
                )
            if r not in seen:
                seen.add(r)
                todo.append(r)


class Table:
    """The rows of one attribute expression in one store: the shared row of unseen
    values, a row per value seen, and the values whose rows still move on other
    values' events."""

    __slots__ = ("active", "default", "rows")

    def __init__(self, default: list[Any]) -> None:
        self.default = default
        self.rows: dict[Any, list[Any]] = {}
        self.active: dict[Any, None] = {}

    def __bool__(self) -> bool:
        return bool(self.rows) or bool(self.default[0])

    def __len__(self) -> int:
        return len(self.rows)

    def _sentinel_copy(self) -> Table:
        """A deep copy, for savepoints (registers hold immutable tuples)."""
        out = Table(list(self.default))
        out.rows = {k: list(v) for k, v in self.rows.items()}
        out.active = dict(self.active)
        return out
