"""The layers that plug into every detector, in one explicit list.

Each module named in :data:`PLUGINS` has ``install(detector)``, which listens
to the detector's events (:mod:`sentinel.detector.events`) for what that layer
needs: the reactive layer finds the database events of mapped classes (once
the ORM layer is loaded), the temporal layer prepares its operators, the
bitemporal layer its timing primitives and modes, the Ode layer checks masked
events (loading it registers the strategies of Ode events and masks).
Every detector installs them when it is made, so what a detector can do does
not depend on which modules the application happened to import.

The modules are named, not imported here: they sit above the detector layer
(``docs/architecture.md``, "Layers") and are imported when the first detector
is made.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

__all__ = ["PLUGINS", "install", "per_detector"]

_T = TypeVar("_T")
_creating = threading.Lock()

#: The modules whose ``install(detector)`` runs on every new detector, in order.
PLUGINS: tuple[str, ...] = (
    "sentinel.reactive.hub",
    "sentinel.temporal.service",
    "sentinel.bitemporal",
    "sentinel.ode.handlers",
)

_loaded: tuple[ModuleType, ...] | None = None


def install(detector: Any) -> None:
    """Run every plug-in's ``install(detector)`` on a new detector."""
    global _loaded
    modules = _loaded
    if modules is None:
        modules = _loaded = tuple(importlib.import_module(name) for name in PLUGINS)
    for module in modules:
        module.install(detector)


def per_detector(detector: Any, attr: str, factory: Callable[[Any], _T]) -> _T:
    """A plug-in's object for ``detector`` (its timer service, its bitemporal
    service), kept as the detector's attribute ``attr`` and made by
    ``factory(detector)`` on first use: once, even when threads ask at the
    same time."""
    made: _T | None = detector.__dict__.get(attr)
    if made is None:
        with detector._lock, _creating:
            made = detector.__dict__.get(attr)
            if made is None:
                made = factory(detector)
                setattr(detector, attr, made)
    return made
