"""Key partitioning, identical to Kafka's default (murmur2 of the key), with the hash cached.

A trace's score events and its decision record share one key, and aiokafka's murmur2 is
pure Python: caching the last few thousand key hashes halves that cost per trace without
changing where any message goes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache

from aiokafka.partitioner import murmur2


@lru_cache(maxsize=4096)
def key_hash(key: bytes) -> int:
    return int(murmur2(key)) & 0x7FFFFFFF


def cached_murmur2_partitioner(
    key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]
) -> int:
    """Kafka's DefaultPartitioner: murmur2(key) mod partitions; random when there is no key."""
    if key is None:
        return random.choice(available or all_partitions)
    return all_partitions[key_hash(key) % len(all_partitions)]
