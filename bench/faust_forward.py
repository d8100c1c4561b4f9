"""Benchmark baseline (a'): the naive Faust agent, which parses and forwards each trace.

A record at a time (``stream.items()``), each forward handed to aiokafka before the next
record is read (``await Topic.send``), on stock Faust: its own ``kafka://`` transport and
monitor, no producer linger (nothing of ``stream`` is imported, so the project's mends are not
installed). ``faust_competent.py`` is the one a competent user writes (a'').
"""

from __future__ import annotations

import os

import faust
import orjson

app = faust.App(
    os.environ["BENCH_APP_ID"],
    broker=f"kafka://{os.environ['KAFKA_BOOTSTRAP_SERVERS']}",
    store="memory://",
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=6,
    broker_heartbeat_interval=2,
    datadir=os.environ.get("BENCH_DATA_DIR", "/tmp/bench-faust-forward"),
)
source = app.topic(os.environ["BENCH_IN"], key_serializer="raw", value_serializer="raw")
sink = app.topic(os.environ["BENCH_OUT"], key_serializer="raw", value_serializer="raw")


@app.agent(source)
async def forward(stream):  # type: ignore[no-untyped-def]
    async for key, value in stream.items():
        orjson.loads(value)
        await sink.send(key=key, value=value)


if __name__ == "__main__":
    worker = faust.Worker(app, loglevel="warn", quiet=True)
    worker.spinner = None  # as the scorer's worker does: the spinner turns on DEBUG logging
    worker.execute_from_commandline()
