"""The runtime form of an automaton: transition rows and generated functions.

A :class:`Program` is what a handler steps through per point. A machine's state
is a list ``[state, r0, r1, ...]`` (the automaton state, then the registers), so
it lives in a detection store like any handler state and is empty (all falsy)
exactly at the start state. Per point::

    q = st[0]; nq = delta[q][symbol]
    f = ops[q][symbol]
    if f is not None: f(st, occ)        # register assignments, in parallel
    st[0] = nq
    r = rec[nq]
    if r is not None: parts = r(st, occ)   # a detection, with its record

``ops`` and ``rec`` are Python functions written from the automaton's templates
(see :mod:`sentinel.ode.automata`) and compiled once per automaton. Registers
hold tuples of parts (primitive occurrences and ``(label, t_occ, parts)``
composites); entering the start state empties those that nothing reads there.
"""

from __future__ import annotations

import linecache
import threading
import typing as t
from itertools import count
from operator import itemgetter

from sentinel.errors import ExpressionError
from sentinel.ode.machines import CUR, Automaton, Template, liveness

__all__ = ["Program", "materialize", "program"]

_ids = count(1)
_lock = threading.Lock()


def _records(key: t.Callable[[t.Any], t.Any]) -> dict[str, t.Callable[..., t.Any]]:
    """The functions that build records, for a handler that processes points in
    the order ``key`` gives (``t_occ`` in arrival order; occurrence time, then
    ``t_occ``, in occurrence-time order, where a point may have arrived before
    one it follows): ``_node``, ``_split``, ``_top`` and ``_latest`` as the
    generated code names them, and ``_tidy``."""

    def tidy(parts: tuple[t.Any, ...], occ: t.Any) -> tuple[t.Any, ...]:
        """The parts of a record at ``occ``: each once, in processing order,
        ending with the current point (a composite that ends there, or the
        occurrence itself). The occurrence is left out where a composite part
        already ends with it."""
        tt = occ[1]
        n = len(parts)
        if n == 1:
            return parts if parts[0][1] == tt else (*parts, occ)
        if n == 2:  # the usual shape: an earlier point, then this one
            first, second = parts
            if second[1] == tt and key(first) < key(second):
                return parts
        if n > 1:
            out: list[t.Any] = []
            for p in parts:
                if not any(p is q for q in out):
                    out.append(p)
            # a composite (a 3-tuple; a primitive occurrence is an 8-tuple) ending here
            if any(len(p) == 3 and p[1] == tt for p in out):
                out = [p for p in out if len(p) == 3 or p[1] != tt]
            out.sort(key=key)
            parts = tuple(out)
        if not parts or parts[-1][1] != tt:
            parts = (*parts, occ)
        return parts

    def node(label: t.Any, occ: t.Any, parts: tuple[t.Any, ...]) -> tuple[t.Any, ...]:
        return ((label, occ[1], tidy(parts, occ)),)

    def split(label: t.Any, occ: t.Any, parts: tuple[t.Any, ...]) -> tuple[t.Any, ...]:
        if not parts or (len(parts) == 1 and parts[0] is occ):
            return (occ,)
        if label is None:
            return tidy(parts, occ)
        if len(parts) == 1 and len(parts[0]) == 3 and parts[0][0] == label:
            return parts  # the operand's own record is labelled already
        return node(label, occ, parts)

    def top(occ: t.Any, parts: tuple[t.Any, ...]) -> tuple[t.Any, ...]:
        return tidy(parts, occ)

    def latest(*times: t.Any) -> int:
        """The index of the latest of ``times`` (each parts, whose last point is
        the time; nothing is older than everything)."""
        best, when = 0, None
        for i, parts in enumerate(times):
            if parts:
                at = key(parts[-1])
                if when is None or at > when:
                    best, when = i, at
        return best

    return {"_node": node, "_split": split, "_top": top, "_latest": latest, "_tidy": tidy}


#: Arrival order: by ``t_occ`` (field 1 of a primitive and of a composite part).
_ARRIVAL = _records(itemgetter(1))
_node: t.Callable[[t.Any, t.Any, tuple[t.Any, ...]], tuple[t.Any, ...]] = _ARRIVAL["_node"]
_split: t.Callable[[t.Any, t.Any, tuple[t.Any, ...]], tuple[t.Any, ...]] = _ARRIVAL["_split"]
_latest: t.Callable[..., int] = _ARRIVAL["_latest"]


def materialize(tpl: Template, regs: t.Sequence[t.Any], occ: t.Any) -> tuple[t.Any, ...]:
    """The parts ``tpl`` stands for, over registers ``regs`` (register ``k`` is
    ``regs[k]``) and the current occurrence (an interpreter, for tests)."""
    kind = tpl[0]
    if kind == "c":
        return (occ,)
    if kind == "r":
        return regs[tpl[1]] or ()
    if kind == "m":
        pairs = tpl[2]
        i = _latest(*(materialize(pairs[j], regs, occ) for j in range(0, len(pairs), 2)))
        return materialize(pairs[2 * i + 1], regs, occ)
    parts: tuple[t.Any, ...] = ()
    for c in tpl[2]:
        parts += materialize(c, regs, occ)
    if kind == "n":
        return parts if tpl[1] is None else _node(tpl[1], occ, parts)
    return _split(tpl[1], occ, parts)


class Program:
    """Transition rows and generated functions of one automaton."""

    __slots__ = ("acc", "delta", "k", "n", "nregs", "ops", "rec", "source")

    def __init__(self, m: Automaton, order: t.Callable[[t.Any], t.Any] | None = None) -> None:
        self.k = m.k
        self.n = m.n
        self.nregs = m.nregs
        self.delta = [list(row) for row in m.delta]
        self.acc = list(m.acc)
        records = _ARRIVAL if order is None else _records(order)
        consts: dict[str, t.Any] = {k: records[k] for k in ("_node", "_split", "_top", "_latest")}
        names: dict[int, str] = {}
        lines: list[str] = []

        def const(obj: t.Any) -> str:
            name = names.get(id(obj))
            if name is None:
                name = names[id(obj)] = f"_k{len(names)}"
                consts[name] = obj
            return name

        def atoms(tpl: Template) -> list[Template]:
            """The template as a list of pieces: transparent nodes flattened, a
            split of nothing but the current point reduced to it."""
            kind = tpl[0]
            if kind in ("c", "r", "m"):
                return [tpl]
            inner = [a for c in tpl[2] for a in atoms(c)]
            if kind == "n" and tpl[1] is None:
                return inner
            if kind == "s" and all(a[0] == "c" for a in inner):
                return [CUR]
            return [(kind, tpl[1], tuple(inner))]

        def code(tpl: Template) -> str:
            pieces = atoms(tpl)
            if not pieces:
                return "()"
            if len(pieces) == 1:
                return piece(pieces[0])
            items = []
            for a in pieces:
                items.append("occ" if a[0] == "c" else f"*{piece(a)}")
            return "(" + ", ".join(items) + ")"

        def piece(a: Template) -> str:
            kind = a[0]
            if kind == "c":
                return "(occ,)"
            if kind == "r":
                return f"(st[{a[1] + 1}] or ())"
            if kind == "m":
                # Every time first, then only the chosen template's parts (the
                # walrus is safe nested: each level compares before it descends).
                pairs = a[2]
                times = ", ".join(code(pairs[j]) for j in range(0, len(pairs), 2))
                n = len(pairs) // 2
                out = code(pairs[-1])
                for i in range(n - 2, -1, -1):
                    test = f"(_i := _latest({times})) == {i}" if i == 0 else f"_i == {i}"
                    out = f"({code(pairs[2 * i + 1])} if {test} else {out})"
                return out
            inner = code(("n", None, a[2]))
            fn = "_node" if kind == "n" else "_split"
            return f"{fn}({const(a[1])}, occ, {inner})"

        fn_of_ops: dict[t.Any, str] = {}
        ops_names: list[list[str | None]] = []
        # Entering the start state empties the registers that are dead there, so
        # that a partition whose automaton is back at the start holds nothing.
        at_start = liveness(m)[0] if m.nregs else set()
        dead = tuple(r for r in range(m.nregs) if r not in at_start)
        for q in range(m.n):
            row: list[str | None] = []
            for a in range(m.k):
                o = m.ops[q][a]
                clear = dead if m.delta[q][a] == 0 else ()
                if not o and not clear:
                    row.append(None)
                    continue
                key = (o, clear)
                name = fn_of_ops.get(key)
                if name is None:
                    name = fn_of_ops[key] = f"op{len(fn_of_ops)}"
                    lines.append(f"def {name}(st, occ):")
                    for i, (_d, src) in enumerate(o):
                        val = f"st[{src[1] + 1}]" if src[0] == "r" else code(src)
                        lines.append(f"    v{i} = {val}")
                    for r in clear:
                        lines.append(f"    st[{r + 1}] = None")
                    for i, (d, _src) in enumerate(o):
                        lines.append(f"    st[{d + 1}] = v{i}")
                row.append(name)
            ops_names.append(row)
        rec_names: list[str | None] = []
        for q in range(m.n):
            tpl = m.rec[q]
            if not m.acc[q] or tpl is None:
                rec_names.append(None)
                continue
            name = f"rec{q}"
            lines.append(f"def {name}(st, occ):")
            lines.append(f"    return _top(occ, {code(tpl)})")
            rec_names.append(name)
        source = "\n".join(lines) + "\n"
        namespace = dict(consts)
        filename = f"<sentinel ode automaton #{next(_ids)}>"
        try:
            code_object = compile(source, filename, "exec")
        except (SyntaxError, RecursionError, MemoryError):
            # Python refuses expressions nested 200 parentheses deep; a record
            # template nests one call per operator of the expression.
            raise ExpressionError(
                "an Ode expression nests too deeply to compile its records (Python "
                "nests at most 200 parentheses; an operator nests one or two); split "
                "it into several events"
            ) from None
        exec(code_object, namespace)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        self.source = source
        self.ops = [[None if n is None else namespace[n] for n in row] for row in ops_names]
        self.rec = [None if n is None else namespace[n] for n in rec_names]

    def new_state(self) -> list[t.Any]:
        return [0] + [None] * self.nregs

    def step(self, st: list[t.Any], symbol: int, occ: t.Any) -> tuple[t.Any, ...] | None:
        """Read one point; returns the record when the automaton accepts."""
        q = st[0]
        f = self.ops[q][symbol]
        if f is not None:
            f(st, occ)
        nq = st[0] = self.delta[q][symbol]
        r = self.rec[nq]
        return None if r is None else r(st, occ)


def program(m: Automaton, order: t.Callable[[t.Any], t.Any] | None = None) -> Program:
    """``m``'s program for points processed in ``t_occ`` order (``order``
    None), or in the order ``order`` gives (a node in occurrence-time order:
    its handler's ``seq``); each made once."""
    if order is None:
        p = m.program
        if p is None:
            with _lock:
                p = m.program
                if p is None:
                    p = m.program = Program(m)
        return p  # type: ignore[no-any-return]
    with _lock:
        p = m.ordered.get(order)
        if p is None:
            p = m.ordered[order] = Program(m, order)
    return p  # type: ignore[no-any-return]
