"""Whether, and as what, an occurrence's parameters go to the log: one entry point.

:func:`loggable_params` is the one place that decides it, called once per logged
occurrence (by the ORM layer's occurrence listener, before the occurrence is
buffered for the log). It applies the :class:`~sentinel.log.policy.LogPolicy`
first: a value the log leaves out (excluded) or replaces (redacted) is never
refused, whatever it is. A value the log keeps is made loggable by
:func:`sentinel.params.normalize` (the value-level rules, owned by the occurrence
layer), or refused with :class:`~sentinel.params.UnloggableParameter` naming the
event and the parameter. Parameter values the layers below made loggable already
(:data:`~sentinel.params.PLAIN`) cost one type test each; only a value over its
type's cap, or of another type, looks at the policy.

The writer (:mod:`sentinel.log.writer`) applies the same policy again when it
writes, and :mod:`sentinel.log.encoding` writes the JSON text (replacing the
largest values of an occurrence too large for one row): what reaches them has
passed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from sentinel.log.policy import LogPolicy
from sentinel.params import (
    MAX_BYTES,
    MAX_INT_BITS,
    MAX_STRING,
    PLAIN,
    UnloggableParameter,
    normalize,
    oversize_error,
    unstorable_text,
)

__all__ = ["loggable_params", "loggable_values"]

#: Parameter value types taken as they are (already loggable): a read-only
#: mapping is a database event's column values or a normalized mapping.
_LOGGABLE = PLAIN | {MappingProxyType}
#: The longest parameter name the log takes.
_MAX_NAME = 1000
#: Parameter names seen to be storable (names recur: one set lookup each).
_NAMES_OK: set[str] = set()
#: Tuples of parameter names (as occurrences store them) seen to be storable.
_NAME_TUPLES_OK: set[tuple[str, ...]] = set()


def loggable_params(
    policy: LogPolicy | None,
    event: str,
    params: dict[str, Any],
    checked_mappings: bool = False,
) -> dict[str, Any]:
    """``params`` (an occurrence's parameters, of the event named ``event``) made
    loggable under ``policy``: the same dict, each value the log keeps and that
    is not loggable as it is replaced in place by its normalized form
    (:func:`sentinel.params.normalize`); values ``policy`` excludes or redacts
    are left as they are.

    Raises :class:`~sentinel.params.UnloggableParameter` naming ``event`` and
    the parameter for a kept value that cannot be logged (of a type the log
    cannot store, or over its type's cap), and for a parameter name no
    backend's JSON keeps as a key.

    ``checked_mappings``: the read-only mappings among ``params`` were made by
    the layer that signalled (an occurrence with a source: a method's bound
    arguments, a database event's column values ``new`` and ``old``); only
    their values' caps are checked. Otherwise (an explicit signal) a read-only
    mapping is normalized like a dict.
    """
    for k, v in params.items():
        if k not in _NAMES_OK:
            _check_name(event, k, v)
        t = type(v)
        if t is str:
            if len(v) > MAX_STRING:
                _refuse_kept(policy, event, params, (k,))
        elif t is int:
            if v.bit_length() > MAX_INT_BITS:
                _refuse_kept(policy, event, params, (k,))
        elif t is float:
            continue  # loggable as it is, no cap
        elif t is MappingProxyType:
            if not checked_mappings:
                if _kept(policy, event, params, (k,)):
                    params[k] = normalize(v, event=event, param=k)
                continue
            for k2, v2 in v.items():
                if _over_cap(v2):
                    _refuse_kept(policy, event, params, (k, k2))
                elif type(v2) in _NESTED:  # a method's argument holding others
                    found = _first_over_cap(v2, (k, k2))
                    if found is not None and _kept(policy, event, params, found[0]):
                        raise oversize_error(event, ".".join(found[0]), found[1])
        elif t not in _LOGGABLE:
            _normalize_kept(policy, event, params)
            break
    return params


def loggable_values(
    policy: LogPolicy | None,
    event: str,
    names: tuple[str, ...],
    values: tuple[Any, ...],
    checked_mappings: bool = False,
) -> tuple[Any, ...] | None:
    """:func:`loggable_params` for parameters stored positionally, as an
    occurrence holds them: ``None`` when ``values`` go to the log as they are,
    else the values made loggable (raises as :func:`loggable_params` does).
    Names seen before (one set lookup per tuple of names) and plain values
    within their caps (and, with ``checked_mappings``, the read-only mappings of
    database events) cost one test each, without a mapping made."""
    if names in _NAME_TUPLES_OK:
        for v in values:
            t = type(v)
            if t is str:
                if len(v) > MAX_STRING:
                    break
            elif t is int:
                if v.bit_length() > MAX_INT_BITS:
                    break
            elif t is float or v is None or t is bool:
                continue
            elif t is MappingProxyType:
                # an explicit signal's mapping is normalized like a dict
                if not checked_mappings or any(
                    _over_cap(x) or type(x) in _NESTED for x in v.values()
                ):
                    break
            elif t not in _LOGGABLE:
                break
        else:
            return None
    params = dict(zip(names, values, strict=True))
    loggable_params(policy, event, params, checked_mappings)  # checks the names
    if len(_NAME_TUPLES_OK) > 10_000:
        _NAME_TUPLES_OK.clear()
    _NAME_TUPLES_OK.add(names)
    made = tuple(params.values())
    return None if all(a is b for a, b in zip(made, values, strict=True)) else made


#: Containers a method's normalized argument may hold values in.
_NESTED = (MappingProxyType, tuple, frozenset)


def _first_over_cap(value: Any, path: tuple[str, ...]) -> tuple[tuple[str, ...], Any] | None:
    """The first value over its cap inside ``value`` (at ``path``), with the
    path a policy names it by (mapping keys; an element of a tuple or set by
    its container's), or ``None``."""
    if type(value) is MappingProxyType:
        items: Any = (((*path, k), v) for k, v in value.items())
    else:
        items = ((path, v) for v in value)
    for where, v in items:
        if _over_cap(v):
            return where, v
        if type(v) in _NESTED:
            found = _first_over_cap(v, where)
            if found is not None:
                return found
    return None


def _over_cap(value: Any) -> bool:
    """Whether a value of a database event's read-only mapping is over its
    type's cap (:func:`sentinel.params.too_large`'s, for the types a database
    event passes as they are: strings, bytes, integers)."""
    t = type(value)
    return (
        (t is str and len(value) > MAX_STRING)
        or (t is int and value.bit_length() > MAX_INT_BITS)
        or (t is bytes and len(value) > MAX_BYTES)
    )


def _check_name(event: str, name: Any, value: Any) -> None:
    """Refuse a parameter name no backend's JSON keeps as a key (``**{"\\x00": 1}``
    in an explicit signal); remember a good one."""
    if type(name) is not str or unstorable_text(name) or len(name) > _MAX_NAME:
        raise UnloggableParameter(
            event,
            repr(name)[:80],
            value,
            "parameter names must be strings of at most 1,000 characters without NUL "
            "characters or lone surrogates",
        )
    if len(_NAMES_OK) > 10_000:
        _NAMES_OK.clear()
    _NAMES_OK.add(name)


def _value_at(params: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = params
    for p in path:
        value = value[p]
    return value


def _kept(
    policy: LogPolicy | None, event: str, params: Mapping[str, Any], path: tuple[str, ...]
) -> bool:
    """Whether the log keeps the value at ``path`` of ``params`` as it is (it
    drops an excluded value and replaces a redacted one)."""
    value = _value_at(params, path)
    view: Any = params if policy is None else policy.apply(event, params)
    for p in path:
        if not isinstance(view, Mapping) or p not in view:
            return False
        view = view[p]
    return view is value


def _refuse_kept(
    policy: LogPolicy | None, event: str, params: Mapping[str, Any], path: tuple[str, ...]
) -> None:
    """Raise for the value over its type's cap (a string too long, bytes, an
    integer too large) at ``path`` of ``params``, unless the log leaves it out."""
    if _kept(policy, event, params, path):
        raise oversize_error(event, ".".join(path), _value_at(params, path))


def _normalize_kept(policy: LogPolicy | None, event: str, params: dict[str, Any]) -> None:
    """Replace the values of ``params`` that are not loggable by loggable ones
    (or raise), leaving alone those the log leaves out."""
    for k, val in list(params.items()):
        if type(val) not in _LOGGABLE and _kept(policy, event, params, (k,)):
            params[k] = normalize(val, event=event, param=k)
