"""A direct evaluator of Ode expressions: E[h] from the definitions (2.2, 2.3, 5).

It shares no code with the automaton compiler: histories are tuples of points
``(position, event name, params)`` and every operator is the set operation its
definition states (∨ as !(!E ∧ !F), the pipe as F[E[h]], F/E and F/+E by cutting
the history, prefix by trying continuations). Exponential; for small histories.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import product
from typing import Any

from sentinel.ode import terms as tm

Point = tuple[int, str, Mapping[str, Any]]
History = tuple[Point, ...]


def history(names: Sequence[str], params: Sequence[Mapping[str, Any]] | None = None) -> History:
    return tuple((i, n, (params[i] if params is not None else {})) for i, n in enumerate(names))


def evaluate(
    term: tm.Term,
    h: History,
    *,
    env: Mapping[str, int] | None = None,
    alphabet: Sequence[Point] = (),
    depth: int = 0,
) -> frozenset[int]:
    """The positions of ``h`` at which ``term`` is satisfied.

    ``alphabet`` (points with any position) and ``depth`` are what prefix tries
    as continuations: every sequence of up to ``depth`` of them.
    """
    return _Eval(alphabet, depth).ev(term, h, dict(env or {}))


class _Eval:
    def __init__(self, alphabet: Sequence[Point], depth: int) -> None:
        self.alphabet = alphabet
        self.depth = depth

    def ev(self, e: tm.Term, h: History, env: dict[str, int]) -> frozenset[int]:
        all_ = frozenset(p for p, _, _ in h)
        if not h:
            return frozenset()  # E[null] = null
        k = e.children
        if isinstance(e, tm.Null):
            return frozenset()
        if isinstance(e, tm.Letter):
            mask: Callable[[Mapping[str, Any]], bool] | None = e.mask
            return frozenset(
                p for p, n, par in h if n == e.event.name and (mask is None or mask(par))
            )
        if isinstance(e, tm.AnyEvent):
            return all_
        if isinstance(e, tm.Conj):
            return self.ev(k[0], h, env) & self.ev(k[1], h, env)
        if isinstance(e, tm.Neg):
            return all_ - self.ev(k[0], h, env)
        if isinstance(e, tm.Rel):
            out: set[int] = set()
            for i in self.ev(k[0], h, env):
                out |= self.ev(k[1], after(h, i), env)
            return frozenset(out)
        if isinstance(e, tm.RelPlus):
            total = set(self.ev(k[0], h, env))
            work = list(total)
            seen: set[int] = set()
            while work:
                j = work.pop()
                if j in seen:
                    continue
                seen.add(j)
                for p in self.ev(k[0], after(h, j), env):
                    total.add(p)
                    work.append(p)
            return frozenset(total)
        if isinstance(e, tm.Disj):  # a. E ∨ F = !(!E ∧ !F)
            ne = all_ - self.ev(k[0], h, env)
            nf = all_ - self.ev(k[1], h, env)
            return all_ - (ne & nf)
        if isinstance(e, tm.Prior):  # c., d.
            acc = k[0]
            for nxt in k[1:]:
                acc = tm.Conj(tm.Rel(acc, tm.ANY), nxt)
            return self.ev(acc, h, env)
        if isinstance(e, tm.Sequence):  # e.
            first = tm.Neg(tm.Rel(tm.ANY, tm.ANY))
            acc = k[0]
            for nxt in k[1:]:
                acc = tm.Conj(tm.Rel(acc, first), nxt)
            return self.ev(acc, h, env)
        if isinstance(e, tm.First):  # f.
            return self.ev(tm.Neg(tm.Rel(tm.ANY, tm.ANY)), h, env)
        if isinstance(e, tm.Pipe):  # g. (E|F)[h] = F[E[h]]
            sub = restrict(h, self.ev(k[0], h, env))
            return self.ev(k[1], sub, env)
        if isinstance(e, tm.Nth):  # h.
            assert isinstance(e, tm.Nth)
            seq = tm.Sequence(*([tm.ANY] * e.n)) if e.n > 1 else tm.ANY
            return self.ev(tm.Pipe(tm.Pipe(k[0], seq), tm.FIRST), h, env)
        if isinstance(e, tm.Every):  # i.
            assert isinstance(e, tm.Every)
            return self.ev(tm.Pipe(k[0], tm.RelPlus(tm.Nth(e.n, tm.ANY))), h, env)
        if isinstance(e, tm.After):  # j. F/E: F after the first E
            es = self.ev(k[1], h, env)
            if not es:
                return frozenset()
            return self.ev(k[0], after(h, min(es)), env)
        if isinstance(e, tm.AfterEach):  # k. (with the erratum 1 <= i <= m-1)
            cuts = sorted(self.ev(k[1], h, env))
            out = set()
            for i, c in enumerate(cuts):
                end = cuts[i + 1] if i + 1 < len(cuts) else None
                seg = tuple(pt for pt in h if pt[0] > c and (end is None or pt[0] < end))
                out |= self.ev(k[0], seg, env)
            return frozenset(out)
        if isinstance(e, tm.FirstAfter):  # l.
            e1, e2, f = k
            return self.ev(tm.AfterEach(tm.Conj(e2, tm.Neg(tm.Prior(f, tm.ANY))), e1), h, env)
        if isinstance(e, tm.Before):  # m.
            return self.ev(tm.Prior(k[0], tm.ANY), h, env)
        if isinstance(e, tm.Happened):  # n.
            return self.ev(tm.Disj(k[0], tm.Prior(k[0], tm.ANY)), h, env)
        if isinstance(e, tm.Star):  # p.
            ee, tt = k
            return self.ev(tm.Conj(tt, tm.Neg(tm.Prior(tm.Neg(ee), tt))), h, env)
        if isinstance(e, tm.Prefix):  # o.
            return frozenset(p for p, _, _ in h if self.extensible(k[0], h, p, env))
        if isinstance(e, tm.Var):
            assert isinstance(e, tm.Var)
            return frozenset(p for p, _, _ in h if p == env[e.name])
        if isinstance(e, tm.Mark):
            assert isinstance(e, tm.Mark)
            return self.ev(k[0], h, env) & {env[e.variable]}
        if isinstance(e, tm.Exists):
            assert isinstance(e, tm.Exists)
            out = set()
            positions = [p for p, _, _ in h]
            for choice in product(positions, repeat=len(e.variables)):
                inner = {**env, **dict(zip(e.variables, choice, strict=True))}
                last = max(choice)
                out |= {p for p in self.ev(k[0], h, inner) if p >= last}
            return frozenset(out)
        if isinstance(e, tm.Scoped):
            return self.ev(k[0], h, env)
        raise TypeError(f"no definition for {type(e).__name__}")

    def extensible(self, e: tm.Term, h: History, p: int, env: dict[str, int]) -> bool:
        """Whether some history identical to h up to p satisfies e at a point after
        p (continuations of up to ``depth`` points from ``alphabet``)."""
        base = tuple(pt for pt in h if pt[0] <= p)
        for n in range(1, self.depth + 1):
            for word in product(self.alphabet, repeat=n):
                ext = base + tuple((p + 1 + i, name, par) for i, (_, name, par) in enumerate(word))
                if any(q > p for q in self.ev(e, ext, env)):
                    return True
        return False


def after(h: History, i: int) -> History:
    """h_i: the points after position i."""
    return tuple(pt for pt in h if pt[0] > i)


def restrict(h: History, keep: frozenset[int]) -> History:
    return tuple(pt for pt in h if pt[0] in keep)
