"""Reactive domain classes: methods that signal events (Sentinel's REACTIVE).

::

    from sentinel import LocalEventDetector, Reactive, event, on

    det = LocalEventDetector()

    class Stock(Reactive, detector=det):
        @event(end="e1")
        def sell_stock(self, qty: int) -> int: ...

        @event(begin="e2", end="e3")
        def set_price(self, price: float) -> None: ...

    det.rule("R", "Stock.e1 ^ Stock.e2", action=print)   # class-level events by name
    det.rule("R_ibm", on(ibm).set_price.end, action=...)  # instance level

Depends on the detector layer only (not on rules, not on SQLAlchemy); the default
detector comes from :mod:`sentinel.default`. Modules: :mod:`.declare` (``@event``),
:mod:`.classes` (the mixin and class set-up), :mod:`.info` (what is known of each
reactive class), :mod:`.hub` (binding to detectors, installing wrappers),
:mod:`.wrapper` (the per-call path), :mod:`.handles` (``on()``), :mod:`.refs`
(object references), :mod:`.binder` (argument binding).
"""

from sentinel.reactive.classes import ClassSelector, Reactive
from sentinel.reactive.declare import event
from sentinel.reactive.handles import EventHandles, MethodEvents, on
from sentinel.reactive.hub import (
    ScopeHook,
    attached_classes,
    bind,
    detector_of,
    set_scope_hook,
)
from sentinel.reactive.refs import object_ref, resolve
from sentinel.reactive.wrapper import ReplacedMethodWarning

__all__ = [
    "ClassSelector",
    "EventHandles",
    "MethodEvents",
    "Reactive",
    "ReplacedMethodWarning",
    "ScopeHook",
    "attached_classes",
    "bind",
    "detector_of",
    "event",
    "object_ref",
    "on",
    "resolve",
    "set_scope_hook",
]
