"""Compiling a channel's leaf targets into one Python function.

The wired graph calls one bound method per handler an occurrence reaches; in
CPython a call costs more than the work most entry points do. For each primitive
event's list of targets, :func:`compile_leaf` writes one function that does the work
of every *direct* handler on the way inline — the handler's code for that slot, then
its outputs', up to the subscription sinks — and calls what it cannot inline
(buffered handlers, partitions, batch emitters, strategies without a template).

A strategy supports inlining by defining ``gen(slot, g, store, occ)``, which writes
the statements of its ``on<slot>`` entry through the :class:`Gen` ``g``: they must do
exactly what the method does (the graph's tests run with compilation on, and a
property test compares it with compilation off). ``g.emit(self, store, var)``
writes the delivery of a detection held in ``var`` to the handler's outputs.

Generated source is registered with :mod:`linecache`, so tracebacks through it
show the code.
"""

from __future__ import annotations

import itertools
import linecache
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sentinel.detector.scopes import Store
from sentinel.occurrence import CompositeOccurrence, Occurrence

__all__ = ["Gen", "Spec", "compile_leaf"]

#: How a target is reached: ("h", handler, slot) to inline a direct handler's
#: entry point, ("sink", subscription) for a subscription's sink, ("route", key,
#: router id, spec) to enter a partition, ("require", keys, spec) to go on only with
#: occurrences carrying the keys, ("call", fn) for anything else (called as
#: ``fn(store, occ)``).
Spec = tuple[Any, ...]

MAX_DEPTH = 12
MAX_LINES = 4000

_ids = itertools.count(1)
_MISSING = object()
_new = tuple.__new__


class Gen:
    """Writes one generated function's body."""

    def __init__(self, outputs: Mapping[int, Sequence[Spec]], triggered: list[Any]) -> None:
        self._outputs = outputs
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {
            "_new": _new,
            "_C": CompositeOccurrence,
            "_O": Occurrence,
            "_T": triggered.append,
            "_MISSING": _MISSING,
            "_unhashable": _unhashable,
            "_nan_key": _nan_key,
            "_Store": Store,
            "_store_new": dict.__new__,
        }
        self._names: dict[int, str] = {}
        self._n = 0
        self._indent = 1
        self._depth = 0
        #: (line count, indent, store) just after the last line that stored an
        #: occurrence into a handler's state in ``store`` unconditionally
        #: (:meth:`kept`).
        self._kept: tuple[int, int, str] | None = None

    def const(self, obj: Any) -> str:
        """A name under which the generated code sees ``obj``."""
        name = self._names.get(id(obj))
        if name is None:
            name = self._names[id(obj)] = f"_c{len(self._names)}"
            self.consts[name] = obj
        return name

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def line(self, text: str) -> None:
        self.lines.append("    " * self._indent + text)

    @contextmanager
    def block(self) -> Iterator[None]:
        self._indent += 1
        try:
            yield
        finally:
            self._indent -= 1

    def state(self, handler: Any, store: str) -> str:
        """A variable holding ``handler``'s state in ``store``."""
        st = self.var("s")
        self.line(f"{st} = {store}[{handler.hid}]")
        return st

    def kept(self, store: str) -> None:
        """Say that the line just generated stored an occurrence into a handler's
        state in ``store``, unconditionally at this indent: when it is the last
        line of the code of the partition whose store that is, the partition
        cannot be empty after it, and the check that releases empty partitions
        is left out (a keyed initiator's leaf)."""
        self._kept = (len(self.lines), self._indent, store)

    def emit(self, handler: Any, store: str, occ: str) -> None:
        """Deliver the detection in ``occ`` to each of ``handler``'s outputs."""
        for spec in self._outputs.get(handler.hid, ()):
            self.target(spec, store, occ)

    def _route(self, spec: Spec, store: str, occ: str) -> None:
        """Enter a partition: the store of the occurrence's key value, created on
        first use and released when it holds nothing. A key value that equals
        nothing, itself included (NaN), is refused where a partition would be
        made for it (:func:`_nan_key`)."""
        from sentinel.algebra.expressions import SOURCE

        _kind, key, rid, inner = spec
        k, parts, sub = self.var("k"), self.var("p"), self.var("u")
        if key is SOURCE:
            self.line(f"{k} = {occ}[4]")
            self.line(f"if {k} is not None:")
        else:
            # The parameters stored positionally (names in field 7), or as a
            # mapping (names None: replay's lazily decoded parameters).
            c, n = self.const(key), self.var("n")
            self.line(f"{n} = {occ}[7]")
            self.line(
                f"{k} = {occ}[5].get({c}, _MISSING) if {n} is None else "
                f"{occ}[5][{n}.index({c})] if {c} in {n} else _MISSING"
            )
            self.line(f"if {k} is not _MISSING:")
        with self.block():
            self.line(f"{parts} = {store}[{rid}][0]")
            self.line("try:")
            with self.block():
                self.line(f"{sub} = {parts}.get({k})")
            self.line("except TypeError:")
            with self.block():
                self.line(f"_unhashable({self.const(key)}, {k}, {occ})")
            if inner[0] == "h" and inner[2] in getattr(inner[1], "idle_slots", ()):
                # Nothing to do in a partition that does not exist (an idle slot
                # on empty state), so none is made for it.
                self.line(f"if {sub} is not None:")
                with self.block():
                    self._enter(inner, parts, k, sub, occ)
                self.line(f"elif {k} != {k}:")
                with self.block():
                    self.line(f"_nan_key({self.const(key)}, {k}, {occ})")
                return
            self.line(f"if {sub} is None:")
            with self.block():
                self.line(f"if {k} != {k}:")
                with self.block():
                    self.line(f"_nan_key({self.const(key)}, {k}, {occ})")
                # Store(factories, store), without the call to its __init__
                self.line(f"{sub} = {parts}[{k}] = _store_new(_Store)")
                self.line(f"{sub}.factories = _factories")
                self.line(f"{sub}.parent = {store}")
                self.line(f"{sub}.owner = None")
            self._enter(inner, parts, k, sub, occ)

    def _enter(self, inner: Spec, parts: str, k: str, sub: str, occ: str) -> None:
        """The code of a partition whose store is ``sub``, then its release."""
        self.target(inner, sub, occ)
        if self._kept == (len(self.lines), self._indent, sub):
            return  # the partition's code ended by storing the occurrence
        # Release the partition's store once it holds nothing: a loop, which
        # costs less than any(map(any, ...)) (no map object, no call per state
        # once one is found non-empty).
        held = self.var("h")
        self.line(f"for {held} in {sub}.values():")
        with self.block():
            self.line(f"if any({held}):")
            with self.block():
                self.line("break")
        self.line("else:")
        with self.block():
            self.line(f"del {parts}[{k}]")

    def _require(self, spec: Spec, store: str, occ: str) -> None:
        """Go on only if the occurrence carries every key (a partitioned primitive
        event)."""
        from sentinel.algebra.expressions import SOURCE

        _kind, keys, inner = spec
        tests = [
            f"{occ}[4] is not None"
            if key is SOURCE
            else f"{self.const(key)} in ({occ}[7] or {occ}[5])"
            for key in keys
        ]
        self.line(f"if {' and '.join(tests)}:")
        with self.block():
            self.target(inner, store, occ)

    def target(self, spec: Spec, store: str, occ: str) -> None:
        kind = spec[0]
        if kind == "h":
            h, slot = spec[1], spec[2]
            gen = getattr(h, "gen", None)
            if gen is not None and self._depth < MAX_DEPTH and len(self.lines) < MAX_LINES:
                self._depth += 1
                try:
                    gen(slot, self, store, occ)
                finally:
                    self._depth -= 1
            else:
                self.line(f"{self.const(h.entry(slot))}({store}, {occ})")
        elif kind == "route":
            self._route(spec, store, occ)
        elif kind == "require":
            self._require(spec, store, occ)
        elif kind == "sink":
            sub = self.const(spec[1])
            # A new name: the code after this sink (other outputs) goes on with
            # the graph's plain tuple, not the object delivered here.
            out = self.var("o")
            self.line(
                f"{out} = _new(_C if len({occ}) == 3 else _O, {occ}) "
                f"if type({occ}) is tuple else {occ}"
            )
            self.line(f"_T(({sub}, {out}))")
        else:
            self.line(f"{self.const(spec[1])}({store}, {occ})")


def _unhashable(key: Any, value: Any, occ: Any) -> None:
    from sentinel.errors import SentinelError

    raise SentinelError(
        f"cannot partition by {key!r}: value {value!r} of {occ[0]} is not hashable"
    ) from None


def _nan_key(key: Any, value: Any, occ: Any) -> None:
    """A NaN equals nothing, not even itself: its partition would only ever be
    found again by the same object (``math.nan``), which a replay, decoding the
    log's value afresh, does not have; and every other NaN would make a
    partition of its own that nothing can complete."""
    from sentinel.errors import SentinelError

    raise SentinelError(
        f"cannot partition by {key!r}: value {value!r} of {occ[0]} equals nothing, "
        "itself included (a NaN), so no other occurrence could join it (without the "
        "parameter, an occurrence takes part in no partition)"
    ) from None


def compile_leaf(
    name: str,
    specs: Sequence[Spec],
    outputs: Mapping[int, Sequence[Spec]],
    triggered: list[Any],
    factories: Mapping[int, Callable[[], list[Any]]],
) -> Callable[[Any, Any], None]:
    """One function doing what calling each of ``specs`` would do; a partition's
    store is made with the states' ``factories``."""
    g = Gen(outputs, triggered)
    g.consts["_factories"] = factories
    for spec in specs:
        g.target(spec, "store", "occ")
    ident = re.sub(r"\W", "_", name)[:40]
    func = f"leaf_{ident}_{next(_ids)}"
    source = f"def {func}(store, occ):\n" + "\n".join(g.lines or ["    pass"]) + "\n"
    filename = f"<sentinel leaf {name!r} #{func}>"
    code = compile(source, filename, "exec")
    namespace = dict(g.consts)
    exec(code, namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    fn: Callable[[Any, Any], None] = namespace[func]
    fn.__sentinel_source__ = source  # type: ignore[attr-defined]
    fn.__sentinel_consts__ = {  # type: ignore[attr-defined]
        k: v for k, v in g.consts.items() if re.fullmatch(r"_c\d+", k)
    }
    return fn
