"""aiokafka 0.14.0 gives every record of a producer batch after the first the first record's
timestamp in its ``RecordMetadata`` when the topic keeps CreateTime
(docs/upstream/aiokafka-send-metadata-timestamp.md).

Nothing in ``stream/`` reads a sent record's metadata timestamp, so there is no mend: the
integration harness reads the stored times back (``harness.stored_times``). This test
reproduces the defect on aiokafka's own classes and fails once aiokafka mends it, when the
harness's read-back can go.
"""

from __future__ import annotations

import asyncio

from aiokafka.producer.message_accumulator import BatchBuilder, MessageBatch
from aiokafka.structs import TopicPartition

SENT_MS = [1_700_000_000_000, 1_700_000_000_007, 1_700_000_000_003]


async def test_every_record_of_a_batch_is_given_the_first_records_timestamp() -> None:
    batch = MessageBatch(TopicPartition("spans", 0), BatchBuilder(16384, 0), ttl=30, linger_time=0)
    futures = [batch.append(b"k", b"v", timestamp) for timestamp in SENT_MS]
    assert all(f is not None for f in futures)
    # a produce answer under CreateTime: log_append_time -1 (Kafka's ProduceResponse)
    batch.done(base_offset=40, timestamp=-1)
    metadata = await asyncio.gather(*futures)

    assert [m.offset for m in metadata] == [40, 41, 42]
    assert {m.timestamp_type for m in metadata} == {0}  # CreateTime
    # the record's own time would be SENT_MS; aiokafka gives the first one to all
    assert [m.timestamp for m in metadata] == [SENT_MS[0]] * 3


async def test_a_batch_of_one_is_given_its_own_timestamp() -> None:
    batch = MessageBatch(TopicPartition("spans", 0), BatchBuilder(16384, 0), ttl=30, linger_time=0)
    future = batch.append(b"k", b"v", SENT_MS[1])
    assert future is not None
    batch.done(base_offset=7, timestamp=-1)
    assert (await future).timestamp == SENT_MS[1]
