"""Event parameters: which values an occurrence may carry, and their JSON form.

Every occurrence can be written to the event log, so parameter values are limited
to *loggable* values:

- ``None``, ``bool``, ``int``, ``float``, ``str``;
- :class:`~sentinel.occurrence.ObjectRef` (how objects are referenced);
- ``datetime.datetime``, ``datetime.date``, ``datetime.time``,
  ``datetime.timedelta``, ``decimal.Decimal``, ``uuid.UUID``, ``bytes``;
- tuples of loggable values, frozensets of loggable values, and mappings with
  ``str`` keys and loggable values (kept as read-only ``MappingProxyType``).

:func:`normalize` converts what it can (lists to tuples, sets to frozensets,
``enum.Enum`` members to their value, dicts to read-only mappings) and raises
:class:`UnloggableParameter` for anything else, and for what no backend's JSON
column could keep: strings longer than :data:`MAX_STRING` characters, ``bytes``
longer than :data:`MAX_BYTES`, integers of more than :data:`MAX_INT_BITS` bits,
decimals of more than :data:`MAX_DECIMAL_DIGITS` digits, tuples and mappings
nested deeper than :data:`MAX_DEPTH` levels (MariaDB keeps at most 32 levels of
JSON, and a value sits a few levels down in the outbox's payload), and mapping
keys that hold a NUL character or a lone surrogate. Each cap keeps one value's
JSON text well below MariaDB's default 16 MiB packet; what the caps cannot
bound (many large values in one occurrence) the log's writer bounds: an
occurrence whose parameters would take more than :data:`MAX_PARAMS` bytes as
sent is logged with its largest values replaced by a marker
(``sentinel.log.TOO_LARGE``), never refused with its neighbours.

:func:`to_json` and :func:`from_json` round-trip loggable values through JSON text
with type tags for what JSON lacks, exactly, on every backend: besides the
types above, strings holding ``"\\x00"`` or a lone surrogate (which
PostgreSQL's ``jsonb`` and MariaDB refuse) are tagged ``$str``, integers outside
the signed 64-bit range ``$int`` (what every JSON reader keeps exactly), floats
that are not finite, negative zero, or whose shortest form has a positive
exponent (PostgreSQL's ``jsonb`` reads ``1e+16`` back as an integer) ``$float``.
A ``$datetime`` whose time zone is a :class:`~zoneinfo.ZoneInfo` carries the zone
after its offset, as RFC 9557 writes it (``2021-10-30T09:00:00+02:00[Europe/Paris]``).
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sentinel.errors import UnloggableParameter
from sentinel.occurrence import ObjectRef

__all__ = [
    "MAX_BYTES",
    "MAX_DECIMAL_DIGITS",
    "MAX_DEPTH",
    "MAX_INT_BITS",
    "MAX_PARAMS",
    "MAX_STRING",
    "PLAIN",
    "UnloggableParameter",
    "dumps",
    "from_json",
    "loads",
    "normalize",
    "oversize_error",
    "storable_text",
    "to_json",
    "too_large",
    "unstorable_text",
]

_SIMPLE = (type(None), bool, int, float, str)
#: Parameter value types that are loggable as they are (no normalization; the
#: strings and integers still have their caps).
PLAIN: Final[frozenset[type]] = frozenset({int, float, str, bool, type(None), ObjectRef})
_TAGGED = (dt.datetime, dt.date, dt.time, dt.timedelta, Decimal, uuid.UUID, bytes)

#: The longest string (in characters) a parameter may hold: escaped as JSON text
#: (up to 12 bytes a character) it stays below MariaDB's default 16 MiB packet.
MAX_STRING = 1_000_000
#: The longest ``bytes`` value a parameter may hold (base64 in the log: 4/3 as
#: many characters).
MAX_BYTES = 1_000_000
#: The largest integer a parameter may hold, in bits (beyond 64 bits the log
#: writes an integer in hexadecimal: at most 1,000,000 digits).
MAX_INT_BITS = 4_000_000
#: The most digits a ``Decimal`` parameter may hold.
MAX_DECIMAL_DIGITS = 1_000_000
#: The most bytes one occurrence's parameters may take in the log, counted as
#: sent (their JSON text, plus one byte for each quote and backslash, which
#: MariaDB's and MySQL's drivers escape): below MariaDB's default 16 MiB packet
#: with the rest of the row. Checked when the row is written: the writer
#: replaces the largest values with a marker until the rest fits.
MAX_PARAMS = 15 * 2**20
#: How deep tuples, frozensets and mappings may nest in one parameter value.
MAX_DEPTH = 10
_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1
#: A lone surrogate (one not part of a high-low pair).
_LONE_SURROGATE = re.compile(
    "[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]"
)


def unstorable_text(text: str) -> bool:
    """True when ``text`` holds what some backend's JSON cannot store as a string:
    a NUL character (PostgreSQL) or a lone surrogate (PostgreSQL, MariaDB)."""
    return "\x00" in text or (not text.isascii() and _LONE_SURROGATE.search(text) is not None)


def storable_text(text: str) -> str:
    """``text`` (a message: an error's text) as every backend's text column
    stores it: NUL characters and lone surrogates written as backslash escapes
    (lossy only for those; a message is for reading)."""
    if not unstorable_text(text):
        return text
    text = text.replace("\x00", "\\x00")
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def normalize(
    value: Any,
    *,
    event: str = "event",
    param: str = "?",
    ref: Callable[[Any], ObjectRef | None] | None = None,
    limits: bool = True,
    _depth: int = 0,
) -> Any:
    """``value`` as a loggable value (see the module docs), or raise
    :class:`UnloggableParameter` naming ``event`` and ``param``.

    ``ref`` maps objects to references (the reactive layer passes one that knows
    reactive objects); it is tried before giving up. ``limits=False`` leaves
    the length caps (strings, bytes, integers, decimals) to whoever logs the
    value, which knows whether its policy leaves it out: the reactive layer's
    binding of a call, before the log's policy is known.
    """
    t = type(value)
    if t is str:
        if limits and len(value) > MAX_STRING:
            raise _too_long(event, param, value)
        return value
    if t is int:
        if limits and value.bit_length() > MAX_INT_BITS:
            raise oversize_error(event, param, value)
        return value
    if t in _SIMPLE or t is ObjectRef:
        return value
    if isinstance(value, enum.Enum):
        return normalize(
            value.value, event=event, param=param, ref=ref, limits=limits, _depth=_depth
        )
    if isinstance(value, _TAGGED):
        if limits and too_large(value):
            raise oversize_error(event, param, value)
        return value
    if isinstance(value, _SIMPLE):  # subclasses of int, str, float
        if limits and too_large(value):
            if isinstance(value, str):
                raise _too_long(event, param, value)
            raise oversize_error(event, param, value)
        return value
    if isinstance(value, (Mapping, list, tuple, set, frozenset)) and _depth >= MAX_DEPTH:
        raise UnloggableParameter(
            event,
            param,
            value,
            f"tuples, sets and mappings may nest at most {MAX_DEPTH} levels deep "
            "(a backend's JSON column keeps no more)",
        )
    depth = _depth + 1
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise UnloggableParameter(event, param, value, "mapping keys must be strings")
            if unstorable_text(k) or len(k) > MAX_STRING:
                raise UnloggableParameter(
                    event,
                    param,
                    value,
                    f"the mapping key {k!r:.40} holds a NUL character or a lone surrogate, "
                    "or is too long (no backend's JSON keeps it as a key)",
                )
            out[str(k)] = normalize(
                v, event=event, param=f"{param}[{k!r}]", ref=ref, limits=limits, _depth=depth
            )
        return MappingProxyType(out)
    if isinstance(value, (set, frozenset)):
        items = [
            normalize(v, event=event, param=f"{param}[{i}]", ref=ref, limits=limits, _depth=depth)
            for i, v in enumerate(value)
        ]
        try:
            return frozenset(items)
        except TypeError:  # pragma: no cover - elements of a set are hashable already
            raise UnloggableParameter(event, param, value) from None
    if isinstance(value, (list, tuple)):
        return tuple(
            normalize(v, event=event, param=f"{param}[{i}]", ref=ref, limits=limits, _depth=depth)
            for i, v in enumerate(value)
        )
    if ref is not None:
        r = ref(value)
        if r is not None:
            return r
    raise UnloggableParameter(event, param, value)


def too_large(value: Any) -> bool:
    """True when ``value`` (a ``str``, ``bytes``, ``int`` or ``Decimal``, or a
    subclass) is over its type's cap (see the module docs); False for any other
    value."""
    if isinstance(value, str):
        return len(value) > MAX_STRING
    if isinstance(value, bytes):
        return len(value) > MAX_BYTES
    if isinstance(value, int):
        return value.bit_length() > MAX_INT_BITS
    if isinstance(value, Decimal):
        return len(value.as_tuple().digits) > MAX_DECIMAL_DIGITS
    return False


def oversize_error(event: str, param: str, value: Any) -> UnloggableParameter:
    """The error for ``value`` (a ``str``, ``bytes``, ``int`` or ``Decimal``)
    over its type's cap (:func:`too_large`), naming ``event`` and ``param``."""
    if isinstance(value, str):
        return _too_long(event, param, value)
    if isinstance(value, bytes):
        what = f"bytes values may hold at most {MAX_BYTES:,} bytes (this one holds {len(value):,})"
    elif isinstance(value, int):
        what = (
            f"integers may hold at most {MAX_INT_BITS:,} bits "
            f"(this one holds {value.bit_length():,})"
        )
    else:
        what = (
            f"decimals may hold at most {MAX_DECIMAL_DIGITS:,} digits "
            f"(this one holds {len(value.as_tuple().digits):,})"
        )
    return UnloggableParameter(
        event,
        param,
        value,
        f"{what}; exclude the parameter from the event, or pass a digest or a reference instead",
    )


def _too_long(event: str, param: str, value: str) -> UnloggableParameter:
    return UnloggableParameter(
        event,
        param,
        value,
        f"strings may hold at most {MAX_STRING:,} characters (this one holds {len(value):,}); "
        "exclude the parameter from the event, or pass a digest or a reference instead",
    )


def to_json(value: Any) -> Any:
    """A JSON-compatible structure for a loggable value, which every backend's
    JSON column stores and gives back exactly (see the module docs)."""
    t = type(value)
    if t is str:
        if unstorable_text(value):
            return {"$str": value.encode("unicode_escape").decode("ascii")}
        return value
    if t is int:
        if _INT_MIN <= value <= _INT_MAX:
            return value
        return {"$int": hex(value)}
    if t is float:
        if value != value:  # NaN, its sign kept (repr() writes "nan" for both)
            return {"$float": "-nan" if math.copysign(1.0, value) < 0 else "nan"}
        if value in (_INF, -_INF):
            return {"$float": repr(value)}
        if -1e16 < value < 1e16:  # repr() writes these without a positive exponent
            if value == 0.0 and math.copysign(1.0, value) < 0:
                return {"$float": "-0.0"}
            return value
        return {"$float": repr(value)}
    if t in _SIMPLE:
        return value
    if t is ObjectRef:
        return {"$ref": [to_json(value[0]), [to_json(k) for k in value[1]]]}
    for base in _SIMPLE[1:]:  # subclasses (IntEnum members were normalized away)
        if isinstance(value, base):
            return to_json(base(value))
    if isinstance(value, dt.datetime):
        zone = value.tzinfo
        if type(zone) is ZoneInfo and zone.key:
            # the IANA zone too, as RFC 9557 writes it: the offset alone would
            # come back as a fixed offset, and wall-clock arithmetic across a
            # daylight-saving change would differ from the live run's
            return {"$datetime": f"{value.isoformat()}[{zone.key}]"}
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
    if isinstance(value, frozenset):
        # in the order of their JSON text: the same set always gives the same text
        return {"$set": sorted((to_json(v) for v in value), key=_json_text)}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if type(k) is not str or unstorable_text(k):
                raise TypeError(f"not a loggable mapping key: {k!r}")
            out[k] = to_json(v)
        if any(k.startswith("$") for k in out):
            return {"$map": out}
        return out
    raise TypeError(f"not a loggable value: {value!r}")


_INF = float("inf")


def _json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _decode_str(text: str) -> str:
    return text.encode("ascii").decode("unicode_escape")


def _datetime(text: str) -> dt.datetime:
    """A ``$datetime`` tag's text: ISO 8601, with an IANA zone in brackets after
    it when the value had one (RFC 9557). The zone comes back as a
    :class:`~zoneinfo.ZoneInfo` (the same instant; its ``fold`` from the offset);
    where this machine does not know it, the fixed offset the text holds."""
    if not text.endswith("]"):
        return dt.datetime.fromisoformat(text)
    head, _, key = text[:-1].partition("[")
    value = dt.datetime.fromisoformat(head)
    try:
        zone = ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError):
        return value
    return value.replace(tzinfo=zone) if value.tzinfo is None else value.astimezone(zone)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "$ref": lambda v: ObjectRef(from_json(v[0]), tuple(from_json(k) for k in v[1])),
    "$datetime": _datetime,
    "$date": dt.date.fromisoformat,
    "$time": dt.time.fromisoformat,
    "$timedelta": lambda v: dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    "$decimal": Decimal,
    "$uuid": uuid.UUID,
    "$bytes": lambda v: base64.b64decode(v),
    "$float": float,
    "$str": _decode_str,
    "$int": lambda v: int(v, 16),
    "$set": lambda v: frozenset(from_json(x) for x in v),
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
