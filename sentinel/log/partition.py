"""A rule firing's partition key as the log stores it, and how a filter finds it.

A partitioned rule (``(A ; B) by order_id``) detects separately for each value
of its key; a firing of it is a detection of one such value. The
``rule_firings.partition_key`` column holds that value as text (NULL for a
rule that is not partitioned), so the firings of one key are found through an
index:

- the text is the compact JSON array of the key's parts, outermost partition
  first (``(E by a) by b`` gives ``[b, a]``), each part in the tagged JSON form
  of :mod:`sentinel.params`, mappings with sorted keys: ``[7]``,
  ``[7,"EU"]``, ``["7"]`` (a string), an object reference (``by @source``)
  ``[{"$ref":["Order",[7]]}]``. Equal keys of one type always give the same
  text; values Python holds equal across types (``1``, ``1.0``, ``True``) do
  not (the detector puts them in one partition; the log keeps the value of the
  detection's first constituent);
- a text longer than :data:`~sentinel.log.tables.KEY_LENGTH` characters (191:
  what an index may hold on MariaDB) is stored as its first 126 characters,
  ``~`` and the SHA-256 of the whole text in hex: still the same for the same
  key;
- the log's parameter policy applies to the key, as to the parameter it was
  read from: a redacted part is stored as the policy's marker, and a key with
  an excluded part is not stored (NULL).

:func:`key_candidates` turns what a person types in a filter (``7``,
``EU``, ``[7,"EU"]``, ``<Order 7>``) into the texts it may stand for, so ``7``
finds the integer key and the string key ``"7"`` alike.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sentinel.log.tables import KEY_LENGTH
from sentinel.occurrence import ObjectRef
from sentinel.params import from_json, to_json

if TYPE_CHECKING:
    from sentinel.log.policy import LogPolicy

__all__ = ["KeyPart", "key_candidates", "partition_key_text"]

_HEAD = KEY_LENGTH - 1 - 64

_canonical = json.JSONEncoder(
    separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False
).encode


#: One part of a detection's partition key, ``(event, param, value)``: the
#: value, the parameter it was read from (``None``: the occurrence's source
#: object, ``by @source``) and the event of the occurrence that carried it
#: (whose log policy applies). :meth:`sentinel.rules.Rule.partition` makes them.
KeyPart = tuple[str, str | None, Any]


def _fit(text: str) -> str:
    if len(text) <= KEY_LENGTH:
        return text
    return text[:_HEAD] + "~" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _text(values: Iterable[Any]) -> str:
    return _fit(_canonical([to_json(v) for v in values]))


def partition_key_text(parts: Iterable[KeyPart], policy: LogPolicy | None = None) -> str | None:
    """The ``partition_key`` text of ``parts`` (outermost first), with
    ``policy`` applied to each part's parameter; ``None`` for no parts or when
    the policy excludes one. Raises :class:`TypeError` for a value that is not
    loggable (the detector's parameters always are).

    >>> partition_key_text([("Paid", "order_id", 7)])
    '[7]'
    >>> partition_key_text([("Paid", "region", "EU"), ("Paid", "order_id", 7)])
    '["EU",7]'
    >>> partition_key_text([("Paid", None, ObjectRef("Order", (7,)))])
    '[{"$ref":["Order",[7]]}]'
    """
    values = []
    for event, param, value in parts:
        if param is not None and policy:
            kept = policy.apply(event, {param: value})
            if param not in kept:
                return None
            value = kept[param]
        values.append(value)
    if not values:
        return None
    return _text(values)


#: ``<Order 7>`` (how an object reference prints) or ``Order:7``.
_REF = re.compile(r"<([A-Za-z_][\w.]*) (.+)>|([A-Za-z_][\w.]*):(.+)", re.DOTALL)


def _scalar(text: str) -> Any:
    """``text`` read as a JSON number, boolean or null, else ``text``."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if value is None or isinstance(value, bool | int | float) else text


def _value_forms(text: str) -> list[Any]:
    """The values ``text`` may stand for: itself as a string, what it reads as
    JSON (tagged forms included), an object reference."""
    forms: list[Any] = [text]
    with contextlib.suppress(ValueError, TypeError, KeyError, IndexError):
        forms.append(from_json(json.loads(text)))
    ref = _REF.fullmatch(text.strip())
    if ref is not None:
        cls = ref.group(1) or ref.group(3)
        raw = ref.group(2) if ref.group(1) else ref.group(4)
        for key in _value_forms(raw):
            parts = key if isinstance(key, tuple) else (key,)
            forms.append(ObjectRef(cls, parts))
            if isinstance(key, str) and "," in key:  # how ObjectRef prints a composite key
                pieces = key.split(",")
                forms.append(ObjectRef(cls, tuple(pieces)))
                forms.append(ObjectRef(cls, tuple(_scalar(p) for p in pieces)))
    return forms


def key_candidates(text: str) -> list[str]:
    """The ``partition_key`` texts a filter value ``text`` may mean, the exact
    stored text first: a stored text itself (as :func:`partition_key_text` or
    a firing's page shows it), a one-part key holding ``text`` as a string or
    as the value its JSON reads as, an object reference written as it prints
    (``<Order 7>``) or ``Order:7``. A JSON array also stands for a multi-part
    key, outermost part first.

    >>> key_candidates("7")
    ['["7"]', '[7]']
    >>> key_candidates("<Order 7>")[-2:]
    ['[{"$ref":["Order",["7"]]}]', '[{"$ref":["Order",[7]]}]']
    """
    # a stored text is a JSON array, or starts as one (a long key's digest form)
    out: dict[str, None] = {text: None} if text.startswith("[") else {}
    for value in _value_forms(text):
        try:
            out[_text([value])] = None
            if type(value) is tuple and value:
                out[_text(value)] = None
        except (TypeError, ValueError):  # not loggable: no key holds it
            continue
    return list(out)
