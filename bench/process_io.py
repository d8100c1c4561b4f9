"""What several benches share: a process's CPU time read from /proc, and keyed messages
produced to a topic as fast as the producer batches them."""

from __future__ import annotations

import os
from pathlib import Path

from aiokafka import AIOKafkaProducer


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc; Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    """``messages`` (key, value) to ``topic``, batched (10 ms linger, 256 KiB batches)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, max_batch_size=262144)
    await producer.start()
    try:
        for key, value in messages:
            await producer.send(topic, key=key, value=value)
        await producer.flush()
    finally:
        await producer.stop()
