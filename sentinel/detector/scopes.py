"""Detection scopes and the storage they own.

All detection state lives in a :class:`Store`: a dict from handler id to that
handler's state (a small list of containers, created on first use). Each detection
scope (a transaction, or the process scope for events outside any transaction) has
its own store, so occurrences of different transactions never meet, and flushing a
scope is dropping its store. A partitioned (keyed) expression keeps one sub-store
per key value inside its parent store.

A handler's state is a list whose items are ``None``, an occurrence, or a
container (list or deque); it is empty exactly when no item is truthy, which is how
partitions are released when they empty.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from sentinel.errors import ScopeError

#: The lock of a scope no detector made (a store's own tests): none.
_NO_LOCK: AbstractContextManager[Any] = nullcontext()

__all__ = ["Scope", "Store"]


class Store(dict):  # type: ignore[type-arg]
    """Handler id -> state, with states created on first access.

    ``parent`` is the enclosing store of a partition's sub-store; ``owner`` is a
    weak reference to the :class:`Scope` whose state a top-level store is (None
    for sub-stores and the process-wide store of rules that do not flush), so
    work started from a store later (a timer) knows its scope.
    """

    __slots__ = ("expires", "factories", "owner", "parent")
    expires: float

    def __init__(self, factories: dict[int, Callable[[], list[Any]]], parent: Store | None = None):
        # No dict.__init__: a new dict is empty already (one call less per partition).
        # The generated leaves (codegen.py, ``_route``) make a new key's store
        # without calling this: keep the two in step.
        self.factories = factories
        self.parent = parent
        self.owner: weakref.ref[Scope] | None = None
        # ``expires`` (when the bitemporal layer next looks for expired occurrences
        # here, see sentinel.bitemporal.lifespan) is left unset: read with a
        # default, so stores of rules without lifespans cost nothing more.

    def __missing__(self, hid: int) -> list[Any]:
        state = self[hid] = self.factories[hid]()
        return state

    def is_empty(self) -> bool:
        """True when no handler holds any occurrence (sub-stores included)."""
        return not any(map(any, self.values()))

    def snapshot(self) -> dict[int, list[Any]]:
        """A copy of every state, for restoring after a rolled-back savepoint."""
        snap: dict[int, list[Any]] = {}
        _copy_into(self, snap, None)
        return snap

    def restore(self, snap: dict[int, list[Any]]) -> None:
        self.clear()
        _copy_into(snap, self, self)

    def occurrences(self) -> int:
        """How many stored entries this store holds (for inspection and tests)."""
        n = 0
        todo: list[Store] = [self]  # partitions nest: a stack, not recursion
        while todo:
            for st in todo.pop().values():
                for item in st:
                    if isinstance(item, (list, deque)):
                        n += len(item)
                    elif isinstance(item, dict):
                        todo.extend(item.values())
                    elif item is not None:
                        n += 1
        return n


def _copy_into(
    states: dict[int, list[Any]], target: dict[int, list[Any]], owner: Store | None
) -> None:
    """Copy every handler's state of ``states`` into ``target``; the partitions they
    hold become sub-stores of ``owner`` (detections leaving a partition go to its
    parent store), copied likewise however deeply they nest."""
    todo: list[tuple[dict[int, list[Any]], dict[int, list[Any]], Store | None]] = [
        (states, target, owner)
    ]
    while todo:
        source, into, parent = todo.pop()
        for hid, state in source.items():
            out: list[Any] = []
            for item in state:
                if isinstance(item, list):
                    item = list(item)
                elif isinstance(item, deque):
                    item = deque(item)
                elif isinstance(item, dict):  # a router's partitions: key -> Store
                    parts = {}
                    for key, sub in item.items():
                        copy = Store(sub.factories, parent)
                        parts[key] = copy
                        todo.append((sub, copy, copy))
                    item = parts
                elif hasattr(item, "_sentinel_copy"):  # state objects of other layers (Ode)
                    item = item._sentinel_copy()
                out.append(item)
            into[hid] = out


class Scope:
    """A detection scope: one transaction's detection state, or the process scope.

    ``id`` is unique within the process and recorded on every occurrence signalled
    in the scope. ``status`` is ``"active"``, ``"committed"`` or ``"aborted"``.
    Scopes are created by the detector (``detector.begin()`` / ``transaction()``);
    a scope is meant to be used by one thread at a time, like the session or
    transaction it stands for.
    """

    __slots__ = (
        "__weakref__",
        "_savepoints",
        "depth",
        "elsewhere",
        "id",
        "info",
        "lock",
        "on_restore",
        "process",
        "status",
        "store",
    )

    def __init__(self, id: Hashable, store: Store) -> None:
        self.id = id
        self.store = store
        if store.owner is None:  # the first scope of a store owns it (views share it)
            store.owner = weakref.ref(self)
        #: Set by a layer that keeps work beside the store (the temporal layer's
        #: timers): ``on_restore(scope, snapshot)`` then restores the store on
        #: :meth:`rollback_to` itself and re-synchronises that work.
        self.on_restore: Callable[[Scope, dict[int, list[Any]]], None] | None = None
        #: The detector's lock (set by the detector that made the scope): a
        #: savepoint's snapshot and its plain restore take it, as the clock's
        #: thread does when a timer of the transaction fires into its store.
        self.lock: AbstractContextManager[Any] = _NO_LOCK
        self.status = "active"
        #: How deeply rules triggered in this scope are nested right now.
        self.depth = 0
        #: The other threads (the clock's) delivering in this scope now, each
        #: through a :meth:`thread_view` with its own ``depth``: their
        #: identifiers, with how deeply (``None``: none, the usual case).
        self.elsewhere: dict[int, int] | None = None
        #: True for the process scope (events outside any transaction) and the
        #: per-thread views of it that carry their own cascade depth.
        self.process = False
        self.info: dict[str, Any] = {}
        self._savepoints: list[tuple[object, dict[int, list[Any]]]] = []

    def view(self) -> Scope:
        """Another handle on this scope: the same id, store, status and savepoints,
        its own cascade ``depth`` (one per thread signalling outside transactions).
        The store keeps pointing at this scope as its owner."""
        v = Scope.__new__(Scope)
        v.id, v.store, v.info, v._savepoints = self.id, self.store, self.info, self._savepoints
        v.lock = self.lock
        v.on_restore, v.status, v.process, v.depth = self.on_restore, self.status, self.process, 0
        v.elsewhere = None
        return v

    def thread_view(self) -> Scope:
        """A handle on this transaction's scope for another thread (the clock's,
        firing the transaction's timers): its own cascade ``depth``, and the
        scope's own ``status``, read through (a rule there that ends the
        transaction is seen ending it)."""
        v = _ThreadView.__new__(_ThreadView)
        v.base = self
        v.id, v.store, v.info, v._savepoints = self.id, self.store, self.info, self._savepoints
        v.lock, v.on_restore, v.process, v.depth = self.lock, self.on_restore, self.process, 0
        v.elsewhere = None
        return v

    @property
    def active(self) -> bool:
        return self.status == "active"

    def _check_active(self, what: str) -> None:
        if self.status != "active":
            raise ScopeError(f"cannot {what} scope {self.id!r}: it is already {self.status}")

    def savepoint(self) -> object:
        """Remember the detection state; returns a token for :meth:`rollback_to` or
        :meth:`release`."""
        self._check_active("set a savepoint in")
        token = object()
        with self.lock:
            snapshot = self.store.snapshot()
        self._savepoints.append((token, snapshot))
        return token

    def release(self, token: object) -> None:
        """Keep what happened since the savepoint (and forget the savepoint)."""
        self._pop_to(token)

    def rollback_to(self, token: object) -> None:
        """Restore the detection state of the savepoint: occurrences signalled since
        are gone from detection, as if they never happened."""
        snap = self._pop_to(token)
        restore = self.on_restore
        if restore is None:
            with self.lock:
                self.store.restore(snap)
        else:
            restore(self, snap)

    def _pop_to(self, token: object) -> dict[int, list[Any]]:
        for i in range(len(self._savepoints) - 1, -1, -1):
            if self._savepoints[i][0] is token:
                snap = self._savepoints[i][1]
                del self._savepoints[i:]
                return snap
        raise ScopeError(f"unknown or finished savepoint in scope {self.id!r}")

    def __repr__(self) -> str:
        return f"<Scope {self.id} {self.status}>"


class _ThreadView(Scope):
    """:meth:`Scope.thread_view`'s handle: the status is the scope's."""

    __slots__ = ("base",)
    base: Scope

    @property
    def status(self) -> str:
        return self.base.status

    @status.setter
    def status(self, value: str) -> None:
        self.base.status = value
