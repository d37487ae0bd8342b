"""Importable references to rules: ``"package.module:attribute"``.

Workers in other processes (detached rules, Spark executors, ``sentinel graph``)
rebuild an application's rules by importing them. A reference names a module and,
after the colon, an attribute (dots walk attributes): an object of the wanted kind,
or a zero-argument callable returning one.
"""

from __future__ import annotations

import importlib
import inspect
import os
import traceback
from typing import Any

from sentinel.errors import RuleReferenceError

__all__ = ["import_reference"]


def import_reference(reference: str, kinds: tuple[type, ...], *, hint: str = "") -> Any:
    """The object ``reference`` names, which must be an instance of one of
    ``kinds`` (a zero-argument callable is called first).

    Raises :class:`~sentinel.errors.RuleReferenceError` saying which step failed:
    the reference's form, the import (``hint`` is added to that message), the
    attribute, the call, or the kind of object found.

    >>> import_reference("myapp.rules:detector", (LocalEventDetector,))  # doctest: +SKIP
    """
    wanted = " or ".join(k.__name__ for k in kinds)
    module_name, sep, attr = str(reference).partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if (
        not isinstance(reference, str)
        or not sep
        or not module_name
        or not attr
        or ":" in attr
        or not all(part.isidentifier() for part in module_name.split("."))
        or not all(part.isidentifier() for part in attr.split("."))
    ):
        raise RuleReferenceError(
            f"a rules reference looks like 'package.module:attribute', not {reference!r}",
            reference=str(reference),
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise RuleReferenceError(
            f"cannot import module {module_name!r} of rules reference {reference!r}: {err}"
            + (f" ({hint})" if hint else ""),
            reference=reference,
        ) from err
    except Exception as err:  # the module's own code failed (or does not compile)
        raise RuleReferenceError(
            f"importing module {module_name!r} of rules reference {reference!r} raised "
            f"{_raised(err)}",
            reference=reference,
        ) from err
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RuleReferenceError(
                f"rules reference {reference!r}: {type(obj).__name__} "
                f"{getattr(obj, '__name__', obj)!r} has no attribute {part!r}",
                reference=reference,
            ) from None
    if not isinstance(obj, kinds) and callable(obj):
        try:
            inspect.signature(obj).bind()
        except TypeError as err:
            raise RuleReferenceError(
                f"rules reference {reference!r} is a callable that could not be called "
                f"without arguments: {err}",
                reference=reference,
            ) from err
        except ValueError:  # no signature to read (some built-ins): call it and see
            pass
        try:
            obj = obj()
        except Exception as err:
            raise RuleReferenceError(
                f"rules reference {reference!r}: calling it raised {_raised(err)}",
                reference=reference,
            ) from err
        if not isinstance(obj, kinds):
            raise RuleReferenceError(
                f"rules reference {reference!r} returned {type(obj).__name__}, not a {wanted}",
                reference=reference,
            )
    if not isinstance(obj, kinds):
        raise RuleReferenceError(
            f"rules reference {reference!r} is a {type(obj).__name__}, not a {wanted} "
            "(nor a zero-argument callable returning one)",
            reference=reference,
        )
    return obj


def _raised(err: BaseException) -> str:
    """``err`` in one line, with where it was raised: the innermost frame of
    the application's code (a rule defined with an unknown event fails inside
    sentinel, and the line to change is the application's), else the innermost
    frame; a syntax error's own file and line."""
    text = f"{type(err).__name__}: {err}"
    if isinstance(err, SyntaxError) and err.filename:
        return f"{type(err).__name__}: {err.msg} ({err.filename}:{err.lineno})"
    frames = traceback.extract_tb(err.__traceback__)
    if frames:
        ours = [f for f in frames if not _in_library(f.filename)]
        frame = ours[-1] if ours else frames[-1]
        text += f" ({frame.filename}:{frame.lineno})"
    return text


#: Where sentinel itself (and the modules that import a reference) live.
_LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _in_library(filename: str) -> bool:
    """Whether ``filename`` is sentinel's own code, or the import machinery's."""
    path = os.path.abspath(filename)
    return path.startswith(_LIBRARY + os.sep) or filename.startswith("<frozen ")
