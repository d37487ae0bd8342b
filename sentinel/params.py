"""Event parameters: which values an occurrence may carry, and their JSON form.

Every occurrence can be written to the event log, so parameter values are limited
to *loggable* values:

- ``None``, ``bool``, ``int``, ``float``, ``str``;
- :class:`~sentinel.occurrence.ObjectRef` (how objects are referenced);
- ``datetime.datetime``, ``datetime.date``, ``datetime.time``,
  ``datetime.timedelta``, ``decimal.Decimal``, ``uuid.UUID``, ``bytes``;
- tuples of loggable values, and mappings with ``str`` keys and loggable values
  (kept as read-only ``MappingProxyType``).

:func:`normalize` converts what it can (lists and other sequences to tuples,
``enum.Enum`` members to their value, dicts to read-only mappings) and raises
:class:`UnloggableParameter` for anything else. :func:`to_json` and
:func:`from_json` round-trip loggable values through JSON text with type tags for
what JSON lacks.
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import json
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from sentinel.errors import SentinelError
from sentinel.occurrence import ObjectRef

__all__ = ["UnloggableParameter", "dumps", "from_json", "loads", "normalize", "to_json"]

_SIMPLE = (type(None), bool, int, float, str)
_TAGGED = (dt.datetime, dt.date, dt.time, dt.timedelta, Decimal, uuid.UUID, bytes)


class UnloggableParameter(SentinelError, TypeError):
    """A parameter value that cannot be written to the event log.

    ``event`` and ``param`` say where; ``value`` is the offending value.
    """

    def __init__(self, event: str, param: str, value: Any, hint: str = "") -> None:
        self.event = event
        self.param = param
        self.value = value
        msg = (
            f"parameter {param!r} of {event} is a {type(value).__name__} ({value!r:.80}), "
            "which the event log cannot store"
        )
        msg += "; " + (
            hint
            or "pass simple values (numbers, strings, dates, ObjectRef) "
            "or exclude the parameter from the event"
        )
        super().__init__(msg)


def normalize(
    value: Any,
    *,
    event: str = "event",
    param: str = "?",
    ref: Callable[[Any], ObjectRef | None] | None = None,
) -> Any:
    """``value`` as a loggable value (see the module docs), or raise
    :class:`UnloggableParameter` naming ``event`` and ``param``.

    ``ref`` maps objects to references (the reactive layer passes one that knows
    reactive objects); it is tried before giving up.
    """
    t = type(value)
    if t in _SIMPLE or t is ObjectRef:
        return value
    if isinstance(value, enum.Enum):
        return normalize(value.value, event=event, param=param, ref=ref)
    if isinstance(value, _TAGGED):
        return value
    if isinstance(value, _SIMPLE):  # subclasses of int, str, float
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise UnloggableParameter(event, param, value, "mapping keys must be strings")
            out[k] = normalize(v, event=event, param=f"{param}[{k!r}]", ref=ref)
        return MappingProxyType(out)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return tuple(
            normalize(v, event=event, param=f"{param}[{i}]", ref=ref) for i, v in enumerate(items)
        )
    if ref is not None:
        r = ref(value)
        if r is not None:
            return r
    raise UnloggableParameter(event, param, value)


def to_json(value: Any) -> Any:
    """A JSON-compatible structure for a loggable value."""
    t = type(value)
    if t in _SIMPLE:
        if t is float and (value != value or value in (float("inf"), float("-inf"))):
            return {"$float": repr(value)}
        return value
    if t is ObjectRef:
        return {"$ref": [value[0], [to_json(k) for k in value[1]]]}
    for base in _SIMPLE[1:]:  # subclasses (IntEnum members were normalized away)
        if isinstance(value, base):
            return to_json(base(value))
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        out = {k: to_json(v) for k, v in value.items()}
        if any(k.startswith("$") for k in out):
            return {"$map": out}
        return out
    raise TypeError(f"not a loggable value: {value!r}")


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "$ref": lambda v: ObjectRef(v[0], tuple(from_json(k) for k in v[1])),
    "$datetime": dt.datetime.fromisoformat,
    "$date": dt.date.fromisoformat,
    "$time": dt.time.fromisoformat,
    "$timedelta": lambda v: dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    "$decimal": Decimal,
    "$uuid": uuid.UUID,
    "$bytes": lambda v: base64.b64decode(v),
    "$float": float,
    "$map": lambda v: MappingProxyType({k: from_json(x) for k, x in v.items()}),
}


def from_json(value: Any) -> Any:
    """The loggable value a :func:`to_json` structure stands for."""
    if isinstance(value, list):
        return tuple(from_json(v) for v in value)
    if isinstance(value, dict):
        if len(value) == 1:
            ((k, v),) = value.items()
            dec = _DECODERS.get(k)
            if dec is not None:
                return dec(v)
        return MappingProxyType({k: from_json(v) for k, v in value.items()})
    return value


def dumps(params: Mapping[str, Any]) -> str:
    """A parameter mapping as JSON text (keys sorted, compact)."""
    return json.dumps(
        {k: to_json(v) for k, v in params.items()},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )


def loads(text: str | bytes | Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameter mapping :func:`dumps` wrote (accepts already-decoded JSON, as
    some drivers return for JSON columns)."""
    if text is None:
        return {}
    raw = json.loads(text) if isinstance(text, (str, bytes)) else text
    return {k: from_json(v) for k, v in raw.items()}
