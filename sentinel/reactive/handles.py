"""Event handles: the primitive events of a reactive class or of one object.

``Stock.set_price.begin`` is the class-level begin event of ``Stock.set_price``
(an attribute of the class's function). :func:`on` gives the same events for a
class and the instance-level ones for an object::

    on(Stock).set_price.begin        # any Stock (and subclass) object: class level
    on(Stock).e2                     # the event named e2 by @event(begin="e2")
    on(ibm).set_price.begin          # only ibm: instance level
    on(ibm).set_price.event("begin", name="set_IBM_price")   # with a name of yours

Handles are plain :class:`~sentinel.Primitive` values: combine them with the
algebra's operators, pass them to ``detector.rule``, and register named ones with
``detector.define_primitive`` to use them in Snoop text.
"""

from __future__ import annotations

from typing import Any

from sentinel.algebra.expressions import Primitive
from sentinel.errors import ReactiveError
from sentinel.occurrence import ObjectRef
from sentinel.reactive.classes import Entry
from sentinel.reactive.declare import PHASES
from sentinel.reactive.info import METHOD, ClassInfo, class_info
from sentinel.reactive.refs import ref_for

__all__ = ["EventHandles", "MethodEvents", "on"]


def on(target: Any) -> EventHandles:
    """The events of a reactive class (class level) or of one reactive object
    (instance level); see the module docs.

    Raises :class:`~sentinel.errors.ReactiveError` if ``target`` is not a reactive
    class or an instance of one.
    """
    if isinstance(target, type):
        info = class_info(target)
        if info is None:
            raise ReactiveError(
                f"on() takes a reactive class or object; {target.__qualname__} is not "
                "reactive (derive it from sentinel.Reactive)",
                owner=target.__qualname__,
            )
        return EventHandles(info, None, None)
    info = class_info(type(target))
    if info is None:
        raise ReactiveError(
            f"on() takes a reactive class or object; {type(target).__qualname__} objects "
            "are not reactive, so they have no instance-level events (derive the class "
            "from sentinel.Reactive)",
            owner=type(target).__qualname__,
        )
    return EventHandles(info, ref_for(target, info.name), target)


def _key_text(ref: ObjectRef) -> str:
    key = ref.key
    if ref.transient:
        return f"~{key[1]}"
    return ",".join(map(str, key))


class EventHandles:
    """The events of a class or object; attributes are its event methods
    (:class:`MethodEvents`) and its named events (primitive events)."""

    __slots__ = ("_info", "_obj", "_ref")

    def __init__(self, info: ClassInfo, ref: ObjectRef | None, obj: Any) -> None:
        self._info = info
        self._ref = ref
        self._obj = obj

    @property
    def level(self) -> str:
        """``"class"`` or ``"instance"``."""
        return "class" if self._ref is None else "instance"

    @property
    def ref(self) -> ObjectRef | None:
        """The object's reference (instance level), else ``None``."""
        return self._ref

    def _prefix(self) -> str:
        if self._ref is None:
            return self._info.name
        return f"{self._info.name}[{_key_text(self._ref)}]"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        info = self._info
        entry = info.entries.get(name)
        if entry is not None:
            return MethodEvents(self, entry)
        named = info.names.get(name)
        if named is not None:
            m, phase = named
            return self._primitive(info.entries[m], phase, f"{self._prefix()}.{name}")
        methods = ", ".join(sorted(info.entries)) or "none"
        names = ", ".join(sorted(info.names)) or "none"
        raise ReactiveError(
            f"{info.name} has no event method or event named {name!r} (event methods: "
            f"{methods}; named events: {names})",
            owner=info.name,
            method=name,
        )

    def _primitive(self, entry: Entry, phase: str, label: str) -> Primitive:
        if self._ref is None:
            if label == f"{self._info.name}.{entry.method.name}:{phase}":
                return entry.handles[phase]
            return Primitive(entry.method.channel_names[phase], entry.selector, label)
        if entry.method.kind != METHOD:
            raise ReactiveError(
                f"{self._info.name}.{entry.method.name} is a {entry.method.kind}: it has "
                "class-level events only (on(ClassName)), no instance-level ones",
                owner=self._info.name,
                method=entry.method.name,
            )
        return Primitive(entry.method.channel_names[phase], self._ref, label)

    def __dir__(self) -> list[str]:
        return sorted({*self._info.entries, *self._info.names})

    def __repr__(self) -> str:
        return f"<events of {self._prefix()}>"


class MethodEvents:
    """The begin and end events of one event method, for a class or an object."""

    __slots__ = ("_entry", "_handles")

    def __init__(self, handles: EventHandles, entry: Entry) -> None:
        self._handles = handles
        self._entry = entry

    @property
    def begin(self) -> Primitive:
        """The method's begin event (raises if it declares none)."""
        return self.event("begin")

    @property
    def end(self) -> Primitive:
        """The method's end event (raises if it declares none)."""
        return self.event("end")

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases the method declares (``("begin", "end")``, ``("end",)``, ...)."""
        return self._entry.method.declaration.phases

    def event(self, phase: str = "end", *, name: str | None = None) -> Primitive:
        """The ``phase`` event, labelled ``name`` if given (register it with
        ``detector.define_primitive`` to use the name in Snoop text)."""
        entry = self._entry
        method = entry.method
        if phase not in PHASES:
            raise ReactiveError(f"an event method's phase is 'begin' or 'end', not {phase!r}")
        if phase not in method.declaration.phases:
            raise ReactiveError(
                f"{self._handles._info.name}.{method.name} has no {phase} event (it declares "
                f"{' and '.join(method.declaration.phases)}); declare it with "
                f"@event({phase}=...)",
                owner=self._handles._info.name,
                method=method.name,
            )
        label = name if name is not None else f"{self._handles._prefix()}.{method.name}:{phase}"
        if name is not None and (not isinstance(name, str) or not name):
            raise ReactiveError(f"an event name is a non-empty string, not {name!r}")
        return self._handles._primitive(entry, phase, label)

    def __repr__(self) -> str:
        return f"<events of {self._handles._prefix()}.{self._entry.method.name}>"
