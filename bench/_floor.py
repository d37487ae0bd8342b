"""Hand-fused floors: the least sentinel's guarantees cost, written by hand
in one frame (issue 32, item 4).

:class:`HandFused` does the least a listened ``@event`` call must do.
``bench/wrapper.py`` times it beside the real wrapper and
``bench/instructions.py`` counts its instructions. :func:`keyed_floor` does the
least a ``signal(name, key=...)`` of the keyed "A then B" rule must do;
``bench/detector.py`` times it beside the detector, once with the occurrence's
parameters in a dict (today's occurrence, as plain tuples) and once in a tuple
(an occurrence the cyclic garbage collector can leave untracked).

This module imports nothing of sentinel, so it also runs on an interpreter
without sentinel installed: ``python bench/_floor.py`` prints the listened
method's instructions per call and a bare call's under callgrind, for any
Python given as ``--python``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from threading import get_ident
from typing import Any


class _FloorScope:
    """The floor's stand-in for a detection scope (its id and cascade depth)."""

    __slots__ = ("depth", "id")

    def __init__(self) -> None:
        self.id = "process:floor"
        self.depth = 0


_floor_lock = threading.RLock()
_floor_scope_var: ContextVar[_FloorScope | None] = ContextVar("floor_scope", default=None)
_floor_process = _FloorScope()
_floor_muted: set[int] = set()
_floor_refs: dict[int, tuple[str, tuple[str, int]]] = {}
_floor_clock = [0]
_floor_any = (None,)  # the end event's listeners: one rule


def _floor_raw(obj: Any, price: float) -> None:
    obj.price = price


def _floor_condition(occ: tuple[Any, ...]) -> bool:
    return bool(occ[5]["price"] < -1e9)


class HandFused:
    """The floor for a listened method: in one frame, the least a listened
    ``@event`` call must do to keep sentinel's guarantees, with every piece
    inlined as generated fused code could at best inline it (issue 32, item 4):
    call the plain method; the bound parameters and the result; the object's
    reference; the current scope; under the lock, the next ``t_occ``, the clock
    and the occurrence tuple; the cascade depth; the thread muted while the
    condition runs; the condition (false). It leaves out what sentinel also
    checks (a rule disabled meanwhile, selectors, masks, occurrence listeners),
    so it is a lower bound of any design with these guarantees."""

    def set_price(self, price: float) -> None:
        if not _floor_any:
            return _floor_raw(self, price)
        params = {"price": price}
        result = _floor_raw(self, price)
        params["result"] = result
        ref = _floor_refs.get(id(self))
        if ref is None:
            ref = _floor_refs[id(self)] = ("Stock", ("local", id(self)))
        scope = _floor_scope_var.get() or _floor_process
        lock = _floor_lock
        lock.acquire()
        try:
            _floor_clock[0] = t = _floor_clock[0] + 1
            now = time.time()
            occ = ("Stock.set_price:end", t, now, now, ref, params, scope.id)
        finally:
            lock.release()
        depth = scope.depth
        if depth >= 100:
            raise RecursionError("cascade limit")
        scope.depth = depth + 1
        try:
            me = get_ident()
            mine = me not in _floor_muted
            if mine:
                _floor_muted.add(me)
            try:
                ok = _floor_condition(occ)
            finally:
                if mine:
                    _floor_muted.discard(me)
            if ok:
                _floor_action(occ)
        finally:
            scope.depth = depth
        return result


def _floor_action(occ: tuple[Any, ...]) -> None:
    return None


def keyed_floor(action: Callable[[Any], Any], *, untracked: bool) -> Callable[..., Any]:
    """The floor of ``signal(name, key=k)`` for the keyed "A then B" rule
    (chronicle): the call with keyword arguments (the API), muting, the current
    scope, under the lock the next ``t_occ``, the clock and the occurrence (one
    plain tuple), the key's pending As in a deque, the composite for a B that
    finds one; after the lock, the cascade depth around the action, whose
    failure is wrapped. It leaves out what sentinel also does (a rule disabled
    meanwhile, occurrence listeners, unhashable keys, the graph's generality),
    so it is a lower bound.

    ``untracked``: the occurrence holds its parameters' values in a tuple
    instead of the keyword dict. CPython's cyclic garbage collector untracks a
    plain tuple holding only atomic values (numbers, strings, such tuples), but
    never one holding a dict, nor an instance of a tuple subclass: kept
    occurrences and the detections made of them then cost the collector
    nothing."""
    lock = threading.RLock()
    scope_var: ContextVar[_FloorScope | None] = ContextVar("floor_keyed", default=None)
    process = _FloorScope()
    muted: set[int] = set()
    pending: dict[Any, deque[tuple[Any, ...]]] = {}
    clock = [0]
    expression = ("A ; B", "by key")
    wall = time.time

    def signal(name: str, /, **params: Any) -> tuple[Any, ...] | None:
        if muted and get_ident() in muted:
            return None
        scope = scope_var.get() or process
        found = None
        lock.acquire()
        try:
            clock[0] = t = clock[0] + 1
            now = wall()
            values = tuple(params.values()) if untracked else params
            occ = (name, t, now, now, None, values, scope.id)
            key = params.get("key")
            if name == "A":
                q = pending.get(key)
                if q is None:
                    pending[key] = deque((occ,))
                else:
                    q.append(occ)
            else:
                q = pending.get(key)
                if q:
                    found = (expression, t, (q.popleft(), occ))
                    if not q:
                        del pending[key]
        finally:
            lock.release()
        if found is not None:
            depth = scope.depth
            if depth >= 100:
                raise RecursionError("cascade limit")
            scope.depth = depth + 1
            try:
                action(found)
            except Exception as e:
                raise RuntimeError("the rule's action failed") from e
            finally:
                scope.depth = depth
        return occ

    return signal


class Bare:
    def set_price(self, price: float) -> None:
        self.price = price


_COUNT = """
import sys
sys.path.insert(0, {here!r})
import _floor
obj = _floor.{cls}()
def go(n):
    for _ in range(n):
        obj.set_price(1.5)
go(1000)
sys.call_tracing(go, ({n},))
"""


def instructions(python: str, cls: str, n: int = 5000) -> float:
    """Instructions per call of ``cls().set_price(1.5)`` under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        code = _COUNT.format(here=str(Path(__file__).resolve().parent), cls=cls, n=n)
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--toggle-collect=sys_call_tracing",
             f"--callgrind-out-file={out}", python, "-c", code],
            capture_output=True, check=True,
        )  # fmt: skip
        total = 0
        for line in out.read_text().splitlines():
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
        return total / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", help="an interpreter (repeatable)")
    args = parser.parse_args()
    for python in args.python or [sys.executable]:
        bare = instructions(python, "Bare")
        fused = instructions(python, "HandFused")
        version = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        print(f"Python {version}: bare {bare:,.0f}, hand-fused floor {fused:,.0f} "
              f"instructions per call: {fused / bare:.1f}x bare")  # fmt: skip


if __name__ == "__main__":
    main()
