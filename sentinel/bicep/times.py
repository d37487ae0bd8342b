"""Times and durations at the processor's boundary.

Inside the database every time is an integer number of seconds since the epoch
(UTC). At the API a time may be given as such a number, a datetime (a naive one
is taken as UTC) or an ISO 8601 string; durations (the chronon) as seconds or a
BiCEPL time literal (``15m``).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from sentinel.bicep.parser import UNIT_SECONDS

__all__ = ["MAX_TIME", "TimeLike", "as_datetime", "duration", "seconds"]

#: The last second a time may be: 9999-12-31T23:59:59Z (the last a datetime holds).
MAX_TIME = 253_402_300_799

TimeLike = int | float | datetime | str

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)

_DURATION = re.compile(r"^\s*([0-9]+)\s*([dhms])\s*$", re.I)


def seconds(value: Any, *, what: str = "time") -> int:
    """``value`` as whole seconds since the epoch (fractions are dropped).

    Raises :class:`ValueError` (with ``what`` in the message) for anything that is
    not a time, and for times before 1970 or after 9999.
    """
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a time, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{what} {value!r} is not a time")
    # Fractions are dropped toward the past (floor, not int()): half a second
    # before 1970 is before 1970. A datetime is counted exactly: its float
    # timestamp rounds 9999-12-31T23:59:59.999999 up into the year 10000.
    if isinstance(value, int):
        out = value
    elif isinstance(value, float):
        out = math.floor(value)
    elif isinstance(value, datetime):
        dt = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        out = (dt - _EPOCH) // _SECOND
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"{what} must be a time (seconds since the epoch, a datetime or an ISO 8601 "
                f"string such as 2014-04-07T09:00), not {value!r}"
            ) from None
        return seconds(dt, what=what)
    else:
        raise ValueError(f"{what} must be a time, not {type(value).__name__} {value!r}")
    if out < 0:
        raise ValueError(f"{what} {value!r} is before 1970; BiCEPL times are seconds since 1970")
    if out > MAX_TIME:
        raise ValueError(f"{what} {value!r} is after 9999-12-31, the last day a time may be")
    return out


def duration(value: Any) -> int:
    """A positive duration in seconds: an int, or a literal such as ``15m``."""
    if isinstance(value, bool):
        raise ValueError(f"a duration is seconds or a literal such as 15m, not {value!r}")
    if isinstance(value, int):
        out = value
    elif isinstance(value, str) and (mt := _DURATION.match(value)):
        out = int(mt.group(1)) * UNIT_SECONDS[mt.group(2).lower()]
    else:
        raise ValueError(f"a duration is seconds or a literal such as 15m, not {value!r}")
    if out <= 0 or out > MAX_TIME:
        raise ValueError(f"a duration must be positive and at most 9999 years, not {value!r}")
    return out


def as_datetime(value: int | None) -> datetime | None:
    """Seconds since the epoch as an aware UTC datetime."""
    return None if value is None else datetime.fromtimestamp(value, UTC)
