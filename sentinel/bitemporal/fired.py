"""``FIRED``: whether a rule has fired for an event instance before (BiCEP 2.4.2).

``FIRED`` is a condition, written in a rule's condition and combined with ``~``
(not), ``&`` and ``|`` with other conditions or plain callables::

    det.rule("order once", "ONTIME(ResourceLow)", condition=~FIRED, action=order)
    det.rule("late again", "CHANGE(Delivery)", condition=FIRED & later, action=tell)

For a detection, the *event instances* are those of its constituents that are
occurrences of an event class (the class, the key and its generation);
``FIRED`` holds when the rule's condition held before for a
detection with one of them. A rule fires when its condition holds, so that is
when the instance is recorded (replay, which evaluates conditions, records the
same). A revoked or expired instance is forgotten: a later announcement with the
same key is a new instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sentinel.bitemporal.classify import revision_of
from sentinel.errors import RuleDefinitionError

if TYPE_CHECKING:
    from sentinel.detector import EventDetector

__all__ = ["FIRED", "Condition", "instances"]

Predicate = Callable[[Any], Any]


def instances(occ: Any) -> Iterator[tuple[str, Any, int]]:
    """The event instances of a detection: ``(class, key, generation)`` (a key
    announced again after a revocation or expiry is a new generation)."""
    stack = [occ]
    while stack:
        o = stack.pop()
        if len(o) != 8:
            stack.extend(o[2])
            continue
        rev = revision_of(o)
        if rev is not None:
            yield (o[0], tuple(rev["key"]), rev.get("gen", 0))


class Condition:
    """A rule condition that refers to ``FIRED``. Combine with ``~``, ``&``, ``|``;
    it is bound to its rule when the rule is defined."""

    def __invert__(self) -> Condition:
        return _Not(self)

    def __and__(self, other: Predicate) -> Condition:
        return _And(self, _lift(other))

    def __rand__(self, other: Predicate) -> Condition:
        return _And(_lift(other), self)

    def __or__(self, other: Predicate) -> Condition:
        return _Or(self, _lift(other))

    def __ror__(self, other: Predicate) -> Condition:
        return _Or(_lift(other), self)

    def evaluate(self, fired: Callable[[Any], bool], occ: Any) -> Any:
        raise NotImplementedError

    def __call__(self, occ: Any) -> Any:
        raise RuleDefinitionError(
            "FIRED is a rule condition: pass it as condition= of a rule (it needs the rule "
            "it belongs to)"
        )

    def __sentinel_bind__(self, detector: EventDetector, rule: str) -> Predicate:
        """The plain condition this one is for ``rule`` on ``detector``."""
        from sentinel.bitemporal.service import service

        registry = service(detector).fired_registry(rule)

        def fired(occ: Any) -> bool:
            return any(i in registry for i in instances(occ))

        def condition(occ: Any) -> Any:
            ok = self.evaluate(fired, occ)
            if ok:
                registry.update(instances(occ))
            return ok

        condition.__sentinel_unbound__ = self  # type: ignore[attr-defined]
        return condition


class _Fired(Condition):
    def evaluate(self, fired: Callable[[Any], bool], occ: Any) -> Any:
        return fired(occ)

    def __repr__(self) -> str:
        return "FIRED"


class _Lift(Condition):
    def __init__(self, fn: Predicate) -> None:
        if not callable(fn):
            raise RuleDefinitionError(f"a condition must be callable, not {fn!r}")
        self.fn = fn

    def evaluate(self, fired: Callable[[Any], bool], occ: Any) -> Any:
        return self.fn(occ)

    def __repr__(self) -> str:
        return getattr(self.fn, "__name__", repr(self.fn))


class _Not(Condition):
    def __init__(self, inner: Condition) -> None:
        self.inner = inner

    def evaluate(self, fired: Callable[[Any], bool], occ: Any) -> Any:
        return not self.inner.evaluate(fired, occ)

    def __repr__(self) -> str:
        return f"~{self.inner!r}"


class _And(Condition):
    def __init__(self, a: Condition, b: Condition) -> None:
        self.a, self.b = a, b

    def evaluate(self, fired: Callable[[Any], bool], occ: Any) -> Any:
        return self.a.evaluate(fired, occ) and self.b.evaluate(fired, occ)

    def __repr__(self) -> str:
        return f"({self.a!r} & {self.b!r})"


class _Or(Condition):
    def __init__(self, a: Condition, b: Condition) -> None:
        self.a, self.b = a, b

    def evaluate(self, fired: Callable[[Any], bool], occ: Any) -> Any:
        return self.a.evaluate(fired, occ) or self.b.evaluate(fired, occ)

    def __repr__(self) -> str:
        return f"({self.a!r} | {self.b!r})"


def _lift(fn: Predicate) -> Condition:
    return fn if isinstance(fn, Condition) else _Lift(fn)


FIRED: Condition = _Fired()
"""True when the rule fired before for one of the detection's event instances."""
