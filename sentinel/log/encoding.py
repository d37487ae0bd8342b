"""The JSON texts of the log's occurrences, made fast.

:func:`_params_text` writes an occurrence's parameters as the JSON text of its
``params`` (in the ``event_batches`` row's ``occurrences``), exactly as :func:`_dumps` writes
:func:`~sentinel.log.records.encode_params`' result, but without calling the
encoder for the plain values most events carry; :func:`_fit` replaces the
largest values of a text over :data:`~sentinel.params.MAX_PARAMS` bytes;
:func:`_key_text` remembers the source keys' text. Used by
:mod:`sentinel.log.inserts` and :class:`~sentinel.log.writer.LogWriter`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from sentinel.log.policy import TOO_LARGE
from sentinel.log.records import encode_key, encode_params
from sentinel.params import MAX_PARAMS, to_json

log = logging.getLogger("sentinel.log")

_KEYS: dict[tuple[Any, ...], str] = {}


def _key_text(key: tuple[Any, ...]) -> str:
    """:func:`~sentinel.log.records.encode_key`, remembered (objects recur)."""
    try:
        return _KEYS[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable key part: encoded each time
        return encode_key(key)
    if len(_KEYS) > 50_000:
        _KEYS.clear()
    text = _KEYS[key] = encode_key(key)
    return text


_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1


def _json_encoder() -> Callable[[Any], str]:
    """A compact JSON encoder for plain values (no NaN: callers check). The C
    encoder is made once and reused: ``JSONEncoder.encode`` makes one per call,
    which costs as much as the encoding of a small mapping."""
    import json.encoder as impl

    c_make_encoder: Any = getattr(impl, "c_make_encoder", None)
    if c_make_encoder is None:  # pragma: no cover - not CPython
        return json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    encode_basestring_ascii = impl.encode_basestring_ascii

    def reject(value: Any) -> Any:
        raise TypeError(f"not JSON: {value!r}")

    make = c_make_encoder(
        None, reject, encode_basestring_ascii, None, ":", ",", False, False, False
    )
    join = "".join

    def dumps(value: Any) -> str:
        return join(make(value, 0))

    return dumps


_dumps = _json_encoder()
_copysign = math.copysign


_esc: Callable[[str], str] = json.encoder.encode_basestring_ascii  # C when there is C
_float_text = float.__repr__
_int_text = int.__repr__
#: parameter names (in order) -> the params object's JSON text with ``%s`` for
#: each value: the names of one event's parameters recur in every row.
_TEMPLATES: dict[tuple[Any, ...], str] = {}


def _template(names: tuple[Any, ...]) -> str | None:
    """The ``%``-template of a params object with these names (``None`` when a
    name is not a string: :func:`~sentinel.log.records.encode_params` refuses it)."""
    if not all(type(n) is str for n in names):
        return None
    if len(_TEMPLATES) > 10_000:
        _TEMPLATES.clear()
    text = _TEMPLATES[names] = (
        "{" + ",".join(_esc(n).replace("%", "%%") + ":%s" for n in names) + "}"
    )
    return text


def _mapping_text(value: Any) -> str | None:
    """A read-only mapping of plain values (as database events carry) as the
    JSON object :func:`~sentinel.params.to_json` makes of it, or ``None`` when
    it needs more than that (a key that is not a string or starts with ``$``,
    a value that is not plain)."""
    parts: list[str] = []
    for k, v in value.items():
        if type(k) is not str or k.startswith("$"):
            return None
        t = type(v)
        if t is str:
            text = _esc(v)
        elif t is float:
            if not (-1e16 < v < 1e16 and (v != 0.0 or _copysign(1.0, v) > 0)):
                return None
            text = _float_text(v)
        elif t is int:
            if not _INT_MIN <= v <= _INT_MAX:
                return None
            text = _int_text(v)
        elif v is None:
            text = "null"
        elif t is bool:
            text = "true" if v else "false"
        else:
            return None
        parts.append(_esc(k) + ":" + text)
    return "{" + ",".join(parts) + "}"


#: A params text at most this long is within MAX_PARAMS whatever it holds (as
#: sent, a character takes at most two bytes): only longer ones are measured.
_SURELY_FITS = MAX_PARAMS // 2


def _sent_size(text: str) -> int:
    """The bytes JSON ``text`` (ASCII: every encoder here escapes to ASCII)
    takes as sent: MySQL's and MariaDB's drivers escape quotes and
    backslashes inside the statement."""
    return len(text) + text.count('"') + text.count("\\")


def _fit(text: str, params: Any, event: str) -> str:
    """``text`` (``params`` as JSON), or when it takes more than
    :data:`~sentinel.params.MAX_PARAMS` bytes as sent, the JSON of ``params``
    with its largest values replaced by :data:`~sentinel.log.TOO_LARGE` until
    the rest fits (reported on the ``sentinel.log`` logger): one occurrence's
    values never make its row, and the rows sent with it, fail."""
    if len(text) <= _SURELY_FITS:
        return text
    size = _sent_size(text)
    if size <= MAX_PARAMS:
        return text
    sizes = sorted(
        ((_sent_size(_dumps(to_json(v))), k) for k, v in params.items()),
        key=lambda item: item[0],
        reverse=True,
    )
    marker = _sent_size(_esc(TOO_LARGE))
    out = dict(params)
    replaced = []
    for n, k in sizes:
        if size <= MAX_PARAMS:
            break
        out[k] = TOO_LARGE
        replaced.append(k)
        size -= n - marker
    log.warning(
        "sentinel's event log: the parameters of an occurrence of %s take more than %d bytes; "
        "logged with %s replaced by %r",
        event[:80],
        MAX_PARAMS,
        ", ".join(repr(k)[:80] for k in replaced),
        TOO_LARGE,
    )
    return _dumps(encode_params(out, event=event))


def _params_text(params: Any, event: str) -> str:
    """Parameters as the JSON text of the ``params`` column, exactly as
    :func:`_dumps` writes :func:`~sentinel.log.records.encode_params`' result.

    Plain values (strings, finite floats without a positive exponent and not
    ``-0.0``, 64-bit integers, booleans, ``None``, and read-only mappings of
    such, as database events carry) are written here, each with the C
    function the JSON encoder itself uses for it, into a template of the
    parameter names made once per set of names; anything else goes through
    :func:`~sentinel.log.records.encode_params` (tagged values; raises
    :class:`~sentinel.params.UnloggableParameter`). Strings are escaped to
    ASCII, so one that needs the ``$str`` tag (a NUL, a lone surrogate) shows in
    the text as ``\\u0000`` or ``\\udXXX``: only then are the values looked at
    one by one. This costs about half of one call of the C encoder, whose
    fixed cost per call dominates for the few values a method has."""
    if not params:
        return "{}"
    parts: list[str] = []
    append = parts.append
    for v in params.values():
        t = type(v)
        if t is float:
            if -1e16 < v < 1e16 and (v != 0.0 or _copysign(1.0, v) > 0):
                append(_float_text(v))
                continue
        elif t is str:
            append(_esc(v))
            continue
        elif t is int:
            if _INT_MIN <= v <= _INT_MAX:
                append(_int_text(v))
                continue
        elif v is None:
            append("null")
            continue
        elif t is bool:
            append("true" if v else "false")
            continue
        elif t is MappingProxyType:
            text = _mapping_text(v)
            if text is not None:
                append(text)
                continue
        return _fit(_dumps(encode_params(params, event=event)), params, event)
    names = tuple(params)
    template = _TEMPLATES.get(names) or _template(names)
    if template is None:
        return _fit(_dumps(encode_params(params, event=event)), params, event)
    text = template % tuple(parts)
    if "\\u0000" in text or "\\ud" in text:
        return _fit(_dumps(encode_params(params, event=event)), params, event)
    if len(text) > _SURELY_FITS:
        return _fit(text, params, event)
    return text
