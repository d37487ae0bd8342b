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
    ONTIME(E)              timing primitive (ANNOUNCEMENT, CHANGE, CANCELLATION, FUTURE,
                           ONTIME, LATE, RETROACTIVECHANGE, POSTPONE, REVOCATION)
    LATE(E, [05:00:00], [1d])   late by 5 hours to a day;  FUTURE(CHANGE(E)): both at once
    WITHIN(E1, E2, [00:10:00])  each E2 within ten minutes of an E1
"""

from __future__ import annotations

import re
import typing as t
from functools import cache
from importlib import resources

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError

from sentinel.algebra import bitemporal as bt
from sentinel.algebra import expressions as ex
from sentinel.algebra import temporal as tm
from sentinel.errors import (
    ExpressionError,
    SnoopSyntaxError,
    TimeStringError,
    caret_context,
    shortened,
)

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
    # No propagate_positions: errors take their positions from tokens, and
    # positions on every tree node cost a third of the parsing time.
    return Lark(grammar, parser="lalr", maybe_placeholders=False)


def _unquote(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s[1:-1])


class _Positioned(Exception):
    """An ExpressionError raised while transforming, with the node's position."""

    def __init__(self, error: ExpressionError, line: int, column: int) -> None:
        self.error, self.line, self.column = error, line, column


@v_args(meta=True)
class _ToExpression(Transformer_NonRecursive[Token, ex.Expression]):
    """Parse tree -> expression. One method per grammar rule, named after the
    operator it builds."""

    def or_op(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        return ex.Or(c[0], c[2])

    def seq_op(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        return ex.Seq(c[0], c[1])

    def and_op(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        return ex.And(c[0], c[2])

    def keyed(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        key = c[1]
        try:
            return ex.Keyed(c[0], str(key) if isinstance(key, Token) else key)
        except ExpressionError as e:
            raise _Positioned(e, *_at(key)) from None

    def param_key(self, meta: t.Any, c: list[Token]) -> Token:
        return c[0]  # with its position, for an error about it

    def source_key(self, meta: t.Any, c: list[t.Any]) -> ex.KeySpec:
        return ex.SOURCE

    def name(self, meta: t.Any, c: list[Token]) -> ex.Expression:
        tok = c[0]
        text = _unquote(str(tok)) if tok.type == "STRING" else str(tok)
        if not text:
            raise _Positioned(ExpressionError("empty event name"), *_at(tok))
        return ex.Primitive(text)

    def count(self, meta: t.Any, c: list[Token]) -> int:
        if len(c[0]) > 9:
            raise _Positioned(ExpressionError(f"count {c[0][:12]}... is too large"), *_at(c[0]))
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


def _at(tok: Token) -> tuple[int, int]:
    return tok.line or 1, tok.column or 1


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
    if op in bt.BIT or op == "WITHIN":
        return _bitemporal(op, args, bracket)

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
    raise ExpressionError(
        f"unknown operator {op}(...); expected ANY, A, A*, NOT, P or P* (or WITHIN, or a "
        "timing primitive: " + ", ".join(bt.KINDS) + ")"
    )


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


def _bitemporal(op: str, args: list[t.Any], bracket: tuple[t.Any, t.Any] | None) -> ex.Expression:
    """Timing primitives (``ONTIME(E)``, ``LATE(E, [min], [max])``) and WITHIN."""
    if bracket is not None:
        raise ExpressionError(f"only NOT takes an interval in brackets, not {op}")
    plain: list[t.Any] = []
    for a in args:
        if isinstance(a, _Interval):
            if a.arg is not None:
                raise _Positioned(
                    ExpressionError(f"only P* takes a parameter after its interval ({a.arg!r})"),
                    a.token.line or 1,
                    a.token.column or 1,
                )
            plain.append(a.duration)
        else:
            plain.append(a)
    built = bt.build_call(op, plain)
    assert built is not None
    return built


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
    if not isinstance(result, ex.Expression):  # pragma: no cover - the grammar's start
        raise ExpressionError(f"could not read {text!r} as an expression")
    return result


def _caret(text: str, line: int, column: int) -> str:
    lines = text.split("\n")
    return caret_context(lines[min(line, len(lines)) - 1], column)


def _position(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of offset ``pos`` (lines end at ``\\n``, as the
    lexer counts them)."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


#: Python's spellings of the algebra, which Snoop text writes otherwise.
_PYTHON_SPELLINGS = {
    "&": "'&' is the Python spelling of AND; Snoop text writes '^'",
    ">>": "'>>' is the Python spelling of SEQ; Snoop text writes ';'",
}
#: Tokens that open with a character and must be closed: (closing, what they are,
#: the token as the grammar reads it).
_CLOSED = {
    "'": ("'", "quoted event name", re.compile(r"'(?:[^'\\]|\\.)*'")),
    "<": (">", "absolute time", re.compile(r"<[^<>\n]*>")),
    "[": ("]", "time interval", re.compile(r"\[[^\[\]\n]*\]")),
}


def _syntax_error(text: str, e: UnexpectedInput) -> SnoopSyntaxError:
    tok = getattr(e, "token", None)
    if isinstance(e, UnexpectedCharacters):
        pos = e.pos_in_stream or 0
        msg = f"unexpected character {text[pos]!r}"
    elif isinstance(e, UnexpectedEOF) or tok is None or tok.type == "$END":
        pos = len(text)
        msg = "unexpected end of text"
    else:
        pos = tok.start_pos if tok.start_pos is not None else 0
        msg = f"unexpected {shortened(repr(str(tok)))}"
    expected = _expected_at(text[:pos])
    for python, hint in _PYTHON_SPELLINGS.items():
        if text.startswith(python, pos):
            msg += f" ({hint})"
            break
    else:
        if pos < len(text) and text[pos] in _CLOSED:
            closing, what, token = _CLOSED[text[pos]]
            if not token.match(text, pos):
                where = "" if closing == "'" else " on its line"
                msg = f"unterminated {what} (no closing {closing}{where})"
                expected = []
    line, column = _position(text, pos)
    return SnoopSyntaxError(
        msg,
        text=text,
        line=line,
        column=column,
        expected=expected,
        context=_caret(text, line, column),
    )


#: Operators written like calls; "*" only after A and P (A*, P*).
_CALLS = {"ANY": False, "A": True, "NOT": False, "P": True}
_CALLS.update(dict.fromkeys((*bt.KINDS, "WITHIN"), False))  # the bitemporal operators


@cache
def _plain_parser() -> Lark:
    """The grammar alone, no transformation (for what an error position expects)."""
    return _parser()


def _expected_at(prefix: str) -> list[str]:
    """What may follow ``prefix`` (text the parser accepted): every token the
    parser would take there, found by offering each one to it."""
    parser = _plain_parser().parse_interactive(prefix)
    last = None
    try:
        for last in parser.iter_parse():  # noqa: B007 - the last token is wanted
            pass
    except UnexpectedInput:  # pragma: no cover - the prefix was accepted before
        return []
    accepted: set[str] = set(parser.accepts())  # type: ignore[no-untyped-call]
    after_name = last is not None and last.type in ("NAME", "STRING")
    if after_name and "INTERVAL" in accepted:
        # A bracket right after an event name is that event's mask.
        accepted.discard("INTERVAL")
        accepted.add("a mask like [amount > 1000]")
    if last is not None and last.type == "NAME":
        # Any name may be followed by "(" in the grammar, but only operators take
        # arguments; offering "(" after E1 would mislead.
        star = _CALLS.get(str(last))
        if star is None:
            accepted -= {"LPAR", "STAR"}
        elif not star:
            accepted.discard("STAR")
    return _expected_text(accepted)


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
    """Print ``expr`` as Snoop text, with only the parentheses the text needs.

    Iterative: an expression of any depth prints (thousands of terms of
    ``a | b | ...``) without exhausting Python's recursion limit.
    """
    text, _whole = _print(expr, None, None)
    return text


def text_within(
    expr: ex.Expression,
    budget: int | None = None,
    refs: t.Mapping[ex.Expression, str] | None = None,
) -> str | None:
    """:func:`to_text`, with two ways to keep the text short: ``budget`` (at most
    that many steps of printing, each an operator, an operand or a piece of text;
    ``None`` when the text needs more) and ``refs`` (sub-expressions printed as
    the text they map to, like ``#12`` for a node of the event graph). The cost
    is bounded by the budget, whatever the expression's depth."""
    text, whole = _print(expr, budget, refs)
    return text if whole else None


def text_prefix(expr: ex.Expression, chars: int) -> tuple[str, bool]:
    """The beginning of :func:`to_text`'s text of ``expr``, cut after the piece
    (a name, an operator, a parenthesis) that makes it ``chars`` characters or
    more, and whether that is the whole text. The cost is bounded by ``chars``
    and the expression's depth, whatever its size (a sub-expression used twice
    at each of n levels prints 2**n times)."""
    return _print(expr, None, None, chars)


def _print(
    expr: ex.Expression,
    budget: int | None,
    refs: t.Mapping[ex.Expression, str] | None,
    chars: int | None = None,
) -> tuple[str, bool]:
    """The text of ``expr``, and True; or, when it takes more than ``budget``
    steps or ``chars`` characters, the text written so far, and False."""
    out: list[str] = []
    todo: list[ex.Expression | str] = [expr]
    steps = 0
    written = counted = 0  # characters in out[:counted]
    while todo:
        if chars is not None:
            while counted < len(out):
                written += len(out[counted])
                counted += 1
            if written >= chars:
                return "".join(out), False
        e = todo.pop()
        if budget is not None:
            steps += 1
            if steps > budget:
                return "".join(out), False
        if isinstance(e, str):
            out.append(e)
            continue
        if refs and e in refs:
            out.append(refs[e])
            continue
        cls = type(e)
        if cls is ex.Primitive:
            assert isinstance(e, ex.Primitive)
            out.append(_name_text(e.label))
        elif cls in _INFIX:
            prec = _PREC[cls]
            left, right = e._args
            parts = [*_wrap(left, prec, False, refs), _INFIX[cls], *_wrap(right, prec, True, refs)]
            todo.extend(reversed(parts))
        elif cls is ex.Keyed:
            assert isinstance(e, ex.Keyed)
            key = "@source" if e.key is ex.SOURCE else str(e.key)
            todo.extend(reversed([*_wrap(e.expression, 4, False, refs), " by " + key]))
        elif cls is ex.Any:
            assert isinstance(e, ex.Any)
            todo.extend(reversed([f"ANY({e.m}, ", *_listed(e.children), ")"]))
        elif cls is ex.Not:
            assert isinstance(e, ex.Not)
            todo.extend(reversed(["NOT(", e.middle, ")[", e.start, ", ", e.end, "]"]))
        elif cls in (ex.A, ex.Astar):
            todo.extend(reversed([f"{e.op}(", *_listed(e.children), ")"]))
        else:
            # Other operators say how they print: text and operands (temporal
            # ones), or their whole text given a printer for their operands
            # (embedded languages: Ode, masks).
            text_parts = getattr(e, "text_parts", None)
            if text_parts is not None:
                todo.extend(reversed(text_parts()))
                continue
            whole = getattr(e, "to_text", None)
            if whole is None:
                raise TypeError(f"cannot print {cls.__name__}")
            out.append(whole(to_text))
    return "".join(out), True


def _listed(children: t.Sequence[ex.Expression]) -> list[ex.Expression | str]:
    items: list[ex.Expression | str] = []
    for i, c in enumerate(children):
        if i:
            items.append(", ")
        items.append(c)
    return items


def _wrap(
    child: ex.Expression, prec: int, right: bool, refs: t.Mapping[ex.Expression, str] | None
) -> list[ex.Expression | str]:
    p = _ATOM if refs and child in refs else _PREC.get(type(child), _ATOM)
    if p < prec or (right and p == prec):
        return ["(", child, ")"]
    return [child]
