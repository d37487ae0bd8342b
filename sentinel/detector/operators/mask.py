"""Masks (``E[predicate]``, :class:`~sentinel.algebra.masks.Masked`): a filter
between a primitive event's leaf and what uses it.

The same in every parameter context: a mask stores nothing, it passes on the
occurrences whose parameters satisfy its predicate, unchanged. Plain Snoop text
writes masks (``E1[amount > 1000]``); Ode's automata read masks too, but as bits
of their symbols (``sentinel.ode.handlers``), not through this node.
"""

from __future__ import annotations

from typing import Any

from sentinel.algebra.masks import Masked
from sentinel.detector.operators.base import Handler, strategy
from sentinel.detector.scopes import Store
from sentinel.occurrence import params_of

__all__ = ["MaskHandler"]


@strategy(Masked)
class MaskHandler(Handler):
    """``E[predicate]``: passes on E's occurrences whose parameters satisfy the
    mask, unchanged."""

    __slots__ = ("test",)
    arity = 1
    role_order = (0,)
    filters = True

    def __init__(self, hid: int, expr: Any) -> None:
        super().__init__(hid, expr)
        assert isinstance(expr, Masked)
        self.test = expr.mask.compiled()

    def new_state(self) -> list[Any]:
        return []

    def on0(self, store: Store, occ: Any) -> None:
        if self.test(params_of(occ)):
            for f in self.out:
                f(store, occ)

    def on0_batch(self, store: Store, occs: list[Any]) -> None:
        self.emit_batch(store, [o for o in occs if self.test(params_of(o))])

    def gen(self, slot: int, g: Any, store: str, occ: str) -> None:
        g.line(f"if {g.const(self.test)}({g.const(params_of)}({occ})):")
        with g.block():
            g.emit(self, store, occ)
            g.line("pass")
