"""Table recovery after kill -9 on the embedded broker: complete with the corrected transport.

The embedded broker reports end offsets as the last batch's base offset + 1. Faust recovers a
table by reading its changelog up to those end offsets, so without the correction a restarted
worker silently loses the tail of every changelog partition; the second case shows that the
scenario really does lose records (so the first case can fail).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from stream.kafka.broker import EmbeddedBroker, free_port

from .harness import Names

APP = Path(__file__).with_name("table_app.py")
N_KEYS = 300


def start_app(
    broker: EmbeddedBroker, names: Names, kind: str, tmp: Path, store: str = "memory://"
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        **os.environ,
        "TABLE_APP_ID": names.group,
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
        "BROKER_KIND": kind,
        "WEB_PORT": str(port),
        "SOURCE_TOPIC": names.traces,
        # a RocksDB store reads its local files at a restart: the same directory both times
        "DATA_DIR": str(tmp / ("data" if store.startswith("rocksdb") else f"data-{port}")),
        "TABLE_STORE": store,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    log = open(tmp / f"table-app-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, str(APP)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    return proc, port


def table(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/table", timeout=5) as resp:
        return json.loads(resp.read())


def wait_for(port: int, predicate, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    last: dict = {}
    while time.monotonic() < deadline:
        try:
            last = table(port)
            if predicate(last):
                return last
        except OSError:
            pass
        time.sleep(0.5)
    return last


async def produce_events(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for i in range(N_KEYS):
            await producer.send(
                topic, key=f"k{i}".encode(), value=json.dumps({"key": f"k{i}", "value": i}).encode()
            )
        await producer.flush()
    finally:
        await producer.stop()


async def all_input_committed(bootstrap: str, group: str, topic: str) -> bool:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        from aiokafka import TopicPartition

        total = 0
        for p in partitions:
            total += await consumer.committed(TopicPartition(topic, p)) or 0
        return total >= N_KEYS
    finally:
        await consumer.stop()


@pytest.mark.parametrize(
    ("kind", "store"),
    [("tansu", "memory://"), ("kafka", "memory://"), ("tansu", "rocksdb://")],
    ids=["tansu-memory", "kafka-memory", "tansu-rocksdb"],
)
async def test_table_is_complete_after_kill_9_and_restart(
    broker: EmbeddedBroker, names: Names, kind: str, store: str, tmp_path: Path
) -> None:
    first, port = start_app(broker, names, kind, tmp_path, store)
    try:
        await produce_events(broker.bootstrap, names.traces)
        full = await asyncio.to_thread(wait_for, port, lambda t: len(t["table"]) == N_KEYS)
        assert len(full["table"]) == N_KEYS, "the first worker did not build the table"
        deadline = time.monotonic() + 30
        while not await all_input_committed(broker.bootstrap, names.group, names.traces):
            assert time.monotonic() < deadline, "input offsets were not committed"
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.5)  # let the changelog writes settle after the last commit
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)

    second, port = start_app(broker, names, kind, tmp_path, store)
    try:
        recovered = await asyncio.to_thread(wait_for, port, lambda t: t["recovered"], 120.0)
        assert recovered.get("recovered"), "recovery did not complete"
        missing = N_KEYS - len(recovered["table"])
        if kind == "tansu":
            assert missing == 0, f"{missing} keys lost in table recovery"
            assert recovered["table"] == full["table"]
        else:
            # Faust's own transport trusts the broker's end offsets: records are lost. If this
            # ever fails, the broker's defect is fixed and the correction can go.
            assert missing > 0
            print(f"uncorrected transport lost {missing} of {N_KEYS} keys")
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(30)
        except subprocess.TimeoutExpired:
            second.kill()
