"""A minimal Faust app with a changelog-backed table, for the table-recovery test.

Each input event ``{"key", "value"}`` sets ``latest[key] = value`` (idempotent, so
redelivered input cannot hide a record missing from the recovered changelog), through a
repartition by key, or straight from the input topic (keyed already) with
``TABLE_REPARTITION=0``. The web page ``/table`` shows whether recovery has completed and the
table's contents. ``SCORER_TEST_CHANGELOG_DELAY_S`` (read by ``stream/kafka/mends/testhooks.py``)
makes each changelog write wait before it reaches the producer.

An event with ``"hold_s"`` makes the agent wait that long before it applies the event (it says
``holding <key>`` on stdout first), so that a test can pause the worker (SIGSTOP) with an event
taken and not yet applied. Right before it applies an event, the agent checks that the event
is of the assignment it works on (Faust's own test when it takes an event, repeated), and with
``TABLE_FENCED=1`` also that the worker is surely a member of its group
(``stream.kafka.mends.membership.still_ours``, mend 9).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import faust

from stream.app import broker_urls
from stream.kafka.mends.membership import of_current_assignment, still_ours

app = faust.App(
    os.environ["TABLE_APP_ID"],
    broker=broker_urls(os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["BROKER_KIND"]),
    store=os.environ.get("TABLE_STORE", "memory://"),
    web_port=int(os.environ["WEB_PORT"]),
    web_host="127.0.0.1",
    web_bind="127.0.0.1",
    topic_partitions=2,
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=6,
    broker_heartbeat_interval=2,
    broker_commit_interval=0.5,
    producer_linger_ms=50,  # batch the changelog writes: the defect bites on batches
    # 1: a record a batch, for which the embedded broker's end offsets are right (``kafka://``)
    producer_max_batch_size=int(os.environ.get("PRODUCER_MAX_BATCH_SIZE") or 16384),
    datadir=os.environ["DATA_DIR"],
)
source = app.topic(os.environ["SOURCE_TOPIC"], value_serializer="json")
latest = app.Table("latest", default=None, partitions=2)
repartition = os.environ.get("TABLE_REPARTITION", "1") != "0"
fenced = os.environ.get("TABLE_FENCED") == "1"


@app.agent(source)
async def remember(stream: Any) -> None:
    events = stream.group_by(lambda e: e["key"], name="by-key") if repartition else stream
    async for event in events:
        message = events.current_event.message
        if hold := event.get("hold_s"):
            print(f"holding {event['key']}", flush=True)
            await asyncio.sleep(hold)
        if fenced and not await still_ours(app, message):
            continue
        if not of_current_assignment(app, message):
            continue
        latest[event["key"]] = event["value"]


@app.page("/table")
async def table_page(web: Any, request: Any) -> Any:
    return web.json(
        {"recovered": app.tables.recovery.completed.is_set(), "table": dict(latest.items())}
    )


if __name__ == "__main__":
    worker = faust.Worker(app, loglevel="info", quiet=True)
    worker.spinner = None
    worker.execute_from_commandline()
