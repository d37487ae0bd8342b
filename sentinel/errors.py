"""The exceptions sentinel raises.

Every error sentinel raises derives from :class:`SentinelError`. Subclasses carry
the structured facts a caller may want to act on (the rule, the event, the position
in a text expression) as attributes, and a message that says what was wrong and
where. An exception raised by a user's condition or action is wrapped in
:class:`RuleError`, which names the rule and keeps the original as ``__cause__``;
sentinel's own errors raised inside a rule pass through unwrapped.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SentinelError(Exception):
    """Root of every exception sentinel raises."""


class UnknownEventError(SentinelError, LookupError):
    """An event name that is not defined on the detector.

    ``name`` is the name that was asked for; ``suggestions`` are defined names
    that look like it.
    """

    def __init__(self, name: str, known: Iterable[str] = (), *, where: str = "") -> None:
        self.name = name
        self.suggestions = difflib.get_close_matches(name, list(known), n=3)
        msg = f"unknown event {name!r}"
        if where:
            msg += f" in {where}"
        if self.suggestions:
            msg += "; did you mean " + " or ".join(repr(s) for s in self.suggestions) + "?"
        else:
            msg += "; define it first (for example with detector.explicit(name))"
        super().__init__(msg)


class DuplicateEventError(SentinelError, ValueError):
    """A name that is already defined as a different event."""

    def __init__(self, name: str, detail: str = "") -> None:
        self.name = name
        super().__init__(f"event {name!r} is already defined" + (f": {detail}" if detail else ""))


class ExpressionError(SentinelError, ValueError):
    """An event expression that is well-formed text but not a valid expression
    (for example ``ANY(4, E1, E2)``: m greater than the number of events)."""


class SnoopSyntaxError(ExpressionError):
    """Malformed Snoop text.

    ``line`` and ``column`` are 1-based; ``expected`` lists what the parser would
    have accepted at that position; ``context`` is the offending line with a caret
    under the position.
    """

    def __init__(
        self,
        message: str,
        *,
        text: str,
        line: int,
        column: int,
        expected: Iterable[str] = (),
        context: str = "",
    ) -> None:
        self.text = text
        self.line = line
        self.column = column
        self.expected = sorted(set(expected))
        self.context = context
        full = f"{message} at line {line}, column {column}"
        if self.expected:
            full += "; expected " + ", ".join(self.expected)
        if context:
            full += "\n" + context
        super().__init__(full)


class RuleDefinitionError(SentinelError, ValueError):
    """A rule that cannot be defined as given (bad name, unknown mode, misuse of a
    coupling mode, a name used twice). Nothing of the rule is applied."""


class RuleError(SentinelError):
    """A user's condition or action raised while a rule ran.

    ``rule`` is the rule's name, ``phase`` is ``"condition"`` or ``"action"``, and
    the original exception is ``__cause__``.
    """

    def __init__(self, rule: str, phase: str, cause: BaseException) -> None:
        self.rule = rule
        self.phase = phase
        super().__init__(f"rule {rule!r} failed in its {phase}: {type(cause).__name__}: {cause}")


class CascadeLimitError(SentinelError):
    """Rules triggered rules deeper than the detector's cascade limit.

    ``rule`` names the rule that would have run at depth ``limit + 1``.
    """

    def __init__(self, rule: str, limit: int) -> None:
        self.rule = rule
        self.limit = limit
        super().__init__(
            f"rule {rule!r} would run at cascade depth {limit + 1}, deeper than the limit "
            f"of {limit}; rules are probably triggering each other in a cycle "
            "(raise LocalEventDetector(cascade_limit=...) if the depth is intended)"
        )


class ScopeError(SentinelError):
    """A transaction hook used out of order (commit of a finished scope, and so on)."""


class EventLogError(SentinelError):
    """A problem with the persisted event log (its tables, its schema, a write)."""


class LogSchemaError(EventLogError):
    """The event log's tables are not at the schema revision this code expects.

    ``location`` names the database (URL without password) and schema;
    ``found`` is the revision recorded in the database (``None`` when there is
    none); ``expected`` is the revision this version of sentinel expects;
    ``missing`` lists log tables that do not exist.
    """

    def __init__(
        self,
        message: str,
        *,
        location: str,
        found: str | None,
        expected: str,
        missing: Iterable[str] = (),
    ) -> None:
        self.location = location
        self.found = found
        self.expected = expected
        self.missing = tuple(missing)
        super().__init__(message)


class LogTablesMissingError(LogSchemaError, LookupError):
    """The log tables (or sentinel's version table) do not exist: the database was
    never upgraded with sentinel's migrations."""


class LogSchemaOutdatedError(LogSchemaError):
    """The log is at an older revision than this code expects; upgrading the
    database (``sentinel db upgrade``) fixes it."""


class LogSchemaUnknownError(LogSchemaError):
    """The log is at a revision this code does not know: written by a newer
    sentinel (upgrade sentinel), or not a sentinel revision at all."""


class LogWriteError(EventLogError):
    """Occurrences, firings or outbox entries that could not be written.

    ``table`` names the log table; the database error, if any, is ``__cause__``.
    Nothing of the failed batch is written.
    """

    def __init__(self, message: str, *, table: str = "") -> None:
        self.table = table
        super().__init__(message)


class LogConfigError(EventLogError, ValueError):
    """A log configuration that cannot be used as given (a bad table-name prefix,
    a malformed parameter policy)."""


class LogConnectionError(EventLogError, ConnectionError):
    """The database holding the log cannot be reached (``location`` says which;
    the driver's error is ``__cause__``)."""

    def __init__(self, message: str, *, location: str) -> None:
        self.location = location
        super().__init__(message)


class ReactiveError(SentinelError, TypeError):
    """A class, method or object that cannot take part in method events as used:
    ``@event`` on something that is not a function, on a method of a class that
    is not :class:`~sentinel.Reactive`, an instance-level event on an object of a
    non-reactive class, an event method overridden by a non-function, and so on.

    ``owner`` names the class concerned and ``method`` the method, where known.
    """

    def __init__(self, message: str, *, owner: str | None = None, method: str | None = None):
        self.owner = owner
        self.method = method
        super().__init__(message)
