"""Snoop text <-> event expressions.

:func:`parse` reads Snoop text (grammar in ``snoop.lark``) into an expression whose
primitive events are plain names; the detector resolves those names against the
events defined on it (``detector.expression(text)``). :func:`to_text` prints an
expression as Snoop text that parses back to an equal expression (the printer
lives with the expressions, :mod:`sentinel.algebra.expressions`, whose ``str``
it is; it is named here too, with :func:`text_within` and :func:`text_prefix`).

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

import importlib
import re
import typing as t
from functools import cache, partial

from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import UnexpectedInput

from sentinel.algebra import bitemporal as bt
from sentinel.algebra import expressions as ex
from sentinel.algebra import temporal as tm
from sentinel.algebra._errors import ErrorAt, TextErrors, Unexpected, build, lalr, unquote
from sentinel.algebra.expressions import text_prefix, text_within, to_text
from sentinel.algebra.masks import Masked, parse_predicate
from sentinel.errors import (
    ExpressionError,
    SnoopSyntaxError,
    TimeStringError,
    shortened,
)

__all__ = ["parse", "register_block", "text_prefix", "text_within", "to_text"]

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


# No propagate_positions: errors take their positions from tokens, and
# positions on every tree node cost a third of the parsing time.
_parser = partial(lalr, "sentinel.algebra", "snoop.lark", maybe_placeholders=False)


@v_args(meta=True)
class _ToExpression(Transformer_NonRecursive[Token, ex.Expression]):
    """Parse tree -> expression. One method per grammar rule, named after the
    operator it builds."""

    or_op = build(ex.Or, 0, 2)
    seq_op = build(ex.Seq, 0, 1)
    and_op = build(ex.And, 0, 2)

    def keyed(self, meta: t.Any, c: list[t.Any]) -> ex.Expression:
        key = c[1]
        try:
            return ex.Keyed(c[0], str(key) if isinstance(key, Token) else key)
        except ExpressionError as e:
            raise ErrorAt(e, *_at(key)) from None

    def param_key(self, meta: t.Any, c: list[Token]) -> Token:
        return c[0]  # with its position, for an error about it

    def source_key(self, meta: t.Any, c: list[t.Any]) -> ex.KeySpec:
        return ex.SOURCE

    def name(self, meta: t.Any, c: list[Token]) -> ex.Expression:
        tok = c[0]
        text = unquote(str(tok)) if tok.type == "STRING" else str(tok)
        if not text:
            raise ErrorAt(ExpressionError("empty event name"), *_at(tok))
        return ex.Primitive(text)

    def count(self, meta: t.Any, c: list[Token]) -> int:
        if len(c[0]) > 9:
            raise ErrorAt(ExpressionError(f"count {c[0][:12]}... is too large"), *_at(c[0]))
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

    def interval(self, meta: t.Any, c: list[Token]) -> ex.Interval:
        duration = _time_string(tm.parse_duration, c[0], what="periodic interval")
        return ex.Interval(duration, str(c[1]) if len(c) > 1 else None, *_at(c[0]))

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
            raise ErrorAt(e, name_tok.line or 1, name_tok.column or 1) from None


def _at(tok: Token) -> tuple[int, int]:
    return tok.line or 1, tok.column or 1


def _time_string(read: t.Callable[..., t.Any], tok: Token, **kw: t.Any) -> t.Any:
    """Read a time-string token; a problem inside it is reported at its own column."""
    try:
        return read(str(tok), **kw)
    except TimeStringError as e:
        raise ErrorAt(
            ExpressionError(e.reason), tok.line or 1, (tok.column or 1) + e.position
        ) from None


#: Readers of embedded languages: ``name{text}`` in Snoop text is ``_BLOCKS[name](text)``.
_BLOCKS: dict[str, t.Callable[[str], ex.Expression]] = {}

#: The embedded languages sentinel ships, and the module whose import registers
#: each (named, not imported: a layer above this one). Text that embeds one
#: works whatever was imported before.
SHIPPED_BLOCKS = {"ode": "sentinel.ode"}


def register_block(name: str, reader: t.Callable[[str], ex.Expression]) -> None:
    """Let Snoop text embed another language as ``name{...}`` (the Ode layer
    registers ``ode``). ``reader`` turns the text between the braces into an
    expression; a :class:`~sentinel.errors.SnoopSyntaxError` it raises is
    reported at its position in the whole text."""
    _BLOCKS[name] = reader


def _inner_error(e: SnoopSyntaxError, line: int, column: int) -> ErrorAt:
    """An error at (e.line, e.column) of text that starts at (line, column)."""
    if e.line == 1:
        return ErrorAt(ExpressionError(e.reason), line, column + e.column - 1)
    return ErrorAt(ExpressionError(e.reason), line + e.line - 1, e.column)


def _masked(name: Token, mask: Token) -> ex.Expression:
    text = unquote(str(name)) if name.type == "STRING" else str(name)
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
    if reader is None and name in SHIPPED_BLOCKS:
        importlib.import_module(SHIPPED_BLOCKS[name])
        reader = _BLOCKS.get(name)
    if reader is None:
        known = ", ".join(f"{n}{{...}}" for n in sorted({*_BLOCKS, *SHIPPED_BLOCKS}))
        raise ErrorAt(
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
        raise ErrorAt(e, tok.line or 1, tok.column or 1) from None


def _build_call(op: str, args: list[t.Any], bracket: tuple[t.Any, t.Any] | None) -> ex.Expression:
    """The call-form operator ``op`` (its class declares the keyword: see
    :func:`sentinel.algebra.expressions.call_form`) built from its arguments."""
    cls = ex.call_form(op)
    if cls is None:
        raise ExpressionError(f"unknown operator {op}(...); expected {_known_calls()}")
    try:
        return cls.from_call(ex.Call(op, tuple(args), bracket))
    except ExpressionError as e:
        position = getattr(e, "position", None)
        if position is not None:  # made by Interval.error: reported there
            raise ErrorAt(e, *position) from None
        raise


#: Where the Snoop paper's own call-form operators are defined (listed first).
_SNOOP_MODULES = ("sentinel.algebra.expressions", "sentinel.algebra.temporal")


def _known_calls() -> str:
    """The call-form keywords, for an error: Snoop's, then the others (operators
    defined elsewhere, the timing primitives last)."""
    keywords = ex.call_keywords()
    snoop = [k for k in keywords if ex.call_form(k).__module__ in _SNOOP_MODULES]
    others = [k for k in keywords if k not in snoop and k not in bt.KINDS]
    extra = [*others, "a timing primitive: " + ", ".join(bt.KINDS)]
    return ", ".join(snoop[:-1]) + " or " + snoop[-1] + " (or " + ", or ".join(extra) + ")"


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
    with _ERRORS.reading(text):
        tree = _parser().parse(text)
        result = _ToExpression().transform(tree)
    if not isinstance(result, ex.Expression):  # pragma: no cover - the grammar's start
        raise ExpressionError(f"could not read {text!r} as an expression")
    return result


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
    "[": (
        "]",
        "time interval or mask",
        re.compile(r"""\[(?:[^\[\]\n'"]|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")*\]"""),
    ),
}


def _describe(text: str, u: Unexpected) -> tuple[str, int, list[str]]:
    """A syntax error's message, place and what was expected there."""
    pos = u.offset
    if u.kind == "character":
        msg = f"unexpected character {text[pos]!r}"
    elif u.kind == "end":
        msg = "unexpected end of text"
    else:
        msg = f"unexpected {shortened(repr(str(u.token)))}"
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
    return msg, pos, expected


_ERRORS = TextErrors(SnoopSyntaxError, _describe, passthrough=(ExpressionError,))


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
        name = str(last)
        if ex.call_form(name) is None and ex.call_form(name + "*") is None:
            accepted -= {"LPAR", "STAR"}
        elif ex.call_form(name + "*") is None:
            accepted.discard("STAR")
    return _expected_text(accepted)
