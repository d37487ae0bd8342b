"""Ode text <-> terms and events (grammar in ``ode.lark``).

Text syntax (the paper's, with ASCII spellings)::

    NULL  any  first                     constants
    deposit  deposit[amount > 1000]      a primitive event, masked
    order(account = I)                   an event whose parameter is bound to I
    E ^ F   E ∧ F   E & F                and
    E || F  E ∨ F                        or
    !E  ¬E                               not
    relative(E, F)  relative+(E)         (also rel, rel+)
    prior(E1, ..., Em)  sequence(E1, ..., Em)  (also seq)
    E | F                                pipe
    <n> E     every <n> E                the n-th, every n-th
    F / E     F /+ E                     after the first E, after each E
    firstAfter(E1, E2, F)  before(E)  happened(E)  prefix(E)
    E * T                                zero or more E, then T
    exists x: E   ∃x: E   E = x   x      correlation variables
    Twice := ...; H1 || Twice            named sub-expressions
    E over (a, b, c)                     the universe

:func:`parse` reads an Ode event (an expression of the detector), :func:`parse_term`
a term; ``str()`` of either prints text that reads back to an equal value.
"""

from __future__ import annotations

import re
import typing as t
from functools import partial

from lark import Token, Transformer, Tree, v_args

from sentinel.algebra._errors import ErrorAt, TextErrors, Unexpected, build, lalr, unquote
from sentinel.algebra.expressions import Primitive
from sentinel.algebra.masks import AllOf, Compare, Predicate, Variable, parse_predicate
from sentinel.errors import ExpressionError, SnoopSyntaxError
from sentinel.ode import terms as tm
from sentinel.ode.compile import check_size
from sentinel.ode.event import OdeEvent
from sentinel.ode.text import CALLS, event_text, name_text, term_text

# The printer lives below the term classes (sentinel.ode.text); its functions
# are still found here, beside the parser that reads back what they print.
__all__ = ["MAX_DEPTH", "event", "event_text", "name_text", "parse", "parse_term", "term_text"]

#: How deeply operators may nest in Ode text (``!!!a`` nests three levels, and so
#: does ``prior(a, prior(a, prior(a, b)))``); the stages after the parser walk
#: the expression recursively.
MAX_DEPTH: t.Final = 150

#: The operators written as calls, by the words of :data:`~sentinel.ode.text.CALLS`.
_OPERATORS: dict[str, type[tm.Term]] = {
    word: cls
    for cls in (tm.Rel, tm.Prior, tm.Sequence, tm.FirstAfter, tm.Before, tm.Happened, tm.Prefix)
    for word, op in CALLS.items()
    if op == cls.op
}
#: How many operands each operator written like a call takes (least, most: None
#: for no limit), and how it is written, for the error that says so.
_ARITY: dict[type[tm.Term], tuple[int, int | None, str]] = {
    tm.Rel: (2, 2, "relative(E, F)"),
    tm.Prior: (2, None, "prior(E1, ..., Em)"),
    tm.Sequence: (2, None, "sequence(E1, ..., Em)"),
    tm.FirstAfter: (3, 3, "firstAfter(E1, E2, F)"),
    tm.Before: (1, 1, "before(E)"),
    tm.Happened: (1, 1, "happened(E)"),
    tm.Prefix: (1, 1, "prefix(E)"),
}
_CONSTANTS = {"NULL": tm.NULL, "any": tm.ANY, "first": tm.FIRST}

_TOKENS = {
    "LPAR": '"("',
    "RPAR": '")"',
    "COMMA": '","',
    "SEMICOLON": '";"',
    "OR": '"||"',
    "AND": '"^"',
    "NOT": '"!"',
    "VBAR": '"|"',
    "SLASH": '"/"',
    "STAR": '"*"',
    "PLUS": '"+"',
    "EQUAL": '"="',
    "LESSTHAN": '"<"',
    "MORETHAN": '">"',
    "COLON": '":"',
    "NAME": "an event name",
    "STRING": "a quoted name",
    "NUMBER": "a number",
    "MASK": "a mask like [amount > 1000]",
    "EXISTS": '"exists"',
    "EVERY": '"every"',
    "OVER": '"over"',
    "$END": "end of text",
}


_parser = partial(
    lalr, "sentinel.ode", "ode.lark", propagate_positions=True, maybe_placeholders=True
)


class _Value(t.NamedTuple):
    value: t.Any


class _Body(t.NamedTuple):
    term: tm.Term
    over: tuple[Primitive, ...] | None


@v_args(meta=True)
class _ToTerm(Transformer[Token, t.Any]):
    """Parse tree -> term. One method per grammar rule."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def _at(self, meta: t.Any, fn: t.Callable[[], tm.Term]) -> tm.Term:
        try:
            return fn()
        except ExpressionError as e:
            if isinstance(e, SnoopSyntaxError):
                raise
            raise ErrorAt(e, meta.line, meta.column) from None

    def start(self, meta: t.Any, c: list[t.Any]) -> _Body:
        *defs, body = c
        named: dict[str, tm.Term] = {}
        for name, term, where in defs:
            if name in named:
                raise ErrorAt(ExpressionError(f"{name} is defined twice"), meta.line, meta.column)
            # Each name is substituted by the same term object, shared, but
            # written out it doubles when each name uses the previous one twice.
            named[name] = _substitute(term, named)
            check_size(named[name], f"{name} (defined at line {where.line}, column {where.column})")
        out = _substitute(body.term, named)
        check_size(out, "the expression" if defs else None)
        return _Body(out, body.over)

    def definition(self, meta: t.Any, c: list[t.Any]) -> tuple[str, tm.Term, t.Any]:
        return (str(c[0]), c[1], meta)

    def body(self, meta: t.Any, c: list[t.Any]) -> _Body:
        return _Body(c[0], c[1])

    def universe(self, meta: t.Any, c: list[t.Any]) -> tuple[Primitive, ...]:
        return tuple(x for x in c if x is not None)

    def uevent(self, meta: t.Any, c: list[Token]) -> Primitive:
        return Primitive(_name(c[0]))

    def exists(self, meta: t.Any, c: list[t.Any]) -> tm.Term:
        names = [str(x) for x in c[:-1]]
        body = c[-1]
        return self._at(meta, lambda: tm.Exists(names, _bind_vars(body, set(names))))

    pipe = build(tm.Pipe, 0, 1)
    disj = build(tm.Disj, 0, 2)
    conj = build(tm.Conj, 0, 2)
    after = build(tm.After, 0, 1)
    after_each = build(tm.AfterEach, 0, 1)
    star = build(tm.Star, 0, 1)
    neg = build(tm.Neg, 1)

    def nth(self, meta: t.Any, c: list[t.Any]) -> tm.Term:
        return self._at(meta, lambda: tm.Nth(_count(c[0]), c[1]))

    def every(self, meta: t.Any, c: list[t.Any]) -> tm.Term:
        return self._at(meta, lambda: tm.Every(_count(c[0]), c[1]))

    def mark(self, meta: t.Any, c: list[t.Any]) -> tm.Term:
        return self._at(meta, lambda: tm.Mark(c[0], str(c[1])))

    def mark_value(self, meta: t.Any, c: list[t.Any]) -> t.Any:
        # Only meaningful as a parameter binding inside an event's parentheses.
        return ("value", c[0], c[1], meta)

    def number(self, meta: t.Any, c: list[Token]) -> _Value:
        s = str(c[0])
        return _Value(int(s) if re.fullmatch(r"-?\d+", s) else float(s))

    def text(self, meta: t.Any, c: list[Token]) -> _Value:
        return _Value(unquote(str(c[0])))

    def true(self, meta: t.Any, c: list[t.Any]) -> _Value:
        return _Value(True)

    def false(self, meta: t.Any, c: list[t.Any]) -> _Value:
        return _Value(False)

    def null(self, meta: t.Any, c: list[t.Any]) -> _Value:
        return _Value(None)

    def _mask(self, tok: Token | None) -> Predicate | None:
        if tok is None:
            return None
        start = _offset(self.source, tok.line or 1, tok.column or 1) + 1
        return parse_predicate(str(tok)[1:-1], offset=start, source=self.source)

    def event(self, meta: t.Any, c: list[t.Any]) -> tm.Term:
        tok, mask_tok = c[0], c[1]
        name = _name(tok)
        if tok.type == "NAME" and name in _CONSTANTS:
            if mask_tok is not None:
                raise ErrorAt(
                    ExpressionError(f"{name} is not an event; only events take masks"),
                    meta.line,
                    meta.column,
                )
            return _CONSTANTS[name]
        return tm.Letter(Primitive(name), self._mask(mask_tok))

    def call(self, meta: t.Any, c: list[t.Any]) -> tm.Term:
        tok, args, mask_tok = c[0], c[1], c[2]
        name = _name(tok)
        if tok.type == "NAME" and name in _OPERATORS:
            if mask_tok is not None:
                raise ErrorAt(
                    ExpressionError(f"{name}(...) is an operator; only events take masks"),
                    meta.line,
                    meta.column,
                )
            for a in args:
                if isinstance(a, tuple):
                    raise ErrorAt(
                        ExpressionError(f"{name} takes event expressions, not a value"),
                        a[3].line,
                        a[3].column,
                    )
            cls = _OPERATORS[name]
            least, most, usage = _ARITY[cls]
            if len(args) < least or (most is not None and len(args) > most):
                raise ErrorAt(
                    ExpressionError(
                        f"{name} takes {_count_text(least, most)}, got {len(args)}: {usage}"
                    ),
                    meta.line,
                    meta.column,
                )
            return self._at(meta, lambda: cls(*args))
        if tok.type == "NAME" and name in _CONSTANTS:
            raise ErrorAt(ExpressionError(f"{name} takes no operands"), meta.line, meta.column)
        return self._bound_event(meta, name, args, self._mask(mask_tok))

    def _bound_event(
        self, meta: t.Any, name: str, args: list[t.Any], mask: Predicate | None
    ) -> tm.Term:
        binds: list[tuple[str, Variable]] = []
        consts: list[Predicate] = []
        for a in args:
            if isinstance(a, tuple):  # param = literal
                _kind, left, value, m = a
                param = _param_of(left)
                if param is None:
                    raise ErrorAt(_bad_binding(name), m.line, m.column)
                consts.append(Compare(param, "==", value.value))
                continue
            if isinstance(a, tm.Mark) and _param_of(a.children[0]) is not None:
                binds.append((_param_of(a.children[0]), Variable(a.variable)))  # type: ignore[arg-type]
                continue
            raise ErrorAt(
                ExpressionError(
                    f"unknown operator {name}(...): an event's parentheses bind parameters "
                    f"({name}(account = I)); operators are {', '.join(sorted(_OPERATORS))}, "
                    "relative+ and rel+"
                ),
                meta.line,
                meta.column,
            )
        full = mask
        for p in consts:
            full = p if full is None else AllOf(full, p)
        return self._at(meta, lambda: tm.Letter(Primitive(name), full, binds))

    def call_plus(self, meta: t.Any, c: list[t.Any]) -> tm.Term:
        name, args = str(c[0]), c[1]
        if name not in ("relative", "rel"):
            raise ErrorAt(
                ExpressionError(f"unknown operator {name}+(...); expected relative+ or rel+"),
                meta.line,
                meta.column,
            )
        if len(args) != 1:
            raise ErrorAt(
                ExpressionError(f"relative+ takes one expression, got {len(args)}"),
                meta.line,
                meta.column,
            )
        return tm.RelPlus(args[0])

    def args(self, meta: t.Any, c: list[t.Any]) -> list[t.Any]:
        return c


def _count_text(least: int, most: int | None) -> str:
    words = {1: "one expression", 2: "two expressions", 3: "three expressions"}
    if most is None:
        return f"at least {words[least]}"
    return words[least]


def _bad_binding(name: str) -> ExpressionError:
    return ExpressionError(f"{name}(...) binds parameters by name: {name}(account = 121)")


def _param_of(term: tm.Term) -> str | None:
    if isinstance(term, tm.Letter) and term.mask is None and not term.bindings:
        name = term.event.name
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            return name
    return None


def _name(tok: Token) -> str:
    return unquote(str(tok)) if tok.type == "STRING" else str(tok)


def _count(tok: Token) -> int:
    s = str(tok)
    if not re.fullmatch(r"\d+", s):
        raise ExpressionError(f"<n> needs a whole number n >= 1, not {s}")
    return int(s)


def _offset(text: str, line: int, column: int) -> int:
    pos = 0
    for _ in range(line - 1):
        pos = text.index("\n", pos) + 1
    return pos + column - 1


def _bind_vars(term: tm.Term, names: set[str]) -> tm.Term:
    """Plain events named like the variables of an enclosing exists are the
    variables."""

    def fn(x: tm.Term) -> tm.Term | None:
        plain = isinstance(x, tm.Letter) and not x.bindings and x.mask is None
        if plain and x.event.name in names and x.event.selector is None:  # type: ignore[attr-defined]
            return tm.Var(x.event.name)  # type: ignore[attr-defined]
        if isinstance(x, tm.Exists):
            inner = names - set(x.variables)
            return x.with_children([_bind_vars(x.children[0], inner)]) if inner else x
        return None

    return tm.rebuild(term, fn)


def _substitute(term: tm.Term, named: dict[str, tm.Term]) -> tm.Term:
    if not named:
        return term

    def fn(x: tm.Term) -> tm.Term | None:
        if isinstance(x, tm.Letter) and x.event.name in named and x.event.selector is None:
            if x.mask is not None or x.bindings:
                raise ExpressionError(
                    f"{x.event.name} names an expression; only primitive events take masks"
                )
            return named[x.event.name]
        return None

    return tm.rebuild(term, fn)


def _parse_tree(text: str) -> _Body:
    if not isinstance(text, str):
        raise TypeError(f"expected Ode text, not {type(text).__name__}")
    with _ERRORS.reading(text):
        tree = _parser().parse(text)
        _check_depth(text, tree)
        result = _ToTerm(text).transform(tree)
    if isinstance(result, Tree) or not isinstance(result, _Body):  # pragma: no cover
        raise ExpressionError(f"could not read {text!r} as an Ode expression")
    return result


def _check_depth(text: str, tree: Tree[Token]) -> None:
    """Refuse text whose operators nest more than :data:`MAX_DEPTH` levels (with
    a stack: the check itself works at any depth)."""
    stack: list[tuple[Tree[Token], int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if node.data not in ("start", "body", "args", "definition"):
            depth += 1
        if depth > MAX_DEPTH:
            line = getattr(node.meta, "line", 1) or 1
            column = getattr(node.meta, "column", 1) or 1
            raise _ERRORS.at(
                text,
                f"the expression nests more than {MAX_DEPTH} levels of operators here "
                "(sentinel.ode.syntax.MAX_DEPTH); split it into several events",
                line=line,
                column=column,
            )
        stack.extend((c, depth) for c in node.children if isinstance(c, Tree))


def parse_term(text: str) -> tm.Term:
    """Read Ode text into a term (a universe given with ``over`` is refused: a
    term alone has none). Raises :class:`~sentinel.errors.SnoopSyntaxError` for
    malformed text (line, column, caret, what was expected) and
    :class:`~sentinel.errors.ExpressionError` for an invalid expression."""
    body = _parse_tree(text)
    if body.over is not None:
        raise ExpressionError("a term has no universe; read it with sentinel.ode.parse()")
    return body.term


def parse(text: str) -> OdeEvent:
    """Read Ode text into an Ode event (see :func:`sentinel.ode.event`); names are
    resolved by the detector the event is used on."""
    body = _parse_tree(text)
    return OdeEvent(body.term, over=body.over)


def event(term: object, *, over: t.Iterable[object] | None = None) -> OdeEvent:
    """An Ode expression as an event of the detector.

    ``term`` is an Ode term (built with :mod:`sentinel.ode`'s operators), a
    primitive event, or Ode text. ``over`` adds primitive events to the universe
    (the history the expression reads; by default the events it names). Raises
    :class:`~sentinel.errors.ExpressionError` for an expression that cannot be
    compiled (an empty universe, an unbound correlation variable, too large an
    automaton) and :class:`~sentinel.errors.SnoopSyntaxError` for malformed text.

    >>> from sentinel import Primitive, ode
    >>> a, b = Primitive("a"), Primitive("b")
    >>> str(ode.event(ode.prior(a, b), over=[a, b, Primitive("c")]))
    'ode{prior(a, b) over (a, b, c)}'
    """
    if isinstance(term, str):
        # The body alone, not parse(): the event of the text's own universe
        # would be compiled, then thrown away for the one over both.
        body = _parse_tree(term)
        if over is None:
            return OdeEvent(body.term, over=body.over)
        return OdeEvent(body.term, over=[*(body.over or ()), *over])
    return OdeEvent(term, over=over)


def _describe(text: str, u: Unexpected) -> tuple[str, int, list[str]]:
    """A syntax error's message, place and what was expected there."""
    if u.kind == "end":
        # At the end of the last line that has text (a final line break ignored).
        end = len(text)
        end -= 2 if text.endswith("\r\n") else 1 if text.endswith(("\n", "\r")) else 0
        msg, pos = "unexpected end of text", end
    elif u.kind == "character":
        msg, pos = f"unexpected character {text[u.offset]!r}", u.offset
    else:
        msg, pos = f"unexpected {str(u.token)!r}", u.offset
    expected = sorted({_TOKENS.get(n, n.lower()) for n in u.expected if not n.startswith("__")})
    return msg, pos, expected


_ERRORS = TextErrors(SnoopSyntaxError, _describe, passthrough=(ExpressionError,))
