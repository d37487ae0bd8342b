"""The four lark front-ends (Snoop, masks, Ode, BiCEPL) report errors through one
helper (sentinel/algebra/_errors.py): each keeps its own exception class and
wording, and all count lines as lark does and show the line with the caret the
same way."""

from __future__ import annotations

import typing as t

import pytest

from sentinel.algebra import parse
from sentinel.algebra.masks import parse_predicate
from sentinel.bicep.parser import parse_program
from sentinel.errors import BicepSyntaxError, SnoopSyntaxError
from sentinel.ode import parse as ode_parse

FRONT_ENDS: list[tuple[str, t.Callable[[str], object], type[Exception]]] = [
    ("snoop", parse, SnoopSyntaxError),
    ("mask", parse_predicate, SnoopSyntaxError),
    ("ode", ode_parse, SnoopSyntaxError),
    ("bicepl", parse_program, BicepSyntaxError),
]
#: For each front-end: text whose second line holds the error, as
#: (the first line, the second line, the error's column on it).
SECOND_LINE = {
    "snoop": ("'a\x0cb' ;", "E2 ; ;", 6),
    "mask": ("a == 'x\x0cy' and", "b > > 2", 5),
    "ode": ("prior('a\x0cb',", "b) )", 4),
    "bicepl": ("-- a\x0cb", "CREATE EVENT", 8),
}


@pytest.mark.parametrize(("name", "read", "error"), FRONT_ENDS, ids=[f[0] for f in FRONT_ENDS])
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_every_front_end_shows_the_line_lark_counted(
    name: str, read: t.Callable[[str], object], error: type[Exception], newline: str
) -> None:
    """A form feed inside the first line is not a line break for lark, so it is
    none for the caret either; a CRLF line ends before its carriage return."""
    first, second, column = SECOND_LINE[name]
    with pytest.raises(error) as caught:
        read(first + newline + second)
    err = t.cast(t.Any, caught.value)
    assert (err.line, err.column) == (2, column)
    src, caret = err.context.split("\n")
    assert src == "    " + second
    assert caret.index("^") == column + 3


@pytest.mark.parametrize(("name", "read", "error"), FRONT_ENDS, ids=[f[0] for f in FRONT_ENDS])
def test_a_crlf_line_shows_no_carriage_return(
    name: str, read: t.Callable[[str], object], error: type[Exception]
) -> None:
    text = {"snoop": "E1 ; ;", "mask": "a > > 1", "ode": "prior(a, b) )", "bicepl": "CREATE EVENT"}
    with pytest.raises(error) as caught:
        read(text[name] + "\r\nx")
    err = t.cast(t.Any, caught.value)
    assert err.line == 1
    assert err.context.split("\n")[0] == "    " + text[name]
