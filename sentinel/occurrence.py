"""Occurrences: what the detector consumes and what rules receive.

An :class:`Occurrence` is one primitive event instance. It is an immutable tuple
subclass (creating one costs about as much as building a tuple) with named
accessors:

``event``
    the primitive event's name, for example ``"E1"``, ``"txn:pre_commit"`` or
    ``"Stock.set_price:begin"``.
``t_occ``
    a strictly increasing integer from the detector's logical clock. One signal is
    one occurrence even when it matches several primitive events (a class-level and
    an instance-level event of one call); they share its ``t_occ``.
``at`` / ``detected_at``
    the two times of the bitemporal model, as timezone-aware UTC datetimes
    (``timestamp`` and ``detected_timestamp`` give the raw POSIX floats): the
    *occurrence time*, when the event happened as its source says (the time of
    the signal unless the source gave one: ``signal_at``, ``@event(occurred_at=)``,
    a database event's ``occurred_at`` attribute, an event class's announcement;
    a timer's due time), and the *detection time*, when the detector received
    it. They are equal unless a source said otherwise.
``source``
    an :class:`ObjectRef` for events signalled by an object, else ``None``.
``params``
    a read-only mapping of the event's parameters.
``scope``
    the id of the detection scope (transaction) the occurrence belongs to.

A :class:`CompositeOccurrence` is one detection of a composite event: the
expression it detects, its ``t_occ`` (that of its terminator) and its ``parts``
(the child occurrences that were combined, in order). ``constituents`` flattens
any occurrence to its primitive occurrences in ``t_occ`` order.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from datetime import UTC, datetime
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Final, TypeAlias

#: The event expression a composite occurrence detected: an
#: :class:`~sentinel.algebra.expressions.Expression`. Typed loosely: this module
#: sits below the algebra and imports nothing of it, not even for typing.
DetectedExpression: TypeAlias = Any

__all__ = [
    "AnyOccurrence",
    "CompositeOccurrence",
    "ObjectRef",
    "Occurrence",
    "occurrence_time",
]

_new: Any = tuple.__new__

# Field positions, shared with the detector's hot loop (which indexes directly).
EVENT: Final = 0
T_OCC: Final = 1
AT: Final = 2
DETECTED_AT: Final = 3
SOURCE: Final = 4
PARAMS: Final = 5
SCOPE: Final = 6

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


class ObjectRef(tuple):  # type: ignore[type-arg]
    """A reference to the object that signalled an event.

    ``class_name`` names its class; ``key`` identifies it: the primary key (a tuple)
    for a persistent ORM object, or ``("local", n, process)`` for a transient
    object, where ``n`` is unique within this process and ``process`` a random
    token of the process (logs written before it have ``("local", n)``). Object
    references are plain values: they compare and hash by content and can be
    written to the event log.
    """

    __slots__ = ()

    def __new__(cls, class_name: str, key: tuple[Any, ...]) -> ObjectRef:
        return _new(cls, (class_name, tuple(key)))  # type: ignore[no-any-return]

    class_name: str = property(itemgetter(0))  # type: ignore[assignment]
    key: tuple[Any, ...] = property(itemgetter(1))  # type: ignore[assignment]

    @property
    def transient(self) -> bool:
        """True for a process-local reference (an object that has no primary key)."""
        k = self[1]
        return 2 <= len(k) <= 3 and k[0] == "local"

    def __repr__(self) -> str:
        key = self[1]
        shown = key[0] if len(key) == 1 else ",".join(map(str, key))
        if self.transient:
            shown = f"~{key[1]}"
        return f"<{self[0]} {shown}>"

    def __getnewargs__(self) -> tuple[str, tuple[Any, ...]]:
        return (self[0], self[1])


class Occurrence(tuple):  # type: ignore[type-arg]
    """One primitive event occurrence (immutable).

    Build occurrences through the detector (``detector.signal``); the constructor
    is public for replay and tests.
    """

    __slots__ = ()

    def __new__(
        cls,
        event: str,
        t_occ: int,
        timestamp: float,
        detected_timestamp: float | None = None,
        source: Hashable | None = None,
        params: Mapping[str, Any] | None = None,
        scope: Hashable | None = None,
    ) -> Occurrence:
        return _new(  # type: ignore[no-any-return]
            cls,
            (
                event,
                t_occ,
                timestamp,
                timestamp if detected_timestamp is None else detected_timestamp,
                source,
                dict(params) if params else {},
                scope,
            ),
        )

    event: str = property(itemgetter(EVENT))  # type: ignore[assignment]
    t_occ: int = property(itemgetter(T_OCC))  # type: ignore[assignment]
    timestamp: float = property(itemgetter(AT))  # type: ignore[assignment]
    detected_timestamp: float = property(itemgetter(DETECTED_AT))  # type: ignore[assignment]
    source: Any = property(itemgetter(SOURCE))
    scope: Any = property(itemgetter(SCOPE))

    @property
    def params(self) -> Mapping[str, Any]:
        """The event's parameters (a read-only view)."""
        return MappingProxyType(self[PARAMS])

    @property
    def at(self) -> datetime:
        """Wall-clock time of occurrence (UTC)."""
        return datetime.fromtimestamp(self[AT], UTC)

    @property
    def detected_at(self) -> datetime:
        """Wall-clock time the detector received the occurrence (UTC)."""
        return datetime.fromtimestamp(self[DETECTED_AT], UTC)

    @property
    def t_init(self) -> int:
        """The earliest ``t_occ`` among the constituents; for a primitive, ``t_occ``."""
        return self[T_OCC]  # type: ignore[no-any-return]

    @property
    def constituents(self) -> tuple[Occurrence, ...]:
        """``(self,)``, so primitive and composite occurrences read alike."""
        return (self,)

    def of(self, event: str) -> tuple[Occurrence, ...]:
        """The constituents whose event is ``event``."""
        return (self,) if self[EVENT] == event else ()

    def values(self, param: str) -> tuple[Any, ...]:
        """The values of parameter ``param`` across the constituents, in order."""
        p = self[PARAMS]
        return (p[param],) if param in p else ()

    def __hash__(self) -> int:
        return hash((self[EVENT], self[T_OCC], self[SCOPE]))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self[PARAMS].items())
        src = f" {self[SOURCE]!r}" if self[SOURCE] is not None else ""
        return f"<{self[EVENT]}@{self[T_OCC]}{src}{' ' + params if params else ''}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_occurrence, (tuple(self),))


def _rebuild_occurrence(fields: tuple[Any, ...]) -> Occurrence:
    return _new(Occurrence, fields)  # type: ignore[no-any-return]


class CompositeOccurrence(tuple):  # type: ignore[type-arg]
    """One detection of a composite event (immutable).

    ``expression`` is the event expression detected, ``t_occ`` that of the
    terminator, ``parts`` the child occurrences that were combined, in the order the
    operator combines them (initiator first, terminator last).
    """

    __slots__ = ()

    def __new__(
        cls, expression: DetectedExpression, t_occ: int, parts: tuple[AnyOccurrence, ...]
    ) -> CompositeOccurrence:
        return _new(cls, (expression, t_occ, tuple(parts)))  # type: ignore[no-any-return]

    expression: DetectedExpression = property(itemgetter(0))
    t_occ: int = property(itemgetter(1))  # type: ignore[assignment]

    @property
    def parts(self) -> tuple[AnyOccurrence, ...]:
        """The child occurrences combined, in operator order."""
        return tuple(map(finished, self[2]))

    @property
    def event(self) -> str:
        """The detected expression, as Snoop text."""
        return str(self[0])

    @property
    def terminator(self) -> Occurrence:
        """The primitive occurrence that made this composite occur."""
        occ: AnyOccurrence = self
        while type(occ) is not Occurrence:
            occ = occ[2][-1]
        return occ

    @property
    def timestamp(self) -> float:
        return self.terminator.timestamp

    @property
    def detected_timestamp(self) -> float:
        return self.terminator.detected_timestamp

    @property
    def at(self) -> datetime:
        """Occurrence time of the terminator."""
        return self.terminator.at

    @property
    def detected_at(self) -> datetime:
        """Detection time of the terminator (when the detector learned of it)."""
        return self.terminator.detected_at

    @property
    def scope(self) -> Any:
        return self.terminator.scope

    @property
    def source(self) -> None:
        return None

    @property
    def constituents(self) -> tuple[Occurrence, ...]:
        """The primitive occurrences this detection combines, in ``t_occ`` order.

        An occurrence used twice (for example by two operators that share an event)
        appears twice, as in the paper's notation.
        """
        return tuple(sorted(_flatten(self), key=itemgetter(T_OCC)))

    @property
    def t_init(self) -> int:
        """The earliest ``t_occ`` among the constituents (the initiator's).

        The scheduler asks this of every detection of a rule in the NOW trigger
        mode that shares nodes with older rules: one walk of the parts, without
        the list and generator :meth:`constituents` makes."""
        best: int | None = None
        stack: list[Any] = [self]
        pop, push = stack.pop, stack.append
        while stack:
            for o in pop()[2]:
                if type(o) is Occurrence:
                    t = o[1]
                    if best is None or t < best:
                        best = t
                else:
                    push(o)
        if best is None:
            raise ValueError(f"{self!r} has no constituents")
        return best

    def of(self, event: str) -> tuple[Occurrence, ...]:
        """The constituents whose event is ``event``, in ``t_occ`` order."""
        return tuple(o for o in self.constituents if o[EVENT] == event)

    def values(self, param: str) -> tuple[Any, ...]:
        """The values of parameter ``param`` across the constituents, in ``t_occ``
        order (constituents without it are skipped)."""
        return tuple(o[PARAMS][param] for o in self.constituents if param in o[PARAMS])

    @property
    def params(self) -> Mapping[str, Any]:
        """Parameters merged over the constituents in ``t_occ`` order (a later
        constituent's value wins). Use :meth:`values` or :meth:`of` when several
        constituents carry the same parameter."""
        merged: dict[str, Any] = {}
        for o in self.constituents:
            merged.update(o[PARAMS])
        return MappingProxyType(merged)

    def __hash__(self) -> int:
        return hash((self[0], self[1], self[2]))

    def __repr__(self) -> str:
        inner = ", ".join(f"{o[EVENT]}@{o[T_OCC]}" for o in self.constituents)
        return f"<{self[0]}@{self[1]} {{{inner}}}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_composite, (tuple(self),))


def _rebuild_composite(fields: tuple[Any, ...]) -> CompositeOccurrence:
    return _new(CompositeOccurrence, fields)  # type: ignore[no-any-return]


def finished(occ: Any) -> Any:
    """The user-facing form of an occurrence from the detector's graph.

    Inside the graph a composite is a plain ``(expression, t_occ, parts)`` tuple
    (a third of the cost of a tuple subclass); detections become
    :class:`CompositeOccurrence` when they are delivered, and ``parts`` converts
    lazily.
    """
    if type(occ) is tuple:
        return _new(CompositeOccurrence, occ)
    return occ


def _flatten(occ: AnyOccurrence) -> Iterator[Occurrence]:
    if type(occ) is Occurrence:
        yield occ
        return
    stack = [occ]
    out: list[Occurrence] = []
    while stack:
        o = stack.pop()
        if type(o) is Occurrence:
            out.append(o)
        else:
            stack.extend(reversed(o[2]))
    yield from out


AnyOccurrence = Occurrence | CompositeOccurrence


def occurrence_time(value: Any, event: str = "event") -> float:
    """``value`` as an occurrence time in POSIX seconds.

    Accepts an aware :class:`~datetime.datetime` (a naive one is read as UTC, as
    the event log reads it) or a finite number of POSIX seconds. Raises
    :class:`~sentinel.errors.OccurrenceTimeError` naming ``event`` for anything
    else (strings, ``None``, booleans, NaN and infinities, dates without a time).

    >>> occurrence_time(datetime(2014, 4, 7, 9, 0, tzinfo=UTC))
    1396861200.0
    """
    t = type(value)
    if t is float or t is int:
        if value != value or value in (float("inf"), float("-inf")):
            raise _time_error(event, value, "it must be finite")
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        ts: float = value.timestamp()
        return ts
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return occurrence_time(float(value), event)
    raise _time_error(event, value, "")


def _time_error(event: str, value: Any, hint: str) -> Exception:
    from sentinel.errors import OccurrenceTimeError

    return OccurrenceTimeError(event, value, hint)
