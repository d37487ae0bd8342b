"""Object references for reactive objects: what an occurrence's ``source`` holds.

A reactive object is referred to by an :class:`~sentinel.ObjectRef`:

- a *persistent* ORM object (one with an identity in its session: it was flushed
  or loaded) by its class's event name and primary key, ``<Stock 42>``; the
  identity is read duck-typed from SQLAlchemy's instance state (its identity
  key, ``obj._sa_instance_state.key``), so this module never imports SQLAlchemy,
  and the reference is kept in the state's ``info`` until the key changes;
- any other object (a plain object, or an ORM object not yet flushed) by a
  process-local number, ``<Stock ~7>``, allocated on first use and never reused in
  the process. The table that maps those numbers back to objects holds them
  weakly: a garbage-collected object leaves nothing behind, and its number is never
  given to another object. Copies and unpickled objects get numbers of their own.
  The key is ``("local", n, process)``: ``process`` is a random token drawn once
  per process (again in a forked child), so the references of two processes never
  compare equal, and neither do those of one program run twice: the global
  detector and replay read the log of many processes, and must not take two
  processes' ``~1`` for one object.

An ORM object's reference changes from the local form to the primary-key form when
it is first flushed; instance-level events on ORM objects are best created once the
object has its primary key.
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
import weakref
from typing import Any, Final

from sentinel.errors import ReactiveError
from sentinel.occurrence import ObjectRef
from sentinel.reactive.info import class_info

__all__ = ["ObjectTable", "object_ref", "resolve"]


class ObjectTable:
    """Process-local references for objects without a primary key.

    Thread-safe. Entries are keyed by ``id(obj)`` and checked against a weak
    reference, and a weak-reference callback removes an entry when its object is
    collected (before the id can be reused).
    """

    __slots__ = ("_by_ref", "_counter", "_lock", "by_id", "process")

    def __init__(self) -> None:
        #: ``id(obj) -> (weak reference to obj, its reference)``; read without the
        #: lock by the per-call path (check the weak reference before trusting it).
        self.by_id: dict[int, tuple[weakref.ref[Any], ObjectRef]] = {}
        self._by_ref: dict[ObjectRef, weakref.ref[Any]] = {}
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        #: This process's token in its references' keys (see the module docs).
        self.process = uuid.uuid4().hex[:12]

    def forked(self) -> None:
        """In a forked child: a token of its own for the references it makes
        from now on (those made before the fork stay what they were)."""
        self.process = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()

    def ref(self, obj: Any, class_name: str) -> ObjectRef:
        """The local reference of ``obj``, allocated on first use."""
        entry = self.by_id.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        with self._lock:
            entry = self.by_id.get(id(obj))
            if entry is not None and entry[0]() is obj:
                return entry[1]
            ref = ObjectRef(class_name, ("local", next(self._counter), self.process))
            key = id(obj)
            by_id, by_ref = self.by_id, self._by_ref

            def forget(_: weakref.ref[Any]) -> None:
                # Runs when obj is collected: drop both entries (if still ours).
                e = by_id.get(key)
                if e is not None and e[1] is ref:
                    del by_id[key]
                by_ref.pop(ref, None)

            try:
                wr = weakref.ref(obj, forget)
            except TypeError:
                raise ReactiveError(
                    f"{type(obj).__name__} objects cannot be referenced weakly, so sentinel "
                    "cannot give them a process-local reference; add '__weakref__' to "
                    "the class's __slots__",
                    owner=type(obj).__name__,
                ) from None
            by_id[key] = (wr, ref)
            by_ref[ref] = wr
            return ref

    def resolve(self, ref: ObjectRef) -> Any:
        """The live object ``ref`` refers to, or ``None`` (collected, or not a local
        reference of this process)."""
        wr = self._by_ref.get(ref)
        return None if wr is None else wr()

    def __len__(self) -> int:
        """How many live objects hold a local reference (for tests and inspection)."""
        return len(self._by_ref)


#: The process's table of local references.
LOCAL = ObjectTable()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=LOCAL.forked)


#: The key under which a persistent object's reference is kept in its
#: SQLAlchemy ``InstanceState.info``, with the identity key it was made from.
_REF_INFO: Final = "sentinel.ref"


def ref_for(obj: Any, class_name: str) -> ObjectRef:
    """``obj``'s reference, given its class's event name (no reactivity check).

    A persistent object's reference is made once per identity key and kept in
    its instance state's ``info`` (every decorated call of the object makes
    one): it is made again only when the identity key is another object
    (after a flush gave it its key, or changed its primary key)."""
    try:
        state = obj.__dict__.get("_sa_instance_state")
    except AttributeError:  # no __dict__ (all slots): not an ORM object
        state = None
    if state is not None:
        key = getattr(state, "key", None)
        if key is not None:
            info = state.info
            known = info.get(_REF_INFO)
            if known is not None and known[0] is key and known[1] == class_name:
                return known[2]  # type: ignore[no-any-return]
            ref = ObjectRef(class_name, key[1])
            info[_REF_INFO] = (key, class_name, ref)
            return ref
    return LOCAL.ref(obj, class_name)


def param_ref(value: Any) -> ObjectRef | None:
    """A reactive object passed as a parameter becomes its reference (``None``
    for anything else); the ``ref`` hook of :func:`sentinel.params.normalize`."""
    info = class_info(type(value))
    return None if info is None else ref_for(value, info.name)


def object_ref(obj: Any) -> ObjectRef:
    """The :class:`~sentinel.ObjectRef` that events signalled by ``obj`` carry as
    their ``source``.

    ``obj`` must be an instance of a :class:`~sentinel.Reactive` class (raises
    :class:`~sentinel.errors.ReactiveError` otherwise). See the module
    documentation for the two forms of reference. Thread-safe.

    >>> from sentinel import Reactive
    >>> class Account(Reactive):
    ...     pass
    >>> a = Account()
    >>> object_ref(a) == object_ref(a), object_ref(a).transient
    (True, True)
    """
    info = class_info(type(obj))
    if info is None:
        raise ReactiveError(
            f"{type(obj).__name__} is not a reactive class; derive it from sentinel.Reactive "
            "to refer to its objects in events",
            owner=type(obj).__name__,
        )
    return ref_for(obj, info.name)


def resolve(ref: ObjectRef) -> Any:
    """The live object a process-local reference stands for, or ``None`` when it
    was garbage-collected (or ``ref`` is a primary-key reference: load those through
    your session). Thread-safe."""
    if not isinstance(ref, ObjectRef):
        raise TypeError(f"resolve() takes an ObjectRef, not {type(ref).__name__}")
    return LOCAL.resolve(ref)
