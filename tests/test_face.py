"""The face (``import sentinel``): its exceptions are reached through
:mod:`sentinel.errors`; a handful stay on the face."""

from __future__ import annotations

import warnings

import pytest

import sentinel
import sentinel.errors

KEPT = (
    "SentinelError",
    "RuleError",
    "RuleDefinitionError",
    "ExpressionError",
    "SnoopSyntaxError",
    "AttachError",
)


@pytest.mark.parametrize("name", KEPT)
def test_the_daily_exceptions_stay_on_the_face_without_a_warning(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(sentinel, name) is getattr(sentinel.errors, name)
    assert name in sentinel.__all__


@pytest.mark.parametrize("name", sorted(sentinel._MOVED_TO_ERRORS))
def test_an_exception_moved_to_errors_still_works_with_a_deprecation_warning(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"import {name} from sentinel\.errors"):
        got = getattr(sentinel, name)
    assert got is getattr(sentinel.errors, name)
    assert issubclass(got, sentinel.errors.SentinelError)
    assert name not in sentinel.__all__


def test_every_exception_on_the_face_is_kept_or_moved() -> None:
    """No exception is on the face by accident: ``__all__`` names only the
    kept ones, and every exception of sentinel.errors the face used to export
    is one of the two sets."""
    on_face = {
        n
        for n in sentinel.__all__
        if isinstance(getattr(sentinel, n), type)
        and issubclass(getattr(sentinel, n), BaseException)
    }
    assert on_face == set(KEPT)
    assert len(sentinel._MOVED_TO_ERRORS) + len(KEPT) == 34


def test_star_import_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("from sentinel import *", {})
