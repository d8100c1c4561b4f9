"""Running the agents with Faust's test tools (``agent.test_context()``), without a broker:
a producer that records what it is handed, readers of what the agents sent and counted, and
the fixtures (a pytest plugin of ``conftest.py``): ``worker`` and ``sent``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

import faust
import pytest
from faust.types import TopicT
from prometheus_client import CollectorRegistry

from stream.agents import forward, otlp, threads
from stream.app import Topics, create_app
from stream.delivery.publisher import Send
from stream.metrics import ScorerMetrics, sample_value
from stream.settings import Settings

# a worker's app, topics, settings and metrics (the ``worker`` fixture)
Worker = tuple[faust.App, Topics, Settings, ScorerMetrics]


class RecordingPublisher:
    """In place of ``Publisher``: every message handed to it is on the broker at once."""

    sent: ClassVar[list[Send]] = []
    batches: ClassVar[list[int]] = []  # messages handed in each send_batched

    def __init__(self, app: faust.App) -> None:
        self.sent = RecordingPublisher.sent

    async def declare(self, topics: Iterable[TopicT]) -> None:
        pass

    async def send(self, sends: list[Send], timestamp: float | None = None) -> list[Awaitable[Any]]:
        self.sent.extend(sends)
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return [done for _ in sends]

    async def send_batched(
        self, sends: list[Send], timestamp: float | None = None, *, at_once: bool = False
    ) -> list[Awaitable[Any]]:
        self.batches.append(len(sends))
        return await self.send(sends, timestamp)

    async def send_until_delivered(self, sends: list[Send], timestamp: float | None = None) -> None:
        self.sent.extend(sends)

    def stop(self) -> None:
        pass

    async def to_partitions(self, topic: str, value: bytes, partitions: Iterable[int]) -> None:
        pass


def dead_letters(sent: list[Send], topics: Topics) -> list[dict[str, str]]:
    """The dead letters among ``sent``: their headers as text, and their value."""
    return [
        {**{k: v.decode() for k, v in (headers or {}).items()}, "value": value.decode()}
        for topic, _, value, headers in sent
        if topic is topics.dlq
    ]


def counted(metrics: ScorerMetrics, name: str, **labels: str) -> float:
    """A sample of ``metrics`` as /metrics shows it."""
    return sample_value(metrics.exposition()[0].decode(), name, **labels)


async def settled(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until ``condition()`` holds (an agent runs in its own task)."""
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not settled in {timeout} s")


NO_BROKER = "127.0.0.1:1"  # nothing listens here: no test connects anywhere


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Worker:
    """A worker's app, topics, settings and metrics, built without a broker."""
    for name in list(os.environ):
        if name.upper().startswith("SCORER_"):
            monkeypatch.delenv(name)
    settings = Settings(data_dir=tmp_path / "data", topic_partitions=2)
    metrics = ScorerMetrics(CollectorRegistry())
    app, topics = create_app(settings, NO_BROKER, metrics)
    return app, topics, settings, metrics


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Send]:
    """What the agents hand the producer (their ``Publisher`` replaced)."""
    monkeypatch.setattr(RecordingPublisher, "sent", [])
    monkeypatch.setattr(RecordingPublisher, "batches", [])
    for module in (forward, otlp, threads):
        monkeypatch.setattr(module, "Publisher", RecordingPublisher)
    return RecordingPublisher.sent
