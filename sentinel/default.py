"""The process's default event detector (Sentinel's local event detector).

An application normally has one detector: reactive classes signal to it unless
they are bound to another one, and :func:`rule` defines rules on it. It is created
on first use by :func:`default_detector`. Tests and processes hosting several
applications inject their own with :func:`set_default_detector` (or the
:func:`using_default_detector` block), or bind classes to explicit detectors
(``class Stock(Reactive, detector=det)``; :func:`sentinel.reactive.bind`).

This module sits above the layers: it imports :mod:`sentinel.rules` only when it
creates the default detector, so the reactive layer (which depends on the detector
layer alone) can use it without importing the rules layer.

Thread-safe. Layers that follow the default register with :func:`watch_default`
and are told when it changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, overload

from sentinel.errors import RuleDefinitionError

if TYPE_CHECKING:
    from sentinel.algebra.expressions import Expression
    from sentinel.rules import LocalEventDetector, Rule
    from sentinel.rules.rule import Action, Condition

__all__ = [
    "current_default_detector",
    "default_detector",
    "rule",
    "set_default_detector",
    "using_default_detector",
    "watch_default",
]

_lock = threading.RLock()
_detector: LocalEventDetector | None = None
_watchers: list[Callable[[Any, Any], None]] = []
_checks: list[Callable[[Any, Any], None]] = []


def default_detector() -> LocalEventDetector:
    """The process's default detector, created (a fresh
    :class:`~sentinel.LocalEventDetector`) on first call."""
    det = _detector
    if det is not None:
        return det
    with _lock:
        if _detector is None:
            from sentinel.rules import LocalEventDetector

            _replace(LocalEventDetector())
        assert _detector is not None
        return _detector


def current_default_detector() -> LocalEventDetector | None:
    """The default detector if one exists, without creating it."""
    return _detector


def set_default_detector(detector: LocalEventDetector | None) -> LocalEventDetector | None:
    """Make ``detector`` the process's default and return the previous one (or
    ``None``). ``None`` drops the default; the next :func:`default_detector` call
    creates a fresh one.

    Reactive classes that follow the default move to the new detector at once (its
    event names are defined there; rules on the old detector no longer see them).
    Raises ``TypeError`` for anything but an event detector, and
    :class:`~sentinel.errors.DuplicateEventError` (changing nothing) if the new
    detector already defines one of those event names as something else.
    """
    if detector is not None:
        from sentinel.detector import EventDetector

        if not isinstance(detector, EventDetector):
            raise TypeError(
                f"set_default_detector() takes an event detector or None, not "
                f"{type(detector).__name__}"
            )
    with _lock:
        return _replace(detector)


@contextmanager
def using_default_detector(detector: LocalEventDetector) -> Iterator[LocalEventDetector]:
    """Make ``detector`` the default inside the block and restore the previous
    default after it (for tests)::

        with using_default_detector(LocalEventDetector()) as det:
            ...
    """
    previous = set_default_detector(detector)
    try:
        yield detector
    finally:
        set_default_detector(previous)


def watch_default(
    callback: Callable[[Any, Any], None], *, check: Callable[[Any, Any], None] | None = None
) -> None:
    """Call ``callback(old, new)`` after the default detector changed (including its
    creation, when ``old`` is None). ``check(old, new)``, if given, is called before
    the change; one that raises stops the change and the exception reaches the
    caller."""
    with _lock:
        _watchers.append(callback)
        if check is not None:
            _checks.append(check)


def _replace(detector: LocalEventDetector | None) -> LocalEventDetector | None:
    global _detector
    old = _detector
    if old is detector:
        return old
    for check in list(_checks):
        check(old, detector)  # may refuse the change (raise): nothing changed yet
    _detector = detector
    for w in list(_watchers):
        w(old, detector)
    return old


@overload
def rule(
    name: str,
    event: Expression | str,
    condition: Condition | None = ...,
    *,
    action: Action,
    detector: LocalEventDetector | None = ...,
    **options: Any,
) -> Rule: ...


@overload
def rule(
    name: str,
    event: Expression | str,
    condition: Condition | None = ...,
    *,
    action: None = ...,
    detector: LocalEventDetector | None = ...,
    **options: Any,
) -> Callable[[Action], Rule]: ...


def rule(
    name: str,
    event: Expression | str,
    condition: Condition | None = None,
    *,
    action: Action | None = None,
    detector: LocalEventDetector | None = None,
    **options: Any,
) -> Rule | Callable[[Action], Rule]:
    """Define a rule on ``detector`` (default: the default detector); used as a
    decorator, the decorated function is the action::

        @rule("R2", on(Stock).e4 >> set_IBM_price, priority=20, trigger_mode="previous")
        def report(occ):
            ...

    Takes the options of :meth:`LocalEventDetector.rule
    <sentinel.LocalEventDetector.rule>` (``context``, ``coupling``, ``priority``,
    ``trigger_mode``, ``enabled``, ``flush``, ``key``) and raises what it raises.
    """
    det = detector if detector is not None else default_detector()
    if not callable(getattr(det, "rule", None)):
        raise RuleDefinitionError(
            f"rule {name!r}: detector= is a LocalEventDetector, not {type(det).__name__}"
        )
    return det.rule(name, event, condition, action=action, **options)
