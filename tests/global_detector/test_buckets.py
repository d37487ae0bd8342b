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
