"""Snoop text <-> event expressions.

:func:`parse` reads Snoop text (grammar in ``snoop.lark``) into an expression whose
primitive events are plain names; the detector resolves those names against the
events defined on it (``detector.expression(text)``). :func:`to_text` prints an
expression as Snoop text that parses back to an equal expression.

Text syntax::

    E1 | E2                OR
    E1 ^ E2                AND
    E1 ; E2                SEQ
    ANY(2, E1, E2, E3)     ANY
    A(E1, E2, E3)          A          A*(E1, E2, E3)     A*
    NOT(E2)[E1, E3]        NOT
    (E1 ; E2) by order_id  partitioned by a parameter   (... by @source: by object)
    'odd name!'            an event whose name is not a plain identifier
    <(17:00:00)*/*/*>      absolute temporal event (wild cards '*'; yy or yyyy)
    E1 + [00:10:00]        relative temporal event (also [2d 00:00:00], [00:00:00.5])
    P(E1, [00:00:10], E3)  periodic       P*(E1, [00:00:10] price, E3)  cumulative periodic
    E1[amount > 1000]      E1 masked by a predicate on its parameters (sentinel.algebra.masks)
    ode{prior(a, b)}       an expression of a registered language (Ode: sentinel.ode)
"""

from __future__ import annotations

import re
import typing as t
from functools import cache
from importlib import resources

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError

from sentinel.algebra import expressions as ex
from sentinel.algebra import temporal as tm
from sentinel.errors import ExpressionError, SnoopSyntaxError, TimeStringError

__all__ = ["parse", "register_block", "to_text"]

_TOKEN_TEXT = {
    "LPAR": '"("',
    "RPAR": '")"',
    "LSQB": '"["',
    "RSQB": '"]"',
    "COMMA": '","',
    "SEMICOLON": '";"',
    "OR": '"|"',
    "AND": '"^"',
    "STAR": '"*"',
    "NAME": "an event name",
    "STRING": "a quoted event name",
    "INT": "a number",
    "BY": '"by"',
    "__ANON_0": '"@source"',
    "PLUS": '"+"',
    "INTERVAL": "a time interval like [00:10:00]",
    "TIMESTRING": "an absolute time like <(17:00:00)*/*/*>",
    "BLOCK": "an embedded expression like ode{...}",
    "$END": "end of text",
}


@cache
def _parser() -> Lark:
    grammar = resources.files("sentinel.algebra").joinpath("snoop.lark").read_text("utf-8")
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def _unquote(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s[1:-1])


class _Positioned(Exception):
    """An ExpressionError raised while transforming, with the node's position."""

    def __init__(self, error: ExpressionError, line: int, column: int) -> None:
        self.error, self.line, self.column = error, line, column


@v_args(meta=True)
class _ToExpression(Transformer[Token, ex.Expression]):
    """Parse tree -> expression. One method per grammar rule, named after the
    operator it builds."""

    def or_op(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        return ex.Or(c[0], c[2])

    def seq_op(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        return ex.Seq(c[0], c[1])

    def and_op(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        return ex.And(c[0], c[2])

    def keyed(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        return ex.Keyed(c[0], c[1])

    def param_key(self, meta: t.Any, c: list[Token]) -> str:
        return str(c[0])

    def source_key(self, meta: t.Any, c: list[t.Any]) -> ex.KeySpec:
        return ex.SOURCE

    def name(self, meta: t.Any, c: list[Token]) -> ex.Expression:
        tok = c[0]
        text = _unquote(str(tok)) if tok.type == "STRING" else str(tok)
        if not text:
            raise _Positioned(ExpressionError("empty event name"), meta.line, meta.column)
        return ex.Primitive(text)

    def count(self, meta: t.Any, c: list[Token]) -> int:
        return int(c[0])

    def masked(self, meta: t.Any, c: list[Token]) -> ex.Expression:
        return _masked(c[0], c[1])

    def block(self, meta: t.Any, c: list[Token]) -> ex.Expression:
        return _block(c[0])

    def relative(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        offset = _time_string(tm.parse_duration, c[1], what="relative offset")
        return tm.Relative(c[0], offset)

    def absolute(self, meta: t.Any, c: list[Token]) -> ex.Expression:
        return tm.Absolute(_time_string(tm.parse_absolute, c[0]))

    def interval(self, meta: t.Any, c: list[Token]) -> _Interval:
        duration = _time_string(tm.parse_duration, c[0], what="periodic interval")
        return _Interval(duration, str(c[1]) if len(c) > 1 else None, c[0])

    def args(self, meta: t.Any, c: list[t.Any]) -> list[t.Any]:
        return c

    def bracket(self, meta: t.Any, c: list[t.Any]) -> tuple[t.Any, t.Any]:
        return (c[0], c[1])

    def call(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        name_tok: Token = c[0]
        starred = len(c) > 1 and isinstance(c[1], Token) and c[1].type == "STAR"
        rest = c[2:] if starred else c[1:]
        args: list[t.Any] = rest[0]
        bracket: tuple[t.Any, t.Any] | None = rest[1] if len(rest) > 1 else None
        op = str(name_tok) + ("*" if starred else "")
        try:
            return _build_call(op, args, bracket)
        except ExpressionError as e:
            raise _Positioned(e, name_tok.line or 1, name_tok.column or 1) from None


class _Interval(t.NamedTuple):
    """``[t] arg`` inside a call's arguments (P and P*)."""

    duration: tm.Duration
    arg: str | None
    token: Token


def _time_string(read: t.Callable[..., t.Any], tok: Token, **kw: t.Any) -> t.Any:
    """Read a time-string token; a problem inside it is reported at its own column."""
    try:
        return read(str(tok), **kw)
    except TimeStringError as e:
        raise _Positioned(
            ExpressionError(e.reason), tok.line or 1, (tok.column or 1) + e.position
        ) from None


#: Readers of embedded languages: ``name{text}`` in Snoop text is ``_BLOCKS[name](text)``.
_BLOCKS: dict[str, t.Callable[[str], ex.Expression]] = {}


def register_block(name: str, reader: t.Callable[[str], ex.Expression]) -> None:
    """Let Snoop text embed another language as ``name{...}`` (the Ode layer
    registers ``ode``). ``reader`` turns the text between the braces into an
    expression; a :class:`~sentinel.errors.SnoopSyntaxError` it raises is
    reported at its position in the whole text."""
    _BLOCKS[name] = reader


def _inner_error(e: SnoopSyntaxError, line: int, column: int) -> _Positioned:
    """An error at (e.line, e.column) of text that starts at (line, column)."""
    if e.line == 1:
        return _Positioned(ExpressionError(e.reason), line, column + e.column - 1)
    return _Positioned(ExpressionError(e.reason), line + e.line - 1, e.column)


def _masked(name: Token, mask: Token) -> ex.Expression:
    from sentinel.algebra.masks import Masked, parse_predicate  # defined on top of this module

    text = _unquote(str(name)) if name.type == "STRING" else str(name)
    try:
        predicate = parse_predicate(str(mask)[1:-1])
    except SnoopSyntaxError as e:
        raise _inner_error(e, mask.line or 1, (mask.column or 1) + 1) from None
    return Masked(ex.Primitive(text), predicate)


def _block(tok: Token) -> ex.Expression:
    raw = str(tok)
    brace = raw.index("{")
    name = raw[:brace].strip()
    reader = _BLOCKS.get(name)
    if reader is None:
        known = ", ".join(f"{n}{{...}}" for n in sorted(_BLOCKS)) or "none"
        raise _Positioned(
            ExpressionError(f"unknown block {name}{{...}}; known: {known}"),
            tok.line or 1,
            tok.column or 1,
        )
    try:
        return reader(raw[brace + 1 : -1])
    except SnoopSyntaxError as e:
        if e.reason == "unexpected end of text":
            e.reason = f"unexpected end of {name}{{...}}"
        raise _inner_error(e, tok.line or 1, (tok.column or 1) + brace + 1) from None
    except ExpressionError as e:
        raise _Positioned(e, tok.line or 1, tok.column or 1) from None


def _build_call(op: str, args: list[t.Any], bracket: tuple[t.Any, t.Any] | None) -> ex.Expression:
    if op in ("P", "P*"):
        return _periodic(op, args, bracket)

    def exprs(n: int) -> list[ex.Expression]:
        if len(args) != n or not all(isinstance(a, ex.Expression) for a in args):
            raise ExpressionError(f"{op} takes {n} event expression(s), got {_describe(args)}")
        return args

    if op != "NOT" and bracket is not None:
        raise ExpressionError(f"only NOT takes an interval in brackets, not {op}")
    if op == "ANY":
        if not args or not isinstance(args[0], int):
            raise ExpressionError("ANY takes a count first: ANY(m, E1, ..., En)")
        rest = args[1:]
        if not all(isinstance(a, ex.Expression) for a in rest):
            raise ExpressionError("ANY takes one count and then event expressions")
        return ex.Any(args[0], *rest)
    if op == "A":
        return ex.A(*exprs(3))
    if op == "A*":
        return ex.Astar(*exprs(3))
    if op == "NOT":
        (middle,) = exprs(1)
        if bracket is None:
            raise ExpressionError("NOT needs its interval: NOT(E2)[E1, E3]")
        return ex.Not(middle, bracket[0], bracket[1])
    raise ExpressionError(f"unknown operator {op}(...); expected ANY, A, A*, NOT, P or P*")


def _periodic(op: str, args: list[t.Any], bracket: tuple[t.Any, t.Any] | None) -> ex.Expression:
    shape = "P(E1, [t], E3)" if op == "P" else "P*(E1, [t] arg, E3) or P*(E1, [t], E3)"
    if bracket is not None:
        raise ExpressionError(f"only NOT takes an interval in brackets, not {op}")
    ok = (
        len(args) == 3
        and isinstance(args[0], ex.Expression)
        and isinstance(args[1], _Interval)
        and isinstance(args[2], ex.Expression)
    )
    if not ok:
        raise ExpressionError(f"{op} is written {shape}, got {_describe(args)}")
    start, iv, end = args
    if op == "P":
        if iv.arg is not None:
            raise _Positioned(
                ExpressionError(
                    f"only P* takes a parameter after its interval ({iv.arg!r}); "
                    "P's ticks carry their times"
                ),
                iv.token.line or 1,
                iv.token.column or 1,
            )
        return tm.P(start, iv.duration, end)
    return tm.Pstar(start, iv.duration, end, iv.arg)


def _describe(args: list[t.Any]) -> str:
    if not args:
        return "none"
    kinds = [
        ("an interval" if isinstance(a, _Interval) else "a count")
        if isinstance(a, (_Interval, int))
        else "an event"
        for a in args
    ]
    return f"{len(args)} argument(s): " + ", ".join(kinds)


def _expected_text(names: t.Iterable[str]) -> list[str]:
    return sorted({_TOKEN_TEXT.get(n, n.lower()) for n in names if not n.startswith("__IGNORE")})


def parse(text: str) -> ex.Expression:
    """Parse Snoop text into an expression whose primitives are bare names.

    Raises :class:`~sentinel.errors.SnoopSyntaxError` for malformed text (with the
    line, column, a caret under the position and what was expected there) and
    :class:`~sentinel.errors.ExpressionError` for well-formed text that is not a
    valid expression (``ANY(4, E1, E2)``).

    >>> str(parse("(E1 ^ E2) ; E3"))
    'E1 ^ E2 ; E3'
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() takes Snoop text, not {type(text).__name__}")
    try:
        tree = _parser().parse(text)
        result = _ToExpression().transform(tree)
    except UnexpectedInput as e:
        raise _syntax_error(text, e) from None
    except VisitError as e:
        orig = e.orig_exc
        if isinstance(orig, _Positioned):
            raise SnoopSyntaxError(
                str(orig.error),
                text=text,
                line=orig.line,
                column=orig.column,
                context=_caret(text, orig.line, orig.column),
            ) from None
        if isinstance(orig, ExpressionError):
            raise orig from None
        raise
    if isinstance(result, Tree):  # pragma: no cover - grammar guarantees an expression
        raise ExpressionError(f"could not read {text!r} as an expression")
    return result


def _caret(text: str, line: int, column: int) -> str:
    lines = text.splitlines() or [""]
    src = lines[min(line, len(lines)) - 1]
    return f"    {src}\n    {' ' * (column - 1)}^"


def _syntax_error(text: str, e: UnexpectedInput) -> SnoopSyntaxError:
    line = getattr(e, "line", 1) or 1
    column = getattr(e, "column", 1) or 1
    if isinstance(e, UnexpectedEOF) or (line < 0 or column < 0):
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
        msg = "unexpected end of text"
        expected = _expected_text(getattr(e, "expected", ()))
    elif isinstance(e, UnexpectedCharacters):
        msg = f"unexpected character {text[e.pos_in_stream or 0]!r}"
        expected = _expected_text(e.allowed or ())
    else:
        tok = getattr(e, "token", None)
        if tok is not None and tok.type == "$END":
            msg = "unexpected end of text"
            lines = text.splitlines() or [""]
            line, column = len(lines), len(lines[-1]) + 1
        else:
            msg = f"unexpected {str(tok)!r}"
        expected = _expected_text(getattr(e, "expected", ()) or ())
    return SnoopSyntaxError(
        msg,
        text=text,
        line=line,
        column=column,
        expected=expected,
        context=_caret(text, line, column),
    )


# -- printing ----------------------------------------------------------------------

_PREC = {ex.Or: 1, ex.Seq: 2, ex.And: 3, ex.Keyed: 4}
_ATOM = 5
_INFIX = {ex.Or: " | ", ex.Seq: " ; ", ex.And: " ^ "}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)*\Z")


def _name_text(label: str) -> str:
    if _PLAIN_NAME.match(label) and label != "by":
        return label
    return "'" + label.replace("\\", "\\\\").replace("'", "\\'") + "'"


def to_text(expr: ex.Expression) -> str:
    """Print ``expr`` as Snoop text, with only the parentheses the text needs."""
    return _text(expr)


def _text(e: ex.Expression) -> str:
    cls = type(e)
    if cls is ex.Primitive:
        assert isinstance(e, ex.Primitive)
        return _name_text(e.label)
    if cls in _INFIX:
        prec = _PREC[cls]
        left, right = e._args
        return _wrap(left, prec, False) + _INFIX[cls] + _wrap(right, prec, True)
    if cls is ex.Keyed:
        assert isinstance(e, ex.Keyed)
        key = "@source" if e.key is ex.SOURCE else str(e.key)
        return _wrap(e.expression, 4, False) + " by " + key
    if cls is ex.Any:
        assert isinstance(e, ex.Any)
        return f"ANY({e.m}, " + ", ".join(_text(c) for c in e.children) + ")"
    if cls is ex.Not:
        assert isinstance(e, ex.Not)
        return f"NOT({_text(e.middle)})[{_text(e.start)}, {_text(e.end)}]"
    if cls in (ex.A, ex.Astar):
        return f"{e.op}(" + ", ".join(_text(c) for c in e.children) + ")"
    text = getattr(e, "to_text", None)
    if text is not None:  # operators added by other layers (temporal) print themselves
        return str(text(_text))
    raise TypeError(f"cannot print {cls.__name__}")


def _wrap(child: ex.Expression, prec: int, right: bool) -> str:
    p = _PREC.get(type(child), _ATOM)
    inner = _text(child)
    if p < prec or (right and p == prec):
        return f"({inner})"
    return inner
