"""sentinel: active-database rules for SQLAlchemy applications.

The public surface. Everything importable from ``sentinel`` is documented and
stable; submodules are implementation.
"""

from typing import TYPE_CHECKING

from sentinel.algebra import SOURCE, A, Any, Astar, Expression, Not, Primitive, parse
from sentinel.algebra.masks import Masked, param
from sentinel.bitemporal import (
    ANNOUNCEMENT,
    CANCELLATION,
    CHANGE,
    FIRED,
    FUTURE,
    IMMUTABLE,
    LATE,
    MUTABLE,
    ONTIME,
    POSTPONE,
    RETROACTIVECHANGE,
    REVOCATION,
    Revision,
    announce,
    event_class,
    revision,
    revoke,
)
from sentinel.default import (
    default_detector,
    rule,
    set_default_detector,
    using_default_detector,
)
from sentinel.detector import TXN_ABORT, TXN_BEGIN, TXN_COMMIT, TXN_PRE_COMMIT, Context, Scope
from sentinel.errors import (
    AttachError,
    ExpressionError,
    RuleDefinitionError,
    RuleError,
    SentinelError,
    SnoopSyntaxError,
)
from sentinel.occurrence import CompositeOccurrence, ObjectRef, Occurrence, occurrence_time
from sentinel.reactive import Reactive, bind, event, object_ref, on, resolve
from sentinel.rules import Coupling, LocalEventDetector, Rule, TriggerMode
from sentinel.temporal import (
    TICK,
    Absolute,
    Duration,
    P,
    Pstar,
    Relative,
    ReplayClock,
    SystemClock,
    VirtualClock,
    not_within,
    timers,
    within,
)

__version__ = "0.1.0"

__all__ = [
    "ANNOUNCEMENT",
    "CANCELLATION",
    "CHANGE",
    "FIRED",
    "FUTURE",
    "IMMUTABLE",
    "LATE",
    "MUTABLE",
    "ONTIME",
    "POSTPONE",
    "RETROACTIVECHANGE",
    "REVOCATION",
    "SOURCE",
    "TICK",
    "TXN_ABORT",
    "TXN_BEGIN",
    "TXN_COMMIT",
    "TXN_PRE_COMMIT",
    "A",
    "Absolute",
    "Any",
    "Astar",
    "AttachError",
    "Attachment",
    "CompositeOccurrence",
    "Context",
    "Coupling",
    "Duration",
    "Expression",
    "ExpressionError",
    "LocalEventDetector",
    "Masked",
    "Not",
    "ObjectRef",
    "Occurrence",
    "P",
    "Primitive",
    "Pstar",
    "Reactive",
    "Relative",
    "ReplayClock",
    "Revision",
    "Rule",
    "RuleDefinitionError",
    "RuleError",
    "Scope",
    "SentinelError",
    "SnoopSyntaxError",
    "SystemClock",
    "TriggerMode",
    "VirtualClock",
    "announce",
    "attach",
    "bicep",
    "bind",
    "db_events",
    "default_detector",
    "detach",
    "detached_context",
    "event",
    "event_class",
    "not_within",
    "object_ref",
    "occurrence_time",
    "ode",
    "on",
    "param",
    "parse",
    "replay",
    "resolve",
    "revision",
    "revoke",
    "rule",
    "scope_of",
    "session_of",
    "set_default_detector",
    "timers",
    "using_default_detector",
    "within",
]

#: Exceptions importable from here before they were reached through
#: :mod:`sentinel.errors` only: each still works, with a DeprecationWarning. The
#: face keeps the few a rule author writes daily (see ``__all__`` and
#: CHANGELOG.md): SentinelError (catch everything), RuleError (a rule's
#: condition or action failed), RuleDefinitionError, ExpressionError and
#: SnoopSyntaxError (a rule or event refused), AttachError (wiring sessions).
_MOVED_TO_ERRORS = frozenset(
    {
        "BicepActionError",
        "BicepAnnouncementError",
        "BicepCycleError",
        "BicepError",
        "BicepProgramChangedError",
        "BicepProgramError",
        "BicepSyntaxError",
        "BicepTickError",
        "BitemporalError",
        "CascadeLimitError",
        "DetachedActionError",
        "DuplicateEventError",
        "EventLogError",
        "LogConnectionError",
        "LogRowError",
        "LogSchemaError",
        "LogWriteError",
        "MissingExtraError",
        "OccurrenceTimeError",
        "OutboxError",
        "ReactiveError",
        "ReplayError",
        "RollbackOnlyError",
        "ScopeError",
        "TemporalError",
        "TimeStringError",
        "UnknownEventError",
        "UnloggableParameter",
    }
)

#: Names of the ORM layer, imported on first use: it loads SQLAlchemy's ORM, which
#: code that never attaches to a session does not need.
_ORM = frozenset(
    {"Attachment", "attach", "db_events", "detach", "detached_context", "scope_of", "session_of"}
)

if TYPE_CHECKING:
    from sentinel import ode
    from sentinel.orm.attach import Attachment, attach, detach
    from sentinel.orm.db_events import db_events
    from sentinel.orm.state import scope_of, session_of
    from sentinel.orm.worker import detached_context


def __getattr__(name: str) -> object:
    if name in _MOVED_TO_ERRORS:
        import warnings

        from sentinel import errors

        warnings.warn(
            f"sentinel.{name} is deprecated: import {name} from sentinel.errors",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(errors, name)
    if name in _ORM:
        from sentinel import orm

        return getattr(orm, name)
    if name == "ode":  # installed on every detector by sentinel.detector.plugins
        import sentinel.ode

        return sentinel.ode
    if name == "replay":  # needs pyarrow: imported on first use
        import sentinel.replay

        return sentinel.replay
    if name == "bicep":  # BiCEPL: sqlglot and SQLAlchemy, imported on first use
        import sentinel.bicep

        return sentinel.bicep
    raise AttributeError(f"module 'sentinel' has no attribute {name!r}")
