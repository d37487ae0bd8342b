"""How the Spark streaming job (:mod:`.streaming`) labels its buckets of keys.

A stateful Spark operator sends each group to the state partition
``pmod(hash(key), partitions)``. The streaming job groups rows by bucket
(``pmod(hash(key value), buckets)``); were the buckets labelled ``0`` to
``buckets - 1``, the hash of those numbers would decide how many buckets each
partition (each core) detects: 27 and 37 of 64 on two partitions. Each
bucket's label is instead chosen so that the partitions hold as many buckets as
each other. Pure Python, so that it is testable and cheap without Spark.

Which bucket a row goes to is decided by :func:`key_hash` of its key's value,
as the detector compares values: equal values (``1``, ``1.0``, ``True``;
``Decimal("1.50")`` and ``1.5``; one instant in two time zones) hash alike,
so they meet in one bucket as they meet in one partition of the detector.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from numbers import Rational
from typing import Any

__all__ = ["bucket_labels", "key_hash", "spark_hash"]


def key_hash(value: Any) -> int:
    """A hash (0 to 2**31 - 1) of a key's value that is the same in every
    process (Python's own ``hash`` of text is not) and the same for values
    Python finds equal: numbers by their exact value whatever their type,
    aware datetimes by their instant."""
    text = _canonical(value).encode("utf-8", "surrogatepass")
    return zlib.crc32(text) & 0x7FFFFFFF


def _canonical(v: Any) -> str:
    if isinstance(v, str):
        return "s:" + v
    if isinstance(v, (Rational, float, Decimal)):
        try:
            f = Fraction(v)
        except (ValueError, OverflowError):  # infinities and NaNs (a signalling one too)
            if isinstance(v, Decimal) and v.is_nan():
                return "n:nan"
            return f"n:{float(v)}"
        return f"n:{f.numerator}" if f.denominator == 1 else f"n:{f.numerator}/{f.denominator}"
    if isinstance(v, datetime):
        if v.utcoffset() is None:
            return "t:" + v.isoformat()
        # as datetime's own hash: the repeated hour's two readings (fold 0 and
        # 1) of one zone are equal, though they are not one instant
        return "tz:" + v.replace(fold=0).astimezone(UTC).isoformat()
    if isinstance(v, tuple):
        return "(" + ",".join(_canonical(x) for x in v) + ")"
    if isinstance(v, frozenset):
        return "{" + ",".join(sorted(_canonical(x) for x in v)) + "}"
    return f"{type(v).__qualname__}:{v!r}"


def bucket_labels(buckets: int) -> list[int]:
    """The value of the grouping column of each of ``buckets`` buckets: bucket
    ``i`` is the smallest integer, not taken by a bucket before it, that Spark's
    hash partitioning (``pmod(hash(label), partitions)``) sends to partition ``i``
    when there are ``buckets`` partitions, and so to partition ``i mod p`` when
    there are ``p`` and ``p`` divides ``buckets``: each state partition holds as
    many buckets as the others (the bucket numbers themselves spread 64 buckets
    over 2 partitions as 27 and 37)."""
    labels: list[int | None] = [None] * buckets
    free, value = buckets, 0
    while free:
        i = spark_hash(value) % buckets
        if labels[i] is None:
            labels[i] = value
            free -= 1
        value += 1
    return [int(b) for b in labels if b is not None]


def spark_hash(value: int) -> int:
    """Spark's ``hash`` of an integer column's ``value``: Murmur3 (x86, 32 bits,
    seed 42) of its 4 bytes, as a signed integer."""
    m = 0xFFFFFFFF
    k = ((value & m) * 0xCC9E2D51) & m
    k = (((k << 15) | (k >> 17)) & m) * 0x1B873593 & m
    h = 42 ^ k
    h = ((((h << 13) | (h >> 19)) & m) * 5 + 0xE6546B64) & m
    h ^= 4
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & m
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & m
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h
