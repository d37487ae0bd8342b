"""Text read with lark: what sentinel's four front-ends share.

Snoop (:mod:`sentinel.algebra.syntax`), masks (:mod:`sentinel.algebra.masks`),
Ode (:mod:`sentinel.ode.syntax`) and BiCEPL (:mod:`sentinel.bicep.parser`) each
raise their own exception class (:class:`~sentinel.errors.SnoopSyntaxError`,
:class:`~sentinel.errors.BicepSyntaxError`), and each words its messages its
own way; what they share is here:

- :class:`Positioned`: raised inside a transformer for a problem at a place of
  the text (lark wraps it in a ``VisitError``);
- :class:`Unexpected`: what lark's ``UnexpectedInput`` says, reduced to where
  (an offset), what kind of problem (the end of the text, a character no token
  starts with, a token out of place), the token and the terminals expected;
- :class:`TextErrors`: a front-end's way of making its error at a place (line,
  column, the line with a caret under the column), and :meth:`TextErrors.reading`,
  which turns lark's exceptions raised while reading into that error;
- :class:`ErrorAt`: a :class:`Positioned` made of an exception and its line and
  column;
- :func:`lalr`, a front-end's parser made from the grammar file it ships;
  :func:`build`, a transformer method that makes a node of its children;
  :func:`unquote`, a quoted string's text.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources

from lark import Lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError

from sentinel.errors import caret_context

__all__ = [
    "ErrorAt",
    "Positioned",
    "TextErrors",
    "Unexpected",
    "build",
    "caret",
    "lalr",
    "position",
    "unquote",
]

E = t.TypeVar("E", bound=Exception)
N = t.TypeVar("N")


@cache
def lalr(package: str, grammar: str, **options: t.Any) -> Lark:
    """The LALR parser of the grammar file ``grammar`` shipped in ``package``
    (``options`` as lark's: ``propagate_positions``, ``maybe_placeholders``),
    made once."""
    text = resources.files(package).joinpath(grammar).read_text("utf-8")
    return Lark(text, parser="lalr", **options)


def build(node: Callable[..., N], *at: int) -> Callable[[t.Any, t.Any, list[t.Any]], N]:
    """A transformer method (of a ``v_args(meta=True)`` transformer) that makes
    ``node`` of the rule's children at the places ``at``: ``or_op = build(Or,
    0, 2)`` for ``a | b``, whose child 1 is the operator's token."""

    def method(self: t.Any, meta: t.Any, c: list[t.Any]) -> N:
        return node(*[c[i] for i in at])

    method.__name__ = f"build_{getattr(node, '__name__', 'node')}"
    return method


def unquote(s: str) -> str:
    """The text of a quoted string token: its quotes off, its escapes undone."""
    return re.sub(r"\\(.)", r"\1", s[1:-1])


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in ``text`` (lines end at ``\\n``,
    as lark counts them)."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def caret(text: str, line: int, column: int) -> str:
    """Line ``line`` of ``text`` with a caret under ``column`` (see
    :func:`~sentinel.errors.caret_context`); a line past the end is the last."""
    lines = text.split("\n")
    src = lines[max(1, min(line, len(lines))) - 1]
    return caret_context(src.removesuffix("\r"), column)


class Positioned(Exception):
    """A problem at a place of the text, raised while transforming a parse tree:
    at ``offset`` (0-based), or at ``line`` and ``column`` (1-based)."""

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.offset, self.line, self.column = message, offset, line, column


class ErrorAt(Positioned):
    """``error`` (its text the message) at ``line`` and ``column``."""

    def __init__(self, error: Exception, line: int, column: int) -> None:
        super().__init__(str(error), line=line, column=column)


class Unexpected(t.NamedTuple):
    """What lark's ``UnexpectedInput`` says, reduced to what a message needs."""

    #: ``"end"`` (the text ended too soon), ``"character"`` (no token starts
    #: here) or ``"token"`` (a token out of place).
    kind: str
    #: Where in the text: the token's or character's offset; ``len(text)`` at the end.
    offset: int
    #: The token out of place (``None`` unless ``kind`` is ``"token"``).
    token: t.Any
    #: lark's names of the terminals the parser would have taken there.
    expected: frozenset[str]

    @classmethod
    def of(cls, text: str, e: UnexpectedInput) -> Unexpected:
        expected = frozenset(getattr(e, "expected", None) or getattr(e, "allowed", None) or ())
        tok = getattr(e, "token", None)
        if isinstance(e, UnexpectedCharacters):
            pos = e.pos_in_stream
            if pos is not None and 0 <= pos < len(text):
                return cls("character", pos, None, expected)
            return cls("end", len(text), None, expected)
        if isinstance(e, UnexpectedEOF) or tok is None or tok.type == "$END":
            return cls("end", len(text), None, expected)
        start = tok.start_pos if tok.start_pos is not None else 0
        return cls("token", start, tok, expected)


class TextErrors(t.Generic[E]):
    """How one front-end reports problems in its text.

    ``make(message, text=..., line=..., column=..., expected=..., context=...)``
    builds the front-end's exception (``context`` is the line with a caret);
    ``describe(text, unexpected)`` words lark's syntax errors, returning
    ``(message, offset, expected)``; ``passthrough`` are the exception classes a
    transformer may raise that leave :meth:`reading` as they are (lark wraps them
    in a ``VisitError``)."""

    def __init__(
        self,
        make: Callable[..., E],
        describe: Callable[[str, Unexpected], tuple[str, int, Iterable[str]]],
        passthrough: tuple[type[Exception], ...] = (),
    ) -> None:
        self.make, self.describe, self.passthrough = make, describe, passthrough

    def at(
        self,
        text: str,
        message: str,
        *,
        offset: int | None = None,
        line: int | None = None,
        column: int | None = None,
        expected: Iterable[str] = (),
    ) -> E:
        """The error ``message`` at ``offset`` of ``text``, or at ``line`` and
        ``column``."""
        if line is None or column is None:
            line, column = position(text, offset or 0)
        return self.make(
            message,
            text=text,
            line=line,
            column=column,
            expected=expected,
            context=caret(text, line, column),
        )

    @contextmanager
    def reading(self, text: str, *, source: str | None = None, offset: int = 0) -> Iterator[None]:
        """Turn lark's exceptions raised inside the block (parsing ``text``,
        transforming its tree) into this front-end's error. When ``text`` is part
        of a longer ``source`` starting at ``offset`` (a mask in Snoop text), the
        error's place is in ``source``."""
        try:
            yield
        except UnexpectedInput as e:
            message, pos, expected = self.describe(text, Unexpected.of(text, e))
            raise self._placed(text, source, offset, message, pos, None, None, expected) from None
        except VisitError as e:
            orig = e.orig_exc
            if isinstance(orig, Positioned):
                raise self._placed(
                    text, source, offset, orig.message, orig.offset, orig.line, orig.column, ()
                ) from None
            if self.passthrough and isinstance(orig, self.passthrough):
                raise orig from None
            raise

    def _placed(
        self,
        text: str,
        source: str | None,
        base: int,
        message: str,
        offset: int | None,
        line: int | None,
        column: int | None,
        expected: Iterable[str],
    ) -> E:
        if source is None and not base:
            return self.at(
                text, message, offset=offset, line=line, column=column, expected=expected
            )
        if offset is None:  # a line and column of text: its offset there
            starts = [0]
            starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
            row = max(1, min(line or 1, len(starts)))
            offset = starts[row - 1] + (column or 1) - 1
        return self.at(
            source if source is not None else text, message, offset=base + offset, expected=expected
        )
