"""The cached partitioner sends every key where Kafka's default partitioner would."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner

from stream.kafka.partitioning import cached_murmur2_partitioner


def test_same_partition_as_the_default_partitioner() -> None:
    default = DefaultPartitioner()
    for count in (1, 3, 4, 12):
        partitions = list(range(count))
        for i in range(500):
            key = f"trace-{i}-ü".encode()
            assert cached_murmur2_partitioner(key, partitions, partitions) == default(
                key, partitions, partitions
            )
    assert cached_murmur2_partitioner(None, [0, 1], [1]) == 1
