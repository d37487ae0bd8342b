"""Ode event expressions as values (Gehani, Jagadish, Shmueli, VLDB 1992, 2.2-2.3).

An Ode expression maps a history to the sub-history of the points at which it is
satisfied. Terms are immutable and equal by structure, like Snoop expressions,
but they are a separate algebra: they become an event of the detector only
inside an :class:`~sentinel.ode.event.OdeEvent`, which also fixes the history
they read (the universe).

Basic operators (2.2): ``NULL``, primitive events (:class:`Letter`, optionally
masked), ``E & F`` (∧), ``~E`` (!), :func:`relative`, :func:`relative_plus`.
Derived ones (2.3) are terms of their own, so they print as written and label the
records of why a detection happened; the automaton compiler builds most of them
from their definitions. Correlation variables (section 5): :func:`var`,
:meth:`Term.mark`, :func:`exists`.
"""

from __future__ import annotations

import re
import typing as t

from sentinel.algebra.expressions import Expression, Or, Primitive
from sentinel.algebra.masks import AllOf, Compare, Masked, Predicate, Variable
from sentinel.algebra.structural import Structural, arg
from sentinel.errors import ExpressionError
from sentinel.ode.text import term_text

if t.TYPE_CHECKING:
    from sentinel.ode.event import OdeEvent

__all__ = [
    "ANY",
    "FIRST",
    "NULL",
    "After",
    "AfterEach",
    "AnyEvent",
    "Before",
    "Conj",
    "Disj",
    "Every",
    "Exists",
    "First",
    "FirstAfter",
    "Happened",
    "Letter",
    "Mark",
    "Neg",
    "Nth",
    "Null",
    "OdePart",
    "Pipe",
    "Prefix",
    "Prior",
    "Rel",
    "RelPlus",
    "Scoped",
    "Sequence",
    "Star",
    "Term",
    "Var",
    "as_term",
    "rebuild",
]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: The class of the module above this one that a term becomes as an event of
#: the detector: ``"OdeEvent"`` (:class:`sentinel.ode.event.OdeEvent`, for
#: ``term.over(...)``, a bare term as a rule's event, and an Ode event as an
#: operand). That module compiles terms, so this one cannot import it:
#: ``sentinel/ode/__init__.py`` installs it, in one statement, when the package
#: is imported (importing this module imports the package first).
BUILT_ABOVE: dict[str, type[OdeEvent]] = {}


class Term(Structural["Term"]):
    """Base of Ode terms. Immutable; equal and hashed by structure.

    Python spelling: ``a & b`` (∧), ``a | b`` (∨), ``~a`` (!), ``f / e`` (F/E),
    ``f // e`` (F/+E), ``e * t`` (E*T), ``e.pipe(f)`` (E|F), ``e.mark(x)``
    (E = x). ``str(term)`` prints Ode text.
    """

    __slots__ = ("_free", "_size")
    _size: int
    _free: frozenset[str]
    #: The operator's name in errors and the text syntax.
    op: t.ClassVar[str] = "?"

    def _init(self, *args: t.Any) -> None:
        super()._init(*args)
        # Both from the operands' own, so that a term whose operands share
        # sub-terms (a named sub-expression used twice, in text) costs its
        # distinct sub-terms, not its written-out size.
        kids = [a for a in args if isinstance(a, Term)]
        object.__setattr__(self, "_size", 1 + sum(k._size for k in kids))
        object.__setattr__(self, "_free", self._find_free(kids))

    def __reduce__(self) -> tuple[t.Any, ...]:
        return (type(self)._from_args, self._args)

    @classmethod
    def _from_args(cls, *args: t.Any) -> Term:
        obj = object.__new__(cls)
        obj._init(*args)
        return obj

    def with_children(self, children: t.Sequence[Term]) -> Term:
        """A copy with the operands replaced, in order."""
        return self._from_args(*self._args_with(children))

    @property
    def size(self) -> int:
        """The operators and events of this term written out: a sub-term used
        twice counts twice (text's named sub-expressions are written out where
        they are used). Known without walking the term."""
        return self._size

    def walk(self) -> t.Iterator[Term]:
        """This term and every sub-term, in pre-order (the paper's numbering of
        sub-expressions, section 4): :attr:`size` of them."""
        yield self
        for c in self.children:
            yield from c.walk()

    def distinct(self) -> t.Iterator[Term]:
        """This term and its sub-terms in the order of :meth:`walk`, but each
        sub-term object once: a shared one is not walked again."""
        seen: set[int] = set()
        stack: list[Term] = [self]
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            yield x
            stack.extend(reversed(x.children))

    def letters(self) -> t.Iterator[Letter]:
        """The letters of the term, in the order they are written (a shared
        sub-term's once)."""
        for x in self.distinct():
            if isinstance(x, Letter):
                yield x

    def free_variables(self) -> frozenset[str]:
        """Correlation variables used here and not bound by an enclosing
        :func:`exists`."""
        return self._free

    def _find_free(self, kids: list[Term]) -> frozenset[str]:
        out: set[str] = set()
        for c in kids:
            out |= c._free
        return frozenset(out)

    # -- Python spelling -------------------------------------------------------------
    def __and__(self, other: object) -> Term:
        return Conj(self, as_term(other, "&"))

    def __rand__(self, other: object) -> Term:
        return Conj(as_term(other, "&"), self)

    def __or__(self, other: object) -> Term:
        return Disj(self, as_term(other, "|"))

    def __ror__(self, other: object) -> Term:
        return Disj(as_term(other, "|"), self)

    def __invert__(self) -> Term:
        return Neg(self)

    def __truediv__(self, other: object) -> Term:
        return After(self, as_term(other, "/"))

    def __floordiv__(self, other: object) -> Term:
        return AfterEach(self, as_term(other, "//"))

    def __mul__(self, other: object) -> Term:
        return Star(self, as_term(other, "*"))

    def pipe(self, other: object) -> Term:
        """``E | F`` (the pipe): F applied to the history of E's occurrences."""
        return Pipe(self, as_term(other, "pipe"))

    def mark(self, variable: str | Var) -> Term:
        """``E = x``: E, satisfied at the point the correlation variable x names."""
        return Mark(self, variable)

    def __sentinel_expression__(self) -> Expression:
        """This term as an event of the detector, over the events it names (what a
        rule or subscription given a bare term detects)."""
        return BUILT_ABOVE["OdeEvent"](self)

    def over(self, *universe: t.Any) -> t.Any:
        """An event of the detector reading the history of ``universe`` (see
        :func:`sentinel.ode.event`)."""
        return BUILT_ABOVE["OdeEvent"](self, over=universe)

    def __str__(self) -> str:
        return term_text(self)


Term.operand_type = Term


def as_term(value: object, where: str = "an Ode operator") -> Term:
    """``value`` as a term: terms as they are, primitive events (masked or not) as
    letters, an Ode event as its expression (its universe comes along), a Snoop OR
    of these as ∨ (it means the same)."""
    if isinstance(value, Term):
        return value
    if isinstance(value, Masked):
        return Letter(value.event, value.mask)
    if isinstance(value, Primitive):
        return Letter(value)
    if isinstance(value, BUILT_ABOVE["OdeEvent"]):
        extra = tuple(u for u in value.universe if u not in value.term_events())
        return Scoped(value.term, extra) if extra else value.term
    if isinstance(value, Or):
        # a | b of primitive events means the same in both algebras
        return Disj(as_term(value.left, where), as_term(value.right, where))
    if isinstance(value, Expression):
        raise ExpressionError(
            f"an Ode operand is a primitive event (masked or not) or an Ode expression, not "
            f"the Snoop composite {value}; use Ode operators, or combine Ode events with "
            "Snoop operators outside"
        )
    raise ExpressionError(
        f"operand of {where} must be an Ode expression or a primitive event, not "
        f"{type(value).__name__} ({value!r})"
    )


def _n(value: object, op: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ExpressionError(f"{op} needs a whole number n >= 1, not {value!r}")
    return value


def _var_name(value: object) -> str:
    if isinstance(value, Var):
        return value.name
    if isinstance(value, str) and _IDENT.match(value):
        return value
    raise ExpressionError(f"a correlation variable is named by an identifier, not {value!r}")


# -- basic operators (2.2) --------------------------------------------------------------


class Null(Term):
    """``NULL``: never satisfied."""

    __slots__ = ()
    op = "NULL"

    def __init__(self) -> None:
        self._init()


class Letter(Term):
    """A primitive event, optionally masked (Ode 2): satisfied at the points of the
    history that are occurrences of ``event`` whose parameters satisfy ``mask``.

    ``bindings`` bind parameters to attribute variables (6.2): ``order(account =
    I)`` is the letter ``order`` with the binding ``("account", I)``. A mask's
    top-level comparisons with an attribute variable become bindings.
    """

    __slots__ = ()
    op = "event"

    def __init__(
        self,
        event: Primitive,
        mask: Predicate | None = None,
        bindings: t.Iterable[tuple[str, Variable]] = (),
    ) -> None:
        if isinstance(event, Masked):
            mask = event.mask if mask is None else AllOf(event.mask, mask)
            event = event.event
        if not isinstance(event, Primitive):
            raise ExpressionError(f"an Ode event is a primitive event, not {event!r}")
        binds = set(bindings)
        if mask is not None:
            mask, found = _split_bindings(mask)
            binds |= found
        for p, v in binds:
            if not isinstance(p, str) or not isinstance(v, Variable):
                raise ExpressionError(f"a binding is (parameter, Variable), not {(p, v)!r}")
        self._init(event, mask, tuple(sorted(binds, key=lambda b: (b[0], b[1].name))))

    event: Primitive = arg(0)
    mask: Predicate | None = arg(1)
    bindings: tuple[tuple[str, Variable], ...] = arg(2)

    def where(self, spec: t.Any = None, /, **equal: t.Any) -> Letter:
        """This letter with a narrower mask."""
        from sentinel.algebra.masks import predicate

        more = predicate(spec, **equal)
        return Letter(
            self.event, more if self.mask is None else AllOf(self.mask, more), self.bindings
        )


def _split_bindings(mask: Predicate) -> tuple[Predicate | None, set[tuple[str, Variable]]]:
    """Top-level conjuncts ``param == Variable`` become bindings; the rest stays
    the mask. A variable anywhere else is refused."""
    conjuncts: list[Predicate] = []

    def flatten(p: Predicate) -> None:
        if isinstance(p, AllOf):
            flatten(p._args[0])
            flatten(p._args[1])
        else:
            conjuncts.append(p)

    flatten(mask)
    binds: set[tuple[str, Variable]] = set()
    rest: list[Predicate] = []
    for c in conjuncts:
        if isinstance(c, Compare) and isinstance(c.value, Variable):
            binds.add((c.param, c.value))
        elif c.variables():
            raise ExpressionError(
                f"the attribute variable in {c} must be equated with a parameter at the top "
                "level of the mask (account == I), not inside 'or' or 'not'"
            )
        else:
            rest.append(c)
    if not binds:
        return mask, binds
    out: Predicate | None = None
    for c in rest:
        out = c if out is None else AllOf(out, c)
    return out, binds


class AnyEvent(Term):
    """``any``: every point of the history (the disjunction of all the universe's
    primitive events)."""

    __slots__ = ()
    op = "any"

    def __init__(self) -> None:
        self._init()


class Conj(Term):
    """``E ∧ F``: the points where both are satisfied."""

    __slots__ = ()
    op = "∧"

    def __init__(self, left: object, right: object) -> None:
        self._init(as_term(left, "∧"), as_term(right, "∧"))


class Neg(Term):
    """``!E``: the points where E is not satisfied."""

    __slots__ = ()
    op = "!"

    def __init__(self, inner: object) -> None:
        self._init(as_term(inner, "!"))


class Rel(Term):
    """``relative(E, F)``: the points where F is satisfied in the history that
    starts right after some point where E is satisfied."""

    __slots__ = ()
    op = "relative"

    def __init__(self, first: object, then: object) -> None:
        self._init(as_term(first, "relative"), as_term(then, "relative"))


class RelPlus(Term):
    """``relative+(E)``: E, relative(E, E), relative(relative(E, E), E), ..."""

    __slots__ = ()
    op = "relative+"

    def __init__(self, inner: object) -> None:
        self._init(as_term(inner, "relative+"))


# -- derived operators (2.3) -------------------------------------------------------------


class Disj(Term):
    """``E ∨ F`` = !(!E ∧ !F)."""

    __slots__ = ()
    op = "∨"

    def __init__(self, left: object, right: object) -> None:
        self._init(as_term(left, "∨"), as_term(right, "∨"))


class Prior(Term):
    """``prior(E1, ..., Em)``: Em after E(m-1) after ... after E1 (overlaps
    allowed): prior(E, F) = relative(E, any) ∧ F."""

    __slots__ = ()
    op = "prior"

    def __init__(self, *terms: object) -> None:
        if len(terms) < 2:
            raise ExpressionError(f"prior needs at least two operands, got {len(terms)}")
        self._init(*(as_term(x, "prior") for x in terms))


class Sequence(Term):
    """``sequence(E1, ..., Em)``: immediately successive occurrences:
    sequence(E1, E2) = relative(E1, first) ∧ E2."""

    __slots__ = ()
    op = "sequence"

    def __init__(self, *terms: object) -> None:
        if len(terms) < 2:
            raise ExpressionError(f"sequence needs at least two operands, got {len(terms)}")
        self._init(*(as_term(x, "sequence") for x in terms))


class First(Term):
    """``first`` = !relative(any, any): the first point of the history."""

    __slots__ = ()
    op = "first"

    def __init__(self) -> None:
        self._init()


class Pipe(Term):
    """``E | F``: F applied to the history E produces."""

    __slots__ = ()
    op = "|"

    def __init__(self, left: object, right: object) -> None:
        self._init(as_term(left, "|"), as_term(right, "|"))


class Nth(Term):
    """``<n>E`` = (E | sequence(any, ..., any)) | first: the n-th occurrence of E."""

    __slots__ = ()
    op = "<n>"

    def __init__(self, n: int, inner: object) -> None:
        self._init(_n(n, "<n>E"), as_term(inner, "<n>"))

    n: int = arg(0)


class Every(Term):
    """``every <n> E`` = E | relative+(<n> any): the n-th, 2n-th, ... occurrences."""

    __slots__ = ()
    op = "every"

    def __init__(self, n: int, inner: object) -> None:
        self._init(_n(n, "every <n> E"), as_term(inner, "every"))

    n: int = arg(0)


class After(Term):
    """``F / E`` = relative(E | first, F): F in the history after the first E."""

    __slots__ = ()
    op = "/"

    def __init__(self, then: object, delimiter: object) -> None:
        self._init(as_term(then, "/"), as_term(delimiter, "/"))


class AfterEach(Term):
    """``F /+ E``: F in each sub-history between successive occurrences of E (and
    after the last)."""

    __slots__ = ()
    op = "/+"

    def __init__(self, then: object, delimiter: object) -> None:
        self._init(as_term(then, "/+"), as_term(delimiter, "/+"))


class FirstAfter(Term):
    """``firstAfter(E1, E2, F)`` = (E2 ∧ !prior(F, any)) /+ E1."""

    __slots__ = ()
    op = "firstAfter"

    def __init__(self, e1: object, e2: object, f: object) -> None:
        self._init(as_term(e1, "firstAfter"), as_term(e2, "firstAfter"), as_term(f, "firstAfter"))


class Before(Term):
    """``before(E)`` = prior(E, any): every point after an E."""

    __slots__ = ()
    op = "before"

    def __init__(self, inner: object) -> None:
        self._init(as_term(inner, "before"))


class Happened(Term):
    """``happened(E)`` = E ∨ prior(E, any): E now or before."""

    __slots__ = ()
    op = "happened"

    def __init__(self, inner: object) -> None:
        self._init(as_term(inner, "happened"))


class Prefix(Term):
    """``prefix(E)``: the points after which some continuation of the history
    satisfies E at a later point."""

    __slots__ = ()
    op = "prefix"

    def __init__(self, inner: object) -> None:
        self._init(as_term(inner, "prefix"))


class Star(Term):
    """``E*T`` = T ∧ !prior(!E, T): zero or more E, then a T."""

    __slots__ = ()
    op = "*"

    def __init__(self, repeated: object, then: object) -> None:
        self._init(as_term(repeated, "*"), as_term(then, "*"))


# -- correlation variables (5) ------------------------------------------------------------


class Var(Term):
    """A correlation variable used as an expression: satisfied exactly at the
    point it names (the point every sub-expression marked with it terminates at)."""

    __slots__ = ()
    op = "variable"

    def __init__(self, name: str) -> None:
        self._init(_var_name(name))

    name: str = arg(0)

    def _find_free(self, kids: list[Term]) -> frozenset[str]:
        return frozenset((self._args[0],))


class Mark(Term):
    """``E = x``: E, at the point the variable x names."""

    __slots__ = ()
    op = "="

    def __init__(self, inner: object, variable: str | Var) -> None:
        name = _var_name(variable)
        term = as_term(inner, "=")
        if name in term.free_variables():
            raise ExpressionError(
                f"{term} = {name}: the variable {name} is already free in the marked "
                "expression (Ode section 5, rule 7)"
            )
        self._init(term, name)

    variable: str = arg(1)

    def _find_free(self, kids: list[Term]) -> frozenset[str]:
        return kids[0]._free | {self._args[1]}


class Exists(Term):
    """``exists x: E``: E with x naming some point of the history (up to the point
    of satisfaction)."""

    __slots__ = ()
    op = "exists"

    def __init__(self, variables: str | Var | t.Iterable[str | Var], inner: object) -> None:
        names = (variables,) if isinstance(variables, (str, Var)) else tuple(variables)
        if not names:
            raise ExpressionError("exists needs at least one variable")
        vs = tuple(_var_name(v) for v in names)
        if len(set(vs)) != len(vs):
            raise ExpressionError(f"exists lists a variable twice: {', '.join(vs)}")
        self._init(vs, as_term(inner, "exists"))

    variables: tuple[str, ...] = arg(0)

    def _find_free(self, kids: list[Term]) -> frozenset[str]:
        return kids[0]._free - set(self._args[0])


class Scoped(Term):
    """A named Ode event used inside another: its term, plus the events of its
    universe that the term does not name (they join the enclosing universe)."""

    __slots__ = ()
    op = "scoped"

    def __init__(self, inner: Term, universe: t.Iterable[Primitive]) -> None:
        self._init(as_term(inner), tuple(universe))

    universe: tuple[Primitive, ...] = arg(1)


NULL: t.Final = Null()
ANY: t.Final = AnyEvent()
FIRST: t.Final = First()


class OdePart(Expression):
    """A sub-expression of an Ode event, as the label of the composite
    occurrences in a detection's record (``detection.parts``): it prints as the
    sub-expression's Ode text."""

    __slots__ = ()
    op = "ode-part"

    def __init__(self, term: Term) -> None:
        if not isinstance(term, Term):
            raise ExpressionError(f"an Ode part labels an Ode term, not {term!r}")
        self._init(term)

    term: Term = arg(0)

    def with_children(self, children: t.Sequence[Expression]) -> Expression:
        return self

    def to_text(self, text: t.Callable[[Expression], str]) -> str:
        return str(self.term)


def rebuild(
    term: Term,
    fn: t.Callable[[Term], Term | None],
    memo: dict[int, Term] | None = None,
) -> Term:
    """``term`` with ``fn(x)`` in place of each sub-term x for which it is not
    None; a sub-term shared by several operands is rebuilt once (``memo``, by
    identity), and stays shared."""
    if memo is None:
        memo = {}
    done = memo.get(id(term))
    if done is not None:
        return done
    out = fn(term)
    if out is None:
        kids = term.children
        new = [rebuild(k, fn, memo) for k in kids]
        same = all(a is b for a, b in zip(new, kids, strict=True))
        out = term if same else term.with_children(new)
    memo[id(term)] = out
    return out
