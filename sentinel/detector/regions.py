"""Regions: the chain of partitions (``E by key``) a node of the event graph sits in.

A region is part of every key of the graph's handlers and routers, so the graph
hashes and compares regions all the time. As tuples of the partitioned
expressions, a region of depth d costs d calls to hash and d copies to extend, and
an expression with partitions nested D deep costs D^2 to wire. A :class:`Region`
is instead a node of one tree (its parent is the region around it) and interned:
equal regions are one object, so a region hashes and compares by identity, in
constant time, and entering one more partition (:meth:`Region.inside`) costs one
dictionary lookup, whatever the depth.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import overload

from sentinel.algebra import expressions as ex

__all__ = ["ROOT", "Region"]

_LOCK = threading.Lock()


class Region:
    """The partitions a node sits in, outermost first: a read-only sequence of
    :class:`~sentinel.algebra.expressions.Keyed` expressions.

    Made only by :meth:`inside` from :data:`ROOT` (outside every partition), so
    that equal regions are one object (thread-safe). ``len``, iteration, indexing
    and prefixes (``region[:k]``, another region) work as on a tuple; ``keyed``
    (the innermost partition) and ``parent`` (the region around it) cost nothing.
    """

    __slots__ = ("__weakref__", "_inner", "depth", "keyed", "parent")

    parent: Region | None
    keyed: ex.Keyed | None

    def __init__(self, parent: Region | None, keyed: ex.Keyed | None) -> None:
        self.parent = parent
        self.keyed = keyed
        self.depth: int = 0 if parent is None else parent.depth + 1
        # Held weakly: a region lives as long as some key (or a region inside it)
        # refers to it, so the tree does not keep every partition ever used.
        self._inner: weakref.WeakValueDictionary[ex.Keyed, Region] = weakref.WeakValueDictionary()

    def inside(self, keyed: ex.Keyed) -> Region:
        """This region with one more partition, ``keyed``, inside it."""
        child = self._inner.get(keyed)
        if child is None:
            with _LOCK:
                child = self._inner.get(keyed)
                if child is None:
                    child = self._inner[keyed] = Region(self, keyed)
        return child

    def ancestor(self, depth: int) -> Region:
        """The region of the outermost ``depth`` partitions of this one."""
        if not 0 <= depth <= self.depth:
            raise IndexError(f"a region of depth {self.depth} has no prefix of depth {depth}")
        r = self
        for _ in range(self.depth - depth):
            assert r.parent is not None
            r = r.parent
        return r

    def __len__(self) -> int:
        return self.depth

    def __iter__(self) -> Iterator[ex.Keyed]:
        chain = []
        r: Region | None = self
        while r is not None and r.keyed is not None:
            chain.append(r.keyed)
            r = r.parent
        return reversed(chain)

    def __contains__(self, keyed: object) -> bool:
        r: Region | None = self
        while r is not None and r.keyed is not None:
            if r.keyed is keyed or r.keyed == keyed:
                return True
            r = r.parent
        return False

    @overload
    def __getitem__(self, index: int) -> ex.Keyed: ...

    @overload
    def __getitem__(self, index: slice) -> Region: ...

    def __getitem__(self, index: int | slice) -> ex.Keyed | Region:
        """``region[i]``: the i-th partition from the outside (negative: from the
        inside); ``region[:k]``: the region of the outermost k (only prefixes)."""
        n = self.depth
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if start != 0 or step != 1:
                raise IndexError("a region's slices are its prefixes, region[:k]")
            return self.ancestor(max(stop, 0))
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"region index {index} out of range (depth {n})")
        keyed = self.ancestor(i + 1).keyed
        assert keyed is not None
        return keyed

    def __reduce__(self) -> tuple[object, ...]:
        # Unpickled, the same interned object as in the process that reads it.
        return (_region, (tuple(self),))

    def __repr__(self) -> str:
        return f"Region({', '.join(str(k) for k in self)})"


def _region(keyed: tuple[ex.Keyed, ...]) -> Region:
    r = ROOT
    for k in keyed:
        r = r.inside(k)
    return r


#: Outside every partition.
ROOT = Region(None, None)
