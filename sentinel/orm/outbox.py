"""The detached-rule outbox in the ORM layer: which rules may go in.

The outbox's store (what an entry holds, and the row operations workers use to
claim, renew, finish and fail entries) is SQLAlchemy Core and lives in the log
layer, :mod:`sentinel.log.outbox`; :mod:`sentinel.orm.worker` runs the entries.
Its names are also importable from here, as before.

:func:`check_importable` rejects lambdas, nested functions, bound methods and
functions of ``__main__`` when a detached rule is defined: a worker process
must be able to build the same rule set by importing it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from typing import TYPE_CHECKING, Any

from sentinel.errors import DetachedActionError
from sentinel.log.outbox import (
    Claimed,
    ClaimLost,
    Exhausted,
    OutboxStore,
    Unreadable,
    entry_for,
    function_path,
    rebuild,
)
from sentinel.rules import Coupling

if TYPE_CHECKING:
    from sentinel.rules import Rule

__all__ = [
    "DETACHED",
    "ClaimLost",
    "Claimed",
    "Exhausted",
    "OutboxStore",
    "Unreadable",
    "check_importable",
    "entry_for",
    "function_path",
    "rebuild",
]

DETACHED = (Coupling.DETACHED, Coupling.DETACHED_INDEPENDENT)


def _why_not_importable(fn: Any) -> str | None:
    if inspect.ismethod(fn):
        return "it is a bound method (the worker cannot rebuild its object)"
    if not inspect.isfunction(fn):
        return f"it is a {type(fn).__name__}, not a function"
    qual = fn.__qualname__
    if "<lambda>" in qual:
        return "it is a lambda"
    if "<locals>" in qual:
        return "it is defined inside a function"
    module = fn.__module__
    if not module or module == "__main__":
        return "it is defined in __main__, which a worker process cannot import"
    if module not in sys.modules and importlib.util.find_spec(module) is None:
        return f"its module {module!r} cannot be found"
    return None


def check_importable(rule: Rule) -> None:
    """Raise :class:`~sentinel.errors.DetachedActionError` unless ``rule``'s
    action (and condition, if any) are module-level functions of an importable
    module. Rules of other coupling modes pass."""
    if rule.coupling not in DETACHED:
        return
    for what, fn in (("action", rule.action), ("condition", rule.condition)):
        if fn is None:
            continue
        why = _why_not_importable(fn)
        if why is not None:
            path = function_path(fn)
            raise DetachedActionError(
                f"detached rule {rule.name!r}: its {what} {path} cannot be imported by the "
                f"outbox worker: {why}; make it a module-level function of an importable "
                "module (a worker runs detached rules after the commit, possibly in "
                "another process)",
                rule=rule.name,
                function=path,
            )
