"""Detection scopes on a detector: which scope a signal goes to (explicit,
ambient, the process scope), transactions' begin, pre-commit, commit and abort,
and flushing detection state.

:class:`Transactions` is the part of :class:`~sentinel.detector.EventDetector`
that does this (a mixin: the detector holds the state named below and signals).
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from threading import get_ident
from typing import TYPE_CHECKING, Any

from sentinel.detector.graph import Channel, EventGraph
from sentinel.detector.scopes import Scope, Store
from sentinel.errors import AmbiguousScopeError, ScopeError

#: Who is running: the current greenlet where greenlet is installed (each
#: thread has its own; SQLAlchemy's asyncio runs each task's database work in
#: one, and gevent each of its tasks), else the thread. A condition muted here
#: that switches greenlets (waits on the database) does not mute the others.
flow: Callable[[], Hashable]
try:
    from greenlet import getcurrent as _getcurrent

    flow = _getcurrent
except ImportError:  # pragma: no cover - greenlet comes with SQLAlchemy's asyncio
    flow = get_ident

if TYPE_CHECKING:
    from sentinel.detector.events import Dispatch

__all__ = ["Transactions", "flow"]

#: ``Scope.status`` of an active scope: the signal path compares by identity
#: (the literal is interned); a scope whose status is not this object takes the
#: slow path, which compares by value.
_ACTIVE = "active"


class ProcessViews(threading.local):
    """A detector's views of its process scope, one per thread (``view``:
    ``None`` until the thread first signals outside a transaction)."""

    view: Scope | None = None


class Transactions:
    """The scopes and transactions of :class:`~sentinel.detector.EventDetector`."""

    _lock: threading.RLock
    dispatch: Dispatch
    graph: EventGraph
    process_scope: Scope
    _channels: dict[str, Channel]
    _muted: set[Any]
    _scope_var: ContextVar[Scope | None]
    _views: ProcessViews
    _home: int
    _home_view: Scope
    _ambient_var: ContextVar[tuple[tuple[Scope, ...], Scope | None]]
    _scopes: weakref.WeakSet[Scope]

    if TYPE_CHECKING:

        def emit(
            self,
            channel: Channel,
            values: tuple[Any, ...],
            names: tuple[str, ...],
            source: Hashable | None,
            selectors: tuple[Hashable, ...],
            scope: Scope | None,
            timestamp: float | None = None,
            muting: bool = True,
        ) -> tuple[Any, ...] | None: ...

    # -- scopes and transactions -------------------------------------------------
    def _new_store(self) -> Store:
        return Store(self.graph.factories)

    def _stores(self) -> Iterator[Store]:
        yield self.process_scope.store
        yield self.graph.global_store
        for s in list(self._scopes):
            yield s.store

    def current_scope(self) -> Scope:
        """The scope signals of this thread (or task) go to. Raises
        :class:`~sentinel.errors.AmbiguousScopeError` when several ambient
        scopes are current (see :meth:`enter_ambient`)."""
        scope = self._scope_var.get() or self._process_view()
        if scope.status is not _ACTIVE:
            scope = self._settle(scope)
        return scope

    # The current scope of a thread (or task) is, in order: the scope of a
    # use_scope() block, of the rule running, of a transaction() block; else
    # the one ambient scope (a session transaction begun in the thread); else
    # the process scope. The ambient scopes are kept in _ambient_var, and the
    # one in force is written into _scope_var itself (when no explicit scope
    # is), so that a signal costs no more than before: one context-variable
    # lookup, and one comparison that sends the unusual cases (an ambient scope
    # that ended elsewhere, several at once) to _settle().

    def enter_ambient(self, scope: Scope) -> None:
        """Make ``scope`` (a transaction begun in this thread or asyncio task)
        current for the signals of this thread or task that name no scope, until
        :meth:`leave_ambient` or its end (commit or abort). A scope made current
        explicitly (:meth:`use_scope`, a rule's run, :meth:`transaction`) takes
        precedence. While several ambient scopes are current, such a signal
        raises :class:`~sentinel.errors.AmbiguousScopeError`.

        The ORM layer calls this for every root transaction of an attached
        session (``docs/orm.md``)."""
        scopes, written = self._ambient_var.get()
        scopes = (*scopes, scope)
        # what a signal would find: the thread's process view when nothing is set
        current = self._scope_var.get() or self._process_view()
        # not while a rule runs here: what its action signals belongs to the
        # transaction that triggered it, even if the action opens another
        if (current.process or current is written) and not current.depth:
            scopes, written = self._ambient(scopes)
            self._scope_var.set(written)
        self._ambient_var.set((scopes, written))

    def leave_ambient(self, scope: Scope) -> None:
        """Undo :meth:`enter_ambient` for ``scope`` in this thread or task
        (nothing if it is not current here)."""
        scopes, written = self._ambient_var.get()
        scopes = tuple(s for s in scopes if s is not scope)
        if written is not None and self._scope_var.get() is written:
            scopes, written = self._ambient(scopes)
            self._scope_var.set(written)
        self._ambient_var.set((scopes, written))

    @staticmethod
    def _ambient(scopes: tuple[Scope, ...]) -> tuple[tuple[Scope, ...], Scope | None]:
        """The active ones of ``scopes``, and what stands for them in
        ``_scope_var``: the one, ``None`` (the process scope) for none, a
        marker scope for several."""
        live = tuple(s for s in scopes if s.status == "active")
        if len(live) == 1:
            return live, live[0]
        if not live:
            return live, None
        marker = Scope.__new__(Scope)
        marker.id, marker.status, marker.process, marker.depth = None, "ambiguous", False, 0
        marker.info = {"scopes": live}
        return live, marker

    def _settle(self, scope: Scope) -> Scope:
        """The scope a signal goes to when ``_scope_var`` holds one that is not
        active: an explicit scope that ended is used as it is (as always); what
        :meth:`enter_ambient` wrote is replaced by what is current now (an
        ambient scope may end in another thread or task). Raises
        :class:`~sentinel.errors.AmbiguousScopeError` for several."""
        scopes, written = self._ambient_var.get()
        if scope is not written:
            return scope
        scopes, written = self._ambient(scopes)
        self._ambient_var.set((scopes, written))
        self._scope_var.set(written)
        if written is None:
            return self._process_view()
        if written.status != "active":
            raise AmbiguousScopeError(tuple(s.id for s in written.info["scopes"]))
        return written

    def _process_view(self) -> Scope:
        """This thread's view of the process scope: the same id and store, its
        own rule-cascade depth. Made once per thread and kept in a
        thread-local of the detector (``_views``), not in ``_scope_var``: a
        context variable's value lives as long as the thread's context, and the
        view reaches the whole detector through its store, so a detector that
        had signalled from a thread could never be freed. The thread that made
        the detector has its view in ``_home_view`` (the signal path compares
        thread ids, cheaper than reading a thread-local). Asyncio tasks of one
        thread share its view: a rule cascade runs to its end without
        yielding, so their depths cannot interleave."""
        if get_ident() == self._home:
            return self._home_view
        views = self._views
        view = views.view
        if view is None:
            view = views.view = self.process_scope.view()
        return view

    @contextmanager
    def muted(self) -> Iterator[None]:
        """Ignore signals from this thread (or greenlet: an asyncio task's
        database work) inside the block (conditions are side-effect free:
        events they signal are not detected)."""
        me = flow()
        if me in self._muted:
            yield
            return
        self._muted.add(me)
        try:
            yield
        finally:
            self._muted.discard(me)

    @contextmanager
    def use_scope(self, scope: Scope) -> Iterator[Scope]:
        """Make ``scope`` current for signals in this block."""
        token = self._scope_var.set(scope)
        try:
            yield scope
        finally:
            self._scope_var.reset(token)

    def begin(self, id: Hashable | None = None) -> Scope:
        """Start a detection scope for a transaction and signal ``txn:begin`` in it."""
        scope = Scope(id if id is not None else uuid.uuid4().hex, self._new_store())
        scope.lock = self._lock
        with self._lock:  # _stores() lists them under it (a WeakSet cannot grow meanwhile)
            self._scopes.add(scope)
        self.emit(self._channels["txn:begin"], (), (), None, (), scope, None, False)
        return scope

    def scope(self, id: Hashable) -> Scope:
        """A new, active detection scope with ``id``, *without* signalling
        ``txn:begin`` (replay injects the logged ``txn:begin`` itself). Finish it
        with :meth:`end_scope`."""
        scope = Scope(id, self._new_store())
        scope.lock = self._lock
        with self._lock:
            self._scopes.add(scope)
        return scope

    def end_scope(self, scope: Scope, status: str, *, abandoned: bool = False) -> None:
        """Mark ``scope`` ``"committed"`` or ``"aborted"``, flush it and run what
        follows the end of a transaction (detached rules), *without* signalling
        ``txn:commit`` / ``txn:abort`` (replay injected the logged ones).
        ``abandoned`` (aborted only): the transaction ended without ``txn:abort``
        (online, its session was garbage-collected), so nothing runs after it."""
        if status not in ("committed", "aborted"):
            raise ScopeError(f"status must be 'committed' or 'aborted', not {status!r}")
        if abandoned and status != "aborted":
            raise ScopeError("only an aborted scope can be abandoned")
        scope._check_active("commit" if status == "committed" else "abort")
        scope.status = status
        self.flush(scope)
        if not abandoned:
            self._after_end(scope)

    def pre_commit(self, scope: Scope) -> None:
        """Signal ``txn:pre_commit`` in ``scope`` (deferred rules run here)."""
        scope._check_active("pre-commit")
        self.emit(self._channels["txn:pre_commit"], (), (), None, (), scope, None, False)

    def commit(self, scope: Scope) -> None:
        """Signal ``txn:commit`` in ``scope``, then flush it and run what follows
        its end (detached rules), even when a rule on ``txn:commit`` failed: the
        transaction committed all the same."""
        scope._check_active("commit")
        try:
            self.emit(self._channels["txn:commit"], (), (), None, (), scope, None, False)
        finally:
            scope.status = "committed"
            self.flush(scope)
            self._after_end(scope)

    def abort(self, scope: Scope) -> None:
        """Signal ``txn:abort`` in ``scope``, then flush it and run what follows
        its end (independent detached rules), even when a rule on ``txn:abort``
        failed."""
        if scope.status == "aborted":
            return
        scope._check_active("abort")
        try:
            self.emit(self._channels["txn:abort"], (), (), None, (), scope, None, False)
        finally:
            scope.status = "aborted"
            self.flush(scope)
            self._after_end(scope)

    def _after_end(self, scope: Scope) -> None:
        """Called once ``scope`` has committed or aborted and been flushed (the
        rules layer runs detached rules here)."""

    @contextmanager
    def transaction(self) -> Iterator[Scope]:
        """A detection scope for the block: ``txn:begin`` on entry; on success
        ``txn:pre_commit`` then ``txn:commit``; on an exception (including one
        raised at pre-commit) ``txn:abort``. Commit and abort flush the scope."""
        scope = self.begin()
        token = self._scope_var.set(scope)
        try:
            try:
                yield scope
                self.pre_commit(scope)
            except BaseException as err:
                # The block's own exception is what the caller sees; a rule on
                # txn:abort that fails too is told in a note on it.
                try:
                    self.abort(scope)
                except Exception as failed:
                    err.add_note(f"and then, aborting the transaction: {failed}")
                raise
            self.commit(scope)
        finally:
            self._scope_var.reset(token)

    def flush(self, scope: Scope | None = None) -> None:
        """Forget detection state: of ``scope``, or of every scope (and the
        process-wide state of rules that do not flush) when ``scope`` is None."""
        with self._lock:
            if self.dispatch.flush:
                self.dispatch.flush(scope)
            if scope is not None:
                scope.store.clear()
                return
            for store in self._stores():
                store.clear()

    def stored(self, scope: Scope | None = None) -> int:
        """How many occurrence entries detection state holds (in ``scope``, or
        everywhere)."""
        with self._lock:
            if scope is not None:
                return scope.store.occurrences()
            return sum(s.occurrences() for s in self._stores())
