"""Automata with registers, their record templates, and minimization.

The data structures of :mod:`sentinel.ode.automata` (see its module docs for
what the templates mean) and what every construction there finishes with:
:func:`liveness` of registers, dropping the assignments no record reads, and
:func:`minimize`. Nothing here builds an automaton from an expression or
spends the work budget: that is :mod:`sentinel.ode.automata`'s.
"""

from __future__ import annotations

import typing as t
from collections import deque

__all__ = [
    "CUR",
    "EMPTY",
    "Automaton",
    "Op",
    "Ops",
    "Template",
    "compose",
    "liveness",
    "minimize",
    "reads",
    "shift",
    "size",
]

Template = tuple[t.Any, ...]
Op = tuple[int, Template]
Ops = tuple[Op, ...]

CUR: t.Final[Template] = ("c",)
EMPTY: t.Final[Template] = ("n", None, ())


class Automaton:
    """A complete deterministic automaton with registers (see the module docs).

    ``delta[q][a]`` is the state after reading symbol ``a`` in state ``q``;
    ``ops[q][a]`` the register assignments of that transition (``()``: none);
    ``acc[q]`` whether ``q`` is accepting and ``rec[q]`` its record template.
    """

    __slots__ = ("acc", "delta", "k", "nregs", "ops", "ordered", "program", "rec")

    def __init__(
        self,
        k: int,
        delta: list[list[int]],
        acc: list[bool],
        ops: list[list[Ops]] | None = None,
        rec: list[Template | None] | None = None,
        nregs: int = 0,
    ) -> None:
        self.k = k
        self.delta = delta
        self.acc = acc
        self.ops: list[list[Ops]] = ops if ops is not None else [[()] * k for _ in delta]
        self.rec = rec if rec is not None else [CUR if a else None for a in acc]
        self.nregs = nregs
        #: The runtime form (sentinel.ode.runtime.Program), made on first use.
        self.program: t.Any = None
        #: Programs for points processed in another order, by its key function.
        self.ordered: dict[t.Any, t.Any] = {}

    @property
    def n(self) -> int:
        """Number of states."""
        return len(self.delta)

    def plain(self) -> Automaton:
        """The same language without registers, minimized."""
        return minimize(
            Automaton(
                self.k, self.delta, list(self.acc), rec=[EMPTY if a else None for a in self.acc]
            )
        )

    def run(self, symbols: t.Iterable[int]) -> list[int]:
        """The positions (0-based) at which the automaton accepts, reading
        ``symbols`` from the start (for tests and tools)."""
        q, out = 0, []
        for i, a in enumerate(symbols):
            q = self.delta[q][a]
            if self.acc[q]:
                out.append(i)
        return out

    def __repr__(self) -> str:
        return f"<Automaton {self.n} states, {self.k} symbols, {self.nregs} registers>"


# -- templates ----------------------------------------------------------------------------


def shift(tpl: Template | None, by: int) -> t.Any:
    """``tpl`` with register numbers moved by ``by``."""
    if tpl is None or by == 0:
        return tpl
    kind = tpl[0]
    if kind == "r":
        return ("r", tpl[1] + by)
    if kind == "c":
        return tpl
    return (kind, tpl[1], tuple(shift(c, by) for c in tpl[2]))


def _shift_ops(ops: Ops, by: int) -> Ops:
    if by == 0:
        return ops
    return tuple((d + by, shift(s, by)) for d, s in ops)


def compose(tpl: Template, ops: Ops) -> Template:
    """A template over the registers after ``ops``, rewritten over the registers
    before them (and the current occurrence)."""
    if not ops:
        return tpl
    assigned = dict(ops)

    def sub(x: Template) -> Template:
        kind = x[0]
        if kind == "r":
            return assigned.get(x[1], x)
        if kind == "c":
            return x
        return (kind, x[1], tuple(sub(c) for c in x[2]))

    return sub(tpl)


def reads(tpl: Template | None) -> t.Iterator[int]:
    """The registers a template reads."""
    if tpl is None:
        return
    kind = tpl[0]
    if kind == "r":
        yield tpl[1]
    elif kind in ("n", "s", "m"):
        for c in tpl[2]:
            yield from reads(c)


def size(tpl: Template | None) -> int:
    """The nodes of a template (what building and rewriting it costs)."""
    if tpl is None:
        return 0
    if tpl[0] in ("r", "c"):
        return 1
    return 1 + sum(map(size, tpl[2]))


def _ops_size(ops: Ops) -> int:
    return sum(size(src) for _d, src in ops) if ops else 0


# -- finishing ---------------------------------------------------------------------------


def _finish(m: Automaton) -> Automaton:
    """Drop assignments nobody reads, renumber registers, minimize."""
    return minimize(_compact(m))


def liveness(m: Automaton) -> list[set[int]]:
    """Per state, the registers whose value there may still reach a record: read
    by the state's record, or, before being assigned again, by a later
    transition's assignment to a register that is itself live after it.

    An assignment to a dead register reads nothing: counting its sources as read
    (plain liveness) would keep chains of registers that no record ever shows,
    and with them states that differ only in those assignments; ``relative``
    over such an operand multiplies the difference by its threads.
    """
    return [_members(bits) for bits in _live_bits(m)]


def _bits(registers: t.Iterable[int]) -> int:
    out = 0
    for r in registers:
        out |= 1 << r
    return out


def _members(bits: int) -> set[int]:
    # Lowest set bit first: the integers are wide (register numbers run to
    # states x registers before _compact) and sparse, and shifting one bit at a
    # time would copy the whole integer per bit.
    out: set[int] = set()
    while bits:
        low = bits & -bits
        out.add(low.bit_length() - 1)
        bits ^= low
    return out


def _live_bits(m: Automaton) -> list[int]:
    """:func:`liveness` as one integer per state (bit r: register r), by a
    worklist over predecessors."""
    n, k = m.n, m.k
    live = [_bits(reads(m.rec[q])) if m.acc[q] else 0 for q in range(n)]
    # Per state, its outgoing transitions that touch registers or lead on:
    # (target, bits written, ((destination bit, bits read), ...)).
    moves: list[list[tuple[int, int, tuple[tuple[int, int], ...]]]] = []
    preds: list[set[int]] = [set() for _ in range(n)]
    # Assignment tuples recur across states (a thread moving between the same
    # blocks): translate each once.
    seen: dict[Ops, tuple[int, tuple[tuple[int, int], ...]]] = {}
    for q in range(n):
        row = []
        dq, oq = m.delta[q], m.ops[q]
        for a in range(k):
            target, o = dq[a], oq[a]
            preds[target].add(q)
            if o:
                moved = seen.get(o)
                if moved is None:
                    moved = seen[o] = (
                        _bits(d for d, _ in o),
                        tuple((1 << d, _bits(reads(s))) for d, s in o),
                    )
                row.append((target, *moved))
            else:
                row.append((target, 0, ()))
        moves.append(list(dict.fromkeys(row)))
    todo = deque(q for q in range(n) if live[q])
    queued = [bool(x) for x in live]
    while todo:
        r = todo.popleft()
        queued[r] = False
        for q in preds[r]:
            lq = live[q]
            new = lq
            for target, written, assigns in moves[q]:
                nxt = live[target]
                if not nxt:
                    continue
                new |= nxt & ~written
                for d, srcs in assigns:
                    if nxt & d:
                        new |= srcs
            if new != lq:
                live[q] = new
                if not queued[q]:
                    queued[q] = True
                    todo.append(q)
    return live


def _compact(m: Automaton) -> Automaton:
    """Drop assignments nobody reads, then let registers that are never live in
    the same state share one (greedy colouring)."""
    if not m.nregs:
        return m
    n, k = m.n, m.k
    live = _live_bits(m)
    ops = [
        [tuple((d, s) for d, s in m.ops[q][a] if live[m.delta[q][a]] >> d & 1) for a in range(k)]
        for q in range(n)
    ]
    used: set[int] = set()
    for q in range(n):
        if m.acc[q]:
            used.update(reads(m.rec[q]))
        for a in range(k):
            for d, src in ops[q][a]:
                used.add(d)
                used.update(reads(src))
    clash: dict[int, int] = {r: 0 for r in used}
    for lq in set(live):
        for r in _members(lq):
            if r in clash:
                clash[r] |= lq
    # Greedy, in register order: r takes the first colour none of whose
    # registers is live with it. One mask per colour (its registers) makes that
    # a test per colour rather than a walk over r's clashes.
    ren: dict[int, int] = {}
    colours: list[int] = []
    for r in sorted(used):
        others = clash[r] & ~(1 << r)
        c = 0
        while c < len(colours) and colours[c] & others:
            c += 1
        if c == len(colours):
            colours.append(0)
        colours[c] |= 1 << r
        ren[r] = c
    count = len(colours)

    def rn(x: t.Any) -> t.Any:
        if x is None:
            return None
        kind = x[0]
        if kind == "r":
            return ("r", ren[x[1]])
        if kind == "c":
            return x
        return (kind, x[1], tuple(rn(c) for c in x[2]))

    ops2 = [
        [
            tuple(
                (ren[d], rn(src))
                for d, src in ops[q][a]
                if not (src[0] == "r" and ren[src[1]] == ren[d])  # a copy onto itself
            )
            for a in range(k)
        ]
        for q in range(n)
    ]
    rec2 = [rn(r) if m.acc[q] else None for q, r in enumerate(m.rec)]
    return Automaton(k, m.delta, m.acc, ops2, rec2, count)


def minimize(m: Automaton) -> Automaton:
    """The quotient of ``m`` by equivalent states (those alike in acceptance,
    record templates and register assignments, whose targets are equivalent);
    state 0 stays the start state."""
    k = m.k
    cls = _classes(m)
    # Number the classes in breadth-first order from the start (deterministic).
    order: dict[int, int] = {cls[0]: 0}
    rep: list[int] = [0]
    i = 0
    while i < len(rep):
        q = rep[i]
        for a in range(k):
            c = cls[m.delta[q][a]]
            if c not in order:
                order[c] = len(rep)
                rep.append(m.delta[q][a])
        i += 1
    delta = [[order[cls[m.delta[q][a]]] for a in range(k)] for q in rep]
    ops = [[m.ops[q][a] for a in range(k)] for q in rep]
    return Automaton(k, delta, [m.acc[q] for q in rep], ops, [m.rec[q] for q in rep], m.nregs)


def _classes(m: Automaton) -> list[int]:
    """The class of each state of ``m`` in its coarsest partition that tells
    apart acceptance, record templates and rows of register assignments, and
    in which equivalent states go to equivalent states on every symbol
    (Hopcroft's refinement: O(k n log n), where refining every class a round
    at a time, as Moore's does, costs a round per state of a chain: minutes
    for the 2,000 states of ``N / N`` named twelve times over)."""
    n, k, delta = m.n, m.k, m.delta
    first: dict[t.Any, int] = {}
    block_of = [
        first.setdefault((m.acc[q], m.rec[q] if m.acc[q] else None, tuple(m.ops[q])), len(first))
        for q in range(n)
    ]
    blocks: list[set[int]] = [set() for _ in first]
    for q, b in enumerate(block_of):
        blocks[b].add(q)
    inv: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(k)]
    for p in range(n):
        row = delta[p]
        for a in range(k):
            inv[a][row[a]].append(p)
    pending = {(b, a) for b in range(len(blocks)) for a in range(k)}
    work = sorted(pending)
    while work:
        b, a = work.pop()
        pending.discard((b, a))
        into = inv[a]
        touched: dict[int, list[int]] = {}
        for q in blocks[b]:
            for p in into[q]:
                touched.setdefault(block_of[p], []).append(p)
        for y, members in touched.items():
            if len(members) == len(blocks[y]):
                continue
            new = set(members)
            blocks[y] -= new
            z = len(blocks)
            blocks.append(new)
            for p in new:
                block_of[p] = z
            for c in range(k):
                if (y, c) in pending:
                    add = (z, c)
                else:
                    add = (z, c) if len(new) <= len(blocks[y]) else (y, c)
                if add not in pending:
                    pending.add(add)
                    work.append(add)
    return block_of
