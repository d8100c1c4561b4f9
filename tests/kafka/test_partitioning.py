"""The cached partitioner sends every key where Kafka's default partitioner would."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from stream.kafka.mends.partitioning import cached_murmur2_partitioner, murmur2


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


@given(st.binary(max_size=300))
def test_murmur2_is_kafkas_on_any_bytes(data: bytes) -> None:
    """Word by word here, byte by byte in aiokafka (Kafka's Java client, ported)."""
    assert murmur2(data) == aiokafka_murmur2(data)


def test_murmur2_known_values() -> None:
    # Kafka's own test vectors (org.apache.kafka.common.utils.UtilsTest#testMurmur2), signed
    for text, expected in {
        "21": -973932308,
        "foobar": -790332482,
        "a-little-bit-long-string": -985981536,
        "a-little-bit-longer-string": -1486304829,
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        "abc": 479470107,
    }.items():
        assert murmur2(text.encode()) == expected & 0xFFFFFFFF
