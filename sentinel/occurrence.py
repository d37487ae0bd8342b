"""Occurrences: what the detector consumes and what rules receive.

An :class:`Occurrence` is one primitive event instance. It is an immutable tuple
subclass with named accessors:

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

Inside the detector's graph an occurrence is a plain tuple of the same fields
(``EVENT`` … ``NAMES`` give the positions), with its parameters stored
positionally: ``params`` holds the values and ``names`` the tuple of their
names, one tuple shared by every occurrence of a call site or event. A plain
tuple of plain values is one CPython's cyclic garbage collector stops tracking,
so the occurrences a detector holds cost it nothing; a tuple subclass or a
dictionary is tracked for as long as it lives. Occurrences become
:class:`Occurrence` objects where they leave the graph (a rule's condition and
action, ``signal``'s result): :func:`finished` converts. A source that decodes
parameters lazily (replay) stores a mapping in ``params`` and ``None`` in
``names``; :func:`params_of` and :func:`param` read either form.

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
    "finished",
    "has_param",
    "leaves",
    "names_of",
    "occurrence_time",
    "param",
    "params_of",
    "split_params",
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
NAMES: Final = 7
#: A primitive occurrence's length; a composite's is 3 (``expression, t_occ, parts``).
PRIMITIVE: Final = 8

#: Parameter names, interned: one tuple per distinct sequence of names, shared
#: by every occurrence that has them (bounded: cleared past 10,000 entries).
_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def names_of(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names``, interned (see :data:`_NAMES`)."""
    got = _NAMES.get(names)
    if got is None:
        if len(_NAMES) >= 10_000:
            _NAMES.clear()
        got = _NAMES[names] = names
    return got


def split_params(params: Mapping[str, Any] | None) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """``params`` as an occurrence stores them: the tuple of values and the
    interned tuple of names, in the mapping's order."""
    if not params:
        return (), ()
    return tuple(params.values()), names_of(tuple(params))


def params_of(occ: Any) -> dict[str, Any]:
    """A primitive occurrence's parameters as a mapping: a new dict, or the
    mapping a source stored (``names`` ``None``), filled first when it is one
    that decodes lazily (it has a ``fill`` method: replay's)."""
    names = occ[7]
    if names is None:
        p = occ[5]
        if not p:
            fill = getattr(p, "fill", None)
            if fill is not None:
                fill()
        return p  # type: ignore[no-any-return]
    return dict(zip(names, occ[5], strict=False))  # same lengths; strict costs 90 ns


def param(occ: Any, name: Any, default: Any = None) -> Any:
    """The value of parameter ``name`` of a primitive occurrence, else ``default``."""
    names = occ[7]
    if names is None:
        return params_of(occ).get(name, default)
    return occ[5][names.index(name)] if name in names else default


def has_param(occ: Any, name: Any) -> bool:
    """Whether a primitive occurrence carries parameter ``name``."""
    names = occ[7]
    return name in (params_of(occ) if names is None else names)


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
        values, names = split_params(params)
        return _new(  # type: ignore[no-any-return]
            cls,
            (
                event,
                t_occ,
                timestamp,
                timestamp if detected_timestamp is None else detected_timestamp,
                source,
                values,
                scope,
                names,
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
        """The event's parameters (a read-only mapping)."""
        names = self[NAMES]
        if names is not None:  # params_of, inlined: conditions read this
            return MappingProxyType(dict(zip(names, self[PARAMS], strict=False)))
        return MappingProxyType(params_of(self))

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
        return (_param(self, param),) if has_param(self, param) else ()

    def __hash__(self) -> int:
        return hash((self[EVENT], self[T_OCC], self[SCOPE]))

    def __eq__(self, other: object) -> bool:
        """Field by field, the parameters as a mapping: their order (which a
        database's JSON may change) does not matter."""
        return isinstance(other, tuple) and len(other) == PRIMITIVE and _same(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in params_of(self).items())
        src = f" {self[SOURCE]!r}" if self[SOURCE] is not None else ""
        return f"<{self[EVENT]}@{self[T_OCC]}{src}{' ' + params if params else ''}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_occurrence, (tuple(self),))


def _rebuild_occurrence(fields: tuple[Any, ...]) -> Occurrence:
    if len(fields) == 7:  # pickled before parameters were stored positionally
        values, names = split_params(fields[5])
        fields = (*fields[:5], values, fields[6], names)
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
        return finished(_terminal(self))  # type: ignore[no-any-return]

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
        """The scope of the terminator (read without making it an
        :class:`Occurrence`)."""
        return _terminal(self)[SCOPE]

    @property
    def source(self) -> None:
        return None

    @property
    def constituents(self) -> tuple[Occurrence, ...]:
        """The primitive occurrences this detection combines, in ``t_occ`` order.

        An occurrence used twice (for example by two operators that share an event)
        appears twice, as in the paper's notation.
        """
        return tuple(map(finished, leaves(self)))

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
                if len(o) == 8:
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
        return tuple(finished(o) for o in leaves(self) if o[EVENT] == event)

    def values(self, param: str) -> tuple[Any, ...]:
        """The values of parameter ``param`` across the constituents, in ``t_occ``
        order (constituents without it are skipped)."""
        return tuple(_param(o, param) for o in leaves(self) if has_param(o, param))

    @property
    def params(self) -> Mapping[str, Any]:
        """Parameters merged over the constituents in ``t_occ`` order (a later
        constituent's value wins). Use :meth:`values` or :meth:`of` when several
        constituents carry the same parameter."""
        merged: dict[str, Any] = {}
        for o in leaves(self):
            merged.update(params_of(o))
        return MappingProxyType(merged)

    def __hash__(self) -> int:
        return hash(_identity(self))

    def __eq__(self, other: object) -> bool:
        """Part by part, each primitive as :meth:`Occurrence.__eq__` compares."""
        return isinstance(other, tuple) and len(other) == 3 and _same(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __repr__(self) -> str:
        inner = ", ".join(f"{o[EVENT]}@{o[T_OCC]}" for o in leaves(self))
        return f"<{self[0]}@{self[1]} {{{inner}}}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_composite, (tuple(self),))


def _identity(occ: Any) -> tuple[Any, ...]:
    """What identifies an occurrence of either form, either kind: a primitive's
    ``(event, t_occ, scope)`` (what :meth:`Occurrence.__hash__` hashes; not its
    parameters, which need not be hashable), a composite's expression, ``t_occ``
    and its parts' identities."""
    if len(occ) == PRIMITIVE:
        return (occ[0], occ[1], occ[6])
    return (occ[0], occ[1], tuple(map(_identity, occ[2])))


def _same(a: Any, b: Any) -> bool:
    """Whether two occurrences of either form are equal: composites part by part,
    primitives field by field with their parameters as a mapping."""
    if len(a) != len(b):
        return False
    if len(a) == PRIMITIVE:
        if a[NAMES] is b[NAMES] or (a[NAMES] is not None and a[NAMES] == b[NAMES]):
            return tuple.__eq__(a, b)
        return a[:5] == b[:5] and a[SCOPE] == b[SCOPE] and params_of(a) == params_of(b)
    pa, pb = a[2], b[2]
    return (
        a[0] == b[0]
        and a[1] == b[1]
        and len(pa) == len(pb)
        and all(x is y or _same(x, y) for x, y in zip(pa, pb, strict=True))
    )


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
        return _new(Occurrence if len(occ) == 8 else CompositeOccurrence, occ)
    return occ


def _flatten(occ: Any) -> Iterator[Any]:
    """The primitive occurrences of ``occ`` (either form), in tree order."""
    if len(occ) == 8:
        yield occ
        return
    stack = [occ]
    out: list[Any] = []
    while stack:
        o = stack.pop()
        if len(o) == 8:
            out.append(o)
        else:
            stack.extend(reversed(o[2]))
    yield from out


def leaves(occ: Any) -> list[Any]:
    """The primitive constituents of ``occ`` (either kind, either form) in
    ``t_occ`` order, in the graph's form: what :attr:`~CompositeOccurrence.constituents`
    holds, without an :class:`Occurrence` made for each."""
    if len(occ) == PRIMITIVE:
        return [occ]
    return sorted(_flatten(occ), key=_t_occ)


_t_occ = itemgetter(T_OCC)


def _terminal(occ: Any) -> Any:
    """The primitive occurrence that made ``occ`` occur, in the graph's form."""
    while len(occ) != PRIMITIVE:
        occ = occ[2][-1]
    return occ


AnyOccurrence = Occurrence | CompositeOccurrence

_param = param


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
        if not _FIRST_TIME <= value < _END_TIME:
            # ``occ.at`` (and the log's datetime columns) could not hold it
            raise _time_error(event, value, "it must fall in the years 1 to 9999")
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        ts: float = value.timestamp()
        return ts
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return occurrence_time(float(value), event)
    raise _time_error(event, value, "")


#: The POSIX seconds a datetime can hold: 0001-01-01 up to (not including) 10000-01-01.
_FIRST_TIME = -62_135_596_800
_END_TIME = 253_402_300_800


def _time_error(event: str, value: Any, hint: str) -> Exception:
    from sentinel.errors import OccurrenceTimeError

    return OccurrenceTimeError(event, value, hint)
