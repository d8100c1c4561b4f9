"""At-least-once at a rebalance, with a minimal Faust app on both of the project's transports
(``ledger_app.py``: every processed offset is written to a ledger topic before it is acked).

Each case provokes one of the ways Faust and the brokers can lose or skip a record, then reads
the ledger and the group's committed offsets: every source offset must have been processed at
least once, and the group must have committed every partition to its end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import ensure_topics

from .harness import Names, committed, read

APP = Path(__file__).with_name("ledger_app.py")
ROOT = Path(__file__).resolve().parents[2]


class LedgerApp:
    """One ``ledger_app.py`` worker process."""

    def __init__(self, broker: EmbeddedBroker, names: Names, kind: str, tmp: Path, **env: str):
        self.port = free_port()
        self.log_path = tmp / f"ledger-{self.port}.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SCORER_")},
            "LEDGER_APP_ID": names.group,
            "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
            "BROKER_KIND": kind,
            "WEB_PORT": str(self.port),
            "SOURCE_TOPIC": names.traces,
            "LEDGER_TOPIC": ledger_topic(names),
            "DATA_DIR": str(tmp / f"data-{self.port}"),
            "PYTHONPATH": str(ROOT),
            **env,
        }
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child
        self.process = subprocess.Popen(
            [sys.executable, str(APP)], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )

    def processed(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/processed", timeout=2) as r:
                return int(orjson.loads(r.read())["processed"])
        except OSError:
            return 0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def ledger_topic(names: Names) -> str:
    return f"ledger-{names.suffix}"


async def produce_to_partitions(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
            for i in range(count)
            for p in range(partitions)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def processed_offsets(
    bootstrap: str, names: Names, expected: set[tuple[int, int]], timeout: float = 60.0
) -> set[tuple[int, int]]:
    """The ``(partition, offset)`` of every ledger record, read until all ``expected`` are
    there (or ``timeout``)."""
    done: set[tuple[int, int]] = set()
    parsed = [0]

    def complete(records: list[Any]) -> bool:
        for record in records[parsed[0] :]:
            entry = orjson.loads(record.value)
            done.add((entry["partition"], entry["offset"]))
        parsed[0] = len(records)
        return expected <= done

    await read(bootstrap, ledger_topic(names), until=complete, timeout=timeout)
    return done


async def wait_until(predicate, timeout: float, step: float = 0.5) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(step)
    return False


@pytest.mark.parametrize("kind", ["tansu", "kafka"])
async def test_records_queued_while_a_rebalance_completes_are_processed(
    broker: EmbeddedBroker, names: Names, tmp_path: Path, kind: str
) -> None:
    """faust-streaming #596: at the end of a rebalance Faust resumes the stream partitions,
    seeks them to their committed offsets, then clears every agent queue; what was queued
    during the seek was dropped and never fetched again. The seek is widened by 1 s (the
    window measured at 0.86 s under load) and the agent is slow, so records queue."""
    partitions, count = 2, 200
    await ensure_topics(broker.bootstrap, [names.traces], partitions)
    await produce_to_partitions(broker.bootstrap, names.traces, partitions, count)
    env = {"AGENT_DELAY_S": "0.02", "SCORER_TEST_SEEK_DELAY_S": "1.0"}
    first = LedgerApp(broker, names, kind, tmp_path, **env)
    second: LedgerApp | None = None
    try:

        async def started() -> bool:
            return first.processed() >= 20

        assert await wait_until(started, 90), "the first worker processed nothing"
        second = LedgerApp(broker, names, kind, tmp_path, **env)
        everything = {(p, o) for p in range(partitions) for o in range(count)}

        async def all_committed() -> bool:
            ends = [
                await committed(broker.bootstrap, names.group, names.traces, p)
                for p in range(partitions)
            ]
            return ends == [count] * partitions

        await wait_until(all_committed, 120, step=1.0)
        done = await processed_offsets(broker.bootstrap, names, everything)
        ends = [
            await committed(broker.bootstrap, names.group, names.traces, p)
            for p in range(partitions)
        ]
    finally:
        first.stop()
        if second:
            second.stop()
    missing = sorted(everything - done)
    assert not missing, (
        f"{len(missing)} offsets never processed: {missing[:20]}..., committed {ends}"
    )
    assert ends == [count] * partitions, f"committed {ends}, not every partition's end"


class RacingProducers:
    """``per_partition`` producers on each partition of ``topic``, each writing one record at a
    time (one batch a produce request, so batches of several producers interleave) with a short
    pause, until ``stop``."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.plan = [p for p in range(partitions) for _ in range(per_partition)]
        self.written = [0] * partitions
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        clients = [
            AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=0)
            for _ in self.plan
        ]
        for client in clients:
            await client.start()
        try:
            await asyncio.gather(
                *(self._write(c, p) for c, p in zip(clients, self.plan, strict=True))
            )
        finally:
            for client in clients:
                await client.stop()

    async def _write(self, client: AIOKafkaProducer, partition: int) -> None:
        while not self.stopping.is_set():
            value = f"{partition}-{self.written[partition]}".encode()
            await (await client.send(self.topic, value=value, partition=partition))
            self.written[partition] += 1
            await asyncio.sleep(0.005)

    def stop(self) -> None:
        self.stopping.set()


RACES_WANTED = 3  # gaps the mended worker logged before the load stops
RACE_BUDGET = 10_000  # records written on each partition at most


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["tansu", "kafka"])
async def test_records_written_out_of_order_by_the_broker_are_processed(
    broker: EmbeddedBroker, names: Names, tmp_path: Path, kind: str
) -> None:
    """The embedded broker reserves a batch's offsets (moves the high watermark) before it
    writes the batch: with several producers on one partition, a fetch landing in between
    returns the next batch, and Faust took the jump as done (the earlier batch never processed,
    the commit past it). A worker at the head of two partitions fetches every 10 ms while four
    producers race on each. The race is rare here (a gap every few thousand records): the load
    stops once the mended worker has logged ``RACES_WANTED`` gaps it fetched again, or at
    ``RACE_BUDGET`` records a partition (the old code, which logs none, lost records there in
    every run measured).

    ``kafka://`` is the transport of a real cluster, which never serves a record past an
    unwritten one: it confirms a gap with one refetch. Fetching every 10 ms, that refetch
    came back inside the same unwritten window for about one gap in 20 here (the record was
    lost), so against the embedded broker it gets the embedded broker's patience."""
    partitions = 2
    await ensure_topics(broker.bootstrap, [names.traces], partitions)
    patience = {"SCORER_TEST_GAP_PATIENCE_S": "5"} if kind == "kafka" else {}
    app = LedgerApp(
        broker,
        names,
        kind,
        tmp_path,
        FETCH_MAX_WAIT_MS="10",
        STREAM_BUFFER_MAXSIZE="1000000",
        AGENT_CONCURRENCY="8",
        **patience,
    )
    racing = RacingProducers(broker.bootstrap, names.traces, partitions, per_partition=4)
    load: asyncio.Task[None] | None = None
    try:
        await produce_to_partitions(broker.bootstrap, names.traces, partitions, 1)

        async def at_the_head() -> bool:
            return app.processed() >= partitions

        assert await wait_until(at_the_head, 90), "the worker processed nothing"
        load = asyncio.create_task(racing.run())

        async def enough() -> bool:
            return races(app) >= RACES_WANTED or min(racing.written) >= RACE_BUDGET

        await wait_until(enough, 400)
        racing.stop()
        await load
        ends = [1 + n for n in racing.written]

        async def all_committed() -> bool:
            return await committed_offsets(broker.bootstrap, names, partitions) == ends

        await wait_until(all_committed, 300, step=1.0)
        everything = {(p, o) for p in range(partitions) for o in range(ends[p])}
        done = await processed_offsets(broker.bootstrap, names, everything)
        commits = await committed_offsets(broker.bootstrap, names, partitions)
    finally:
        racing.stop()
        if load is not None and not load.done():
            await asyncio.wait([load], timeout=30)
        app.stop()
    missing = sorted(everything - done)
    print(f"{kind}: {sum(ends)} records, {races(app)} gaps fetched again by the worker")
    assert not missing, f"{len(missing)} offsets never processed: {missing[:20]}, of {ends}"
    assert commits == ends, f"committed {commits}, not every partition's end {ends}"


def races(app: LedgerApp) -> int:
    """Gaps in a fetch the mended consumer logged (and fetched again)."""
    return app.log().count("missing from a fetch")


async def committed_offsets(bootstrap: str, names: Names, partitions: int) -> list[int | None]:
    return [await committed(bootstrap, names.group, names.traces, p) for p in range(partitions)]
