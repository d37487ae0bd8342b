"""Errors about very long texts and names show a window of the text, not all of
it (a megabyte-long expression must not make a megabyte-long message)."""

from __future__ import annotations

import pytest

from sentinel import ExpressionError, LocalEventDetector, SnoopSyntaxError, parse
from sentinel.errors import UnknownEventError


def test_an_error_in_a_long_line_shows_a_window_around_the_position() -> None:
    # Was the whole line: a megabyte of text in the message of an error in a
    # megabyte-long expression.
    text = " | ".join(["e0"] * 5_000)
    for bad, column in [(text + " | )", len(text) + 4), ("e0 | ) | " + text, 6)]:
        with pytest.raises(SnoopSyntaxError) as info:
            parse(bad)
        err = info.value
        assert err.column == column
        assert len(str(err)) < 500, len(str(err))
        src, caret = err.context.split("\n")
        # The caret is under the offending character of the window shown.
        assert src[caret.index("^")] == ")"
    with pytest.raises(SnoopSyntaxError) as info:
        parse(f"e0[{' and '.join(['a > 1'] * 5000)} and]")
    assert len(str(info.value)) < 500


def test_a_huge_name_or_operand_is_shortened_in_messages() -> None:
    name = "e" + "x" * 100_000
    with pytest.raises(UnknownEventError) as info:
        LocalEventDetector().rule("r", name, action=print)
    assert len(str(info.value)) < 500
    e0 = LocalEventDetector().explicit("e0")
    with pytest.raises(ExpressionError) as info:
        e0 | name  # type: ignore[operator]
    assert len(str(info.value)) < 1000
    with pytest.raises(SnoopSyntaxError) as info:
        parse(f"e0 {name}")
    assert len(str(info.value)) < 500
