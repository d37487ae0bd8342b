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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from sentinel.algebra.expressions import Expression
from sentinel.algebra.structural import arg
from sentinel.detector.operators import Handler
from sentinel.detector.scopes import Store
from sentinel.errors import ExpressionError, SentinelError
from sentinel.ode.event import OdeEvent
from sentinel.ode.handlers import OdeHandler
from sentinel.ode.runtime import program

__all__ = ["AttributeHandler", "Bound", "Table", "check_bound"]

_MISSING = object()


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


class AttributeHandler(OdeHandler):
    """The table of rows of an attribute expression (see the module docs)."""

    __slots__ = ("attr_bits", "steady", "variable")

    def __init__(self, hid: int, expr: Any) -> None:
        Handler.__init__(self, hid, expr)
        assert isinstance(expr, OdeEvent) and expr.attribute is not None
        self.variable = expr.attribute.name
        self.prog = program(expr.automaton)
        alphabet = expr.alphabet
        if any(len(p) > 1 for p in alphabet.combos if any(alphabet.attrs[i] for i in p)):
            raise ExpressionError(
                f"{expr}: an attribute bound on one of several events of one channel (a "
                "class-level and an instance-level event) is not supported"
            )
        self.combos = {}
        bound: dict[int, list[tuple[str, int]]] = {}
        for present, (base, weights) in alphabet.combos.items():
            bits: list[tuple[Callable[[Any], bool], int]] = []
            for (kind, i, what), w in weights:
                if kind == "mask":
                    bits.append((what.compiled(), w))
                else:
                    bound.setdefault(i, []).append((what, w))
            self.combos[present] = (base, tuple(bits))
        self.attr_bits: list[tuple[tuple[str, int], ...]] = [
            tuple(bound.get(i, ())) for i in range(len(expr.universe))
        ]
        m = expr.automaton
        other = sorted(alphabet.other())
        self.steady = [
            not m.acc[q] and all(m.delta[q][s] == q and not m.ops[q][s] for s in other)
            for q in range(m.n)
        ]
        self._entries = [self._make_point(i) for i in range(len(expr.universe))]
        self._batch = [self._make_batch(e) for e in self._entries]

    def _make_point(self, slot: int) -> Callable[[Store, Any], None]:
        present = frozenset((slot,))
        point = self._point

        def on(store: Store, occ: Any) -> None:
            point(store, occ, present)

        return on

    def new_state(self) -> list[Any]:
        return [Table(self.prog.new_state())]

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        """Not inlined: a call of the slot's entry."""
        g.line(f"{g.const(self.entry(slot))}({store}, {occ})")

    def _point(self, store: Store, occ: Any, present: frozenset[int]) -> None:
        base, bits = self.combos[present]
        params = occ[5]
        s = base
        for fn, w in bits:
            if fn(params):
                s += w
        own: dict[Any, int] = {}
        for i in present:
            for param, w in self.attr_bits[i]:
                v = params.get(param, _MISSING)
                if v is _MISSING:
                    continue
                try:
                    own[v] = own.get(v, s) + w
                except TypeError:
                    raise SentinelError(
                        f"cannot detect {self.expr} per value of {self.variable}: "
                        f"{param}={v!r} of {occ[0]} is not hashable"
                    ) from None
        table: Table = store[self.hid][0]
        step = self.prog.step
        rows, steady = table.rows, self.steady
        default = table.default
        found: list[tuple[Any, tuple[Any, ...]]] = []
        # A value seen for the first time starts from the shared row as it was
        # before this point.
        for v in own:
            if v not in rows:
                rows[v] = list(default)
        if not steady[default[0]]:
            step(default, s, occ)
        if table.active:
            for v in [v for v in table.active if v not in own]:
                row = rows[v]
                r = step(row, s, occ)
                if r is not None:
                    found.append((v, r))
                self._settle(table, v, row)
        for v, sym in own.items():
            row = rows[v]
            r = step(row, sym, occ)
            if r is not None:
                found.append((v, r))
            self._settle(table, v, row)
        if found:
            # Several values at one instant are one batch (parents pair each
            # against their state before it).
            expr, var, t_occ = self.expr, self.variable, occ[1]
            self.emit_batch(store, [(Bound(expr, var, v), t_occ, parts) for v, parts in found])

    def _settle(self, table: Table, v: Any, row: list[Any]) -> None:
        if not self.steady[row[0]]:
            table.active[v] = None
            return
        table.active.pop(v, None)
        if row == table.default and self.steady[table.default[0]]:
            del table.rows[v]

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        present = frozenset(i for i, b in enumerate(batches) if b)
        if present:
            occ = next(b[0] for b in batches if b)
            self._point(store, occ, present)

    def summary(self) -> str:
        return super().summary() + f", one row per value of {self.variable}"
