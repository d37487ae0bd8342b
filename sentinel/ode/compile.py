"""Ode terms to automata (section 3), and what each compiles to.

Basic operators use the paper's constructions (:mod:`sentinel.ode.automata`):
a letter is a two-state automaton, ∧ a product, ! a complement, ``relative`` and
``relative+`` the ε-connections determinized, the pipe, ``/+`` and ``prefix``
their own constructions. ∨ is a product too (rather than !(!E ∧ !F)) so that it
keeps the record of the operand that holds. The other derived operators are
built from their definitions in 2.3 and relabelled, so that a record names them
as written:

=================  ==================================================
``prior(E, F)``    relative(E, any) ∧ F
``sequence(E, F)`` relative(E, first) ∧ F
``first``          !relative(any, any)
``<n>E``           (E | sequence(any, ..., any)) | first
``every <n> E``    E | relative+(<n> any)
``F / E``          relative(E | first, F)
``firstAfter``     (E2 ∧ !prior(F, any)) /+ E1
``before(E)``      prior(E, any)
``happened(E)``    E ∨ prior(E, any)
``E * T``          T ∧ !prior(!E, T)
=================  ==================================================

A correlation variable x adds one bit to the alphabet while its ``exists`` is
compiled: ``x`` (and ``E = x``, which is E ∧ x) are the symbols with the bit set,
and ``exists x: E`` projects the bit away, requiring it at exactly one point at
or before the point of satisfaction (so x may appear under negation too). An
inner ``exists`` reusing an enclosing variable's name adds a bit of its own, and
the name means that (innermost) bit in its body: it shadows the outer one.

Automata are cached per term and alphabet.
"""

from __future__ import annotations

import threading
import typing as t
from collections import OrderedDict

from sentinel.algebra.masks import Variable
from sentinel.errors import ExpressionError
from sentinel.ode import automata as au
from sentinel.ode import terms as tm
from sentinel.ode.alphabet import Alphabet
from sentinel.ode.automata import CUR, EMPTY, Automaton, Template

__all__ = ["check_size", "compile_term"]

_CACHE: OrderedDict[tuple[t.Any, ...], Automaton] = OrderedDict()
_CACHE_SIZE = 256
_lock = threading.Lock()


def compile_term(term: tm.Term, alphabet: Alphabet, attribute: Variable | None = None) -> Automaton:
    """The minimized automaton of ``term`` over ``alphabet`` (cached).

    Records are labelled with :class:`~sentinel.ode.terms.OdePart` of the
    sub-terms; the top term's own label is left out (its detection is the
    event's). Raises :class:`~sentinel.errors.ExpressionError` for a variable
    that is not bound, ``relative+`` or ``prefix`` over free variables, and
    automata beyond :data:`~sentinel.ode.automata.MAX_STATES` states or whose
    constructions would do more than :data:`~sentinel.ode.automata.MAX_WORK` units
    of work (a transition, or a register assignment by the size of what it records:
    :class:`~sentinel.ode.automata.AutomatonTooCostly`, raised before the work
    passes the limit).
    """
    check_size(term)
    key = (term, alphabet, attribute)
    with _lock:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    free = term.free_variables()
    if free:
        raise ExpressionError(
            f"correlation variable(s) {', '.join(sorted(free))} not bound in {term}; bind "
            "them with exists (exists x: ...)"
        )
    with au.budget():
        m = _Compiler(alphabet, attribute).top(term)
    with _lock:
        _CACHE[key] = m
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return m


def check_size(term: tm.Term, what: str | None = None) -> None:
    """Refuse (:class:`~sentinel.ode.automata.AutomatonTooCostly`) a term with
    more than :data:`~sentinel.ode.automata.MAX_WORK` operators and events
    written out (:attr:`~sentinel.ode.terms.Term.size`), before anything walks
    it: printing or reading it would take that long, and its compilation spends
    at least one unit of work on each (``what`` names it in the error; by
    default its operator)."""
    if term.size > au.MAX_WORK:
        raise au.AutomatonTooCostly.written_out(
            term, term.size, au.MAX_WORK, what or f"an expression (its top operator {term.op})"
        )


def _wrap(label: t.Any) -> t.Callable[[Template], Template]:
    return lambda r: ("n", label, (r,))


class _Compiler:
    def __init__(self, alphabet: Alphabet, attribute: Variable | None) -> None:
        self.alphabet = alphabet
        self.attribute = attribute
        self.memo: dict[tuple[tm.Term, tuple[str, ...]], Automaton] = {}

    def top(self, term: tm.Term) -> Automaton:
        m = self.c(term, ())
        label = tm.OdePart(term)

        def strip(r: Template) -> Template:
            if r[0] == "n" and r[1] == label:
                return ("n", None, r[2])
            return r

        return au.relabel(m, strip)

    # -- symbols -------------------------------------------------------------------
    def k(self, vs: tuple[str, ...]) -> int:
        return self.alphabet.k << len(vs)

    def extend(self, base: frozenset[int], vs: tuple[str, ...]) -> frozenset[int]:
        kb = self.alphabet.k
        return frozenset(s + kb * b for b in range(1 << len(vs)) for s in base)

    def var_symbols(self, name: str, vs: tuple[str, ...]) -> frozenset[int]:
        # The innermost binding: an exists that reuses an enclosing variable's
        # name shadows it (section 5, rule 6), and its bit is the later one.
        kb, j = self.alphabet.k, len(vs) - 1 - vs[::-1].index(name)
        return frozenset(s + kb * b for b in range(1 << len(vs)) if b >> j & 1 for s in range(kb))

    # -- terms ---------------------------------------------------------------------
    def c(self, term: tm.Term, vs: tuple[str, ...]) -> Automaton:
        key = (term, vs)
        m = self.memo.get(key)
        if m is None:
            try:
                # Nothing over more symbols than the budget has left is built:
                # not even the sets of symbols of a letter.
                au.afford(self.k(vs), term.op)
                m = self.memo[key] = self._build(term, vs)
            except au.AutomatonTooLarge as e:
                if e.term is not None:
                    raise
                raise e.with_term(term) from None
        return m

    def any_(self, vs: tuple[str, ...], record: Template = CUR) -> Automaton:
        return au.constant(self.k(vs), True, record)

    def first(self, vs: tuple[str, ...]) -> Automaton:
        return au.neg(au.relative(self.any_(vs), self.any_(vs), None, None, "first"))

    def prior2(self, a: Automaton, b: Automaton, split: t.Any, vs: tuple[str, ...]) -> Automaton:
        return au.conj(au.relative(a, self.any_(vs, EMPTY), None, split, "prior"), b, "prior")

    def seq2(self, a: Automaton, b: Automaton, split: t.Any, vs: tuple[str, ...]) -> Automaton:
        rel = au.relative(a, self.first(vs), None, split, "sequence")
        return au.conj(rel, b, "sequence")

    def nth(self, n: int, m: Automaton, vs: tuple[str, ...]) -> Automaton:
        """<n>E with the record [the 1st, ..., n-th points of E]."""
        points = self.any_(vs)
        for _ in range(n - 1):
            points = self.seq2(points, self.any_(vs), None, vs)
        quiet = au.relabel(m, lambda r: EMPTY)
        nth = au.pipe(au.pipe(quiet, points, None, "<n>"), self.first(vs), None, "<n>")
        return nth

    def _build(self, term: tm.Term, vs: tuple[str, ...]) -> Automaton:
        k = self.k(vs)
        label = tm.OdePart(term)
        kids = term.children
        if isinstance(term, tm.Null):
            return au.constant(k, False)
        if isinstance(term, tm.Letter):
            return au.letter(k, self.extend(self.alphabet.letter(term, self.attribute), vs))
        if isinstance(term, tm.AnyEvent):
            return self.any_(vs)
        if isinstance(term, tm.Conj):
            return au.conj(self.c(kids[0], vs), self.c(kids[1], vs))
        if isinstance(term, tm.Disj):
            return au.disj(self.c(kids[0], vs), self.c(kids[1], vs))
        if isinstance(term, tm.Neg):
            return au.neg(self.c(kids[0], vs))
        if isinstance(term, tm.Rel):
            a, b = kids
            return au.relative(self.c(a, vs), self.c(b, vs), label, tm.OdePart(a))
        if isinstance(term, tm.RelPlus):
            if kids[0].free_variables():
                raise ExpressionError(
                    f"relative+ cannot be applied to {kids[0]}: it has free correlation "
                    "variables (Ode section 5, rule 3)"
                )
            return au.relative_plus(self.c(kids[0], vs), label)
        if isinstance(term, tm.Pipe):
            return au.pipe(self.c(kids[0], vs), self.c(kids[1], vs), label)
        if isinstance(term, tm.AfterEach):
            f, e = kids
            return au.after_each(self.c(f, vs), self.c(e, vs), label, tm.OdePart(e))
        if isinstance(term, tm.Prefix):
            if kids[0].free_variables():
                raise ExpressionError(
                    f"prefix cannot be applied to {kids[0]}: it has free correlation variables"
                )
            return au.prefix(self.c(kids[0], vs))
        if isinstance(term, tm.Scoped):
            return self.c(kids[0], vs)
        if isinstance(term, tm.First):
            return self.first(vs)
        if isinstance(term, (tm.Prior, tm.Sequence)):
            two = self.prior2 if isinstance(term, tm.Prior) else self.seq2
            op = type(term)
            m = self.c(kids[0], vs)
            for i in range(1, len(kids)):
                split = tm.OdePart(kids[0] if i == 1 else op(*kids[:i]))
                m = two(m, self.c(kids[i], vs), split, vs)
                if i < len(kids) - 1:
                    m = au.relabel(m, _wrap(tm.OdePart(op(*kids[: i + 1]))))
            return au.relabel(m, _wrap(label))
        if isinstance(term, tm.Nth):
            assert isinstance(term, tm.Nth)
            return au.relabel(self.nth(term.n, self.c(kids[0], vs), vs), _wrap(label))
        if isinstance(term, tm.Every):
            assert isinstance(term, tm.Every)
            quiet = au.relabel(self.c(kids[0], vs), lambda r: EMPTY)
            groups = au.relative_plus(self.nth(term.n, self.any_(vs), vs), None, keep_split=False)
            return au.relabel(au.pipe(quiet, groups, None, "every"), _wrap(label))
        if isinstance(term, tm.After):
            f, e = kids
            first_e = au.pipe(self.c(e, vs), self.first(vs), None, "/")
            return au.relative(first_e, self.c(f, vs), label, tm.OdePart(e), "/")
        if isinstance(term, tm.FirstAfter):
            e1, e2, f = kids
            fresh = au.neg(self.prior2(self.c(f, vs), self.any_(vs, EMPTY), None, vs))
            body = au.conj(self.c(e2, vs), fresh, "firstAfter")
            return au.after_each(body, self.c(e1, vs), label, tm.OdePart(e1), "firstAfter")
        if isinstance(term, tm.Before):
            m = self.prior2(self.c(kids[0], vs), self.any_(vs, EMPTY), tm.OdePart(kids[0]), vs)
            return au.relabel(m, _wrap(label))
        if isinstance(term, tm.Happened):
            me = self.c(kids[0], vs)
            earlier = self.prior2(me, self.any_(vs, EMPTY), tm.OdePart(kids[0]), vs)
            return au.relabel(au.disj(me, earlier, "happened"), _wrap(label))
        if isinstance(term, tm.Star):
            repeated, then = kids
            mt = self.c(then, vs)
            never = au.neg(self.prior2(au.neg(self.c(repeated, vs)), mt, None, vs))
            return au.relabel(au.conj(mt, never, "*"), _wrap(label))
        if isinstance(term, tm.Var):
            assert isinstance(term, tm.Var)
            return au.letter(k, self.var_symbols(term.name, vs))
        if isinstance(term, tm.Mark):
            assert isinstance(term, tm.Mark)
            point = au.letter(k, self.var_symbols(term.variable, vs), EMPTY)
            return au.conj(self.c(kids[0], vs), point, "=")
        if isinstance(term, tm.Exists):
            assert isinstance(term, tm.Exists)
            inner = vs + term.variables
            au.afford(self.k(inner), "exists")
            m = self.c(kids[0], inner)
            for depth in range(len(inner), len(vs), -1):
                m = au.project(m, self.alphabet.k << (depth - 1), None)
            return au.relabel(m, _wrap(label))
        raise ExpressionError(f"cannot compile the Ode operator {term.op!r}")
