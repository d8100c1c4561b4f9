"""The cached partitioner sends every key where Kafka's default partitioner would."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from stream.kafka.mends.partitioning import (
    BatchPartitioner,
    cached_murmur2_partitioner,
    murmur2,
    murmur2_each,
)


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


@given(
    st.integers(min_value=0, max_value=70).flatmap(
        lambda length: st.lists(
            st.binary(min_size=length, max_size=length), min_size=1, max_size=80
        )
    )
)
def test_keys_of_one_length_hashed_together_are_hashed_as_kafka_does(keys: list[bytes]) -> None:
    assert murmur2_each(keys) == [aiokafka_murmur2(key) for key in keys]


def test_a_batch_of_keys_goes_where_the_default_partitioner_sends_each() -> None:
    default = DefaultPartitioner()
    keys = [f"trace-{i}-ü".encode() for i in range(300)] + [b"", b"k", b"k", None]
    partitioner = BatchPartitioner(keys)  # lengths many keys share, and lengths only a few do
    for count in (1, 3, 4, 12):
        partitions = list(range(count))
        for key in keys:
            if key is not None:
                assert partitioner(key, partitions, partitions) == default(
                    key, partitions, partitions
                )
    assert partitioner(None, [0, 1], [1]) == 1
