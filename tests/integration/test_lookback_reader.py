"""The reader of runs of offsets (``stream/kafka/lookback.py``) against the embedded broker:
runs read exactly, through batches; a run read once serves the next from its cache; a run the
partition does not reach is an ``IncompleteReadError`` in its time, never a part taken for
the whole."""

from __future__ import annotations

import time

import pytest

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.lookback import IncompleteReadError, RunReader

from .harness import Names, produce


async def test_runs_are_read_exactly_and_a_short_partition_is_an_incomplete_read(
    broker: EmbeddedBroker, names: Names
) -> None:
    topic = f"lookback-{names.suffix}"
    await ensure_topics(broker.bootstrap, [topic], 1)
    await produce(broker.bootstrap, topic, [(b"k", b"v%d" % n) for n in range(30)])
    reader = RunReader(broker.bootstrap, topic, run_timeout_s=3.0)
    try:
        records = await reader.read(0, [(20, 29), (3, 9)])
        assert [r.offset for r in records] == [*range(3, 10), *range(20, 30)]
        assert [r.value for r in records[:2]] == [b"v3", b"v4"]
        read = reader.records_read
        again = await reader.read(0, [(4, 8)])  # inside a run read: from the cache
        assert [r.offset for r in again] == [4, 5, 6, 7, 8] and reader.records_read == read
        started = time.monotonic()
        with pytest.raises(IncompleteReadError, match="not read through"):
            await reader.read(0, [(25, 40)])  # the partition ends at 29
        assert time.monotonic() - started < 10
    finally:
        await reader.close()
