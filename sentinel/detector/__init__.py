"""Composite event detection: the event graph, parameter contexts, scopes.

Imports nothing from SQLAlchemy or Spark.
"""

from sentinel.detector.contexts import Context
from sentinel.detector.detector import (
    TXN_ABORT,
    TXN_BEGIN,
    TXN_COMMIT,
    TXN_PRE_COMMIT,
    EventDetector,
    t_init,
)
from sentinel.detector.graph import Channel, EventGraph, Mode, Subscription
from sentinel.detector.scopes import Scope, Store

__all__ = [
    "TXN_ABORT",
    "TXN_BEGIN",
    "TXN_COMMIT",
    "TXN_PRE_COMMIT",
    "Channel",
    "Context",
    "EventDetector",
    "EventGraph",
    "Mode",
    "Scope",
    "Store",
    "Subscription",
    "t_init",
]
