"""What the log stores and returns: logged occurrences, rule firings, outbox entries,
and the JSON form of occurrences.

These are plain values shared by the writer, the readers and the layers above
(the ORM writes :class:`Firing` and :class:`OutboxEntry` rows; replay reads
:class:`LoggedOccurrence`). Parameter values use the tagged JSON form of
:mod:`sentinel.params`, so every loggable value comes back with its type.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, NamedTuple

from sentinel.log.partition import KeyPart
from sentinel.occurrence import AnyOccurrence, ObjectRef, Occurrence, params_of, split_params
from sentinel.params import UnloggableParameter, from_json, to_json, unstorable_text

__all__ = [
    "Firing",
    "LoggedOccurrence",
    "OutboxEntry",
    "decode_key",
    "decode_occurrence",
    "decode_occurrences",
    "encode_key",
    "encode_occurrence",
    "encode_occurrences",
    "encode_params",
    "idempotency_key",
]

_new = tuple.__new__
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _now() -> datetime:
    return datetime.now(UTC)


class _LoggedRow(NamedTuple):
    occurrence: Occurrence
    outcome: str | None
    id: int


class LoggedOccurrence(_LoggedRow):
    """One row of the event log: the occurrence as the detector saw it, how its
    transaction ended (``"committed"``, ``"aborted"``, or ``None`` for the process
    scope) and the row's ``id`` (insertion order).

    ``savepoint`` is an attribute, not a field (rows unpack as three values, as
    before it existed): ``None``, or for an occurrence that the rollback of a
    savepoint undid (its outcome is then ``"aborted"``), that savepoint's path,
    such as ``"sp1/sp3"`` (see ``docs/eventlog.md``).
    """

    savepoint: str | None = None


@dataclass(frozen=True, slots=True)
class Firing:
    """One rule execution, as the rule-firing log records it.

    ``scope`` and ``t_occ`` identify the detection (``t_occ`` is its
    terminator's); ``constituents`` are the ``(scope, t_occ)`` ids of the
    primitive occurrences it combines, in ``t_occ`` order; ``status`` is a
    :class:`~sentinel.log.tables.FiringStatus` value. ``id`` is set on firings
    read back from the log. ``savepoint`` names the savepoint whose rollback
    undid the rule run (a path such as ``"sp1/sp3"``), else ``None``.

    ``partition`` is what a partitioned rule's detection was partitioned by
    (its :class:`~sentinel.log.partition.KeyPart` values, outermost first;
    empty for other rules): the writer stores it as ``key``, the canonical
    text of :func:`~sentinel.log.partition.partition_key_text` with the log's
    parameter policy applied. ``key`` is set on firings read back from the log
    (and, when set, is written as it is).
    """

    rule: str
    scope: str
    t_occ: int
    constituents: tuple[tuple[str, int], ...]
    coupling: str
    status: str
    error: str | None = None
    fired_at: datetime = field(default_factory=_now)
    finished_at: datetime | None = None
    id: int | None = None
    savepoint: str | None = None
    partition: tuple[KeyPart, ...] = ()
    key: str | None = None

    @classmethod
    def of(
        cls,
        rule: str,
        occurrence: AnyOccurrence,
        *,
        coupling: str,
        status: str,
        error: str | None = None,
        fired_at: datetime | None = None,
        finished_at: datetime | None = None,
        partition: tuple[KeyPart, ...] = (),
    ) -> Firing:
        """The firing of ``rule`` for the detection ``occurrence``.

        >>> from sentinel import Occurrence
        >>> f = Firing.of("R1", Occurrence("E1", 3, 0.0, scope="tx"),
        ...               coupling="immediate", status="fired")
        >>> f.scope, f.t_occ, f.constituents
        ('tx', 3, (('tx', 3),))
        """
        return cls(
            rule=rule,
            scope=occurrence.scope,
            t_occ=occurrence.t_occ,
            constituents=tuple((c.scope, c.t_occ) for c in occurrence.constituents),
            coupling=str(coupling),
            status=str(status),
            error=error,
            fired_at=fired_at or _now(),
            finished_at=finished_at,
            partition=partition,
        )


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """A detached rule's pending execution, written in the triggering commit.

    ``constituents`` are the detection's primitive occurrences (stored in full in
    ``payload``, so the worker can rebuild what the action receives; the writer
    applies the log's parameter policy to them); ``extra`` holds further loggable
    values the ORM layer wants to keep with the entry. ``scope`` / ``t_occ``
    identify the triggering detection. Build entries with :meth:`of`.
    """

    rule: str
    idempotency_key: str
    scope: str
    t_occ: int
    constituents: tuple[Occurrence, ...]
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    status: str = "pending"
    attempts: int = 0
    next_attempt_at: datetime | None = None
    claimed_by: str | None = None
    last_error: str | None = None
    created_at: datetime = field(default_factory=_now)
    done_at: datetime | None = None
    id: int | None = None

    @classmethod
    def of(
        cls,
        rule: str,
        occurrence: AnyOccurrence,
        *,
        key: str | None = None,
        extra: Mapping[str, Any] | None = None,
        next_attempt_at: datetime | None = None,
    ) -> OutboxEntry:
        """A pending entry for ``rule`` triggered by ``occurrence``; ``key``
        defaults to :func:`idempotency_key` (deterministic, so the same detection
        can be enqueued only once)."""
        now = _now()
        return cls(
            rule=rule,
            idempotency_key=key or idempotency_key(rule, occurrence),
            scope=occurrence.scope,
            t_occ=occurrence.t_occ,
            constituents=occurrence.constituents,
            extra=MappingProxyType(dict(extra)) if extra else _EMPTY,
            next_attempt_at=next_attempt_at or now,
            created_at=now,
        )

    @property
    def payload(self) -> dict[str, Any]:
        """The JSON structure stored in the ``payload`` column."""
        return {
            "constituents": encode_occurrences(self.constituents),
            "extra": encode_params(self.extra, event="outbox " + self.rule),
        }

    @staticmethod
    def decode_payload(
        payload: Mapping[str, Any],
    ) -> tuple[tuple[Occurrence, ...], Mapping[str, Any]]:
        """``(constituents, extra)`` from a ``payload`` column value."""
        extra = payload.get("extra") or {}
        return (
            decode_occurrences(payload.get("constituents", ())),
            MappingProxyType({k: from_json(v) for k, v in extra.items()}),
        )


def idempotency_key(rule: str, occurrence: AnyOccurrence) -> str:
    """A key that is the same exactly when the rule and the detection (its scope,
    ``t_occ`` and constituent ids) are: 64 hex digits."""
    return detection_key(rule, str(occurrence.scope), occurrence.t_occ, occurrence.constituents)


_esc = json.encoder.encode_basestring_ascii  # what json.dumps escapes strings with
_sha256 = hashlib.sha256


def detection_key(rule: str, scope: str, t_occ: Any, constituents: Iterable[Occurrence]) -> str:
    """:func:`idempotency_key` of the detection with this ``scope``, ``t_occ``
    and ``constituents``: the SHA-256 of the :func:`json.dumps` text of
    ``[rule, scope, t_occ, "scope/t_occ" of each constituent]``, written here
    directly when ``rule`` is a string and ``t_occ`` an integer."""
    if type(rule) is str and type(t_occ) is int:
        esc = _esc
        text = ", ".join([esc(rule), esc(scope), int.__repr__(t_occ)])
        for c in constituents:
            text += ", " + esc(f"{c.scope}/{c.t_occ}")
        return _sha256(("[" + text + "]").encode()).hexdigest()
    ident = [rule, scope, t_occ]
    ident.extend(f"{c.scope}/{c.t_occ}" for c in constituents)
    return _sha256(json.dumps(ident).encode()).hexdigest()


# -- JSON forms ---------------------------------------------------------------------
def encode_params(params: Mapping[str, Any], *, event: str = "event") -> dict[str, Any]:
    """``params`` in the log's JSON form; raises
    :class:`~sentinel.params.UnloggableParameter` naming ``event`` and the
    parameter for a value that is not loggable (or a parameter name no
    backend's JSON keeps: not a string, or holding a NUL or a lone surrogate)."""
    try:
        out = {k: to_json(v) for k, v in params.items()}
    except TypeError:
        for k, v in params.items():
            try:
                to_json(v)
            except TypeError:
                raise UnloggableParameter(event, k, v) from None
        raise
    for k in out:
        if type(k) is not str or unstorable_text(k):
            raise UnloggableParameter(
                event,
                repr(k),
                params[k],
                "parameter names must be strings without NUL characters or lone surrogates",
            )
    return out


_compact = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def encode_key(key: tuple[Any, ...]) -> str:
    """An object reference's key as compact JSON text (the ``source_key`` column)."""
    return _compact(to_json(tuple(key)))


def decode_key(text: str) -> tuple[Any, ...]:
    key = from_json(json.loads(text))
    return key if isinstance(key, tuple) else (key,)


def encode_occurrence(occ: Occurrence) -> dict[str, Any]:
    """A primitive occurrence as a JSON structure (floats kept exactly)."""
    event, t_occ, ts, dts, source, _, scope, _ = occ
    params = params_of(occ)
    return {
        "event": event,
        "t_occ": t_occ,
        "ts": ts,
        "detected_ts": dts,
        "source": None if source is None else to_json(source),
        "params": encode_params(params, event=event),
        "scope": scope,
    }


def decode_occurrence(data: Mapping[str, Any]) -> Occurrence:
    """The occurrence :func:`encode_occurrence` encoded."""
    source = data.get("source")
    values, names = split_params({k: from_json(v) for k, v in (data.get("params") or {}).items()})
    return _new(
        Occurrence,
        (
            data["event"],
            data["t_occ"],
            data["ts"],
            data["detected_ts"],
            None if source is None else from_json(source),
            values,
            data["scope"],
            names,
        ),
    )


def encode_occurrences(occs: Iterable[Occurrence]) -> list[dict[str, Any]]:
    return [encode_occurrence(o) for o in occs]


def decode_occurrences(data: Sequence[Mapping[str, Any]]) -> tuple[Occurrence, ...]:
    return tuple(decode_occurrence(d) for d in data)


def source_ref(source_class: str | None, source_key: str | None) -> ObjectRef | None:
    """The :class:`ObjectRef` stored in a row's ``source_class`` / ``source_key``."""
    if source_class is None:
        return None
    return ObjectRef(source_class, decode_key(source_key) if source_key is not None else ())
