"""Benchmark baseline (a''): the Faust worker a competent user writes to parse and forward each
trace, run on the transport the scorer's worker runs on.

What a competent user does with Faust's public API: takes the stream in batches
(``Stream.take_events``: up to ``BENCH_BATCH_MAX`` records, or what came within
``BENCH_BATCH_WITHIN_MS``; the scorer's own defaults, 64 and 5 ms), parses each value, and
hands each to the producer without waiting for it (``Topic.send_soon``), the producer lingering
``BENCH_LINGER_MS`` to fill its batches (the scorer's default, 5 ms). ``take_events`` acks a
batch's records when the loop asks for the next batch, before the broker has what
``send_soon`` buffered: it is the commit's wait for the producer (mend 5 of the transport) that
keeps a committed offset from passing a forward not yet on the broker.

The app is ``faust_apps.competent_app`` (the scorer's transport and its mends; the worker is the
scorer's, ``MendedWorker``: no spinner). Nothing of the scorer's engine, agents or delivery is
used.
"""

from __future__ import annotations

import os

import orjson
from faust_apps import BATCH_MAX, BATCH_WITHIN_S, collector_as_asked, competent_app

from stream.kafka.mends.faust_worker import MendedWorker

app = competent_app("/tmp/bench-faust-competent")
source = app.topic(os.environ["BENCH_IN"], key_serializer="raw", value_serializer="raw")
sink = app.topic(os.environ["BENCH_OUT"], key_serializer="raw", value_serializer="raw")


@app.agent(source)
async def forward(stream):  # type: ignore[no-untyped-def]
    # send_soon puts a forward in Faust's producer buffer, whose task hands it to aiokafka; that
    # waits while a partition's batch is full, and past 100 buffered the conductor holds the
    # next record back until the buffer ebbs, with a warning each time: the back-pressure
    async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
        for event in events:
            orjson.loads(event.value)
            sink.send_soon(key=event.key, value=event.value)


if __name__ == "__main__":
    collector_as_asked()
    MendedWorker(app, loglevel="warn", quiet=True).execute_from_commandline()
