"""What sentinel knows about the reactive classes: one :class:`ClassInfo` per
class (:func:`class_info` finds it), the selectors of their class-level events,
and the lock that serialises their set-up and binding.

Below the mixin (:mod:`.classes`, which sets classes up), the hub (:mod:`.hub`,
which binds them to detectors) and object references (:mod:`.refs`): all three
read it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from sentinel.algebra.expressions import Primitive

if TYPE_CHECKING:
    from sentinel.detector import EventDetector
    from sentinel.reactive.classes import Entry
    from sentinel.reactive.declare import Declaration
    from sentinel.reactive.hub import Hub

__all__ = [
    "CLASSMETHOD",
    "LOCK",
    "METHOD",
    "STATICMETHOD",
    "ClassInfo",
    "ClassSelector",
    "class_info",
    "hierarchy",
]

#: The kinds of event method: how the class holds the callable.
METHOD: Final = "method"
CLASSMETHOD: Final = "classmethod"
STATICMETHOD: Final = "staticmethod"

#: Serialises class set-up and binding (not the per-call path).
LOCK = threading.RLock()


class ClassSelector(str):
    """The selector of a reactive subclass's class-level events: the class's event
    name. A ``str`` (hashing is cached, so matching costs a dict lookup)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ClassSelector({str.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ClassSelector, (str(self),))


class ClassInfo:
    """What sentinel knows about one reactive class (``cls.__dict__["_sentinel_info"]``)."""

    __slots__ = (
        "__weakref__",
        "attached",
        "binding",
        "cls",
        "declared",
        "entries",
        "name",
        "names",
        "selector",
        "tops",
    )

    def __init__(self, cls: type, name: str) -> None:
        self.cls = weakref.ref(cls)
        self.name = name
        self.selector = ClassSelector(name)
        self.entries: dict[str, Entry] = {}
        #: What ``@event`` declared in the class's own body, by method (a copy of
        #: the class, such as ``@dataclass(slots=True)`` makes, declares the same).
        self.declared: dict[str, Declaration] = {}
        #: event name -> (method name, phase)
        self.names: dict[str, tuple[str, str]] = {}
        #: The hierarchy tops (reactive classes directly below Reactive) it belongs to.
        self.tops: tuple[type, ...] = ()
        #: Tops only: the explicitly bound detector, or None to follow the default.
        self.binding: EventDetector | None = None
        #: The hub of the detector the class is currently attached to.
        self.attached: Hub | None = None

    def primitives(self) -> Iterator[Primitive]:
        """Every class-level event of this class (to define on a detector)."""
        for entry in self.entries.values():
            yield from entry.handles.values()
            yield from entry.named.values()

    def __repr__(self) -> str:
        return f"<ClassInfo {self.name} {sorted(self.entries)}>"


def class_info(cls: Any) -> ClassInfo | None:
    """The :class:`ClassInfo` of a reactive class (``None`` for anything else)."""
    try:
        info = cls.__dict__.get("_sentinel_info")
    except AttributeError:
        return None
    return info if isinstance(info, ClassInfo) else None


def hierarchy(top: type) -> list[type]:
    """``top`` and every live reactive subclass, parents before children."""
    out: list[type] = []
    seen: set[type] = set()
    stack = [top]
    while stack:
        c = stack.pop(0)
        if c in seen or class_info(c) is None:
            continue
        seen.add(c)
        out.append(c)
        stack.extend(c.__subclasses__())
    return out
