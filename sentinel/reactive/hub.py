"""Reactive classes on detectors: binding, event definitions, wrapper installation.

Every reactive hierarchy (the classes below one top reactive class) signals to one
detector: the one it is bound to, or the process's default detector
(:mod:`sentinel.default`), followed when it changes. A :class:`Hub` is the reactive
layer's state for one detector:

- it defines the classes' event names on the detector (``Stock.set_price:begin``,
  ``Stock.e2``, ``SubStock.set_price:begin``, ...) so rules can name them in text;
- it watches the detector (``detector.watch``) and, whenever subscriptions or
  occurrence listeners change, installs the wrapper of every event method that is
  listened to (a rule's leaf on one of its channels, or an occurrence listener such
  as the event log) and puts the plain function back into the class when nothing
  listens any more. An unobserved event method is therefore a plain function: a
  call costs what a bare call costs.
- it holds the *scope hook*: how the scope of an object's events is chosen (the ORM
  layer uses the object's session transaction); by default the detector's current
  scope.

Locking: class set-up and binding hold :data:`classes.LOCK` and may then take the
detector's lock (defining events). The detector calls :meth:`Hub.refresh` under its
own lock; refresh takes only the hub's lock, never :data:`classes.LOCK`.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sentinel import default
from sentinel.algebra.expressions import Primitive
from sentinel.detector.events import listen, remove
from sentinel.errors import DuplicateEventError, ReactiveError
from sentinel.reactive.info import LOCK, ClassInfo, class_info, hierarchy
from sentinel.reactive.wrapper import install_entry

if TYPE_CHECKING:
    from sentinel.detector import EventDetector, Scope

__all__ = [
    "Hub",
    "ScopeHook",
    "attached_classes",
    "bind",
    "detector_of",
    "hub_for",
    "install",
    "register",
    "set_scope_hook",
]

ScopeHook = Callable[[Any], "Scope | None"]

_HUBS: weakref.WeakKeyDictionary[EventDetector, Hub] = weakref.WeakKeyDictionary()
#: Top classes that follow the default detector.
_FOLLOWERS: weakref.WeakSet[type] = weakref.WeakSet()


class Hub:
    """The reactive layer's state for one detector (see the module docs)."""

    def __init__(self, detector: EventDetector) -> None:
        self._detector = weakref.ref(detector)
        self._lock = threading.RLock()
        self.classes: weakref.WeakSet[type] = weakref.WeakSet()
        #: event name prefix -> the class using it
        self.names: dict[str, weakref.ref[type]] = {}
        #: Every event name this hub defined on the detector (they stay defined).
        self.defined: set[str] = set()
        listen(detector, "changed", self.refresh)

    @property
    def detector(self) -> EventDetector | None:
        return self._detector()

    def refresh(self) -> None:
        """Install the wrappers of listened event methods; remove the others."""
        det = self._detector()
        if det is None:
            return
        always = det.has_listeners
        with self._lock:
            for cls in list(self.classes):
                info = class_info(cls)
                if info is None:
                    continue
                for entry in info.entries.values():
                    method = entry.method
                    method.always = always
                    install_entry(entry, method.listened)

    # -- attaching classes ---------------------------------------------------------
    def check(self, classes: Iterable[type], *, names: bool = True) -> None:
        """Raise if ``classes`` cannot be attached: an event name another class of
        this detector uses (``names``), or one the detector defines differently.
        Changes nothing."""
        det = self._detector()
        assert det is not None
        events = det.events
        for cls in classes:
            info = class_info(cls)
            assert info is not None
            if names:
                self._check_name(cls, info)
            for prim in info.primitives():
                existing = events.get(prim.label)
                if existing is not None and (existing != prim or prim.label not in self.defined):
                    raise DuplicateEventError(
                        prim.label,
                        f"the detector already defines it as {existing!r}, so "
                        f"{cls.__qualname__} cannot use that name (give the class another "
                        "sentinel_name=)",
                    )

    def _check_name(self, cls: type, info: ClassInfo) -> None:
        if not _claims_name(cls, info):
            return
        held = self.names.get(info.name)
        other = held() if held is not None else None
        if other is None or other is cls or _same_definition(other, cls):
            return
        # A class of a finished test may be garbage only waiting for collection.
        other = None
        gc.collect()
        other = held() if held is not None else None
        if other is None or other is cls:
            return
        raise DuplicateEventError(
            f"{info.name}.*",
            f"{other.__module__}.{other.__qualname__} already uses the event name prefix "
            f"{info.name!r} on this detector; give {cls.__module__}.{cls.__qualname__} "
            "another one (class ...(Reactive, sentinel_name='...')) or bind it to its "
            "own detector (class ...(Reactive, detector=...))",
        )

    def attach(self, classes: list[type]) -> None:
        """Define ``classes``' events here, give their event methods this detector's
        channels and install wrappers as needed (call :meth:`check` first)."""
        det = self._detector()
        assert det is not None
        always = det.has_listeners
        for cls in classes:
            info = class_info(cls)
            assert info is not None
            for prim in info.primitives():
                det.define_primitive(prim)
                self.defined.add(prim.label)
            for entry in info.entries.values():
                method = entry.method
                if method.root is cls:
                    method.detector = det
                    method.hub = self
                    method.always = always
                    names = method.channel_names
                    method.begin = det.channel(names["begin"]) if "begin" in names else None
                    method.end = det.channel(names["end"]) if "end" in names else None
                    method.wired = (det, method.begin, method.end)
            with self._lock:
                if _claims_name(cls, info):
                    self.names[info.name] = weakref.ref(cls)
                self.classes.add(cls)
                info.attached = self
        self.refresh()
        if det.dispatch.classes_attached:
            det.dispatch.classes_attached(classes)

    def detach(self, classes: list[type]) -> None:
        """Stop ``classes`` signalling here: plain functions back in the classes,
        no channels. Their event names stay defined on the detector."""
        with self._lock:
            for cls in reversed(classes):
                info = class_info(cls)
                if info is None or info.attached is not self:
                    continue
                for entry in info.entries.values():
                    install_entry(entry, False)
                    method = entry.method
                    if method.root is cls:
                        method.wired = None  # first: a call in flight reads this
                        method.begin = method.end = None
                        method.detector = None
                        method.hub = None
                        method.always = False
                self.classes.discard(cls)
                held = self.names.get(info.name)
                if held is not None and held() is cls:
                    del self.names[info.name]
                info.attached = None


def _claims_name(cls: type, info: ClassInfo) -> bool:
    """Whether ``cls`` holds its event name prefix on the detector: a class with
    method events, or a table (its database events use the name). A base class
    with neither (an application's declarative ``Base``) has no event to mix up
    with another class's, so two such bases of one name may share a detector."""
    return bool(info.entries) or any(
        getattr(cls, attr, None) is not None for attr in ("__tablename__", "__table__")
    )


def _same_definition(a: type, b: type) -> bool:
    """The same class defined again (a module reloaded, a dataclass(slots=True)
    copy): it takes the name over."""
    return a.__module__ == b.__module__ and a.__qualname__ == b.__qualname__


def hub_for(detector: EventDetector) -> Hub:
    """The hub of ``detector``, created on first use."""
    with LOCK:
        hub = _HUBS.get(detector)
        if hub is None:
            hub = _HUBS[detector] = Hub(detector)
        return hub


def _binding(info: ClassInfo) -> EventDetector | None:
    top = class_info(info.tops[0])
    assert top is not None
    return top.binding


def detector_of(cls: type) -> EventDetector | None:
    """The detector a reactive class signals to now (``None``: it follows the
    default detector and none exists yet)."""
    info = class_info(cls)
    if info is None:
        raise ReactiveError(f"{cls!r} is not a reactive class")
    binding = _binding(info)
    return binding if binding is not None else default.current_default_detector()


def register(cls: type, info: ClassInfo, *, replaces: type | None = None) -> None:
    """A reactive class was created: attach it to its hierarchy's detector.

    ``replaces`` is the class ``cls`` is a copy of (``@dataclass(slots=True)``
    makes one): when it is the same definition, it stops being reactive (it is
    detached and forgotten), and ``cls`` takes its place."""
    with LOCK:
        if info.tops == (cls,) and info.binding is None:
            _FOLLOWERS.add(cls)
        det = detector_of(cls)
        hub = hub_for(det) if det is not None else None
        if hub is not None:
            hub.check([cls])
        if replaces is not None and _same_definition(replaces, cls):
            _retire(replaces)
        if hub is not None:
            hub.attach([cls])


def _retire(cls: type) -> None:
    """``cls`` was replaced by a copy of it (see :func:`register`): no longer
    reactive, so that it neither signals nor moves with its hierarchy. Left
    alone if reactive classes derive from it."""
    info = class_info(cls)
    subclasses: list[type] = type.__subclasses__(cls)
    if info is None or any(class_info(sub) is not None for sub in subclasses):
        return
    if info.attached is not None:
        info.attached.detach([cls])
    _FOLLOWERS.discard(cls)
    type.__delattr__(cls, "_sentinel_info")


def bind(cls: type, detector: EventDetector | None) -> None:
    """Bind the reactive hierarchy whose top class is ``cls`` to ``detector``
    (``None``: follow the process's default detector).

    Its event names are defined on the new detector and its calls signal there
    from now on; rules on the previous detector no longer see them. Raises
    :class:`~sentinel.errors.ReactiveError` if ``cls`` is not the top reactive
    class of its hierarchy, or if a class of the hierarchy also belongs to another
    hierarchy bound elsewhere; :class:`~sentinel.errors.DuplicateEventError` if the
    new detector already uses one of its event names. Nothing changes on error.
    """
    info = class_info(cls)
    if info is None:
        raise ReactiveError(f"bind() takes a reactive class, not {cls!r}")
    if info.tops != (cls,):
        raise ReactiveError(
            f"bind() takes the top reactive class of a hierarchy; {cls.__qualname__} "
            f"belongs to {', '.join(t.__qualname__ for t in info.tops)}",
            owner=cls.__qualname__,
        )
    if detector is not None:
        from sentinel.detector import EventDetector

        if not isinstance(detector, EventDetector):
            raise ReactiveError(
                f"bind() takes an event detector or None, not {type(detector).__name__}"
            )
    with LOCK:
        classes = hierarchy(cls)
        for c in classes:
            for t in class_info(c).tops:  # type: ignore[union-attr]
                if t is not cls and class_info(t).binding is not detector:  # type: ignore[union-attr]
                    raise ReactiveError(
                        f"{c.__qualname__} also belongs to the hierarchy of {t.__qualname__}, "
                        f"which is bound elsewhere; bind {t.__qualname__} as well",
                        owner=c.__qualname__,
                    )
        new = detector if detector is not None else default.current_default_detector()
        old_hub = info.attached
        if new is not None and (old_hub is None or old_hub.detector is not new):
            hub_for(new).check(classes)
        info.binding = detector
        if detector is None:
            _FOLLOWERS.add(cls)
        else:
            _FOLLOWERS.discard(cls)
        _move(classes, old_hub, new)


def _move(classes: list[type], old_hub: Hub | None, new: EventDetector | None) -> None:
    if old_hub is not None and old_hub.detector is new:
        return
    if old_hub is not None:
        old_hub.detach(classes)
    if new is not None:
        hub_for(new).attach(classes)


def _followers() -> list[tuple[list[type], ClassInfo]]:
    out = []
    for top in list(_FOLLOWERS):
        info = class_info(top)
        if info is not None and info.binding is None:
            out.append((hierarchy(top), info))
    return out


def _check_default_change(old: Any, new: Any) -> None:
    """Before the default detector changes: refuse a new default that already
    defines one of the following classes' event names as something else."""
    if new is None:
        return
    with LOCK:
        hub = hub_for(new)
        for classes, _ in _followers():
            # Prefixes were checked when the classes were defined; on a change of
            # default the most recent definitions simply take their names.
            hub.check(classes, names=False)


def _default_changed(old: Any, new: Any) -> None:
    """After the default detector changed: move the hierarchies that follow it."""
    with LOCK:
        for classes, info in _followers():
            _move(classes, info.attached, new)


default.watch_default(_default_changed, check=_check_default_change)


def attached_classes(detector: EventDetector) -> list[type]:
    """The reactive classes signalling to ``detector`` now (those that come
    later fire its ``classes_attached`` event). Thread-safe."""
    with LOCK:
        hub = hub_for(detector)
        return [c for c in list(hub.classes) if class_info(c) is not None]


def set_scope_hook(detector: EventDetector, hook: ScopeHook | None) -> None:
    """Choose the detection scope of method events signalled to ``detector``.

    ``hook(obj)`` is called for each signalled method event with the object (the
    class for a classmethod, ``None`` for a staticmethod) and returns the
    :class:`~sentinel.Scope` its occurrence belongs to, or ``None`` for the
    detector's current scope (the default without a hook). The ORM layer installs
    one that maps an object to its session's transaction. ``None`` removes the
    hook.

    A shorthand for the detector's ``object_scope`` event
    (:mod:`sentinel.detector.events`): ``hook`` becomes its one listener.
    """
    for old in detector.dispatch.object_scope:
        remove(detector, "object_scope", old)
    if hook is not None:
        listen(detector, "object_scope", hook)


def install(detector: EventDetector) -> None:
    """The reactive layer's plug-in (:mod:`sentinel.detector.plugins`): a text
    expression naming a database event of a reactive mapped class
    (``Stock:update``) before sentinel was attached on the detector finds it
    defined on first use, once the ORM layer is loaded."""
    listen(detector, "prepare", _prepare_db_event)


def _prepare_db_event(detector: EventDetector, expr: Any) -> None:
    if type(expr) is not Primitive:
        return
    # The ORM layer, when loaded: importing it here would load SQLAlchemy's ORM
    # for every detector, and only mapped classes have database events.
    db_events = sys.modules.get("sentinel.orm.db_events")
    if db_events is not None:
        db_events.prepare_name(detector, expr)
