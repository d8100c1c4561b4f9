"""A minimal Faust app on the project's transports that records every offset it processes.

Its one agent reads the source topic and, for each record, writes ``{partition, offset, pid}``
to the ledger topic and waits until the broker has it before the record is acked (so a
committed source offset always has its ledger record). A test reads the ledger to see which
source offsets were processed at least once, whatever rebalances happened in between.
``AGENT_DELAY_S`` makes the agent slow (a backlog queues in front of it);
``SCORER_TEST_SEEK_DELAY_S`` (read by ``stream/kafka/mends/testhooks.py``) widens the window
between the seek to committed offsets and the end of a rebalance.

A consumer at the head of a partition: ``FETCH_MAX_WAIT_MS`` is the longest a fetch waits for
records. A Kafka broker answers a waiting fetch as soon as records arrive; the embedded broker
waits half of it (Faust asks for 1.5 s) even when records are there, so a worker fetches about
once a second. A few milliseconds make it fetch as it would from Kafka under a steady stream.
``STREAM_BUFFER_MAXSIZE`` lets the fetcher stay at the head while the agent is behind;
``AGENT_CONCURRENCY`` agents take records at once (each acked once its ledger record is written).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import faust
import orjson
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from stream.app import broker_urls

app = faust.App(
    os.environ["LEDGER_APP_ID"],
    broker=broker_urls(os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["BROKER_KIND"]),
    web_port=int(os.environ["WEB_PORT"]),
    web_host="127.0.0.1",
    web_bind="127.0.0.1",
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=6,
    broker_heartbeat_interval=2,
    broker_commit_interval=0.5,
    datadir=os.environ["DATA_DIR"],
    stream_wait_empty=True,
    stream_buffer_maxsize=int(os.environ.get("STREAM_BUFFER_MAXSIZE") or 4096),
)
source = app.topic(os.environ["SOURCE_TOPIC"], value_serializer="raw")
ledger = app.topic(os.environ["LEDGER_TOPIC"], value_serializer="raw")
# a table, as every scorer worker has: its recovery is the path that resumes the streams
seen = app.Table("seen", default=int, partitions=2)
delay = float(os.environ.get("AGENT_DELAY_S") or 0)
processed = [0]

if fetch_max_wait_ms := os.environ.get("FETCH_MAX_WAIT_MS"):
    create_worker_consumer = AIOKafkaConsumerThread._create_worker_consumer

    def _create_worker_consumer(thread: AIOKafkaConsumerThread, transport: Any) -> Any:
        consumer = create_worker_consumer(thread, transport)
        consumer._fetch_max_wait_ms = int(fetch_max_wait_ms)  # Faust hard-codes 1500
        return consumer

    AIOKafkaConsumerThread._create_worker_consumer = _create_worker_consumer  # type: ignore[method-assign]


@app.agent(source, concurrency=int(os.environ.get("AGENT_CONCURRENCY") or 1))
async def record(stream: Any) -> None:
    async for event in stream.events():
        message = event.message
        if delay:
            await asyncio.sleep(delay)
        entry = {"partition": message.partition, "offset": message.offset, "pid": os.getpid()}
        sent = await ledger.send(
            key=f"{message.partition}:{message.offset}", value=orjson.dumps(entry)
        )
        await sent
        seen[message.partition] += 1
        processed[0] += 1


@app.page("/processed")
async def processed_page(web: Any, request: Any) -> Any:
    return web.json({"processed": processed[0]})


if __name__ == "__main__":
    worker = faust.Worker(app, loglevel="info", quiet=True)
    worker.spinner = None
    worker.execute_from_commandline()
