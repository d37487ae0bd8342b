"""The values an event class stores: checked once, the same on every backend.

A value a database would refuse (PostgreSQL and a NUL character, MariaDB and
NaN), store differently (SQLite keeps a string longer than ``VARCHAR(5)``,
turns NaN into NULL) or that would break a later tick (a time after the year
9999, which no datetime holds) is refused where it enters:

- :meth:`Processor.announce` and ``announce_many`` raise
  :class:`~sentinel.errors.BicepAnnouncementError`;
- a row the application wrote into an inbox itself is checked when a tick reads
  it (:func:`inbox_row`), and rejected if bad: the tick goes on without it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

from sentinel.bicep import model as m
from sentinel.bicep.tables import KEY_TEXT_LENGTH
from sentinel.bicep.times import MAX_TIME

__all__ = ["INT_MAX", "INT_MIN", "MAX_TEXT_VALUE_BYTES", "check_value", "inbox_row"]

#: The integers every backend stores (a 64-bit BIGINT).
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
#: The most bytes (UTF-8) of a text value, on every backend: MariaDB's and
#: MySQL's ``TEXT`` column, which holds an attribute that is not a key, holds
#: 65,535.
MAX_TEXT_VALUE_BYTES = 65_535

#: Room for any NUMERIC(p, s) a backend holds (MariaDB: p up to 65).
_WIDE = Context(prec=200)


def check_value(cls: str, attr: m.Attribute, value: Any, *, key: bool, stored: bool = False) -> Any:
    """``value`` as the attribute ``attr`` of class ``cls`` stores it (a
    :class:`~decimal.Decimal` for ``NUMERIC(p, s)``, ``float`` for ``REAL``
    and plain ``NUMERIC``); raise :class:`ValueError` saying what is
    wrong. ``stored``: the value was read from a table (booleans may come back as
    0 or 1, numbers as :class:`~decimal.Decimal` or, a wide ``NUMERIC(p, s)``
    on SQLite, as text)."""
    if value is None:
        return None
    kind = attr.type.kind
    where = f"attribute {attr.name} of {cls}"
    if kind == "boolean":
        if stored and type(value) is int and value in (0, 1):
            return bool(value)
        if isinstance(value, bool):
            return value
    elif kind == "integer":
        if isinstance(value, int) and not isinstance(value, bool):
            if not INT_MIN <= value <= INT_MAX:
                raise ValueError(
                    f"{where}: {value} is outside the integers a database stores "
                    f"({INT_MIN} to {INT_MAX})"
                )
            return value
    elif kind in ("numeric", "real"):
        if stored and isinstance(value, str) and attr.type.precision is not None:
            # SQLite holds a wide NUMERIC(p, s) as its text (tables.ExactDecimal)
            with contextlib.suppress(ArithmeticError):  # (not a number: refused below)
                value = Decimal(value.strip())
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            return _number(where, attr.type, value)
    elif isinstance(value, str):
        return _text(where, attr.type, value, key=key)
    raise ValueError(f"{where} is {kind}, not {type(value).__name__} {value!r}")


def _number(where: str, t: m.SqlType, value: int | float | Decimal) -> float | Decimal:
    if t.kind == "numeric" and t.precision is not None:
        return _decimal(where, t, value)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{where}: {value!r} is not a finite number")
    # (SQLite and MariaDB would store -0.0 as 0.0: zero is zero everywhere)
    return 0.0 if number == 0 else number


def _decimal(where: str, t: m.SqlType, value: int | float | Decimal) -> Decimal:
    """``value`` as a ``NUMERIC(p, s)`` stores it: exact, rounded to ``s``
    decimals here, half away from zero as PostgreSQL and MariaDB round a
    decimal, because SQLite would keep every digit (the same value, then, on
    every backend); a float is taken as the decimal it prints as."""
    assert t.precision is not None
    exact = (
        value
        if isinstance(value, Decimal)
        else Decimal(value)
        if isinstance(value, int)
        else Decimal(repr(value))
    )
    if not exact.is_finite():
        raise ValueError(f"{where}: {value!r} is not a finite number")
    scale = t.scale or 0
    limit = Decimal(10) ** (t.precision - scale)
    # (copy_abs and comparisons are exact; abs() would round to 28 digits)
    if exact.copy_abs() < limit:
        exact = exact.quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP, _WIDE)
    if exact.copy_abs() >= limit:
        raise ValueError(f"{where}: {value!r} does not fit {t.text}")
    return exact.copy_abs() if exact.is_zero() else exact


def _text(where: str, t: m.SqlType, value: str, *, key: bool) -> str:
    if "\x00" in value:
        raise ValueError(f"{where}: a NUL character (\\x00), which PostgreSQL cannot store")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as err:
        bad = value[err.start : err.end]
        raise ValueError(
            f"{where}: a lone surrogate ({bad!r}), which is not text a database can store"
        ) from None
    if size > MAX_TEXT_VALUE_BYTES:
        raise ValueError(
            f"{where}: {size} bytes (UTF-8), more than the {MAX_TEXT_VALUE_BYTES} a text "
            "value may have (MariaDB's and MySQL's TEXT column)"
        )
    limit = t.length if t.length is not None else (KEY_TEXT_LENGTH if key else None)
    if limit is not None and len(value) > limit:
        holds = t.text if t.length is not None else f"a key of TEXT ({limit} characters)"
        raise ValueError(f"{where}: {len(value)} characters, more than {holds} holds")
    return value


def _time(name: str, value: Any) -> int:
    if type(value) is not int:
        raise ValueError(f"{name} {value!r} is not a time (whole seconds since 1970)")
    if value < 0:
        raise ValueError(f"{name} {value} is before 1970")
    if value > MAX_TIME:
        raise ValueError(f"{name} {value} is after 9999-12-31, the last day a time may be")
    return value


def inbox_row(
    cls: str,
    attributes: tuple[m.Attribute, ...],
    keys: tuple[str, ...],
    row: Mapping[Any, Any],
) -> dict[str, Any]:
    """A row read from an inbox, checked and normalized as an announcement of
    ``cls`` would be; raise :class:`ValueError` saying what is wrong with it."""
    out: dict[str, Any] = {"id": row["id"]}
    revoked = row["revoked"]
    if type(revoked) not in (int, bool) or revoked not in (0, 1):
        raise ValueError(f"revoked is {revoked!r}, not 0 or 1")
    out["revoked"] = int(revoked)
    out["dettime"] = _time("dettime", row["dettime"])
    occ = row["occtime"]
    if occ is None:
        if not revoked:
            raise ValueError("no occurrence time (occtime), and not a revocation")
        out["occtime"] = None
    else:
        out["occtime"] = _time("occtime", occ)
    key_idents = {k.lower() for k in keys}
    for a in attributes:
        value = row[a.ident]
        if value is None and a.ident in key_idents:
            raise ValueError(f"its key {a.name} is missing")
        out[a.ident] = check_value(cls, a, value, key=a.ident in key_idents, stored=True)
    return out
