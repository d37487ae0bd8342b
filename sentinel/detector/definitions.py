"""Naming events on a detector: explicit and primitive events, named composite
events, Snoop text resolved against them, samplers.

:class:`Definitions` is the part of :class:`~sentinel.detector.EventDetector`
that does this (a mixin: the detector holds the state named below).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sentinel.algebra import expressions as ex
from sentinel.algebra.syntax import parse
from sentinel.detector.graph import Channel
from sentinel.errors import DuplicateEventError, ExpressionError, UnknownEventError

if TYPE_CHECKING:
    import threading

    from sentinel.detector.events import Dispatch

__all__ = ["Definitions"]


class Definitions:
    """The event definitions of :class:`~sentinel.detector.EventDetector`."""

    _lock: threading.RLock
    dispatch: Dispatch
    samplers: dict[str, Callable[[], Any]]
    _channels: dict[str, Channel]
    _explicit: dict[str, Channel]
    _events: dict[str, ex.Expression]

    # -- definitions -------------------------------------------------------------
    def explicit(self, name: str) -> ex.Primitive:
        """Define (or look up) the explicit event ``name`` and return it.

        Explicit events are signalled by the application with :meth:`signal`.
        Raises :class:`~sentinel.errors.DuplicateEventError` if ``name`` is
        already a different kind of event.
        """
        prim = ex.Primitive(name)
        with self._lock:  # looked up and defined at once: two threads, one event
            existing = self._events.get(name)
            if existing is not None:
                if isinstance(existing, ex.Primitive) and name in self._explicit:
                    return existing
                raise DuplicateEventError(name, f"it is {existing}")
            self._define_primitive(prim)
            self._explicit[name] = self._channels[name]
        return prim

    def _define_primitive(self, prim: ex.Primitive) -> None:
        if prim.name not in self._channels:
            self._channels[prim.name] = Channel(prim.name)
        self._events[prim.label] = prim

    def channel(self, name: str) -> Channel:
        """The channel ``name``, created if needed (for layers that signal events
        of their own kinds, such as method events)."""
        with self._lock:
            ch = self._channels.get(name)
            if ch is None:
                ch = self._channels[name] = Channel(name)
            return ch

    def define_primitive(self, prim: ex.Primitive) -> ex.Primitive:
        """Register a primitive event built by another layer (a method event, an
        instance-level event) under its label, so text expressions can name it."""
        if not isinstance(prim, ex.Primitive):
            raise ExpressionError(
                f"define_primitive() takes a Primitive (an event another layer built), not "
                f"{type(prim).__name__} {prim!r}; an event of your own is detector.explicit(name)"
            )
        with self._lock:
            existing = self._events.get(prim.label)
            if existing is not None and existing != prim:
                raise DuplicateEventError(prim.label, f"it is {existing!r}")
            self.channel(prim.name)
            self._events[prim.label] = prim
        return prim

    def define(self, name: str, expression: ex.Expression | str) -> ex.Expression:
        """Name a composite event so text expressions can refer to it.

        ``expression`` may be Snoop text; names in it are resolved now.
        """
        if not isinstance(name, str) or not name:
            raise ExpressionError(f"an event name must be a non-empty string, not {name!r}")
        expr = self.expression(expression)
        with self._lock:  # two threads defining one name: the second is refused
            existing = self._events.get(name)
            if existing is not None and existing != expr:
                raise DuplicateEventError(name, f"it is {existing}")
            self._events[name] = expr
        return expr

    def event(self, name: str) -> ex.Expression:
        """The event defined as ``name``; raises UnknownEventError."""
        try:
            return self._events[name]
        except KeyError:
            raise UnknownEventError(name, self._events) from None

    @property
    def events(self) -> Mapping[str, ex.Expression]:
        """Every defined event by name (a read-only view)."""
        from types import MappingProxyType

        return MappingProxyType(self._events)

    def expression(self, value: ex.Expression | str) -> ex.Expression:
        """``value`` as an expression whose events are all defined here.

        Snoop text is parsed; names refer to events defined on this detector
        (primitive or named composite). Raises
        :class:`~sentinel.errors.UnknownEventError` naming the first unknown
        event, :class:`~sentinel.errors.SnoopSyntaxError` for malformed text.
        """
        text = value if isinstance(value, str) else None
        expr = parse(value) if isinstance(value, str) else value
        convert = getattr(expr, "__sentinel_expression__", None)
        if convert is not None:  # an expression of another algebra (an Ode term)
            expr = convert()
        if not isinstance(expr, ex.Expression):
            raise ExpressionError(
                f"expected an event expression or Snoop text, not {type(value).__name__}"
            )
        return self._resolve(expr, text)

    def sampler(self, name: str, fn: Callable[[], Any]) -> None:
        """Register ``fn`` as the sampler ``name``: ``P*(E1, [t] name, E3)`` calls
        ``fn()`` at each tick and keeps the value (it must be loggable) as the
        tick's parameter ``name``. Replaces a sampler of the same name.

        A registry of named values, not an event (``docs/architecture.md``, "The
        detector's events")."""
        if not isinstance(name, str) or not name or not callable(fn):
            raise ExpressionError(f"a sampler is a name and a callable, not {name!r}, {fn!r}")
        self.samplers[name] = fn

    def _resolve(self, expr: ex.Expression, text: str | None) -> ex.Expression:
        # Parents are prepared before their operands (pre-order), then resolved
        # after them; with stacks, not recursively: expressions of any depth.
        seen: set[int] = set()
        todo = [expr]
        prepare = self.dispatch.prepare
        while todo:
            e = todo.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            if prepare:
                prepare(self, e)
            todo.extend(reversed(e.children))
        # id -> (resolved, whether it equals the original)
        done: dict[int, tuple[ex.Expression, bool]] = {}
        for e in expr.walk():
            if id(e) in done:
                continue
            if isinstance(e, ex.Primitive):
                resolved = self._resolve_primitive(e, text)
                done[id(e)] = (resolved, resolved == e)
            elif all(done[id(c)][1] for c in e.children):
                done[id(e)] = (e, True)
            else:
                done[id(e)] = (e.with_children([done[id(c)][0] for c in e.children]), False)
        return done[id(expr)][0]

    def _resolve_primitive(self, expr: ex.Primitive, text: str | None) -> ex.Expression:
        resolve_inner = getattr(expr, "resolve_inner", None)
        if resolve_inner is not None:  # a leaf built on another event (a timing primitive)
            return resolve_inner(lambda e: self._resolve(e, text))  # type: ignore[no-any-return]
        if expr.selector is None and expr.label == expr.name:
            known = self._events.get(expr.name)
            if known is not None:
                return known
        elif expr.name in self._channels:
            return expr  # built by another layer (an instance-level event)
        raise UnknownEventError(expr.label, self._events, where=repr(text) if text else "")
