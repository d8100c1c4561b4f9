"""Table recovery after kill -9 or a stop on the embedded broker: complete with the mended
transports.

The embedded broker reports end offsets as the last batch's base offset + 1. Faust recovers a
table by reading its changelog up to those end offsets, so without the correction a restarted
worker silently loses the tail of every changelog partition; the second case shows that the
scenario really does lose records (so the first case can fail).

A source offset can be committed before the table writes of what it produced are durable
(issue 23, mechanism 3): Faust's producer flush before a commit gave up after 0.1 s without
progress, and a stopping worker shut its producer down before its buffer drained. The last two
cases make every changelog write lag (``SCORER_TEST_CHANGELOG_DELAY_S``), stop the worker with
writes in flight (SIGTERM, or kill -9 after a commit), and check the next worker's table.
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
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import ensure_topics

from .harness import Names, committed

APP = Path(__file__).with_name("table_app.py")
ROOT = Path(__file__).resolve().parents[2]
N_KEYS = 300


def start_app(
    broker: EmbeddedBroker,
    names: Names,
    kind: str,
    tmp: Path,
    store: str = "memory://",
    **extra: str,
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
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        **extra,
    }
    log = open(log_path(tmp, port), "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, str(APP)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    return proc, port


def log_path(tmp: Path, port: int) -> Path:
    return tmp / f"table-app-{port}.log"


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


async def all_committed(bootstrap: str, names: Names) -> bool:
    """Every input record committed, and every record the app repartitioned by key (the table
    is written as those are read): the next worker has nothing to process again, so its
    table is what it recovers. The mended worker commits only once the table writes of what
    it commits are acknowledged: no sleep needed before kill -9."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        suffix = f"{names.traces}-by-key-repartition"
        topics = [names.traces, *(t for t in await admin.list_topics() if t.endswith(suffix))]
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    if len(topics) < 2:
        return False
    for topic in described:
        partitions = [p["partition"] for p in topic["partitions"]]
        done = [await committed(bootstrap, names.group, topic["topic"], p) for p in partitions]
        if sum(o or 0 for o in done) < N_KEYS:
            return False
    return True


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
        deadline = time.monotonic() + 60
        while not await all_committed(broker.bootstrap, names):
            assert time.monotonic() < deadline, "input offsets were not committed"
            await asyncio.sleep(0.5)
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


CHANGELOG_DELAY_S = "0.25"  # a write every 0.25 s: Faust's flush gave up after 0.1 s without one


async def produce_keyed(bootstrap: str, topic: str, indexes: range) -> dict[str, tuple[int, int]]:
    """Events ``{"key": "k<i>", "value": i}`` keyed by their key; where each one landed."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, key=f"k{i}".encode(), value=json.dumps({"key": f"k{i}", "value": i}).encode()
            )
            for i in indexes
        ]
        landed = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return {f"k{i}": (m.partition, m.offset) for i, m in zip(indexes, landed, strict=True)}


async def committed_offsets(bootstrap: str, names: Names) -> list[int]:
    return [await committed(bootstrap, names.group, names.traces, p) or 0 for p in range(2)]


async def until(predicate: Callable[[], Awaitable[bool]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.5)
    return False


def commits_put_off(log: Path) -> int:
    """Commits the mended consumer held until the producer drained (it logs each)."""
    return log.read_text(errors="replace").count("commit put off")


def stop(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    process.send_signal(sig)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def transport(kind: str, **env: str) -> dict[str, str]:
    """The app's env for ``kind``: Faust's own transport (``kafka``) trusts the embedded
    broker's end offsets, which are right only for batches of one record."""
    batches = {"PRODUCER_MAX_BATCH_SIZE": "1"} if kind == "kafka" else {}
    return {"TABLE_REPARTITION": "0", **batches, **env}


async def assert_next_worker_recovers_every_committed_write(
    broker: EmbeddedBroker,
    names: Names,
    kind: str,
    tmp: Path,
    written: dict[str, tuple[int, int]],
) -> None:
    """Start a worker (no delay) after the first one stopped; once it has committed every
    input record, its table must hold every record's write, and first of all those of the
    records committed before the stop (never processed again)."""
    at_stop = await committed_offsets(broker.bootstrap, names)
    ends = [1 + max((o for p, o in written.values() if p == q), default=-1) for q in range(2)]
    second, port = start_app(broker, names, kind, tmp, **transport(kind))
    try:

        async def all_committed() -> bool:
            return await committed_offsets(broker.bootstrap, names) == ends

        assert await until(all_committed, 180), "the next worker did not commit every record"
        recovered = await asyncio.to_thread(wait_for, port, lambda t: t["recovered"], 120.0)
    finally:
        stop(second, signal.SIGTERM)
    content = recovered["table"]
    lost = sorted(
        (p, o, key) for key, (p, o) in written.items() if o < at_stop[p] and key not in content
    )
    print(f"committed at the stop: {at_stop} of {ends}; next worker's table: {len(content)} keys")
    assert not lost, (
        f"{len(lost)} records committed before the stop have no table write: {lost[:10]}"
    )
    assert content == {key: int(key[1:]) for key in written}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["tansu", "kafka"])
async def test_a_stop_with_table_writes_in_flight_commits_none_of_them(
    broker: EmbeddedBroker, names: Names, kind: str, tmp_path: Path
) -> None:
    """SIGTERM while the changelog writes lag: Faust committed what its agent had processed,
    flushed its producer for 0.1 s and shut it down, so the writes still buffered were lost
    while their source offsets were committed (never processed again)."""
    await ensure_topics(broker.bootstrap, [names.traces], 2)
    delay = {"SCORER_TEST_CHANGELOG_DELAY_S": CHANGELOG_DELAY_S}
    first, port = start_app(broker, names, kind, tmp_path, **transport(kind, **delay))
    try:
        written = await first_records_committed(broker, names)
        written |= await produce_keyed(broker.bootstrap, names.traces, range(20, 220))
        # 50 more processed: their writes take 12.5 s to reach the producer
        busy = await asyncio.to_thread(wait_for, port, lambda t: len(t["table"]) >= 70)
        assert len(busy["table"]) >= 70, "the worker did not process the input"
    finally:
        stop(first, signal.SIGTERM)
    await assert_next_worker_recovers_every_committed_write(broker, names, kind, tmp_path, written)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["tansu", "kafka"])
async def test_no_commit_passes_a_table_write_in_flight_kill_9(
    broker: EmbeddedBroker, names: Names, kind: str, tmp_path: Path
) -> None:
    """kill -9 after a commit, while changelog writes lag: a commit must never be past a record
    whose changelog write is not acknowledged (Faust's flush before a commit gave up after
    0.1 s without progress). The records past the commit are processed again by the next
    worker, so its table must hold every record's write."""
    await ensure_topics(broker.bootstrap, [names.traces], 2)
    delay = {"SCORER_TEST_CHANGELOG_DELAY_S": CHANGELOG_DELAY_S}
    first, port = start_app(broker, names, kind, tmp_path, **transport(kind, **delay))
    log = log_path(tmp_path, port)
    try:
        written = await first_records_committed(broker, names)
        held = commits_put_off(log)
        written |= await produce_keyed(broker.bootstrap, names.traces, range(20, 220))

        async def next_commit() -> bool:
            # the old code commits past writes in flight; the mended one holds the commit
            if commits_put_off(log) > held:
                return True
            return sum(await committed_offsets(broker.bootstrap, names)) > 20

        assert await until(next_commit, 120), "no commit after the next 200 records"
    finally:
        stop(first, signal.SIGKILL)
    await assert_next_worker_recovers_every_committed_write(broker, names, kind, tmp_path, written)


async def first_records_committed(
    broker: EmbeddedBroker, names: Names
) -> dict[str, tuple[int, int]]:
    """20 records, processed and committed (the mended worker commits once their table
    writes are acknowledged, 5 s at a write every 0.25 s)."""
    written = await produce_keyed(broker.bootstrap, names.traces, range(20))

    async def committed_all() -> bool:
        return sum(await committed_offsets(broker.bootstrap, names)) == 20

    assert await until(committed_all, 120), "the first 20 records were not committed"
    return written
