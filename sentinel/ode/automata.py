"""Deterministic automata with registers: the constructions of Ode section 3.

An :class:`Automaton` reads one symbol per point of the history (symbols are
numbered ``0 .. k-1``: the alphabet's minterms, see :mod:`sentinel.ode.alphabet`)
and the expression is satisfied at a point exactly when the state entered there
is accepting. States are numbered from 0, the start state. Acceptance is only
looked at after a symbol was read, so the start state's own flag matters only
when some transition returns to it.

Registers record *why*: each transition may assign registers (in parallel, from
the registers before it and the occurrence just read), and each accepting state
has a *template* saying how the detection's record is built from the registers
and the current occurrence. A record is a list of parts: primitive occurrences,
and labelled composites ``(label, t_occ, parts)`` for sub-expressions satisfied
at earlier points (the split points of ``relative``). Templates are tuples:

``("c",)``
    the current occurrence.
``("r", k)``
    the parts held in register k (nothing while it is empty).
``("n", label, children)``
    the children's parts, inside one composite labelled ``label`` at the
    current point (``label`` None: the parts themselves, no composite).
``("s", label, children)``
    the same, kept as a plain occurrence when the children are nothing or only
    the current occurrence (a split point seen by ``relative``).

``("m", None, (time1, tpl1, time2, tpl2, ...))``
    the parts of the ``tpl`` whose ``time`` (a template whose parts' last point
    is a split point) is latest, decided when the point is read.

Several computation threads of a non-deterministic construction (``relative``,
``relative+``, the projection of a correlation variable) are kept in one state;
threads that meet in one state keep the newest one's registers. So a record
names, at each ``relative``, the latest split point that works. The threads are
a tuple ordered newest first, so that the newest is known when the automaton is
built; when their orders would make more than :data:`MAX_STATES` states, a set,
the newest chosen by the ``"m"`` template (see ``_threads``).

Every construction returns a complete, minimized automaton whose registers are
all read somewhere. Constructions refuse to grow beyond :data:`MAX_STATES`
states, naming the operator; and all the constructions of one expression
together refuse to build more than :data:`MAX_WORK` transitions and register
assignments (see :func:`budget`).

The automaton itself, its templates and minimization are in
:mod:`sentinel.ode.machines` (imported here under the same names).
"""

from __future__ import annotations

import typing as t
from collections import deque
from contextlib import contextmanager
from contextvars import ContextVar

from sentinel.errors import ExpressionError
from sentinel.ode.machines import (
    CUR,
    EMPTY,
    Automaton,
    _finish,
    _ops_size,
    _shift_ops,
    compose,
    minimize,
    shift,
)
from sentinel.ode.machines import Op as Op
from sentinel.ode.machines import Ops as Ops
from sentinel.ode.machines import Template as Template
from sentinel.ode.machines import liveness as liveness
from sentinel.ode.machines import reads as reads
from sentinel.ode.machines import size as size

__all__ = [
    "CUR",
    "EMPTY",
    "MAX_STATES",
    "MAX_WORK",
    "Automaton",
    "AutomatonTooCostly",
    "AutomatonTooLarge",
    "afford",
    "after_each",
    "budget",
    "conj",
    "constant",
    "disj",
    "letter",
    "minimize",
    "neg",
    "pipe",
    "prefix",
    "project",
    "relabel",
    "relative",
    "relative_plus",
]

#: The most states one construction may build.
MAX_STATES: t.Final = 20_000
#: The most work the compilation of one expression may do, counted as the
#: transitions plus the register assignments its constructions build (their sum
#: over all of them, including intermediate automata that minimization shrinks
#: again), each assignment weighed by the size of its template (its nodes: a
#: copy of a register is 1), since the later passes walk every template. Compile
#: time grows with this count, some 2 to 6 microseconds per unit (measured on
#: ``a / a / ... / a``, nested ``relative``, long ``prior`` and ``/+`` over
#: ``relative``: about a second at most at the limit); the states alone do not
#: bound it, as registers multiply the work of each transition (``relative``
#: keeps a block of registers per state of its second operand, so nesting it n
#: deep builds about n**4 assignments), and correlation variables double the
#: alphabet: nothing over more symbols than the budget has left is built.
MAX_WORK: t.Final = 200_000


#: Sub-expressions with more events and operators than this are described in
#: errors rather than printed (their text may be that long and more).
_PRINTED: t.Final = 1_000


def _where(operator: str, term: t.Any) -> str:
    if term is None:
        return operator
    size = getattr(term, "size", 0)
    if size > _PRINTED:
        return f"a sub-expression of {size:,} events and operators (its {operator})"
    return f"{term} (its {operator})"


class AutomatonTooLarge(ExpressionError):
    """An expression whose automaton would exceed :data:`MAX_STATES` states.

    ``operator`` is the construction that grew too large, ``states`` the limit,
    ``term`` the sub-expression it was building (set by the compiler; None when
    a construction is called directly).
    """

    def __init__(self, operator: str, states: int, term: t.Any = None) -> None:
        self.operator = operator
        self.states = states
        self.term = term
        super().__init__(self._message())

    def _message(self) -> str:
        """The refusal's text, from the fields (a subclass says it its own way)."""
        return (
            f"the automaton of {_where(self.operator, self.term)} grows beyond "
            f"{self.states} states; some expressions need that many "
            "(one that depends on the n-th last occurrence of an event "
            "remembers the last n of them, 2**n states): use a smaller count, or split "
            "the expression into several events"
        )

    def with_term(self, term: t.Any) -> AutomatonTooLarge:
        """The same refusal, naming the sub-expression ``term``."""
        return AutomatonTooLarge(self.operator, self.states, term)


class AutomatonTooCostly(AutomatonTooLarge):
    """An expression whose compilation would do more than :data:`MAX_WORK` work
    (transitions, and register assignments by their templates' sizes, over all
    its constructions).

    ``operator`` and ``term`` are as for :class:`AutomatonTooLarge`: the
    construction that passed the limit and its sub-expression; ``states`` the
    states that construction had built, ``registers`` the registers its
    transitions assigned (numbered before the ones never live together are
    merged), ``symbols`` the size of its alphabet, ``limit`` the limit passed and
    ``work`` the work done by then, counting the row of transitions (or the
    alphabet) that it was about to build when that alone would pass the limit.
    """

    def __init__(
        self,
        operator: str,
        states: int,
        registers: int,
        work: int,
        limit: int,
        term: t.Any = None,
        symbols: int = 0,
    ) -> None:
        self.registers = registers
        self.work = work
        self.limit = limit
        self.symbols = symbols
        super().__init__(operator, states, term)

    def _message(self) -> str:
        return (
            f"compiling {_where(self.operator, self.term)} passes the limit of "
            f"{self.limit:,} transitions and register assignments built "
            f"(sentinel.ode.automata.MAX_WORK): it needs at least {self.work:,}, and this "
            f"operator had built {self.states:,} states with {self.registers:,} registers "
            f"over {self.symbols:,} symbols; each nested relative (or /, prior, sequence) "
            "multiplies the registers, and each correlation variable doubles the symbols: "
            "split the expression into several Ode events combined with Snoop "
            "operators, or nest fewer levels"
        )

    def with_term(self, term: t.Any) -> AutomatonTooCostly:
        return AutomatonTooCostly(
            self.operator, self.states, self.registers, self.work, self.limit, term, self.symbols
        )

    @classmethod
    def written_out(cls, term: t.Any, size: int, limit: int, what: str) -> AutomatonTooCostly:
        """The refusal of an expression that has ``size`` operators and events
        written out (``term.size``), more than ``limit``: ``what`` names it
        (its text would be as long, so it is not printed)."""
        e = cls.__new__(cls)
        e.operator, e.states, e.registers, e.symbols = term.op, 0, 0, 0
        e.work, e.limit, e.term = size, limit, term
        ExpressionError.__init__(
            e,
            f"{what} has {size:,} operators and events written out (a named sub-expression "
            "counts again wherever it is used), more than the limit of "
            f"{limit:,} units of work (sentinel.ode.automata.MAX_WORK) that compiling one "
            "expression may do: each counts at least one; use fewer names that each use the "
            "previous ones several times, or split the expression into several Ode events "
            "combined with Snoop operators",
        )
        return e


class _Budget:
    """Work left for the compilation of one expression (see :func:`budget`)."""

    __slots__ = ("limit", "spent")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spent = 0


_BUDGET: ContextVar[_Budget | None] = ContextVar("sentinel_ode_budget", default=None)


@contextmanager
def budget(limit: int | None = None) -> t.Iterator[None]:
    """Constructions inside share one budget of ``limit`` (default
    :data:`MAX_WORK`) units of work (see there); outside any,
    each construction has a budget of its own. A construction that would pass
    it raises :class:`AutomatonTooCostly` before building more."""
    token = _BUDGET.set(_Budget(MAX_WORK if limit is None else limit))
    try:
        yield
    finally:
        _BUDGET.reset(token)


# -- building ----------------------------------------------------------------------------


def afford(k: int, operator: str) -> None:
    """Refuse (:class:`AutomatonTooCostly`) a construction over ``k`` symbols
    when one row of its transitions would pass the budget, before anything of
    that size is built."""
    spend = _BUDGET.get() or _Budget(MAX_WORK)
    if spend.spent + k > spend.limit:
        raise AutomatonTooCostly(operator, 0, 0, spend.spent + k, spend.limit, symbols=k)


def _explore(
    k: int,
    start: t.Hashable,
    step: t.Callable[[t.Any, int], tuple[t.Hashable, Ops]],
    operator: str,
) -> tuple[list[t.Any], list[list[int]], list[list[Ops]]]:
    """Breadth-first construction of the reachable states from ``start``,
    charged to the budget (see :func:`budget`) state by state: each transition
    1, each register assignment the size of its template. A row that would pass
    the budget on its transitions alone is refused before it is built."""
    spend = _BUDGET.get() or _Budget(MAX_WORK)
    index: dict[t.Hashable, int] = {start: 0}
    keys: list[t.Any] = [start]
    delta: list[list[int]] = []
    ops: list[list[Ops]] = []

    def refuse(work: int) -> AutomatonTooCostly:
        registers = max((d for o in ops for x in o for d, _ in x), default=-1) + 1
        return AutomatonTooCostly(operator, len(keys), registers, work, spend.limit, symbols=k)

    i = 0
    while i < len(keys):
        if spend.spent + k > spend.limit:
            raise refuse(spend.spent + k)
        key = keys[i]
        row: list[int] = []
        orow: list[Ops] = []
        for a in range(k):
            nxt, o = step(key, a)
            j = index.get(nxt)
            if j is None:
                j = index[nxt] = len(keys)
                keys.append(nxt)
                if j >= MAX_STATES:
                    raise AutomatonTooLarge(operator, MAX_STATES)
            row.append(j)
            orow.append(o)
        delta.append(row)
        ops.append(orow)
        i += 1
        spend.spent += k + sum(map(_ops_size, orow))
        if spend.spent > spend.limit:
            raise refuse(spend.spent)
    return keys, delta, ops


def fresh_start(m: Automaton) -> Automaton:
    """``m`` with a start state that is not accepting and that no transition
    enters (what ``relative``, ``relative+`` and ``/+`` need of the automaton
    they restart)."""
    entered = any(0 in row for row in m.delta)
    if not entered and not m.acc[0]:
        return m
    delta = [[x + 1 for x in m.delta[0]]] + [[x + 1 for x in row] for row in m.delta]
    ops = [list(m.ops[0])] + [list(r) for r in m.ops]
    return Automaton(m.k, delta, [False, *m.acc], ops, [None, *m.rec], m.nregs)


# -- the constructions of section 3 --------------------------------------------------------


def constant(k: int, accepting: bool, record: Template = CUR) -> Automaton:
    """NULL (never accepts) or, accepting, every point (with ``record``)."""
    _keys, delta, ops = _explore(k, 0, lambda q, a: (0, ()), "constant")
    return Automaton(k, delta, [accepting], ops, [record if accepting else None])


def letter(k: int, symbols: frozenset[int], record: Template = CUR) -> Automaton:
    """A primitive event: accepts right after reading one of ``symbols``."""
    if not symbols:
        return constant(k, False)
    if len(symbols) == k:
        return constant(k, True, record)
    _keys, delta, ops = _explore(k, 0, lambda q, a: (1 if a in symbols else 0, ()), "letter")
    return Automaton(k, delta, [False, True], ops, [None, record])


def neg(m: Automaton) -> Automaton:
    """``!E``: the complement (registers dropped: an absence needs no witness)."""
    p = m.plain()
    acc = [not a for a in p.acc]
    return minimize(Automaton(p.k, p.delta, acc, rec=[EMPTY if a else None for a in acc]))


def _product(
    a: Automaton, b: Automaton, accept: t.Callable[[int, int], Template | None], operator: str
) -> Automaton:
    k, na = a.k, a.nregs

    def step(key: tuple[int, int], s: int) -> tuple[tuple[int, int], Ops]:
        p, q = key
        return (a.delta[p][s], b.delta[q][s]), a.ops[p][s] + _shift_ops(b.ops[q][s], na)

    keys, delta, ops = _explore(k, (0, 0), step, operator)
    rec = [accept(p, q) for p, q in keys]
    acc = [r is not None for r in rec]
    return _finish(Automaton(k, delta, acc, ops, rec, na + b.nregs))


def conj(a: Automaton, b: Automaton, operator: str = "∧") -> Automaton:
    """``E ∧ F``: the product, accepting where both accept; the record is both
    records."""
    na = a.nregs

    def accept(p: int, q: int) -> Template | None:
        if a.acc[p] and b.acc[q]:
            return ("n", None, (a.rec[p], shift(b.rec[q], na)))
        return None

    return _product(a, b, accept, operator)


def disj(a: Automaton, b: Automaton, operator: str = "∨") -> Automaton:
    """``E ∨ F``: the product, accepting where either accepts; the record is the
    first operand's when it accepts, else the second's."""
    na = a.nregs

    def accept(p: int, q: int) -> Template | None:
        if a.acc[p]:
            return a.rec[p]
        if b.acc[q]:
            return t.cast(Template, shift(b.rec[q], na))
        return None

    return _product(a, b, accept, operator)


Candidate = tuple[Template, int, Ops]  # (its time, its first register, its own ops)


def newest(candidates: t.Sequence[tuple[Template, Template]]) -> Template:
    """The template of the candidate whose *time* is latest: ``candidates`` are
    ``(time, template)`` pairs, a time being a template whose parts' last point
    is the candidate's time (nothing: older than everything). One candidate is
    itself; several make an ``("m", None, (time1, tpl1, time2, tpl2, ...))``."""
    if len(candidates) == 1 or all(c[1] == candidates[0][1] for c in candidates):
        return candidates[0][1]
    return ("m", None, tuple(x for pair in candidates for x in pair))


def _known(
    choice: list[tuple[Template, Template]],
    cands: list[Candidate],
    fresh: int | None,
    ordered: bool,
) -> list[tuple[Template, Template]]:
    """``choice`` cut to its winner when the construction knows it: the first
    when threads are kept in order, newest first; a thread that starts at this
    point (its time is the current point), or the one in the fresh start state
    (block ``fresh``), which started at the latest split."""
    if ordered:
        return choice[:1]
    for (time, old, _own), pick in zip(cands, choice, strict=True):
        if time == CUR or old == fresh:
            return [pick]
    return choice


def _merge(
    groups: t.Mapping[int, list[Candidate]],
    s: int,
    m: Automaton,
    block: t.Callable[[int], int],
    fresh: int | None,
    ordered: bool,
) -> list[Op]:
    """The register assignments that move threads of ``m`` on symbol ``s`` into
    their new states: ``groups[q2]`` lists the threads that reach ``q2``, each as
    (its time, the first register of its block, ``m``'s ops it takes). Where
    several meet, each register of q2's block takes the value of the thread with
    the latest time (the newest split point), decided when the point is read."""
    ops: list[Op] = []
    nm = m.nregs
    for q2, cands in groups.items():
        new = block(q2)
        for j in range(1 + nm):
            choice: list[tuple[Template, Template]] = []
            for time, old, own in cands:
                src: Template | None = None
                if j:
                    mine = dict(own).get(j - 1)
                    if mine is not None:
                        src = shift(mine, old + 1)
                if src is None:
                    src = time if j == 0 else ("r", old + j)
                choice.append((time, src))
            tpl = newest(_known(choice, cands, fresh, ordered))
            if tpl != ("r", new + j):
                ops.append((new + j, tpl))
    return ops


def _move(
    threads: tuple[int, ...], s: int, m: Automaton, block: t.Callable[[int], int], ordered: bool
) -> tuple[list[int], list[Op]]:
    """Advance every thread of ``m`` on symbol ``s`` (a thread: a state and its
    block of registers, split register first, then ``m``'s); threads meeting in
    one state keep the registers of the one with the latest split point. With
    ``ordered``, ``threads`` are newest first and so are the states returned."""
    groups: dict[int, list[Candidate]] = {}
    for q in threads:
        b = block(q)
        groups.setdefault(m.delta[q][s], []).append((("r", b), b, m.ops[q][s]))
    return list(groups), _merge(groups, s, m, block, block(0), ordered)


def _latest(
    label: t.Any,
    done: list[int],
    m: Automaton,
    block: t.Callable[[int], int],
    ordered: bool,
    split: bool = True,
) -> Template:
    """The record of the accepting threads ``done`` of ``m``: the one with the
    latest split point (its split register, unless not ``split``, and ``m``'s
    record): the first when ``ordered``, else chosen when the point is read."""
    choice: list[tuple[Template, Template]] = []
    for q in done[:1] if ordered else done:
        base = block(q)
        own = shift(m.rec[q], base + 1)
        choice.append((("r", base), ("n", None, (("r", base), own) if split else (own,))))
    return ("n", label, (newest(choice),))


def _threads(build: t.Callable[[bool], Automaton]) -> Automaton:
    """``build(ordered)``, threads kept in order first, as sets if that is too
    large.

    In order (newest first), the newest thread is known when the automaton is
    built, and a merge or a record is a plain copy; but the orders threads can
    come in multiply the states (the set of threads of ``relative(c, every <3> a
    || every <4> b)`` takes some 12,000 values, their orders over 300,000). As a
    set, the state is what the language needs, and where threads meet the
    registers of the one with the latest split point are chosen at run time
    (the ``"m"`` template); that keeps more registers live, so it is the second
    choice."""
    try:
        return build(True)
    except AutomatonTooCostly:
        raise  # the work is spent; as sets would spend more
    except AutomatonTooLarge:
        return build(False)


def _key(states: list[int], ordered: bool) -> tuple[int, ...]:
    return tuple(states) if ordered else tuple(sorted(states))


def relative(
    a: Automaton, b: Automaton, label: t.Any, split_label: t.Any, operator: str = "relative"
) -> Automaton:
    """``relative(E, F)``: F restarted after every point where E accepts (the
    ε-transitions of section 3, determinized). The record is the latest split
    point (E's record there) and F's record."""
    b = fresh_start(b)
    k, na, nb = a.k, a.nregs, b.nregs
    width = 1 + nb

    def block(q: int) -> int:
        return na + q * width

    def build(ordered: bool) -> Automaton:
        def step(key: tuple[int, tuple[int, ...]], s: int) -> tuple[t.Hashable, Ops]:
            p, threads = key
            p2 = a.delta[p][s]
            aops = a.ops[p][s]
            moved, ops = _move(threads, s, b, block, ordered)
            if a.acc[p2]:
                # A new thread in F's fresh start state, which no transition enters.
                split = ("s", split_label, (compose(a.rec[p2], aops),))  # type: ignore[arg-type]
                ops.append((block(0), split))
                moved.insert(0, 0)
            return (p2, _key(moved, ordered)), aops + tuple(ops)

        keys, delta, ops = _explore(k, (0, ()), step, operator)
        acc: list[bool] = []
        rec: list[Template | None] = []
        for _p, threads in keys:
            done = [q for q in threads if b.acc[q]]
            acc.append(bool(done))
            rec.append(_latest(label, done, b, block, ordered) if done else None)
        return _finish(Automaton(k, delta, acc, ops, rec, na + b.n * width))

    return _threads(build)


def relative_plus(
    a: Automaton, label: t.Any, operator: str = "relative+", *, keep_split: bool = True
) -> Automaton:
    """``relative+(E)``: E restarted after every point where the whole expression
    accepts. The record keeps the last iteration: its start point (none for the
    first iteration; left out when not ``keep_split``) and E's record."""
    a = fresh_start(a)
    k, na = a.k, a.nregs
    width = 1 + na

    def block(q: int) -> int:
        return q * width

    def build(ordered: bool) -> Automaton:
        def step(threads: tuple[int, ...], s: int) -> tuple[t.Hashable, Ops]:
            moved, ops = _move(threads, s, a, block, ordered)
            if any(a.acc[q] for q in moved):
                ops.append((block(0), CUR))
                moved.insert(0, 0)
            return _key(moved, ordered), tuple(ops)

        keys, delta, ops = _explore(k, (0,), step, operator)
        acc: list[bool] = []
        rec: list[Template | None] = []
        for threads in keys:
            done = [q for q in threads if a.acc[q]]
            acc.append(bool(done))
            rec.append(_latest(label, done, a, block, ordered, keep_split) if done else None)
        return _finish(Automaton(k, delta, acc, ops, rec, a.n * width))

    return _threads(build)


def pipe(a: Automaton, b: Automaton, label: t.Any, operator: str = "|") -> Automaton:
    """``E | F``: F reads only the points where E accepts."""
    k, na = a.k, a.nregs

    def step(key: tuple[int, int], s: int) -> tuple[t.Hashable, Ops]:
        p, q = key
        p2 = a.delta[p][s]
        if a.acc[p2]:
            return (p2, b.delta[q][s]), a.ops[p][s] + _shift_ops(b.ops[q][s], na)
        return (p2, q), a.ops[p][s]

    keys, delta, ops = _explore(k, (0, 0), step, operator)
    acc = [a.acc[p] and b.acc[q] for p, q in keys]
    rec = [
        ("n", label, (a.rec[p], shift(b.rec[q], na))) if ok else None
        for (p, q), ok in zip(keys, acc, strict=True)
    ]
    return _finish(Automaton(k, delta, acc, ops, rec, na + b.nregs))


def after_each(
    f: Automaton, e: Automaton, label: t.Any, split_label: t.Any, operator: str = "/+"
) -> Automaton:
    """``F /+ E``: F restarted at every point where E accepts (that point belongs
    to no segment). The record is the delimiting E and F's record."""
    f = fresh_start(f)
    k, ne = e.k, e.nregs
    delim = ne

    def step(key: tuple[int, int], s: int) -> tuple[t.Hashable, Ops]:
        p, q = key
        p2 = e.delta[p][s]
        eops = e.ops[p][s]
        if e.acc[p2]:
            split = ("s", split_label, (compose(e.rec[p2], eops),))  # type: ignore[arg-type]
            return (p2, 0), (*eops, (delim, split))
        if q >= 0:
            return (p2, f.delta[q][s]), eops + _shift_ops(f.ops[q][s], ne + 1)
        return (p2, -1), eops

    keys, delta, ops = _explore(k, (0, -1), step, operator)
    acc = [q >= 0 and f.acc[q] for _p, q in keys]
    rec = [
        ("n", label, (("r", delim), shift(f.rec[q], ne + 1))) if ok else None
        for (_p, q), ok in zip(keys, acc, strict=True)
    ]
    return _finish(Automaton(k, delta, acc, ops, rec, ne + 1 + f.nregs))


def prefix(m: Automaton) -> Automaton:
    """``prefix(E)``: accepting where some non-empty continuation makes E accept
    (section 3's prefix construction)."""
    p = m.plain()
    # States from which an accepting state is reachable in zero or more steps.
    back: list[list[int]] = [[] for _ in range(p.n)]
    for q, row in enumerate(p.delta):
        for r in set(row):
            back[r].append(q)
    alive = {q for q in range(p.n) if p.acc[q]}
    todo = deque(alive)
    while todo:
        r = todo.popleft()
        for q in back[r]:
            if q not in alive:
                alive.add(q)
                todo.append(q)
    acc = [any(r in alive for r in row) for row in p.delta]
    return minimize(Automaton(p.k, p.delta, acc, rec=[EMPTY if x else None for x in acc]))


def project(m: Automaton, low: int, label: t.Any, operator: str = "exists") -> Automaton:
    """``exists x: E`` for ``m`` over an alphabet whose last bit is x: symbols
    ``s`` (x absent) and ``s + low`` (x here) of ``m`` become one symbol ``s``
    of an alphabet of ``low`` symbols, and x must occur at exactly one point, at
    or before the point of satisfaction. The record adds x's point."""
    k = low
    nm = m.nregs
    width = 1 + nm
    # Thread (q, bound): block per state for bound threads; the one unbound
    # thread (x not yet placed) keeps its registers in a block of its own.
    unbound = m.n * width

    def block(q: int) -> int:
        return q * width

    def build(ordered: bool) -> Automaton:
        def step(key: tuple[int, tuple[int, ...]], s: int) -> tuple[t.Hashable, Ops]:
            free, bound = key
            # The thread that places x here is the newest (x's point is its time).
            groups: dict[int, list[Candidate]] = {}
            if free >= 0:
                groups[m.delta[free][s + low]] = [(CUR, unbound, m.ops[free][s + low])]
            for q in bound:
                b = block(q)
                groups.setdefault(m.delta[q][s], []).append((("r", b), b, m.ops[q][s]))
            ops = _merge(groups, s, m, block, None, ordered)
            free2 = -1
            if free >= 0:
                free2 = m.delta[free][s]
                for j, src in m.ops[free][s]:
                    ops.append((unbound + 1 + j, shift(src, unbound + 1)))
            return (free2, _key(list(groups), ordered)), tuple(ops)

        keys, delta, ops = _explore(k, (0, ()), step, operator)
        acc: list[bool] = []
        rec: list[Template | None] = []
        for _free, bound in keys:
            done = [q for q in bound if m.acc[q]]
            acc.append(bool(done))
            rec.append(_latest(label, done, m, block, ordered) if done else None)
        return _finish(Automaton(k, delta, acc, ops, rec, m.n * width + width))

    return _threads(build)


def relabel(m: Automaton, fn: t.Callable[[Template], Template]) -> Automaton:
    """``m`` with every accepting state's record template replaced by
    ``fn(template)`` (derived operators name their records this way)."""
    rec = [fn(r) if a and r is not None else r for r, a in zip(m.rec, m.acc, strict=True)]
    return _finish(Automaton(m.k, m.delta, m.acc, m.ops, rec, m.nregs))
