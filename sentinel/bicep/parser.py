"""BiCEPL text -> :class:`~sentinel.bicep.model.Program`.

The statements are read with lark (``bicepl.lark``); a complex class's query is
kept as text with its position, for :mod:`sentinel.bicep.sqlpart`. Errors are
:class:`~sentinel.errors.BicepSyntaxError` with the line, column, a caret and
what was expected.
"""

from __future__ import annotations

import math
import typing as t

from lark import Token, Transformer, Tree, v_args

from sentinel.algebra._errors import Positioned, TextErrors, Unexpected, caret, lalr
from sentinel.algebra._errors import position as _position
from sentinel.bicep import model as m
from sentinel.errors import BicepProgramError, BicepSyntaxError

__all__ = ["UNIT_SECONDS", "error_at", "parse_program", "position", "time_literal"]

#: Seconds per time unit (case-insensitive; ``m`` is minutes, errata).
UNIT_SECONDS: t.Final = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}

_TOKEN_TEXT = {
    "LPAR": '"("',
    "RPAR": '")"',
    "COMMA": '","',
    "SEMICOLON": '";"',
    "DOT": '"."',
    "PLUS": '"+"',
    "MINUS": '"-"',
    "NAME": "a name",
    "INT": "a whole number",
    "NUMBER": "a number",
    "STRING": "a quoted string",
    "TIMELIT": "a time literal such as 5d, 12h, 10m or 30s",
    "MUTABILITY": "MUTABLE or IMMUTABLE",
    "SQL_QUERY": "SELECT ... OCCURRING AT <time>",
    "NEWOLD": "NEW.<column> or OLD.<column>",
    "TIMING": "a timing primitive (ANNOUNCEMENT, CHANGE, ONTIME, LATE, ...)",
    "COMPARISON": "a comparison (=, <>, <, <=, >, >=)",
    "MAX": "MAX",
    "MIN": "MIN",
    "$END": "end of program",
}

_TYPES: dict[str, m.TypeKind] = {
    "INT": "integer",
    "INTEGER": "integer",
    "SMALLINT": "integer",
    "BIGINT": "integer",
    "TINYINT": "integer",
    "LONG": "integer",
    "NUMERIC": "numeric",
    "DECIMAL": "numeric",
    "DEC": "numeric",
    "REAL": "real",
    "FLOAT": "real",
    "DOUBLE": "real",
    "DOUBLE PRECISION": "real",
    "VARCHAR": "text",
    "CHAR": "text",
    "CHARACTER": "text",
    "CHARACTER VARYING": "text",
    "NVARCHAR": "text",
    "TEXT": "text",
    "STRING": "text",
    "BOOLEAN": "boolean",
    "BOOL": "boolean",
}


def position(text: str, offset: int) -> m.Pos:
    """The :class:`Pos` of ``offset`` in ``text``."""
    offset = max(0, min(offset, len(text)))
    return m.Pos(*_position(text, offset), offset)


E = t.TypeVar("E", bound=BicepProgramError)


def error_at(
    text: str,
    offset: int,
    message: str,
    expected: t.Iterable[str] = (),
    cls: type[E] = BicepSyntaxError,  # type: ignore[assignment]
) -> E:
    """An error of class ``cls`` at ``offset`` of ``text``, with a caret."""
    pos = position(text, offset)
    return cls(
        message,
        line=pos.line,
        column=pos.column,
        expected=expected,
        context=caret(text, pos.line, pos.column),
    )


def time_literal(token: str) -> int:
    """Seconds of a time literal such as ``5d`` or ``10m``."""
    return int(token[:-1]) * UNIT_SECONDS[token[-1].lower()]


#: How deeply a program's conditions, values and times may nest (``A AND B AND
#: ...`` nests one level per term; parentheses add none).
MAX_DEPTH: t.Final = 100
#: The longest time literal: 9999 years (the times a datetime holds).
MAX_SPAN: t.Final = 253_402_300_799
_INT_MAX: t.Final = 2**63 - 1


class _Positioned(Positioned):
    """A problem at ``offset`` of the program's text."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message, offset=offset)


def _pos(text: str, meta_or_token: t.Any) -> m.Pos:
    if isinstance(meta_or_token, Token):
        return position(text, meta_or_token.start_pos or 0)
    return position(text, getattr(meta_or_token, "start_pos", 0) or 0)


@v_args(meta=True)
class _ToProgram(Transformer[Token, t.Any]):
    """Parse tree -> program model; one method per grammar rule."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def _p(self, x: t.Any) -> m.Pos:
        return _pos(self.text, x)

    def _span(self, token: Token) -> int:
        seconds = time_literal(str(token))
        if seconds > MAX_SPAN:
            raise _Positioned(
                f"time literal {token} is longer than a time may be (at most 9999 years)",
                token.start_pos or 0,
            )
        return seconds

    # -- classes ----------------------------------------------------------------------
    def start(self, meta: t.Any, c: list[m.ClassDef]) -> m.Program:
        return m.Program(self.text, tuple(c))

    def sclass(self, meta: t.Any, c: list[t.Any]) -> m.SubscribedClass:
        mutability, schema, lifespan, statements = c
        name, attrs, keys, key_pos = schema
        return m.SubscribedClass(
            name=name,
            attributes=attrs,
            keys=keys,
            lifespan=lifespan,
            statements=tuple(statements or ()),
            pos=self._p(meta),
            key_positions=key_pos,
            mutable=str(mutability).upper() == "MUTABLE",
        )

    def cclass(self, meta: t.Any, c: list[t.Any]) -> m.ComplexClass:
        schema, lifespan, query, time, statements = c
        name, attrs, keys, key_pos = schema
        return m.ComplexClass(
            name=name,
            attributes=attrs,
            keys=keys,
            lifespan=lifespan,
            statements=tuple(statements or ()),
            pos=self._p(meta),
            key_positions=key_pos,
            query=str(query),
            query_pos=self._p(query),
            occurring=time,
        )

    def schema(self, meta: t.Any, c: list[t.Any]) -> tuple[t.Any, ...]:
        name, attrs, keys = c
        return str(name), attrs, tuple(str(k) for k in keys), tuple(self._p(k) for k in keys)

    def attributes(self, meta: t.Any, c: list[m.Attribute]) -> tuple[m.Attribute, ...]:
        return tuple(c)

    def attribute(self, meta: t.Any, c: list[t.Any]) -> m.Attribute:
        return m.Attribute(str(c[0]), c[1], self._p(c[0]))

    def type(self, meta: t.Any, c: list[t.Any]) -> m.SqlType:
        args = c[-1] if c and isinstance(c[-1], tuple) else None
        words = [str(w).upper() for w in c if isinstance(w, Token)]
        name = " ".join(words)
        kind = _TYPES.get(name)
        if kind is None:
            raise _Positioned(
                f"unknown type {name!r}; use INTEGER, NUMERIC, REAL, VARCHAR(n), TEXT or BOOLEAN",
                c[0].start_pos or 0,
            )
        text = self.text[meta.start_pos : meta.end_pos]
        if kind == "text":
            return m.SqlType(kind, text, length=args[0] if args else None)
        if kind == "numeric":
            return m.SqlType(
                kind,
                text,
                precision=args[0] if args else None,
                scale=args[1] if args and len(args) > 1 else None,
            )
        if args:
            raise _Positioned(f"type {name} takes no length", c[0].start_pos or 0)
        return m.SqlType(kind, text)

    def type_args(self, meta: t.Any, c: list[Token]) -> tuple[int, ...]:
        return tuple(int(x) for x in c if x is not None)

    def keys(self, meta: t.Any, c: list[Token]) -> list[Token]:
        return c

    def lifespan(self, meta: t.Any, c: list[t.Any]) -> int | None:
        v = c[0]
        if v is None:
            return None
        return self._span(v)

    def unbounded(self, meta: t.Any, c: list[Token]) -> None:
        if str(c[0]) != "1":
            raise _Positioned(
                "a lifespan is a time literal such as 5d, or -1 for none", meta.start_pos
            )
        return None

    # -- OCCURRING AT --------------------------------------------------------------------
    def dotted(self, meta: t.Any, c: list[Token]) -> m.ColumnTime:
        return m.ColumnTime(tuple(str(x) for x in c), self._p(meta))

    def later(self, meta: t.Any, c: list[t.Any]) -> m.Shift:
        return m.Shift(c[0], self._span(c[1]), self._p(meta))

    def earlier(self, meta: t.Any, c: list[t.Any]) -> m.Shift:
        return m.Shift(c[0], -self._span(c[1]), self._p(meta))

    def extreme(self, meta: t.Any, c: list[t.Any]) -> m.Extreme:
        fn = t.cast(t.Literal["MAX", "MIN"], str(c[0]).upper())
        return m.Extreme(fn, tuple(c[1:]), self._p(meta))

    # -- statements ------------------------------------------------------------------------
    def statements(self, meta: t.Any, c: list[m.Statement]) -> tuple[m.Statement, ...]:
        return tuple(c)

    def statement(self, meta: t.Any, c: list[t.Any]) -> m.Statement:
        text = self.text[meta.start_pos : meta.end_pos]
        return m.Statement(c[0], c[1], self._p(meta), " ".join(text.split()))

    def or_(self, meta: t.Any, c: list[t.Any]) -> m.Or:
        return m.Or(c[0], c[1], self._p(meta))

    def and_(self, meta: t.Any, c: list[t.Any]) -> m.And:
        return m.And(c[0], c[1], self._p(meta))

    def not_(self, meta: t.Any, c: list[t.Any]) -> m.Not:
        return m.Not(c[0], self._p(meta))

    def timing(self, meta: t.Any, c: list[Token]) -> m.Timing:
        return m.Timing(str(c[0]).upper(), self._p(c[0]))

    def late_between(self, meta: t.Any, c: list[Token]) -> m.Timing:
        low, high = self._span(c[1]), self._span(c[2])
        if low > high:
            raise _Positioned(
                f"LATE(min, max) needs min <= max, not {c[1]} > {c[2]}", c[1].start_pos or 0
            )
        return m.Timing("LATE", self._p(meta), low, high)

    def fired(self, meta: t.Any, c: list[t.Any]) -> m.Fired:
        return m.Fired(self._p(meta))

    def compare(self, meta: t.Any, c: list[t.Any]) -> m.Compare:
        op = str(c[1])
        return m.Compare("<>" if op == "!=" else op, c[0], c[2], self._p(meta))

    # -- values ----------------------------------------------------------------------------
    def add(self, meta: t.Any, c: list[t.Any]) -> m.BinOp:
        return m.BinOp("+", c[0], c[1], self._p(meta))

    def sub(self, meta: t.Any, c: list[t.Any]) -> m.BinOp:
        return m.BinOp("-", c[0], c[1], self._p(meta))

    def now(self, meta: t.Any, c: list[t.Any]) -> m.Now:
        return m.Now(self._p(meta))

    def ref(self, meta: t.Any, c: list[Token]) -> m.Ref:
        side, _, column = str(c[0]).partition(".")
        return m.Ref("new" if side.upper() == "NEW" else "old", column, self._p(c[0]))

    def number(self, meta: t.Any, c: list[Token]) -> m.Literal_:
        s = str(c[0])
        value: int | float = float(s) if any(ch in s for ch in ".eE") else int(s)
        if isinstance(value, int) and value > _INT_MAX:
            raise _Positioned(
                f"the number {s} is outside the integers a database stores (64 bits)",
                c[0].start_pos or 0,
            )
        if not math.isfinite(value):
            raise _Positioned(f"the number {s} is not a finite number", c[0].start_pos or 0)
        return m.Literal_("number", value, self._p(c[0]))

    def duration(self, meta: t.Any, c: list[Token]) -> m.Literal_:
        return m.Literal_("duration", self._span(c[0]), self._p(c[0]))

    def string(self, meta: t.Any, c: list[Token]) -> m.Literal_:
        return m.Literal_("string", str(c[0])[1:-1].replace("''", "'"), self._p(c[0]))

    def neg(self, meta: t.Any, c: list[t.Any]) -> m.Neg:
        return m.Neg(c[0], self._p(meta))

    def extreme_value(self, meta: t.Any, c: list[t.Any]) -> m.ExtremeValue:
        fn = t.cast(t.Literal["MAX", "MIN"], str(c[0]).upper())
        return m.ExtremeValue(fn, tuple(c[1:]), self._p(meta))

    def action(self, meta: t.Any, c: list[t.Any]) -> m.ActionSpec:
        params = tuple(p for p in c[1:] if p is not None)
        return m.ActionSpec(str(c[0]), params, self._p(c[0]))


def parse_program(text: str) -> m.Program:
    """Parse BiCEPL text (syntax only; :func:`sentinel.bicep.compile_program`
    checks names and the SQL).

    Raises :class:`~sentinel.errors.BicepSyntaxError` with the line, column, a
    caret and what was expected.
    """
    if not isinstance(text, str):
        raise TypeError(f"a BiCEPL program is text, not {type(text).__name__}")
    with _ERRORS.reading(text):
        parser = lalr(
            "sentinel.bicep", "bicepl.lark", propagate_positions=True, maybe_placeholders=True
        )
        tree = parser.parse(text)
        _check_depth(text, tree)
        program = _ToProgram(text).transform(tree)
    return t.cast(m.Program, program)


def _check_depth(text: str, tree: Tree[Token]) -> None:
    """Refuse a parse tree nested more than :data:`MAX_DEPTH` levels below its
    class (the stages after the parser walk it recursively)."""
    stack: list[tuple[Tree[Token], int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH + 2:  # start, the class, then its parts
            offset = getattr(node.meta, "start_pos", 0) or 0
            raise error_at(
                text,
                offset,
                f"the program nests too deeply here (more than {MAX_DEPTH} levels of "
                "conditions, values or times); split it, or use fewer terms",
            )
        stack.extend((child, depth + 1) for child in node.children if isinstance(child, Tree))


_OCCURRING = "a complex class's query must end with OCCURRING AT <time>, and none was found"


def _describe(text: str, u: Unexpected) -> tuple[str, int, list[str]]:
    """A syntax error's message, place and what was expected there."""
    if u.kind == "character":
        offset = u.offset
        if "SQL_QUERY" in u.expected:
            head = text[offset : offset + 6].upper()
            if head.startswith(("SELECT", "WITH", "(")):
                return _OCCURRING, offset, []
        ch = text[offset]
        if ch.isspace() or not ch.isprintable():  # a no-break space, a control character
            return f"unexpected character {ch!r}", offset, _expected(u.expected)
        word = text[offset:].split(None, 1)[0][:20]
        return f"unexpected {word!r}", offset, _expected(u.expected)
    expected = _expected(u.expected)
    if u.kind == "end":
        return "unexpected end of program", len(text.rstrip()), expected
    tok = u.token
    if "SQL_QUERY" in u.expected and str(tok).upper() in ("SELECT", "WITH"):
        return _OCCURRING, u.offset, []
    return f"unexpected {str(tok)!r}", u.offset, expected


def _syntax_error(message: str, *, text: str, **where: t.Any) -> BicepSyntaxError:
    return BicepSyntaxError(message, **where)


_ERRORS = TextErrors(_syntax_error, _describe)


def _expected(names: t.Iterable[str]) -> list[str]:
    out = set()
    for n in names:
        if n.startswith("__IGNORE") or n == "COMMENT":
            continue
        if n in _TOKEN_TEXT:
            out.add(_TOKEN_TEXT[n])
        elif n.isupper() and n.isalpha():
            out.add(n)  # a keyword terminal lark named after its text
        else:
            out.add(n.lower())
    return sorted(out)
