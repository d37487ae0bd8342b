"""sentinel: active-database rules for SQLAlchemy applications.

The public surface. Everything importable from ``sentinel`` is documented and
stable; submodules are implementation.
"""

from sentinel.algebra import SOURCE, A, Any, Astar, Expression, Not, Primitive, parse
from sentinel.default import (
    default_detector,
    rule,
    set_default_detector,
    using_default_detector,
)
from sentinel.detector import TXN_ABORT, TXN_BEGIN, TXN_COMMIT, TXN_PRE_COMMIT, Context, Scope
from sentinel.errors import (
    CascadeLimitError,
    DuplicateEventError,
    ExpressionError,
    ReactiveError,
    RuleDefinitionError,
    RuleError,
    ScopeError,
    SentinelError,
    SnoopSyntaxError,
    UnknownEventError,
)
from sentinel.occurrence import CompositeOccurrence, ObjectRef, Occurrence
from sentinel.params import UnloggableParameter
from sentinel.reactive import Reactive, bind, event, object_ref, on, resolve
from sentinel.rules import Coupling, LocalEventDetector, Rule, TriggerMode

__version__ = "0.1.0"

__all__ = [
    "SOURCE",
    "TXN_ABORT",
    "TXN_BEGIN",
    "TXN_COMMIT",
    "TXN_PRE_COMMIT",
    "A",
    "Any",
    "Astar",
    "CascadeLimitError",
    "CompositeOccurrence",
    "Context",
    "Coupling",
    "DuplicateEventError",
    "Expression",
    "ExpressionError",
    "LocalEventDetector",
    "Not",
    "ObjectRef",
    "Occurrence",
    "Primitive",
    "Reactive",
    "ReactiveError",
    "Rule",
    "RuleDefinitionError",
    "RuleError",
    "Scope",
    "ScopeError",
    "SentinelError",
    "SnoopSyntaxError",
    "TriggerMode",
    "UnknownEventError",
    "UnloggableParameter",
    "bind",
    "default_detector",
    "event",
    "object_ref",
    "on",
    "parse",
    "resolve",
    "rule",
    "set_default_detector",
    "using_default_detector",
]
