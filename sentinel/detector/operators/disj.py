"""OR (E1 | E2): every occurrence of either operand, passed on unchanged.

The same in every context (a primitive event's semantics do not depend on the
context, and OR stores nothing). When one occurrence reaches both operands at one
instant it is emitted once: the graph buffers such an OR and merges its slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sentinel.algebra import expressions as ex
from sentinel.detector.operators.base import Handler, strategy
from sentinel.detector.scopes import Store


@strategy(ex.Or)
class OrHandler(Handler):
    __slots__ = ()
    merge_slots = True

    def new_state(self) -> list[Any]:
        return []

    def on0(self, store: Store, occ: Any) -> None:
        for f in self.out:
            f(store, occ)

    on1 = on0

    def on0_batch(self, store: Store, occs: list[Any]) -> None:
        self.emit_batch(store, occs)

    on1_batch = on0_batch

    def process_instant(self, store: Store, batches: Sequence[list[Any]]) -> None:
        merged: list[Any] = []
        for batch in batches:
            for occ in batch:
                if not any(occ is m or (self.twins and occ == m) for m in merged):
                    merged.append(occ)
        self.emit_batch(store, merged)
