"""A data directory that holds tables from another broker (design record 38): a worker stops
in one line naming it, or rebuilds its tables from the changelogs when told to. Real workers,
on two embedded brokers one after the other (each a fresh cluster)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from faust.types import TP
from fixtures import live_trace
from scorer_runs import error_lines, run_scorer

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.mends import snapshot_store
from stream.kafka.mends.stale_state import Held, find_stale
from stream.metrics import sample_value

from .harness import Names, Worker, produce, read_scores, trace_bytes
from .test_threads import as_messages, session_turn

TABLE_FILES = {"rocksdb": "threads-*.db", "memory": "threads.memory-snapshot"}


@contextmanager
def broker_at(log: Path) -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker(log_path=log).start()
    try:
        yield broker
    finally:
        broker.stop()


def table_files(data: Path, store: str) -> list[Path]:
    return sorted((data / "v1" / "tables").glob(TABLE_FILES[store]))


@pytest.mark.parametrize("store", ["rocksdb", "memory"])
async def test_tables_from_another_broker_stop_the_start_in_one_line_or_are_rebuilt(
    store: str, names: Names, tmp_path: Path
) -> None:
    """A worker folds a few sessions on broker A and stops cleanly; A goes, a fresh broker B
    comes. On B the same data directory stops the next worker in one line naming it (exit 2,
    no traceback, the directory left as it was); with SCORER_STALE_STATE=rebuild the worker
    discards the tables, starts, and scores a new trace."""
    data = tmp_path / "data"
    env = {"SCORER_STORE": store, "SCORER_DATA_DIR": str(data)}
    with broker_at(tmp_path / "a.log") as first_broker:
        first = Worker(first_broker.bootstrap, names, tmp_path, **env).start()
        try:
            turns = [session_turn(f"s{n}", 0, 0.5) for n in range(6)]
            await produce(first_broker.bootstrap, names.sessions, as_messages(turns))
            for _ in range(150):
                if sample_value(first.scrape(), "scorer_thread_events_total", type="turn") >= 6:
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError("the first worker did not fold the turns")
        finally:
            first.stop()
    kept = table_files(data, store)
    assert kept, "the first worker kept no thread table under its data directory"

    with broker_at(tmp_path / "b.log") as second_broker:
        settings = {
            k: v
            for k, v in Worker(second_broker.bootstrap, names, tmp_path, **env).env.items()
            if k.startswith(("SCORER_", "KAFKA_"))
        }
        started = time.monotonic()
        result = run_scorer(["worker"], tmp_path, timeout=30, **settings)
        took = time.monotonic() - started
        [error] = error_lines(result)  # exit 2, no traceback, the error last on stderr
        assert result.stderr.splitlines()[-1] == f"error: {error}"
        assert error.startswith(
            f"SCORER_DATA_DIR: {data} holds tables from another Kafka cluster, or from before "
            "the changelog topics were re-created: table threads holds "
            f"{names.group}-threads-changelog partition "
        ), error
        assert f"but on {second_broker.bootstrap} that partition ends at offset 0" in error
        assert error.endswith(
            f"remove {data} to start afresh, or set SCORER_STALE_STATE=rebuild to discard its "
            "tables and rebuild them from the changelogs"
        ), error
        assert took < 20
        assert table_files(data, store) == kept  # left as it was

        second = Worker(
            second_broker.bootstrap, names, tmp_path, SCORER_STALE_STATE="rebuild", **env
        )
        second.start()
        try:
            trace = live_trace()
            trace["id"] = f"after-rebuild-{names.suffix}"
            await produce(second_broker.bootstrap, names.traces, [trace_bytes(trace)])
            scores = await read_scores(
                second_broker.bootstrap,
                names.scores,
                until=lambda rs: any(s["target_id"] == trace["id"] for s in rs),
                timeout=40,
            )
            assert any(s["target_id"] == trace["id"] for s in scores), second.log()[-3000:]
        finally:
            second.stop()
        log = second.log()
        assert f"{data} held tables from another Kafka cluster" in log
        assert "discarded the local state of tables" in log and "threads" in log
        assert "ConsistencyError" not in log and "Traceback" not in log


async def test_an_end_offset_the_embedded_broker_under_reports_is_not_taken_for_stale(
    broker: EmbeddedBroker, names: Names
) -> None:
    """The embedded broker reports a partition's end as its last batch's base offset + 1
    (design record 03): five records in one batch end at 1 by ListOffsets. A table held up
    to the fourth is not stale; held up to offset 5, the next record's, it is."""
    topic = f"{names.group}-threads-changelog"
    await ensure_topics(broker.bootstrap, [topic], 1)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=200)
    await producer.start()
    try:
        batch = producer.create_batch()
        for n in range(5):
            batch.append(key=f"k{n}".encode(), value=b"v", timestamp=None)
        await (await producer.send_batch(batch, topic, partition=0))
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
    await consumer.start()
    try:
        reported = await consumer.end_offsets([TopicPartition(topic, 0)])
    finally:
        await consumer.stop()
    assert reported[TopicPartition(topic, 0)] == 1  # the defect this guards against

    tp = TP(topic, 0)
    assert await find_stale([Held("threads", tp, 4)], broker.bootstrap, None) == []
    held = Held("threads", tp, 5)
    assert await find_stale([held], broker.bootstrap, None) == [(held, 5)]


def test_a_snapshot_is_read_by_its_header_as_the_store_would_use_it(tmp_path: Path) -> None:
    """The offsets come from a whole snapshot of the table only: one the memory store would
    not read (truncated, another table's) holds nothing, and is not taken for stale."""
    path = tmp_path / f"threads{snapshot_store.SUFFIX}"
    assert snapshot_store.snapshot_offsets(path, "threads") is None  # none written
    raw = snapshot_store.encode_snapshot("threads", {0: 7, 3: 2}, [(0, b"k", b"v" * 100)])
    path.write_bytes(raw)
    assert snapshot_store.snapshot_offsets(path, "threads") == {0: 7, 3: 2}
    assert snapshot_store.snapshot_offsets(path, "otlp_traces") is None
    path.write_bytes(raw[:-10])
    assert snapshot_store.snapshot_offsets(path, "threads") is None
    path.write_bytes(raw[:5])
    assert snapshot_store.snapshot_offsets(path, "threads") is None
