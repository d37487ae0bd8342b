"""An Ode expression as an event of the detector: the term and its universe.

The *universe* is the set of primitive events whose occurrences make up the
history the term reads: ``any`` is any of them, ``first`` the first of them, and
``sequence``, ``!`` and every other operator see exactly these points. By default
it is the primitive events the term names; ``over`` adds others (the events of a
class, say, so that ``sequence(deposit, withdraw)`` means *immediately* among all
of an account's operations). Which occurrences of those events a history holds
is the detector's usual rule: those of one transaction (or, for rules with
``flush=False``, of the process), and with ``.by(key)`` those of one key value
or source object.

An :class:`OdeEvent` is compiled to its automaton when it is built, so an
expression that cannot be compiled is refused before any rule uses it.
"""

from __future__ import annotations

import typing as t

from sentinel.algebra.expressions import Expression, Primitive
from sentinel.algebra.masks import AllOf, Masked, Predicate, Variable
from sentinel.errors import ExpressionError
from sentinel.ode import terms as tm
from sentinel.ode.alphabet import Alphabet
from sentinel.ode.attributes import check_bound
from sentinel.ode.automata import Automaton
from sentinel.ode.compile import check_size, compile_term
from sentinel.ode.text import event_text

__all__ = ["OdeEvent"]


class OdeEvent(Expression):
    """An Ode expression over a universe of primitive events (see the module
    docs). Its operands in the event graph are the universe's events.

    ``automaton`` is the compiled automaton (:mod:`sentinel.ode.automata`);
    ``attribute`` the attribute variable of an expression like ``complete(I)``
    (detected per value of I, see :mod:`sentinel.ode.attributes`), else None.
    """

    __slots__ = ("alphabet", "attribute", "automaton")
    op = "ODE"
    alphabet: Alphabet
    automaton: Automaton
    attribute: Variable | None

    def __init__(self, term: object, over: t.Iterable[object] | None = None) -> None:
        body = tm.as_term(term, "an Ode event")
        check_size(body)
        body, extra = _strip_scoped(body)
        declared = None if over is None else _universe_list(over)
        if extra:
            base = list(declared) if declared is not None else _letter_events(body)
            declared = tuple(dict.fromkeys([*base, *extra]))
        universe = tuple(dict.fromkeys([*(declared or ()), *_letter_events(body)]))
        self._init(body, declared, *universe)
        variables = {v for x in body.letters() for _p, v in x.bindings}
        if len(variables) > 1:
            names = ", ".join(sorted(v.name for v in variables))
            raise ExpressionError(
                f"{body} uses the attribute variables {names}: an Ode event may bind one "
                "attribute variable (detected per value); use one, or constants"
            )
        attribute = next(iter(variables)) if variables else None
        alphabet = Alphabet(universe, _masks(body, universe), _attrs(body, universe))
        automaton = compile_term(body, alphabet, attribute)
        object.__setattr__(self, "alphabet", alphabet)
        object.__setattr__(self, "attribute", attribute)
        object.__setattr__(self, "automaton", automaton)
        if attribute is not None:
            check_bound(self)

    @property
    def keeps_history(self) -> bool:
        """Whether its state stands for the history read (an automaton with more
        than one state, or with registers): then no occurrence of it can expire
        on its own, and a lifespan is refused (``docs/bitemporal.md``)."""
        return self.automaton.n > 1 or self.automaton.nregs > 0

    @classmethod
    def _from_args(cls, *args: t.Any) -> Expression:
        return cls(args[0], over=args[1])

    @property
    def term(self) -> tm.Term:
        """The Ode expression."""
        return self._args[0]  # type: ignore[no-any-return]

    @property
    def over(self) -> tuple[Primitive, ...] | None:
        """The events declared with ``over`` (None: the default universe)."""
        return self._args[1]  # type: ignore[no-any-return]

    @property
    def universe(self) -> tuple[Primitive, ...]:
        """The primitive events whose occurrences form the history, in slot order."""
        return self._args[2:]

    def term_events(self) -> tuple[Primitive, ...]:
        """The primitive events the term names."""
        return tuple(_letter_events(self.term))

    def with_children(self, children: t.Sequence[Expression]) -> Expression:
        """This event with its universe's events replaced (the detector resolves
        names this way): a name that is an Ode event is replaced by its
        expression (its universe joins this one); a masked event keeps its mask."""
        old = self.universe
        if list(children) == list(old):
            return self
        mapping = dict(zip(old, children, strict=True))

        def fn(x: tm.Term) -> tm.Term | None:
            if not isinstance(x, tm.Letter):
                return None
            new = mapping.get(x.event)
            if new is None or new == x.event:
                return None
            if isinstance(new, Primitive):
                return tm.Letter(new, x.mask, x.bindings)
            if isinstance(new, Masked):
                return tm.Letter(new.event, _and(new.mask, x.mask), x.bindings)
            if isinstance(new, OdeEvent):
                if x.mask is not None or x.bindings:
                    raise ExpressionError(
                        f"{x.event.label} is an Ode expression ({new.term}); only primitive "
                        "events take masks and bindings"
                    )
                return tm.as_term(new)
            raise ExpressionError(
                f"{x.event.label} is the Snoop composite {new}; an Ode expression is made of "
                "primitive events (combine the Ode event with Snoop operators instead)"
            )

        term = tm.rebuild(self.term, fn)
        over = self.over
        if over is not None:
            resolved: list[Primitive] = []
            for u in over:
                new = mapping.get(u, u)
                if isinstance(new, OdeEvent):
                    resolved.extend(new.universe)
                elif isinstance(new, Primitive):
                    resolved.append(new)
                else:
                    raise ExpressionError(f"over lists primitive events; {u.label} is {new}")
            over = tuple(resolved)
        return OdeEvent(term, over=over)

    def to_text(self, text: t.Callable[[Expression], str]) -> str:
        return "ode{" + event_text(self.term, self.over) + "}"

    def describe(self) -> str:
        """Sizes of the automaton: states, symbols, registers."""
        m = self.automaton
        plain = m.plain()
        extra = f", {m.n} with records" if m.n != plain.n else ""
        return f"{plain.n} states{extra}, {m.k} symbols, {m.nregs} registers"


def _and(a: Predicate, b: Predicate | None) -> Predicate:
    return a if b is None else AllOf(a, b)


def _universe_list(over: t.Iterable[object]) -> tuple[Primitive, ...]:
    if isinstance(over, (str, Expression)):
        over = (over,)
    out: list[Primitive] = []
    for u in over:
        if isinstance(u, str):
            u = Primitive(u)
        if isinstance(u, OdeEvent):
            out.extend(u.universe)
            continue
        if isinstance(u, Masked):
            raise ExpressionError(
                f"over lists primitive events, not the masked {u}; a mask belongs in the "
                "expression (or pipe the history through it)"
            )
        if not isinstance(u, Primitive):
            raise ExpressionError(f"over lists primitive events, not {u!r}")
        out.append(u)
    return tuple(dict.fromkeys(out))


def _letter_events(term: tm.Term) -> list[Primitive]:
    return list(dict.fromkeys(x.event for x in term.letters()))


def _masks(term: tm.Term, universe: tuple[Primitive, ...]) -> list[list[Predicate]]:
    found: dict[Primitive, set[Predicate]] = {u: set() for u in universe}
    for x in term.letters():
        if x.mask is not None:
            found[x.event].add(x.mask)
    return [sorted(found[u], key=str) for u in universe]


def _attrs(term: tm.Term, universe: tuple[Primitive, ...]) -> list[list[str]]:
    found: dict[Primitive, set[str]] = {u: set() for u in universe}
    for x in term.letters():
        for p, _v in x.bindings:
            found[x.event].add(p)
    return [sorted(found[u]) for u in universe]


def _strip_scoped(term: tm.Term) -> tuple[tm.Term, list[Primitive]]:
    extra: list[Primitive] = []

    def fn(x: tm.Term) -> tm.Term | None:
        if isinstance(x, tm.Scoped):
            extra.extend(x.universe)
            return tm.rebuild(x.children[0], fn)
        return None

    return tm.rebuild(term, fn), extra
