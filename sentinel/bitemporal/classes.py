"""Event classes with keys: announcements, revisions and revocations.

An *event class* (the thesis's subscribed event class, 2.4.1) is a primitive
event whose occurrences are announcements of *instances* identified by the values
of its key attributes. The first announcement of a key is an ANNOUNCEMENT; a
later one is a revision (new attributes and/or a new occurrence time), allowed
only for a ``MUTABLE`` class; a revocation cancels the instance. Each is one
occurrence of the class's event, whose parameters are the instance's attributes
(the old ones for a revocation) plus ``$revision``: ``kind``, ``key``, ``n`` (the
instance's version), and for a revision or revocation ``old_ts`` and ``old`` (the
previous occurrence time and attributes). :func:`revision` reads it.

This module keeps the classes' current versions (the as-of-now view) and turns
requests into occurrences; :mod:`sentinel.bitemporal.service` signals them, at
once or at the next clock tick.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

from sentinel.algebra.expressions import Primitive
from sentinel.bitemporal.classify import REVISION
from sentinel.errors import BitemporalError
from sentinel.occurrence import param, params_of
from sentinel.params import normalize

__all__ = ["IMMUTABLE", "MUTABLE", "EventClass", "Instance", "Revision", "revision"]

MUTABLE: Final = "MUTABLE"
IMMUTABLE: Final = "IMMUTABLE"


@dataclass(frozen=True)
class EventClass:
    """A keyed event class: its ``name`` (the event's name), the ``key``
    attributes identifying an instance, whether it is ``mutable``, and its
    ``lifespan`` in seconds (``None``: unbounded) with ``archive`` saying whether
    expired instances are handed to the archive listeners."""

    name: str
    key: tuple[str, ...]
    mutable: bool
    lifespan: float | None = None
    archive: bool = False

    @property
    def event(self) -> Primitive:
        """The class's primitive event (use it in expressions)."""
        return Primitive(self.name)

    def key_of(self, attrs: Mapping[str, Any], what: str) -> tuple[Hashable, ...]:
        missing = [k for k in self.key if k not in attrs]
        if missing:
            raise BitemporalError(
                f"{what} of {self.name} lacks its key attribute(s) {', '.join(missing)} "
                f"(the key of {self.name} is {', '.join(self.key)})",
                event=self.name,
            )
        key = tuple(attrs[k] for k in self.key)
        try:
            hash(key)
        except TypeError:
            raise BitemporalError(
                f"{what} of {self.name}: key value {key!r} is not hashable", event=self.name
            ) from None
        return key

    def __str__(self) -> str:
        kind = MUTABLE if self.mutable else IMMUTABLE
        return f"{kind} event class {self.name} key ({', '.join(self.key)})"


@dataclass
class Instance:
    """The current version of one instance: its occurrence time, attributes,
    version number and detection time."""

    ts: float
    attrs: Mapping[str, Any]
    n: int
    detected: float


def attributes(cls: EventClass, attrs: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``attrs`` made loggable (raising
    :class:`~sentinel.params.UnloggableParameter` naming the class and attribute)."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if k == REVISION:
            raise BitemporalError(
                f"{what} of {cls.name}: {REVISION!r} is reserved for the revision", event=cls.name
            )
        out[k] = normalize(v, event=cls.name, param=k)
    return out


def revision_params(
    kind: str,
    key: tuple[Hashable, ...],
    n: int,
    attrs: Mapping[str, Any],
    old: Instance | None,
) -> dict[str, Any]:
    """The parameters of an event class occurrence (see the module docs)."""
    rev: dict[str, Any] = {"kind": kind, "key": key, "n": n}
    if old is not None:
        rev["old_ts"] = old.ts
        rev["old"] = old.attrs
    params = dict(attrs)
    params[REVISION] = MappingProxyType(rev)
    return params


@dataclass(frozen=True)
class Revision:
    """What one occurrence of an event class says about its instance (see
    :func:`revision`).

    ``kind`` is ``"announce"``, ``"revise"``, ``"revoke"`` or ``"due"`` (a FUTURE
    instance whose time has come); ``key`` the key values; ``n`` the instance's
    version (1 for the first announcement); ``new`` and ``new_at`` the
    attributes and occurrence time after it (``None`` for a revocation); ``old``
    and ``old_at`` before it (``None`` for a first announcement).
    """

    kind: str
    key: tuple[Any, ...]
    n: int
    new: Mapping[str, Any] | None
    new_at: datetime | None
    old: Mapping[str, Any] | None
    old_at: datetime | None


def revision(occ: Any) -> Revision | None:
    """The revision an occurrence of an event class carries, or ``None`` for any
    other occurrence. For a composite occurrence, that of its terminator.

    >>> from sentinel.occurrence import Occurrence
    >>> revision(Occurrence("E", 1, 0.0)) is None
    True
    """
    while len(occ) != 8:
        parts = occ[2]
        occ = parts[-1]
    rev = param(occ, REVISION)
    if rev is None:
        return None
    kind = rev["kind"]
    new = (
        None
        if kind == "revoke"
        else MappingProxyType({k: v for k, v in params_of(occ).items() if k != REVISION})
    )
    old_ts = rev.get("old_ts")
    return Revision(
        kind=kind,
        key=tuple(rev["key"]),
        n=rev["n"],
        new=new,
        new_at=None if kind == "revoke" else datetime.fromtimestamp(occ[2], UTC),
        old=rev.get("old"),
        old_at=None if old_ts is None else datetime.fromtimestamp(old_ts, UTC),
    )
