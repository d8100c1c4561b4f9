"""Record batches handed to the producer in order, by one task, without the caller waiting.

aiokafka takes a partition's batch (``AIOKafkaProducer.send_batch``, aiokafka 0.14) only once
the one before it is on its way to the broker (``MessageAccumulator.add_batch`` waits for it
to drain): a produce round trip. Whoever builds batches (the publisher's batched sends, a
table's batched changelog writes) queues them here instead; one task hands them over in the
order queued, and each batch's delivery future is done when the broker has it.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import faust

from .faust_state import aiokafka_producer


class Handover:
    """One queue and one task handing batches to ``app``'s producer in order.

    ``delay_s``: how long each batch waits before it reaches the producer (a test hook: a
    changelog write as slow as when aiokafka's buffer is full)."""

    def __init__(self, app: faust.App, delay_s: float = 0.0) -> None:
        self.app = app
        self.delay_s = delay_s
        self._queue: asyncio.Queue[tuple[Any, str, int, asyncio.Future[Any]]] | None = None
        self._task: asyncio.Task[None] | None = None

    def hand(self, builder: Any, topic: str, partition: int) -> asyncio.Future[Any]:
        """Queue ``builder`` (a ``BatchBuilder`` of the producer) for ``topic``'s
        ``partition``; return its delivery future (the batch's ``RecordMetadata``: the offset
        of its first record)."""
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._hand_over(self._queue))
        delivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((builder, topic, partition, delivered))
        return delivered

    async def _hand_over(self, queue: asyncio.Queue[tuple[Any, str, int, Any]]) -> None:
        """Hand each queued batch to the producer, in the order queued; its delivery future
        is done when the producer's is (a batch the producer refuses fails its future)."""
        producer = aiokafka_producer(self.app)
        while True:
            builder, topic, partition, delivered = await queue.get()
            try:
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                sent = await producer.send_batch(builder, topic, partition=partition)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not delivered.done():
                    delivered.set_exception(exc)
                continue
            sent.add_done_callback(partial(_settle, delivered))

    def stop(self) -> None:
        """Stop handing batches over: what is still queued is never delivered (its futures
        cancelled, so nothing waits for them for ever); a batch handed after this starts a
        task afresh (an agent restarted by Faust's supervisor hands its batches again)."""
        if self._task is not None:
            self._task.cancel()
        if self._queue is not None:
            while not self._queue.empty():
                *_, delivered = self._queue.get_nowait()
                delivered.cancel()
        self._queue = self._task = None


def _settle(delivered: asyncio.Future[Any], sent: asyncio.Future[Any]) -> None:
    """``delivered`` done as the producer's batch future ``sent`` is."""
    if delivered.done():
        return
    if sent.cancelled():
        delivered.cancel()
    elif (exc := sent.exception()) is not None:
        delivered.set_exception(exc)
    else:
        delivered.set_result(sent.result())
