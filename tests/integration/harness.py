"""Integration harness: the embedded broker, worker processes, and plain Kafka I/O."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from stream.kafka.broker import free_port
from stream.kafka.io import reader

_counter = itertools.count()


@dataclass
class Names:
    """Topic and group names unique to one test, so tests share one broker safely."""

    suffix: str = field(default_factory=lambda: f"{next(_counter)}-{uuid.uuid4().hex[:6]}")

    @property
    def traces(self) -> str:
        return f"traces-{self.suffix}"

    @property
    def scores(self) -> str:
        return f"scores-{self.suffix}"

    @property
    def decisions(self) -> str:
        return f"decisions-{self.suffix}"

    @property
    def dlq(self) -> str:
        return f"dlq-{self.suffix}"

    @property
    def sessions(self) -> str:
        return f"sessions-{self.suffix}"

    @property
    def otlp(self) -> str:
        return f"otlp-{self.suffix}"

    @property
    def group(self) -> str:
        return f"scorer-{self.suffix}"

    def env(self) -> dict[str, str]:
        return {
            "SCORER_TRACES_TOPIC": self.traces,
            "SCORER_SCORES_TOPIC": self.scores,
            "SCORER_DECISIONS_TOPIC": self.decisions,
            "SCORER_DLQ_TOPIC": self.dlq,
            "SCORER_SESSIONS_TOPIC": self.sessions,
            "SCORER_OTLP_TOPIC": self.otlp,
            "SCORER_APP_ID": self.group,
        }


# the judge asked for every trace: tests of the judge's own trouble (outages, 429s, a stuck
# call) send traces whose prompts are alike, which the verdict cache (on by default; its own
# tests are tests/integration/test_verdict_*.py) would answer after the first call
NO_VERDICT_CACHE = {"SCORER_JUDGE_CACHE_TTL_S": "0"}


class Worker:
    """A real `scorer worker` process."""

    def __init__(self, bootstrap: str, names: Names, tmp: Path, **env: str) -> None:
        self.port = free_port()
        self.log_path = tmp / f"worker-{self.port}.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SCORER_", "OPENAI_"))},
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SCORER_WEB_PORT": str(self.port),
            "SCORER_DATA_DIR": str(tmp / f"data-{self.port}"),
            "SCORER_SESSION_TIMEOUT_S": "6",
            "SCORER_BROKER_KIND": "tansu",
            "SCORER_JUDGE_BACKOFF_BASE_S": "0.05",
            "SCORER_JUDGE_BACKOFF_MAX_S": "0.5",
            "SCORER_PACKS": '["fretcoach"]',  # the pipeline tests script the FretCoach judges
            **names.env(),
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, loglevel: str = "info") -> Worker:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(
            [sys.executable, "-m", "stream.cli", "worker", "--loglevel", loglevel],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return self

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def scrape(self) -> str:
        """The /metrics page, or nothing while the web server is not up yet."""
        try:
            return self.metrics()
        except OSError:
            return ""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        assert self.process
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


async def produce(
    bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes]]
) -> list[Any]:
    """Send ``messages`` and return their ``RecordMetadata``. Its ``timestamp`` is not the
    record's Kafka time for any but a producer batch's first record (aiokafka 0.14.0,
    docs/upstream/aiokafka-send-metadata-timestamp.md): read that with ``stored_times``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, key=k, value=v) for k, v in messages]
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


async def stored_times(bootstrap: str, topic: str, sent: list[Any]) -> list[int]:
    """The Kafka time (ms) the broker stored for each record of ``sent`` (the metadata of
    ``produce``), read back from ``topic``."""
    wanted = {(m.partition, m.offset) for m in sent}

    def seen(records: list[Any]) -> bool:
        return wanted <= {(r.partition, r.offset) for r in records}

    records = await read(bootstrap, topic, until=seen)
    assert seen(records), f"{topic}: not every sent record was read back within the timeout"
    times = {(r.partition, r.offset): r.timestamp for r in records}
    return [times[m.partition, m.offset] for m in sent]


def trace_bytes(document: dict[str, Any]) -> tuple[bytes, bytes]:
    return document["id"].encode(), orjson.dumps(document)


async def read(bootstrap: str, topic: str, *, until: Any, timeout: float = 60.0) -> list[Any]:
    """Read ``topic`` from the start until ``until(records)`` is true or ``timeout`` passes."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topic) as consumer:
        while time.monotonic() < deadline and not until(records):
            batch = await consumer.getmany(timeout_ms=300)
            for part in batch.values():
                records.extend(part)
    return records


async def read_scores(
    bootstrap: str, topic: str, *, until: Any, timeout: float = 60.0
) -> list[dict[str, Any]]:
    records = await read(
        bootstrap,
        topic,
        until=lambda rs: until([orjson.loads(r.value) for r in rs]),
        timeout=timeout,
    )
    return [orjson.loads(r.value) for r in records]


async def committed(bootstrap: str, group: str, topic: str, partition: int) -> int | None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(topic, partition))
    finally:
        await consumer.stop()
