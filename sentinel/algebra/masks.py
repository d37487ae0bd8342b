"""Masks: predicates on a primitive event's parameters (Ode 2 and 6.2).

A *mask* hides the occurrences of a primitive event whose parameters do not
satisfy a predicate: "a large deposit" is the event ``Account.deposit:end``
masked by ``amount > 1000``. Masks are values (equal by structure, printable,
parsed back from their text), so an expression with masks is shared in the event
graph, written in text and rebuilt by replay exactly as it was defined.

Python::

    deposit.where("amount > 1000")                    # text
    deposit.where(param("amount") > 1000)             # built with param()
    deposit.where(currency="EUR")                     # equality, as keywords
    deposit.where((param("amount") > 1000) & ~param("currency").isin("EUR", "USD"))

Text (Snoop and Ode alike): ``deposit[amount > 1000 and currency == 'EUR']``.

Predicates: comparisons ``== != < <= > >=`` of a parameter with a value (a number,
a quoted string, ``true``, ``false``, ``null``) or with another parameter;
``name in (v1, v2)`` and ``name not in (...)``; ``and``, ``or``, ``not`` and
parentheses. A comparison whose parameter is missing, or whose values cannot be
compared (``'abc' > 5``), is false; ``not`` negates it.

In Ode expressions a comparison may name an *attribute variable* instead of a
value (:class:`Variable`, written ``order(account = I)`` in Ode text): see
:mod:`sentinel.ode`.
"""

from __future__ import annotations

import operator
import re
import typing as t
from functools import partial

from lark import Token, Transformer_NonRecursive, v_args

from sentinel.algebra._errors import Positioned, TextErrors, Unexpected, lalr, unquote
from sentinel.algebra.expressions import Expression, Primitive, _check
from sentinel.algebra.structural import arg
from sentinel.errors import ExpressionError, SnoopSyntaxError, shortened

__all__ = [
    "MAX_MASK_DEPTH",
    "AllOf",
    "AnyOf",
    "Compare",
    "In",
    "Masked",
    "NotP",
    "Param",
    "Predicate",
    "Variable",
    "masked",
    "param",
    "parse_predicate",
    "predicate",
]

Scalar = int | float | str | bool | None
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEYWORDS = frozenset({"and", "or", "not", "in", "true", "false", "null"})
_MISSING: t.Final = object()

#: How deeply ``and``, ``or`` and ``not`` may nest in one mask (``a and b and c``
#: nests one level per term). A mask is compiled to one Python expression, and
#: Python refuses one that nests parentheses 200 deep.
MAX_MASK_DEPTH: t.Final = 100


class Variable:
    """An Ode attribute variable (Ode 6.2): ``I`` in ``complete(I) =
    prior(order(I, Q), perform(I, A))``. Compared with a parameter in a mask, it
    binds the parameter to the variable's value; see :mod:`sentinel.ode`."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not _IDENT.match(name) or name in _KEYWORDS:
            raise ExpressionError(f"an attribute variable is named by an identifier, not {name!r}")
        object.__setattr__(self, "name", name)

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise AttributeError("Variable is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Variable) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("Variable", self.name))

    def __reduce__(self) -> tuple[t.Any, ...]:
        return (Variable, (self.name,))

    def __repr__(self) -> str:
        return f"Variable({self.name!r})"

    def __str__(self) -> str:
        return self.name


class ParamRef:
    """The value of another parameter, on the right of a comparison."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", _param_name(name))

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise AttributeError("ParamRef is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParamRef) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("ParamRef", self.name))

    def __reduce__(self) -> tuple[t.Any, ...]:
        return (ParamRef, (self.name,))

    def __repr__(self) -> str:
        return self.name


Operand = Scalar | ParamRef | Variable


class Predicate:
    """A predicate on an occurrence's parameters. Immutable; equal by structure.

    Call it with a parameter mapping (``pred({"amount": 5})``). Combine with
    ``&``, ``|`` and ``~``. ``str(pred)`` is its text, which
    :func:`parse_predicate` reads back.
    """

    __slots__ = ("_args", "_depth", "_fn", "_hash")
    _args: tuple[t.Any, ...]
    _hash: int
    _depth: int
    _fn: t.Callable[[t.Mapping[str, t.Any]], bool] | None
    #: Binding strength when printed (higher binds tighter).
    prec: t.ClassVar[int] = 4

    def _init(self, *args: t.Any) -> None:
        depth = 1 + max((a._depth for a in args if isinstance(a, Predicate)), default=0)
        if depth > MAX_MASK_DEPTH + 1:  # the comparisons, then the connectives
            raise ExpressionError(
                f"a mask nests more than {MAX_MASK_DEPTH} levels of and, or and not "
                f"(MAX_MASK_DEPTH); split it: {shortened(_first_text(args), 60)}"
            )
        object.__setattr__(self, "_args", args)
        object.__setattr__(self, "_depth", depth)
        object.__setattr__(self, "_hash", hash((type(self).__name__, args)))
        object.__setattr__(self, "_fn", None)

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other):
            return NotImplemented
        assert isinstance(other, Predicate)
        return self._hash == other._hash and self._args == other._args

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[t.Any, ...]:
        return (type(self), self._args)

    def __bool__(self) -> bool:
        # Python's ``and``, ``or`` and chained comparisons (1 < p < 9) would keep
        # one side silently; ``if pred:`` would be true whatever it tests.
        raise ExpressionError(
            f"a mask predicate ({shortened(self.text(), 60)}) has no truth value: combine "
            "predicates with &, | and ~, not and, or, not, and write a range as "
            "(p > 1) & (p < 9)"
        )

    def __and__(self, other: Predicate) -> Predicate:
        return AllOf(self, _pred(other, "&"))

    def __or__(self, other: Predicate) -> Predicate:
        return AnyOf(self, _pred(other, "|"))

    def __invert__(self) -> Predicate:
        return NotP(self)

    def __call__(self, params: t.Mapping[str, t.Any]) -> bool:
        fn = self._fn
        if fn is None:
            fn = self.compiled()
        return fn(params)

    def compiled(self) -> t.Callable[[t.Mapping[str, t.Any]], bool]:
        """This predicate as one Python function of the parameter mapping."""
        fn = self._fn
        if fn is None:
            fn = _compile(self)
            object.__setattr__(self, "_fn", fn)
        return fn

    def source(self, p: str, consts: dict[str, t.Any]) -> str:
        """A Python expression computing the predicate over the mapping named
        ``p`` (constants it needs are added to ``consts``)."""
        raise NotImplementedError

    def variables(self) -> frozenset[Variable]:
        """The attribute variables this predicate compares with."""
        return frozenset(v for c in self.comparisons() for v in c.variables())

    def comparisons(self) -> t.Iterator[Predicate]:
        """The comparisons and ``in`` tests inside, in order."""
        for a in self._args:
            if isinstance(a, Predicate):
                yield from a.comparisons()

    def parameters(self) -> frozenset[str]:
        """The parameter names this predicate reads."""
        return frozenset(n for c in self.comparisons() for n in c.parameters())

    def text(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"


def _first_text(args: tuple[t.Any, ...]) -> str:
    """The text of the innermost leftmost comparison under ``args`` (where a mask
    that is too deep starts)."""
    node = args[0]
    while isinstance(node, Predicate) and not isinstance(node, (Compare, In)):
        node = node._args[0]
    return f"{node} ..." if isinstance(node, Predicate) else "..."


def _pred(value: object, where: str) -> Predicate:
    if not isinstance(value, Predicate):
        raise ExpressionError(
            f"operand of {where} must be a predicate (built with param() or read from text), "
            f"not {type(value).__name__}"
        )
    return value


def _param_name(name: object) -> str:
    if not isinstance(name, str) or not _IDENT.match(name) or name in _KEYWORDS:
        raise ExpressionError(f"a parameter is named by an identifier, not {name!r}")
    return name


def _operand(value: object) -> Operand:
    if isinstance(value, (ParamRef, Variable)):
        return value
    if isinstance(value, Param):
        return ParamRef(value.name)
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and value != value:
            raise ExpressionError("a mask cannot compare with NaN (it equals nothing)")
        if isinstance(value, float) and value in (_INF, -_INF):
            raise ExpressionError(
                f"a mask cannot compare with {value} (a mask's text has no infinity to "
                "write it back with); compare with a finite bound, or leave the test out"
            )
        return value
    raise ExpressionError(
        "a mask compares a parameter with a number, a string, True, False, None, another "
        f"parameter or an attribute variable, not {type(value).__name__} ({value!r})"
    )


def _value_text(v: Operand) -> str:
    if isinstance(v, (ParamRef, Variable)):
        return v.name
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(v)


_OPS: dict[str, t.Callable[[t.Any, t.Any], t.Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_ORDERING = frozenset({"<", "<=", ">", ">="})


class Compare(Predicate):
    """``param op value``: a comparison of a parameter with a value, another
    parameter (:class:`ParamRef`) or an attribute variable (:class:`Variable`)."""

    __slots__ = ()

    def __init__(self, param: str, op: str, value: object) -> None:
        if op not in _OPS:
            raise ExpressionError(f"unknown comparison {op!r}; expected one of {', '.join(_OPS)}")
        value = _operand(value)
        if isinstance(value, Variable) and op != "==":
            raise ExpressionError(
                f"an attribute variable can only be equated with a parameter ({param} == "
                f"{value.name}), not compared with {op!r}"
            )
        self._init(_param_name(param), op, value)

    param: str = arg(0)
    operator: str = arg(1)
    value: Operand = arg(2)

    def comparisons(self) -> t.Iterator[Predicate]:
        yield self

    def variables(self) -> frozenset[Variable]:
        v = self.value
        return frozenset((v,)) if isinstance(v, Variable) else frozenset()

    def parameters(self) -> frozenset[str]:
        v = self.value
        return frozenset((self.param, v.name) if isinstance(v, ParamRef) else (self.param,))

    def source(self, p: str, consts: dict[str, t.Any]) -> str:
        op, v = self.operator, self.value
        if isinstance(v, Variable):
            raise ExpressionError(
                f"the mask {self} names the attribute variable {v.name}: attribute "
                "variables belong to Ode expressions (sentinel.ode), not to Snoop events"
            )
        left = f"{p}.get({self.param!r}, _M)"
        right = f"{p}.get({v.name!r}, _M)" if isinstance(v, ParamRef) else _const(v, consts)
        if op in _ORDERING:
            fn = _const(_safe(_OPS[op]), consts)
            return f"{fn}({left}, {right})"
        if op == "==":
            if isinstance(v, ParamRef):
                return f"_eq({left}, {right})"
            return f"({left} == {right})"
        return f"_ne({left}, {right})"

    def text(self) -> str:
        return f"{self.param} {self.operator} {_value_text(self.value)}"


class In(Predicate):
    """``param in (v1, v2, ...)`` (``negated``: ``not in``)."""

    __slots__ = ()

    def __init__(self, param: str, values: t.Iterable[object], negated: bool = False) -> None:
        vals = tuple(_operand(v) for v in values)
        for v in vals:
            if isinstance(v, (ParamRef, Variable)):
                raise ExpressionError(f"'in' lists values, not the name {v}")
        self._init(_param_name(param), vals, bool(negated))

    param: str = arg(0)
    values: tuple[Scalar, ...] = arg(1)
    negated: bool = arg(2)

    def comparisons(self) -> t.Iterator[Predicate]:
        yield self

    def variables(self) -> frozenset[Variable]:
        return frozenset()

    def parameters(self) -> frozenset[str]:
        return frozenset((self.param,))

    def source(self, p: str, consts: dict[str, t.Any]) -> str:
        fn = _const(_not_in if self.negated else _in, consts)
        return f"{fn}({p}.get({self.param!r}, _M), {_const(self.values, consts)})"

    def text(self) -> str:
        vals = ", ".join(_value_text(v) for v in self.values)
        return f"{self.param} {'not in' if self.negated else 'in'} ({vals})"


class AllOf(Predicate):
    """``a and b``."""

    __slots__ = ()
    prec = 2

    def __init__(self, left: Predicate, right: Predicate) -> None:
        self._init(_pred(left, "and"), _pred(right, "and"))

    def source(self, p: str, consts: dict[str, t.Any]) -> str:
        return f"({self._args[0].source(p, consts)} and {self._args[1].source(p, consts)})"

    def text(self) -> str:
        return f"{_wrap(self._args[0], 2)} and {_wrap(self._args[1], 3)}"


class AnyOf(Predicate):
    """``a or b``."""

    __slots__ = ()
    prec = 1

    def __init__(self, left: Predicate, right: Predicate) -> None:
        self._init(_pred(left, "or"), _pred(right, "or"))

    def source(self, p: str, consts: dict[str, t.Any]) -> str:
        return f"({self._args[0].source(p, consts)} or {self._args[1].source(p, consts)})"

    def text(self) -> str:
        return f"{_wrap(self._args[0], 1)} or {_wrap(self._args[1], 2)}"


class NotP(Predicate):
    """``not a``."""

    __slots__ = ()
    prec = 3

    def __init__(self, inner: Predicate) -> None:
        self._init(_pred(inner, "not"))

    def source(self, p: str, consts: dict[str, t.Any]) -> str:
        return f"(not {self._args[0].source(p, consts)})"

    def text(self) -> str:
        return f"not {_wrap(self._args[0], 3)}"


def _wrap(p: Predicate, prec: int) -> str:
    return f"({p.text()})" if p.prec < prec else p.text()


_INF = float("inf")


def _const(value: t.Any, consts: dict[str, t.Any]) -> str:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return repr(value)
    name = f"_k{len(consts)}"
    consts[name] = value
    return name


def _safe(op: t.Callable[[t.Any, t.Any], t.Any]) -> t.Callable[[t.Any, t.Any], bool]:
    def compare(a: t.Any, b: t.Any) -> bool:
        if a is _MISSING or b is _MISSING:
            return False
        try:
            return bool(op(a, b))
        except (TypeError, ArithmeticError):  # not comparable: a Decimal NaN raises
            return False

    return compare


def _eq(a: t.Any, b: t.Any) -> bool:
    return a is not _MISSING and b is not _MISSING and bool(a == b)


def _ne(a: t.Any, b: t.Any) -> bool:
    return a is not _MISSING and b is not _MISSING and bool(a != b)


def _in(a: t.Any, values: tuple[t.Any, ...]) -> bool:
    return a is not _MISSING and any(a == v for v in values)


def _not_in(a: t.Any, values: tuple[t.Any, ...]) -> bool:
    return a is not _MISSING and not any(a == v for v in values)


def _compile(pred: Predicate) -> t.Callable[[t.Mapping[str, t.Any]], bool]:
    consts: dict[str, t.Any] = {"_M": _MISSING, "_eq": _eq, "_ne": _ne}
    body = pred.source("p", consts)
    namespace = dict(consts)
    exec(f"def mask(p):\n    return bool({body})\n", namespace)
    fn: t.Callable[[t.Mapping[str, t.Any]], bool] = namespace["mask"]
    return fn


class Param:
    """A parameter, for building predicates in Python: ``param("amount") > 1000``,
    ``param("currency") == "EUR"``, ``param("kind").isin("a", "b")``."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", _param_name(name))

    def __setattr__(self, name: str, value: t.Any) -> None:
        raise AttributeError("Param is immutable")

    def __eq__(self, other: object) -> Compare:  # type: ignore[override]
        return Compare(self.name, "==", other)

    def __ne__(self, other: object) -> Compare:  # type: ignore[override]
        return Compare(self.name, "!=", other)

    def __lt__(self, other: object) -> Compare:
        return Compare(self.name, "<", other)

    def __le__(self, other: object) -> Compare:
        return Compare(self.name, "<=", other)

    def __gt__(self, other: object) -> Compare:
        return Compare(self.name, ">", other)

    def __ge__(self, other: object) -> Compare:
        return Compare(self.name, ">=", other)

    __hash__ = None  # type: ignore[assignment]

    def isin(self, *values: object) -> In:
        """``name in (values...)``."""
        return In(self.name, values)

    def notin(self, *values: object) -> In:
        """``name not in (values...)``."""
        return In(self.name, values, negated=True)

    def __repr__(self) -> str:
        return f"param({self.name!r})"


def param(name: str) -> Param:
    """The parameter ``name``, to build a mask: ``param("amount") > 1000``."""
    return Param(name)


def predicate(spec: Predicate | str | None = None, /, **equal: object) -> Predicate:
    """A predicate from text, a predicate, or keyword equalities (all combined
    with ``and``). Raises :class:`~sentinel.errors.ExpressionError` (a
    :class:`~sentinel.errors.SnoopSyntaxError` with the position for bad text)."""
    parts: list[Predicate] = []
    if isinstance(spec, str):
        parts.append(parse_predicate(spec))
    elif isinstance(spec, Predicate):
        parts.append(spec)
    elif spec is not None:
        raise ExpressionError(
            f"a mask is text ('amount > 1000'), a predicate (param('amount') > 1000) or "
            f"keyword equalities (currency='EUR'), not {type(spec).__name__}"
        )
    for name, value in equal.items():
        parts.append(Compare(name, "==", value))
    if not parts:
        raise ExpressionError("an empty mask: give a predicate or keyword equalities")
    out = parts[0]
    for p in parts[1:]:
        out = AllOf(out, p)
    return out


# -- text ------------------------------------------------------------------------------


_parser = partial(
    lalr, "sentinel.algebra", "mask.lark", propagate_positions=True, maybe_placeholders=True
)


class _Positioned(Positioned):
    """A problem at ``column`` (1-based) of a mask's text."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message, offset=column - 1)


def _at(meta: t.Any, build: t.Callable[..., Predicate], *args: Predicate) -> Predicate:
    """``build(*args)``; an error (a mask nested too deeply) is reported where the
    connective's text starts."""
    try:
        return build(*args)
    except ExpressionError as e:
        raise _Positioned(str(e), meta.column) from None


@v_args(meta=True)
class _ToPredicate(Transformer_NonRecursive[Token, t.Any]):
    def any_of(self, meta: t.Any, c: list[t.Any]) -> Predicate:
        return _at(meta, AnyOf, c[0], c[1])

    def all_of(self, meta: t.Any, c: list[t.Any]) -> Predicate:
        return _at(meta, AllOf, c[0], c[1])

    def not_(self, meta: t.Any, c: list[t.Any]) -> Predicate:
        return _at(meta, NotP, c[0])

    def compare(self, meta: t.Any, c: list[t.Any]) -> Predicate:
        try:
            return Compare(str(c[0]), str(c[1]), c[2])
        except ExpressionError as e:
            raise _Positioned(str(e), meta.column) from None

    def in_(self, meta: t.Any, c: list[t.Any]) -> Predicate:
        return In(str(c[0]), c[1])

    def not_in(self, meta: t.Any, c: list[t.Any]) -> Predicate:
        return In(str(c[0]), c[1], negated=True)

    def param_ref(self, meta: t.Any, c: list[Token]) -> ParamRef:
        return ParamRef(str(c[0]))

    def values(self, meta: t.Any, c: list[t.Any]) -> list[t.Any]:
        # "()" and "(null)" both come as [None] (the optional list's
        # placeholder, null's value): only the first is empty text
        return [] if c == [None] and meta.empty else c

    def number(self, meta: t.Any, c: list[Token]) -> int | float:
        s = str(c[0])
        if re.fullmatch(r"-?\d+", s):
            try:
                return int(s)
            except ValueError:  # past Python's limit on digits (4,300 by default)
                raise _Positioned(
                    f"a number of {len(s.lstrip('-')):,} digits is too long for a mask",
                    meta.column,
                ) from None
        value = float(s)
        if value in (_INF, -_INF):
            raise _Positioned(
                f"{s} is too large for a mask's number (it reads as infinity)", meta.column
            )
        return value

    def string(self, meta: t.Any, c: list[Token]) -> str:
        return unquote(str(c[0]))

    def true(self, meta: t.Any, c: list[t.Any]) -> bool:
        return True

    def false(self, meta: t.Any, c: list[t.Any]) -> bool:
        return False

    def null(self, meta: t.Any, c: list[t.Any]) -> None:
        return None


_TOKENS = {
    "PARAM": "a parameter name",
    "CMP": "a comparison (== != < <= > >=)",
    "NUMBER": "a number",
    "STRING": "a quoted string",
    "LPAR": '"("',
    "RPAR": '")"',
    "COMMA": '","',
    "AND": '"and"',
    "OR": '"or"',
    "NOT": '"not"',
    "IN": '"in"',
    "TRUE": '"true"',
    "FALSE": '"false"',
    "NULL": '"null"',
    "$END": "end of mask",
}


def parse_predicate(text: str, *, offset: int = 0, source: str | None = None) -> Predicate:
    """Read a mask's text (``amount > 1000 and currency == 'EUR'``).

    Raises :class:`~sentinel.errors.SnoopSyntaxError` with the position. When the
    mask is part of a longer text (``source``), ``offset`` is where it starts
    there, so the position points into ``source``.
    """
    if not isinstance(text, str):
        raise ExpressionError(f"a mask's text is a string, not {type(text).__name__}")
    with _ERRORS.reading(text, source=source, offset=offset):
        tree = _parser().parse(text)
        result = _ToPredicate().transform(tree)
    if not isinstance(result, Predicate):
        full = source if source is not None else text
        raise _ERRORS.at(full, "a mask is a predicate, not a bare value", offset=offset)
    return result


def _describe(text: str, u: Unexpected) -> tuple[str, int, list[str]]:
    """A syntax error's message, place and what was expected there."""
    if u.kind == "character":
        msg = f"unexpected character {text[u.offset]!r} in mask"
    elif u.kind == "end":
        msg = "unexpected end of mask"
    else:
        msg = f"unexpected {str(u.token)!r} in mask"
    return msg, u.offset, sorted({_TOKENS.get(n, n.lower()) for n in u.expected})


_ERRORS = TextErrors(SnoopSyntaxError, _describe, passthrough=(ExpressionError,))


# -- the masked primitive event ---------------------------------------------------------


class Masked(Expression):
    """``E[predicate]``: the occurrences of the primitive event E whose parameters
    satisfy the predicate (a mask, Ode 2). Build it with :meth:`Primitive.where`.

    Detected like any operator: a filter node between E's leaf and what uses it,
    the same in every parameter context.
    """

    __slots__ = ()
    op = "mask"
    strategies = "sentinel.detector.operators.mask"

    def __init__(self, event: Primitive, mask: Predicate) -> None:
        if not isinstance(_check(event, "a mask"), Primitive):
            raise ExpressionError(
                f"a mask applies to a primitive event, not to the composite {event}"
            )
        if getattr(event, "op", None) == "absolute":
            raise ExpressionError(
                f"{event} is a point in time and has no parameters: a mask on it would "
                "always hold or never"
            )
        self._init(event, _pred(mask, "where"))

    event: Primitive = arg(0)
    mask: Predicate = arg(1)

    def where(self, spec: Predicate | str | None = None, /, **equal: object) -> Masked:
        """A narrower mask: this one ``and`` the new one."""
        return Masked(self.event, AllOf(self.mask, predicate(spec, **equal)))

    def to_text(self, text: t.Callable[[Expression], str]) -> str:
        return f"{text(self.event)}[{self.mask}]"


def masked(event: Primitive, spec: Predicate | str | None = None, /, **equal: object) -> Masked:
    """``event.where(...)``: ``event`` masked by :func:`predicate` of the rest."""
    return Masked(event, predicate(spec, **equal))
