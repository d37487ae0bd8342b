"""Ode event expressions (Gehani, Jagadish, Shmueli, VLDB 1992), compiled to
automata and detected beside Snoop's.

Build expressions from primitive events (masked with ``.where(...)`` or not)::

    from sentinel import ode
    big = deposit.where("amount > 1000")
    e = ode.relative(deposit, ~ode.before(interest)) & withdraw   # 2.4.1 item 5
    cut = ode.pipe(I | D, ode.sequence(D, D, D))                  # 2.4.2
    det.rule("three cuts", ode.event(cut, over=[I, D, other]), action=...)

or from text: ``ode.event("(I || D) | sequence(D, D, D)")``, and inside Snoop
text as ``ode{...}``. See ``docs/ode.md``.

Python spelling of the operators:

==========================  =====================  ============================
paper                       Python                 text
==========================  =====================  ============================
E ∧ F, E ∨ F, !E            ``e & f``, ``e | f``,  ``E ^ F``, ``E || F``, ``!E``
                            ``~e``
relative(E, F), relative+   ``relative(e, f)``,    ``relative(E, F)``,
                            ``relative_plus(e)``   ``relative+(E)``
E | F (pipe)                ``pipe(e, f)``         ``E | F``
F / E, F /+ E               ``f / e``, ``f // e``  ``F / E``, ``F /+ E``
<n>E, every <n> E           ``nth(n, e)``,         ``<n> E``, ``every <n> E``
                            ``every(n, e)``
E*T                         ``e * t``              ``E * T``
E = x, ∃x                   ``e.mark(x)``,         ``E = x``, ``exists x: E``
                            ``exists(x, e)``
==========================  =====================  ============================
"""

from __future__ import annotations

import typing as t

from sentinel.algebra.masks import Variable
from sentinel.algebra.syntax import register_block
from sentinel.ode import handlers as _handlers  # registers the strategies
from sentinel.ode import terms as _tm
from sentinel.ode.automata import AutomatonTooCostly, AutomatonTooLarge
from sentinel.ode.event import OdeEvent
from sentinel.ode.records import binding, explain, occurrence_tuple
from sentinel.ode.syntax import event, parse, parse_term
from sentinel.ode.terms import ANY, FIRST, NULL, OdePart, Term, Var, as_term

del _handlers
register_block("ode", parse)
# The one list of what a module of this package builds of the modules above it
# (which build on it, so it cannot import them): a term becomes an OdeEvent
# (term.over(...), a bare term as a rule's event) and an OdeEvent an operand of
# a term. docs/architecture.md, "Layers as contracts".
_tm.BUILT_ABOVE.update(OdeEvent=OdeEvent)

__all__ = [
    "ANY",
    "FIRST",
    "NULL",
    "AutomatonTooCostly",
    "AutomatonTooLarge",
    "OdeEvent",
    "OdePart",
    "Term",
    "Var",
    "Variable",
    "after",
    "after_each",
    "attribute",
    "before",
    "binding",
    "event",
    "every",
    "exists",
    "explain",
    "first_after",
    "happened",
    "nth",
    "occurrence_tuple",
    "parse",
    "parse_term",
    "pipe",
    "prefix",
    "prior",
    "relative",
    "relative_plus",
    "sequence",
    "star",
    "term",
    "var",
]


def term(value: object) -> Term:
    """``value`` as an Ode term: a term, a primitive event (masked or not), an Ode
    event's expression, or Ode text."""
    if isinstance(value, str):
        return parse_term(value)
    return as_term(value)


def relative(first: object, then: object) -> Term:
    """``relative(E, F)``: F in the history that starts after some E (2.2)."""
    return _tm.Rel(first, then)


def relative_plus(e: object) -> Term:
    """``relative+(E)``: E, relative(E, E), ... (2.2)."""
    return _tm.RelPlus(e)


def prior(*events: object) -> Term:
    """``prior(E1, ..., Em)``: occurrences in order, overlaps allowed (2.3 c, d)."""
    return _tm.Prior(*events)


def sequence(*events: object) -> Term:
    """``sequence(E1, ..., Em)``: immediately successive occurrences (2.3 e)."""
    return _tm.Sequence(*events)


def pipe(e: object, f: object) -> Term:
    """``E | F``: F applied to the history of E's occurrences (2.3 g)."""
    return _tm.Pipe(e, f)


def nth(n: int, e: object) -> Term:
    """``<n>E``: the n-th occurrence of E (2.3 h)."""
    return _tm.Nth(n, e)


def every(n: int, e: object) -> Term:
    """``every <n> E``: the n-th, 2n-th, ... occurrences of E (2.3 i)."""
    return _tm.Every(n, e)


def after(f: object, e: object) -> Term:
    """``F / E``: F in the history after the first E (2.3 j)."""
    return _tm.After(f, e)


def after_each(f: object, e: object) -> Term:
    """``F /+ E``: F in each sub-history delimited by occurrences of E (2.3 k)."""
    return _tm.AfterEach(f, e)


def first_after(e1: object, e2: object, f: object) -> Term:
    """``firstAfter(E1, E2, F)``: E2 after the latest E1 without an F since (2.3 l)."""
    return _tm.FirstAfter(e1, e2, f)


def before(e: object) -> Term:
    """``before(E)``: every point after an E (2.3 m)."""
    return _tm.Before(e)


def happened(e: object) -> Term:
    """``happened(E)``: E now or before (2.3 n)."""
    return _tm.Happened(e)


def prefix(e: object) -> Term:
    """``prefix(E)``: while some continuation can still satisfy E (2.3 o)."""
    return _tm.Prefix(e)


def star(e: object, then: object) -> Term:
    """``E*T``: zero or more E, then a T (2.3 p)."""
    return _tm.Star(e, then)


def var(name: str) -> Var:
    """The correlation variable ``name`` (section 5), to use as an expression
    (``relative(x, ...)``) and in marks (``e.mark(x)``)."""
    return Var(name)


def exists(variables: str | Var | t.Iterable[str | Var], e: object) -> Term:
    """``exists x: E`` (section 5)."""
    return _tm.Exists(variables, e)


def attribute(name: str) -> Variable:
    """The attribute variable ``name`` (6.2): ``order.where(account=I)`` binds
    the parameter ``account`` to it; the event is detected per value of I."""
    return Variable(name)
