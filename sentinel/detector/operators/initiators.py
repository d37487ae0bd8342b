"""How a strategy keeps its initiators (slot 0), one class per context.

A parameter context is, first of all, a policy on initiators (Snoop's contexts,
Chakravarthy et al., "Composite events for active databases", section 4): which
initiator occurrences a binary operator keeps until a terminator pairs with them.
SEQ, A, NOT (``detector/operators``) and WITHIN (``bitemporal/window.py``) keep them
alike, so the policy is written once, here; a strategy names it first among its
bases (``class SeqRecent(KeepsLatest, _Seq)``) and writes only what its operator
does with a terminator. ``gen`` (the compiled form) is each strategy's own.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from sentinel.detector.operators.base import Handler
from sentinel.detector.scopes import Store

__all__ = ["KeepsAll", "KeepsFirst", "KeepsLatest", "KeepsOldestFirst"]


class KeepsLatest(Handler):
    """Recent: slot 0 holds the latest initiator; a newer one replaces it."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [None]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0] = occ


class KeepsFirst(Handler):
    """Cumulative: slot 0 holds the first initiator until it is consumed; later
    ones are ignored meanwhile."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [None]

    def on0(self, store: Store, occ: Any) -> None:
        st = store[self.hid]
        if st[0] is None:
            st[0] = occ


class KeepsOldestFirst(Handler):
    """Chronicle: slot 0 queues the initiators, oldest first (a terminator
    consumes from the left)."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [deque()]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(occ)


class KeepsAll(Handler):
    """Continuous and unrestricted (and SEQ in cumulative, which accumulates its
    initiators until a terminator): slot 0 lists every initiator."""

    __slots__ = ()

    def new_state(self) -> list[Any]:
        return [[]]

    def on0(self, store: Store, occ: Any) -> None:
        store[self.hid][0].append(occ)
