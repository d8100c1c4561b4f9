"""Plain aiokafka helpers for the CLI: create topics, produce traces, read scores."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from ..errors import ScorerError


async def ensure_topics(bootstrap: str, names: Iterable[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(n, partitions, 1) for n in names if n not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(new)
    finally:
        await admin.close()


def read_traces(path: Path) -> list[Any]:
    """Traces from JSONL (one event per line) or an Opik export (a JSON array, or a page
    object with ``content``/``traces``). Lines that are not JSON are kept as raw bytes, so
    replaying a file reproduces it faithfully, bad lines included (they go to the DLQ)."""
    text = path.read_bytes()
    stripped = text.lstrip()
    if stripped.startswith(b"[") or (stripped.startswith(b"{") and b"\n{" not in stripped.strip()):
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, list):
            return data
        if isinstance(data, dict):
            for key in ("content", "traces", "data"):
                if isinstance(data.get(key), list):
                    return list(data[key])
            return [data]
    items: list[Any] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            items.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            items.append(line)
    return items


def message_value(item: Any) -> bytes:
    """An item read by ``read_traces`` as the message it was: raw bytes stay as they were."""
    return item if isinstance(item, bytes) else orjson.dumps(item)


def message_key(item: Any) -> bytes | None:
    """Key = thread id when the trace has one (a thread stays in one partition), a session
    event's session id, else the trace id."""
    if isinstance(item, dict):
        key = item.get("thread_id") or item.get("session_id") or item.get("id")
        return str(key).encode() if key is not None else None
    return None


async def produce(
    bootstrap: str, topic: str, items: list[Any], progress: Callable[[], object] | None = None
) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = []
        for item in items:
            value = message_value(item)
            futures.append(await producer.send(topic, value=value, key=message_key(item)))
            if progress:
                progress()
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return len(items)


@contextlib.asynccontextmanager
async def reader(bootstrap: str, topic: str) -> AsyncIterator[AIOKafkaConsumer]:
    """A group-less consumer reading ``topic`` from the beginning."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def collect_scores(
    bootstrap: str, topic: str, expected: int, timeout: float
) -> dict[str, dict[str, Any]]:
    """Read score events until ``expected`` distinct score ids arrived or ``timeout`` passed."""
    scores: dict[str, dict[str, Any]] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with reader(bootstrap, topic) as consumer:
        while len(scores) < expected and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    try:
                        event = orjson.loads(record.value)
                    except orjson.JSONDecodeError as exc:
                        raise ScorerError(
                            f"unreadable score event at offset {record.offset}"
                        ) from exc
                    scores[event["score_id"]] = event
    return scores
