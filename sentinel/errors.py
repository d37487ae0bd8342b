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
import reprlib
from collections.abc import Iterable
from typing import Any

#: The distribution name: ``pip install sqlalchemy-sentinel`` (also
#: :data:`sentinel.extras.DISTRIBUTION`).
DISTRIBUTION = "sqlalchemy-sentinel"


class SentinelError(Exception):
    """Root of every exception sentinel raises."""


#: How much of a long line an error shows on each side of its position.
_WIDTH = 60


def caret_context(line: str, column: int) -> str:
    """``line`` with a caret under its 1-based ``column``: the context of a syntax
    error. Of a long line only the part around the column is shown (a
    megabyte-long expression must not make a megabyte-long message)."""
    col = max(0, column - 1)
    if len(line) > 2 * _WIDTH:
        start = max(0, col - _WIDTH)
        prefix = "..." if start else ""
        suffix = "..." if col + _WIDTH < len(line) else ""
        line, col = prefix + line[start : col + _WIDTH] + suffix, col - start + len(prefix)
    return f"    {line}\n    {' ' * col}^"


def shortened(text: str, width: int = 2 * _WIDTH) -> str:
    """``text`` cut to ``width`` characters, marked with ``...``, for a message."""
    return text if len(text) <= width else text[: width - 3] + "..."


class UnknownEventError(SentinelError, LookupError):
    """An event name that is not defined on the detector (or, from
    ``signal()``, not an explicit event: ``detail`` then says what it is).

    ``name`` is the name that was asked for; ``suggestions`` are defined names
    that look like it.
    """

    def __init__(
        self, name: str, known: Iterable[str] = (), *, where: str = "", detail: str = ""
    ) -> None:
        self.name = name
        self.suggestions = (
            difflib.get_close_matches(name, list(known), n=3)
            if isinstance(name, str) and not detail
            else []
        )
        what = "cannot signal" if detail else "unknown event"
        msg = f"{what} {shortened(repr(name))}"
        if where:
            msg += f" in {shortened(where)}"
        if detail:
            msg += f": {detail}"
        elif self.suggestions:
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
    under the position; ``reason`` is the message without the position.
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
        self.reason = message
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
    """A transaction hook used out of order (commit of a finished scope, and so
    on). ``subscriber`` names the subscriber that ended its transaction, when
    that is the mistake."""

    def __init__(self, *args: Any, subscriber: str | None = None) -> None:
        super().__init__(*args)
        self.subscriber = subscriber


class AmbiguousScopeError(ScopeError):
    """A signal that names no scope, made while several transactions are current
    in its thread (or asyncio task): two sessions' transactions open at once.
    ``scopes`` are their scope ids. Choose one with
    ``with detector.use_scope(sentinel.scope_of(session)): ...``."""

    def __init__(self, scopes: tuple[Any, ...]) -> None:
        self.scopes = scopes
        super().__init__(
            f"{len(scopes)} transactions are current in this thread or asyncio task (scopes "
            f"{', '.join(repr(s) for s in scopes[:4])}{', ...' if len(scopes) > 4 else ''}): "
            "an event signalled without a scope could belong to any of them; signal it "
            "inside `with detector.use_scope(sentinel.scope_of(session)):` for the "
            "session it belongs to"
        )


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


class LogRowError(EventLogError, ValueError):
    """A row of a log table that does not hold what sentinel writes there (a row
    written or changed by hand, a damaged database): a value of the wrong type,
    JSON that is not the expected structure, an unknown outcome.

    ``table`` names the table, ``row_id`` the row's ``id``, ``column`` the first
    column found wrong.
    """

    def __init__(self, message: str, *, table: str, row_id: object, column: str) -> None:
        self.table = table
        self.row_id = row_id
        self.column = column
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


class ReplayError(SentinelError):
    """Replay of the event log cannot run as asked (a bad option, a rule that
    cannot be replayed in the order requested, a worker without PySpark)."""


class RuleReferenceError(ReplayError, LookupError):
    """A rules reference (``package.module:attribute``) that does not lead to a
    :class:`~sentinel.LocalEventDetector`: malformed, a module that cannot be
    imported, a missing attribute, or something that is not a detector (nor a
    zero-argument callable returning one).

    ``reference`` is the reference as given; the import error, if any, is
    ``__cause__``.
    """

    def __init__(self, message: str, *, reference: str) -> None:
        self.reference = reference
        super().__init__(message)


class ReplaySourceError(ReplayError):
    """A replay source that cannot be read: a path that does not exist, a
    directory that is not a sentinel log export, a table without the log's
    columns. ``source`` names it."""

    def __init__(self, message: str, *, source: str) -> None:
        self.source = source
        super().__init__(message)


class TimeStringError(ExpressionError):
    """A malformed time string: an absolute time (``<(17:00:00)*/*/*>``), a
    relative offset or a periodic interval (``[00:10:00]``).

    ``text`` is the time string, ``position`` the 0-based offset of the problem in
    it and ``reason`` what is wrong there. Inside Snoop text, :func:`sentinel.parse`
    reports the same problem as a :class:`SnoopSyntaxError` at its line and column.
    """

    def __init__(self, reason: str, text: str, position: int) -> None:
        self.reason = reason
        self.text = text
        self.position = position
        super().__init__(
            f"{reason} at position {position + 1} of {text!r}\n    {text}\n    {' ' * position}^"
        )


class TemporalError(SentinelError):
    """A temporal event that cannot be detected as asked: a detector whose clock
    cannot run timers, a clock used after it was closed, an unknown or failing
    sampler of P*, a virtual clock moved backwards."""


class AttachError(SentinelError):
    """Sentinel cannot be attached to (or detached from) a session factory as
    asked: the same sessionmaker or session class attached twice (or one whose
    sessions another attachment already covers), something that is not a
    sessionmaker, ``scoped_session`` or ``Session`` subclass, a bad option.
    ``target`` is what was given."""

    def __init__(self, message: str, *, target: object = None) -> None:
        self.target = target
        super().__init__(message)


class DetachedActionError(RuleDefinitionError):
    """A detached rule whose condition or action the outbox worker could not
    import: a lambda, a nested function, a bound method, a function defined in
    ``__main__``. The worker runs detached rules from the outbox in another
    transaction (possibly another process), so they must be module-level
    functions of an importable module. ``rule`` names the rule, ``function`` the
    offending callable's ``module:qualname`` (as far as it has one)."""

    def __init__(self, message: str, *, rule: str, function: str) -> None:
        self.rule = rule
        self.function = function
        super().__init__(message)


class RollbackOnlyError(SentinelError):
    """A commit refused because a rule failed earlier in the transaction, or
    because the transaction changed after its deferred rules ran.

    A failing immediate rule marks its transaction (or the savepoint it ran in)
    for rollback; the exception reached the code that signalled the event. If the
    application goes on and commits anyway, the commit raises this error and the
    transaction is rolled back. ``rule`` names the rule that failed; its
    :class:`RuleError` is ``__cause__``.

    Likewise when a commit attempt failed after the deferred rules ran (a later
    ``before_commit`` listener raised, and SQLAlchemy left the transaction open)
    and the application then changed something: the deferred rules cannot see
    it, so the transaction may not commit. ``rule`` is then empty.
    """

    def __init__(self, message: str, *, rule: str = "") -> None:
        self.rule = rule
        super().__init__(message)


class OutboxError(EventLogError):
    """A detached rule's outbox entry that cannot be run: its rule is unknown to
    the worker (and its action cannot be imported), its claim was lost to another
    worker, a bad worker option. ``key`` is the entry's idempotency key."""

    def __init__(self, message: str, *, key: str = "") -> None:
        self.key = key
        super().__init__(message)


class MissingExtraError(SentinelError, ImportError):
    """A feature needs packages that are not installed: ``extra`` names the
    optional dependency set that brings them (``pip install
    'sqlalchemy-sentinel[replay]'``), ``missing`` the module that was not found."""

    def __init__(self, feature: str, extra: str, missing: str | None) -> None:
        self.feature, self.extra, self.missing = feature, extra, missing
        found = f"{missing} is not installed" if missing else "a dependency is missing"
        super().__init__(
            f"{feature} needs the {extra!r} extra ({found}): pip install '{DISTRIBUTION}[{extra}]'",
            name=missing,
        )


class BicepError(SentinelError):
    """A BiCEPL program, processor or announcement that cannot be used as given."""


class BicepProgramError(BicepError, ValueError):
    """A BiCEPL program that is malformed or invalid: bad syntax (in the
    statements or in a complex class's SQL), an unknown class or column, a key
    that is not an attribute, classes that form a cycle, a query the database
    rejects when the class is created.

    ``line`` and ``column`` are 1-based (``None`` when the problem has no single
    place, like a cycle); ``expected`` lists what would have been accepted there;
    ``context`` is the offending line with a caret under the position.
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        expected: Iterable[str] = (),
        context: str = "",
    ) -> None:
        self.reason = message
        self.line = line
        self.column = column
        self.expected = sorted(set(expected))
        self.context = context
        full = message
        if line is not None:
            full += f" at line {line}, column {column}"
        if self.expected:
            full += "; expected " + ", ".join(self.expected)
        if context:
            full += "\n" + context
        super().__init__(full)


class BicepSyntaxError(BicepProgramError):
    """Malformed BiCEPL text (the statements, a time literal, or the SQL of a
    complex class)."""


class BicepCycleError(BicepProgramError):
    """Complex classes that are defined through each other; ``cycle`` names them
    in order, the first repeated at the end."""

    def __init__(self, message: str, *, cycle: Iterable[str], **kwargs: Any) -> None:
        self.cycle = tuple(cycle)
        super().__init__(message, **kwargs)


class BicepActionError(BicepError, LookupError):
    """An action a BiCEPL program uses that has no callable registered (or a
    registration that cannot be used); ``action`` names it."""

    def __init__(self, message: str, *, action: str) -> None:
        self.action = action
        super().__init__(message)


class BicepAnnouncementError(BicepError, ValueError):
    """An announcement that cannot be accepted: an unknown class, a missing key
    or attribute, a value of the wrong type, a time that is not a time, a
    revision or revocation of an immutable class's event, a revocation of an
    unknown key. ``event_class`` names the class; nothing of it is stored."""

    def __init__(self, message: str, *, event_class: str) -> None:
        self.event_class = event_class
        super().__init__(message)


class BicepTickError(BicepError):
    """A clock tick of a BiCEPL program that the database refused to compute:
    a complex class's query or a condition-action statement failed on the
    tick's data (an integer beyond 64 bits, a division by zero, a table of
    yours that is gone). The tick was rolled back as a whole and runs again,
    from the same tick, at the next run.

    ``program`` names the program, ``tick`` is the tick (a UTC datetime),
    ``event_class`` the class whose SQL failed, ``statement`` the
    condition-action statement as written (``None`` for the class's query), and
    ``line`` / ``column`` its place in the program. The database's error is
    ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        program: str,
        tick: Any,
        event_class: str,
        statement: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.program = program
        self.tick = tick
        self.event_class = event_class
        self.statement = statement
        self.line = line
        self.column = column
        super().__init__(message)


class BicepProgramChangedError(BicepError):
    """The program installed in the database under this name differs from the
    one given. Installing a changed program is an explicit step (a new version:
    ``Processor.install(upgrade=True)`` or ``sentinel bicep install --upgrade``).
    ``name``, ``installed`` (version number) and ``differences`` say what."""

    def __init__(
        self, message: str, *, name: str, installed: int, differences: Iterable[str] = ()
    ) -> None:
        self.name = name
        self.installed = installed
        self.differences = tuple(differences)
        super().__init__(message)


class BitemporalError(SentinelError, ValueError):
    """A bitemporal announcement, event class or lifespan that sentinel refuses.

    ``event`` names the event (or event class) concerned. Raised before anything
    is signalled or logged: a refused announcement leaves no trace.
    """

    def __init__(self, message: str, *, event: str | None = None) -> None:
        self.event = event
        super().__init__(message)


class OccurrenceTimeError(BitemporalError, TypeError):
    """An occurrence time that is not a time (a string, ``None``, NaN...).

    ``event`` names the event it was given for; ``value`` is the offending value.
    """

    def __init__(self, event: str, value: object, hint: str = "") -> None:
        self.value = value
        msg = (
            f"the occurrence time of {event} must be a datetime or POSIX seconds, not "
            f"{type(value).__name__} ({value!r:.80})"
        )
        if hint:
            msg += f"; {hint}"
        super().__init__(msg, event=event)


class SentinelWarning(UserWarning):
    """The warnings sentinel issues: something that works, but is probably not
    what was meant. Silence one kind with :func:`warnings.filterwarnings` and its
    class, or by saying what you mean (each subclass says how)."""


class ReplacedMethodWarning(SentinelWarning):
    """An event method that something listens to is replaced in its class (by
    ``mock.patch`` or an assignment), so sentinel leaves it alone: its calls
    signal nothing while the replacement is there, and after the original comes
    back, until the detector's rules or listeners next change (sentinel cannot
    see the class attribute being set back). Define rules outside the patch, or
    patch after defining them. ``owner`` and ``method`` name the method."""

    def __init__(self, message: str, *, owner: str, method: str) -> None:
        self.owner = owner
        self.method = method
        super().__init__(message)


class LifespanWarning(SentinelWarning):
    """An event class defined without saying how long its occurrences live: the
    thesis makes a lifespan mandatory, sentinel keeps every occurrence and
    instance for ever. ``lifespan="14d"`` (or any lifespan) bounds them;
    ``lifespan=None``, given explicitly, keeps them for ever without the
    warning. ``event`` names the class."""

    def __init__(self, message: str, *, event: str | None = None) -> None:
        self.event = event
        super().__init__(message)


class GlobalDetectorError(SentinelError):
    """The global event detector cannot run as asked: a rule that is not
    detached, a log without commit order, a bad option."""


class LeaseLost(GlobalDetectorError):
    """A global detector instance no longer holds its cursor's lease (it expired
    and another instance took it): its batch is rolled back, nothing acted."""


class RuleSwitchError(EventLogError, LookupError):
    """A request to enable or disable a global detector's rule cannot be
    written: a rule the rule set does not define (``rule`` names it). A log
    without the switches table raises
    :class:`LogTablesMissingError` (or :class:`LogSchemaOutdatedError`)
    instead, naming the command that adds it."""

    def __init__(self, message: str, *, rule: str | None = None) -> None:
        self.rule = rule
        super().__init__(message)


class UnloggableParameter(SentinelError, TypeError):
    """A parameter value that cannot be written to the event log.

    ``event`` and ``param`` say where; ``value`` is the offending value.
    """

    def __init__(self, event: str, param: str, value: Any, hint: str = "") -> None:
        self.event = event
        self.param = param
        self.value = value
        msg = (
            f"parameter {param!r} of {event} is a {type(value).__name__} "
            f"({_short_repr(value)}), "
            "which the event log cannot store"
        )
        msg += "; " + (
            hint
            or "pass simple values (numbers, strings, dates, ObjectRef) "
            "or exclude the parameter from the event"
        )
        super().__init__(msg)


def _short_repr(value: Any) -> str:
    """A bounded repr for messages (a value may be huge, deeply nested or
    refuse to be printed)."""
    try:
        return _REPR.repr(value)[:80]
    except Exception:
        return f"<{type(value).__name__}>"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlong = 40
