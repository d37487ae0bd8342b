"""Detection strategies for Ode events (and the check of masks' variables).

:class:`OdeHandler` is the node of an :class:`~sentinel.ode.event.OdeEvent` in
the event graph: one input slot per universe event, and its state in the store
is the automaton's (``[state, registers...]``, see :mod:`sentinel.ode.runtime`).
An arrival is turned into its symbol (the slot's base symbol, plus the bits of the
masks that hold) and read; entering an accepting state emits a detection
``(event, t_occ, parts)`` whose parts are the record of why. Several universe
events of one channel (a class-level and an instance-level event of one call)
make the node buffered: their arrivals of one instant are one point, read once.
An Ode event with an attribute variable gets an :class:`AttributeHandler`
instead: the same automaton, stepped once per row of its table of values
(:mod:`sentinel.ode.attributes`).

The same in every parameter context: an automaton has no initiators to choose
between. Masks outside Ode expressions have their own strategy in the detector
(:class:`sentinel.detector.operators.mask.MaskHandler`, re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sentinel.algebra.masks import Masked
from sentinel.detector import Context, EventDetector
from sentinel.detector.events import listen
from sentinel.detector.operators import Entry, Handler, register
from sentinel.detector.operators.base import ARRIVAL
from sentinel.detector.operators.mask import MaskHandler
from sentinel.detector.scopes import Store
from sentinel.errors import ExpressionError, SentinelError
from sentinel.occurrence import params_of
from sentinel.ode.attributes import Bound, Table
from sentinel.ode.event import OdeEvent
from sentinel.ode.runtime import Program, program

__all__ = ["AttributeHandler", "MaskHandler", "OdeHandler"]

_MISSING = object()

Bits = tuple[tuple[Callable[[Any], bool], int], ...]


def _symbol_of(base: int, bits: Bits) -> Callable[[Any], int]:
    def symbol(params: Any) -> int:
        s = base
        for fn, w in bits:
            if fn(params):
                s += w
        return s

    return symbol


class OdeHandler(Handler):
    """The automaton of an Ode event (see the module docs)."""

    __slots__ = ("_batch", "_cols", "_entries", "_ops", "_rec", "combos", "prog")
    arity = None

    def __new__(cls, hid: int, expr: Any) -> OdeHandler:
        if cls is OdeHandler and isinstance(expr, OdeEvent) and expr.attribute is not None:
            return AttributeHandler.__new__(AttributeHandler, hid, expr)
        return super().__new__(cls)  # Handler.__new__: compiled, object.__new__ refuses

    def __init__(self, hid: int, expr: Any) -> None:
        super().__init__(hid, expr)
        assert isinstance(expr, OdeEvent)
        self.prog: Program = program(expr.automaton)
        # This handler's copies of the program's tables of functions, which its
        # entries and generated code read: set_order() refills them in place
        # (the leaf code compiled before it then runs the new functions too).
        self._ops = [list(row) for row in self.prog.ops]
        self._rec = list(self.prog.rec)
        self._cols: dict[int, list[Any]] = {}
        self.combos: dict[frozenset[int], tuple[int, Bits]] = {}
        for present, (base, weights) in expr.alphabet.combos.items():
            bits: list[tuple[Callable[[Any], bool], int]] = []
            for (kind, _i, what), w in weights:
                if kind != "mask":
                    raise ExpressionError(f"{expr} binds an attribute; it needs a value table")
                bits.append((what.compiled(), w))
            self.combos[present] = (base, tuple(bits))
        self._entries = [self._make_entry(i) for i in range(len(expr.universe))]
        self._batch = [self._make_batch(e) for e in self._entries]

    @property
    def expires(self) -> bool:  # type: ignore[override]
        """Only an automaton that remembers nothing (``OdeEvent.keeps_history``)."""
        return not self.expr.keeps_history  # type: ignore[attr-defined]

    def new_state(self) -> list[Any]:
        return self.prog.new_state()

    def slots(self) -> int:
        return len(self._entries)

    def entry(self, slot: int) -> Entry:
        return self._entries[slot]

    def entry_batch(self, slot: int) -> Entry:
        return self._batch[slot]

    def _make_entry(self, slot: int) -> Entry:
        base, bits = self.combos[frozenset((slot,))]
        prog, hid, expr = self.prog, self.hid, self.expr
        delta, ops, rec = prog.delta, self._ops, self._rec
        handler = self
        if not bits:

            def on(store: Store, occ: Any) -> None:
                st = store[hid]
                q = st[0]
                f = ops[q][base]
                if f is not None:
                    f(st, occ)
                nq = st[0] = delta[q][base]
                r = rec[nq]
                if r is not None:
                    det = (expr, occ[1], r(st, occ))
                    for g in handler.out:
                        g(store, det)

            return on
        symbol = _symbol_of(base, bits)

        def on_masked(store: Store, occ: Any) -> None:
            s = symbol(params_of(occ))
            st = store[hid]
            q = st[0]
            f = ops[q][s]
            if f is not None:
                f(st, occ)
            nq = st[0] = delta[q][s]
            r = rec[nq]
            if r is not None:
                det = (expr, occ[1], r(st, occ))
                for g in handler.out:
                    g(store, det)

        return on_masked

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        """Write the work of ``entry(slot)`` inline (see
        :mod:`sentinel.detector.codegen`): the transition, the register
        assignments when the automaton has any on that column, the detection."""
        base, bits = self.combos[frozenset((slot,))]
        prog = self.prog
        st, q, nq, r = g.var("s"), g.var("q"), g.var("n"), g.var("r")
        g.line(f"{st} = {store}[{self.hid}]")
        g.line(f"{q} = {st}[0]")
        if bits:
            sym = g.var("y")
            g.line(f"{sym} = {g.const(_symbol_of(base, bits))}({g.const(params_of)}({occ}))")
            delta, ops = g.const(prog.delta), g.const(self._ops)
            f = g.var("f")
            g.line(f"{f} = {ops}[{q}][{sym}]")
            g.line(f"if {f} is not None:")
            with g.block():
                g.line(f"{f}({st}, {occ})")
            g.line(f"{nq} = {st}[0] = {delta}[{q}][{sym}]")
        else:
            # One symbol: its column of the tables, indexed by the state alone.
            ocol = self._column(base)
            if any(f is not None for f in ocol):
                f = g.var("f")
                g.line(f"{f} = {g.const(ocol)}[{q}]")
                g.line(f"if {f} is not None:")
                with g.block():
                    g.line(f"{f}({st}, {occ})")
            dcol = [row[base] for row in prog.delta]
            g.line(f"{nq} = {st}[0] = {g.const(dcol)}[{q}]")
        g.line(f"{r} = {g.const(self._rec)}[{nq}]")
        g.line(f"if {r} is not None:")
        with g.block():
            c = g.var("c")
            g.line(f"{c} = ({g.const(self.expr)}, {occ}[1], {r}({st}, {occ}))")
            g.emit(self, store, c)

    def _column(self, base: int) -> list[Any]:
        """The functions of the symbol ``base``, by state (kept: set_order
        refills it)."""
        col = self._cols.get(base)
        if col is None:
            col = self._cols[base] = [row[base] for row in self._ops]
        return col

    def set_order(self, seq: Callable[[Any], Any]) -> None:
        """Records list their points in the order ``seq`` gives (a node in
        occurrence-time order: a point may have arrived before one it
        follows): the program made for it, its functions put in place."""
        super().set_order(seq)
        prog = program(self.expr.automaton, None if seq is ARRIVAL else seq)  # type: ignore[attr-defined]
        if prog is self.prog:
            return
        self.prog = prog
        for mine, theirs in zip(self._ops, prog.ops, strict=True):
            mine[:] = theirs
        self._rec[:] = prog.rec
        for base, col in self._cols.items():
            col[:] = [row[base] for row in prog.ops]

    @staticmethod
    def _make_batch(one: Entry) -> Entry:
        def batch(store: Store, occs: list[Any]) -> None:
            seen: list[Any] = []
            for occ in sorted(occs, key=lambda o: o[1]):
                if not any(occ is s for s in seen):
                    seen.append(occ)
                    one(store, occ)

        return batch

    def step(self, store: Store, occ: Any, symbol: int) -> None:
        """Read one point with the given symbol (emitting any detection)."""
        st = store[self.hid]
        r = self.prog.step(st, symbol, occ)
        if r is not None:
            self.emit(store, (self.expr, occ[1], r))

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        """One instant's arrivals on several slots are one point: the symbol of the
        set of universe events it matched."""
        present = frozenset(i for i, b in enumerate(batches) if b)
        if not present:
            return
        occ = next(b[0] for b in batches if b)
        base, bits = self.combos[present]
        s = base
        for fn, w in bits:
            if fn(params_of(occ)):
                s += w
        self.step(store, occ, s)

    def summary(self) -> str:
        """The automaton's sizes (for ``sentinel graph``)."""
        assert isinstance(self.expr, OdeEvent)
        return self.expr.describe()


class AttributeHandler(OdeHandler):
    """The table of rows of an attribute expression (see
    :mod:`sentinel.ode.attributes`)."""

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

    def set_order(self, seq: Callable[[Any], Any]) -> None:
        """As :meth:`OdeHandler.set_order`; each point reads ``self.prog``."""
        Handler.set_order(self, seq)
        self.prog = program(self.expr.automaton, None if seq is ARRIVAL else seq)  # type: ignore[attr-defined]

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        """Not inlined: a call of the slot's entry."""
        g.line(f"{g.const(self.entry(slot))}({store}, {occ})")

    def _point(self, store: Store, occ: Any, present: frozenset[int]) -> None:
        base, bits = self.combos[present]
        params = params_of(occ)
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


def _check_mask(det: EventDetector, expr: Any) -> None:
    assert isinstance(expr, Masked)
    if expr.mask.variables():
        raise ExpressionError(
            f"the mask of {expr} names an attribute variable: attribute variables belong to "
            "Ode expressions (sentinel.ode)"
        )
    expr.mask.compiled()


def _prepare(det: EventDetector, expr: Any) -> None:
    if type(expr) is Masked:
        _check_mask(det, expr)


def install(det: EventDetector) -> None:
    """The Ode layer's plug-in (:mod:`sentinel.detector.plugins`): masked events
    are checked when resolved. Importing it registered the strategies of Ode
    events and masked events (``operators.register``) and, through
    :mod:`sentinel.ode`, the ``ode{...}`` block of Snoop text."""
    listen(det, "prepare", _prepare)


register(OdeEvent, dict.fromkeys(Context, OdeHandler))
