"""The streaming job's bucket labels (:mod:`sentinel.global_detector.buckets`):
hash partitioning spreads them evenly over the state partitions (Spark's own
hash of them is checked in tests/replay/test_global_streaming.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from sentinel.global_detector.buckets import bucket_labels, spark_hash


@pytest.mark.parametrize("buckets", [1, 2, 3, 7, 64, 100, 256])
def test_each_partition_that_divides_the_buckets_holds_as_many_as_the_others(
    buckets: int,
) -> None:
    labels = bucket_labels(buckets)
    assert len(labels) == len(set(labels)) == buckets and min(labels) >= 0
    assert [spark_hash(b) % buckets for b in labels] == list(range(buckets))
    for partitions in range(1, buckets + 1):
        if buckets % partitions == 0:
            held = Counter(spark_hash(b) % partitions for b in labels)
            assert set(held.values()) == {buckets // partitions}, (partitions, held)


def test_the_bucket_numbers_themselves_would_not() -> None:
    """Why the labels: 0 to 63 hash onto two partitions as 27 and 37."""
    assert sorted(Counter(spark_hash(b) % 2 for b in range(64)).values()) == [27, 37]


def test_spark_hash_is_murmur3_with_seed_42() -> None:
    """Spark's ``hash(0)``, ``hash(1)`` and ``hash(-1)`` (``SELECT hash(CAST(x AS INT))``)."""
    assert [spark_hash(v) for v in (0, 1, -1)] == [933211791, -559580957, -1604776387]


def test_the_key_hash_follows_pythons_equality_of_the_detectors_partitions() -> None:
    """Values the detector's partitions (a dict) take for one key hash alike:
    numbers by their value, aware datetimes by their instant, and, as
    ``datetime.__hash__``, the two readings of a zone's repeated hour (fold 0
    and 1, equal to each other); a signalling NaN does not raise."""
    from datetime import UTC, datetime, timedelta, timezone
    from decimal import Decimal
    from zoneinfo import ZoneInfo

    from sentinel.global_detector.buckets import key_hash

    assert key_hash(1) == key_hash(1.0) == key_hash(True) == key_hash(Decimal("1.00"))
    assert key_hash(0) == key_hash(-0.0) == key_hash(False)
    assert key_hash(Decimal("2.50")) == key_hash(2.5)
    assert key_hash(10**16) == key_hash(1e16)
    at = datetime(2024, 1, 1, tzinfo=UTC)
    assert key_hash(at) == key_hash(at.astimezone(timezone(timedelta(hours=2))))
    zone = ZoneInfo("America/New_York")
    first = datetime(2024, 11, 3, 1, 30, tzinfo=zone)
    second = first.replace(fold=1)
    assert first == second and hash(first) == hash(second)
    assert key_hash(first) == key_hash(second)
    assert key_hash("1") != key_hash(1)
    assert key_hash((1, "a")) == key_hash((1.0, "a"))
    assert key_hash(Decimal("sNaN")) == key_hash(float("nan"))
