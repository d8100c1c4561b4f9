"""A table's writes batched (``stream/kafka/mends/changelog.py``): the local store written at once,
the changelog in record batches, the store told how far its changelog is written, commits
held until the broker has every batch, a refused batch stopping the commit."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.structs import RecordMetadata, TopicPartition
from faust.types import TP
from prometheus_client import CollectorRegistry

from stream.app import create_app
from stream.kafka.mends.changelog import UNANSWERED_AT_MOST, BatchedWrites, batched_writers
from stream.kafka.mends.commits import ChangelogFailures, changelog_failure, drain_producer
from stream.kafka.mends.faust_state import scoring
from stream.kafka.mends.snapshot_store import SnapshotStore
from stream.metrics import ScorerMetrics
from stream.settings import Settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SCORER_"):
            monkeypatch.delenv(name)


class Log:
    """aiokafka's producer as ``BatchedWrites`` uses it, in front of a broker's logs:
    ``create_batch`` gives aiokafka's own ``BatchBuilder`` (``batch_size`` bytes, as the
    producer's ``max_batch_size``); ``send_batch`` appends the batch to the partition's log
    and its future gives the ``RecordMetadata`` of its first record (Kafka assigns a batch
    the log's next offset as its base offset, its records the offsets that follow). While
    ``refusing``, the broker answers with that error; while ``held``, it does not answer."""

    def __init__(self, batch_size: int = 16384) -> None:
        self.batch_size = batch_size
        self.logs: dict[tuple[str, int], list[tuple[int, bytes, bytes | None]]] = {}
        self.batches: list[tuple[str, int, int]] = []  # topic, partition, records
        self.refusing: Exception | None = None
        self.held: list[tuple[asyncio.Future[Any], Any]] = []
        self.holding = False

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self.batch_size, 0)

    async def send_batch(self, builder: BatchBuilder, topic: str, *, partition: int) -> Any:
        answered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.holding:
            self.held.append((answered, (builder, topic, partition)))
        else:
            self._answer(answered, builder, topic, partition)
        return answered

    def release(self) -> None:
        self.holding = False
        for answered, (builder, topic, partition) in self.held:
            self._answer(answered, builder, topic, partition)
        self.held.clear()

    def _answer(self, answered: Any, builder: BatchBuilder, topic: str, partition: int) -> None:
        if self.refusing is not None:
            answered.set_exception(self.refusing)
            return
        log = self.logs.setdefault((topic, partition), [])
        base = len(log)
        records = list(DefaultRecordBatch(bytes(builder._build())))  # what aiokafka sends
        log.extend((base + n, r.key, r.value) for n, r in enumerate(records))
        self.batches.append((topic, partition, len(records)))
        tp = TopicPartition(topic, partition)
        answered.set_result(RecordMetadata(topic, partition, tp, base, -1, -1, -1))


class Record:
    """What Faust's stream makes current for a record: its event, with the message's
    partition (``faust.streams._current_event`` holds a weak reference to it)."""

    def __init__(self, partition: int) -> None:
        self.message = type("Message", (), {"partition": partition})()


@contextmanager
def reading(partition: int) -> Iterator[None]:
    record = Record(partition)
    with scoring(record):  # type: ignore[arg-type]
        yield


def table_app(
    tmp_path: Path, store: str, log: Log, linger_s: float = 60
) -> tuple[faust.App, Any, BatchedWrites]:
    """An app with a ``threads`` table on ``store``, its producer in front of ``log``, and
    the table's batched writes (``linger_s`` 60: handed over only when drained here)."""
    settings = Settings(data_dir=tmp_path / "data", store=store)
    app, _ = create_app(settings, "127.0.0.1:1", ScorerMetrics(CollectorRegistry()))
    Path(app.conf.tabledir).mkdir(parents=True, exist_ok=True)
    app.producer._ensure_producer = lambda: log  # type: ignore[attr-defined]
    table = app.Table("threads", partitions=4, key_type=bytes, value_type=bytes)
    return app, table, BatchedWrites(app, table, linger_s=linger_s)


def changelog(app: faust.App) -> str:
    return f"{app.conf.id}-threads-changelog"


@pytest.mark.parametrize("store", ["rocksdb", "memory"])
async def test_writes_are_read_at_once_and_logged_in_batches_in_order(
    tmp_path: Path, store: str
) -> None:
    log = Log()
    app, table, writes = table_app(tmp_path, store, log)  # handed over only when drained
    with reading(1):
        writes[b"a"] = b"1"
        writes[b"b"] = b"2"
        assert writes.get(b"a") == b"1" and writes[b"b"] == b"2"
        writes[b"a"] = b"3"
        del writes[b"b"]
        assert writes.get(b"b") is None and b"b" not in writes
    with reading(2):
        writes[b"c"] = b"4"
    assert log.batches == []  # nothing handed over before the linger or a drain
    assert await writes.drain(5)
    topic = changelog(app)
    assert log.logs == {
        (topic, 1): [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"a", b"3"), (3, b"b", None)],
        (topic, 2): [(0, b"c", b"4")],
    }
    assert sorted(log.batches) == [(topic, 1, 4), (topic, 2, 1)]  # one batch a partition
    data = table.data
    if store == "rocksdb":  # Faust's persisted offset: the last record written
        assert data.persisted_offset(TP(topic, 1)) == 3
        assert data.persisted_offset(TP(topic, 2)) == 0
        assert data._db_for_partition(1).get(b"a") == b"3"
        assert data._db_for_partition(2).get(b"c") == b"4"
    else:  # every write answered: the snapshot can be written, exact at these offsets
        assert isinstance(data, SnapshotStore)
        assert data._persisted == {1: 3, 2: 0}
        assert data._answered == data._writes == 5
        assert data.write_snapshot() == 2
        assert dict(writes.items()) == {b"a": b"3", b"c": b"4"}  # (RocksDB: assigned only)
    writes.stop()


async def test_a_full_batch_is_handed_over_and_the_next_follows_it(tmp_path: Path) -> None:
    log = Log(batch_size=200)
    app, table, writes = table_app(tmp_path, "rocksdb", log)
    with reading(0):
        for n in range(10):
            writes[f"k{n}".encode()] = bytes([n]) * 60
    assert await writes.drain(5)
    topic = changelog(app)
    assert [key for _, key, _ in log.logs[(topic, 0)]] == [f"k{n}".encode() for n in range(10)]
    assert len(log.batches) > 1  # a batch refused a record: the rest went in the next ones
    assert table.data.persisted_offset(TP(topic, 0)) == 9
    writes.stop()


async def test_batches_are_handed_over_after_the_linger(tmp_path: Path) -> None:
    log = Log()
    app, _table, writes = table_app(tmp_path, "rocksdb", log, linger_s=0.01)
    with reading(3):
        writes[b"k"] = b"v"
    await asyncio.sleep(0.1)
    assert log.batches == [(changelog(app), 3, 1)]
    writes.stop()


async def test_a_write_with_no_record_in_scope_is_refused(tmp_path: Path) -> None:
    _app, _table, writes = table_app(tmp_path, "rocksdb", Log())
    with pytest.raises(RuntimeError, match="no event in scope"):
        writes[b"k"] = b"v"


async def test_the_producer_drains_only_once_the_broker_has_every_batch(tmp_path: Path) -> None:
    log = Log()
    app, table, writes = table_app(tmp_path, "memory", log)
    assert writes in batched_writers(app)
    log.holding = True
    with reading(0):
        writes[b"k"] = b"v"
    # the commit's drain hands the open batch over and waits for the broker's answer
    assert not await drain_producer(app.producer, 0.2)
    assert log.held and table.data._answered < table.data._writes
    assert table.data.write_snapshot() is None  # not answered: no snapshot
    log.release()
    assert await drain_producer(app.producer, 1)
    assert table.data._persisted == {0: 0}
    writes.stop()


async def test_a_refused_batch_stops_the_next_commit(tmp_path: Path) -> None:
    log = Log()
    app, table, writes = table_app(tmp_path, "rocksdb", log)
    failures = ChangelogFailures(set())
    assert changelog_failure(app, failures) is None
    log.refusing = RuntimeError("NotLeaderForPartition")
    with reading(0):
        writes[b"k"] = b"v"
    await writes.drain(1)
    failed = changelog_failure(app, failures)
    assert failed is not None
    topic, exc = failed
    assert topic == changelog(app) and str(exc) == "NotLeaderForPartition"
    assert table.data.persisted_offset(TP(topic, 0)) is None  # nothing written is claimed
    writes.stop()


async def test_rocksdb_is_written_before_its_changelog_batch_goes(tmp_path: Path) -> None:
    """The persisted offset never runs ahead of the database: a batch's writes are in it
    before the batch is handed over; a partition revoked before that (its database closed)
    gets neither, and its next owner replays the changelog, which has them."""
    log = Log()
    app, table, writes = table_app(tmp_path, "rocksdb", log)
    data = table.data
    with reading(0):
        writes[b"a"] = b"1"
        assert writes[b"a"] == b"1"  # read before it is in the database
    with reading(1):
        writes[b"b"] = b"2"
    assert data._db_for_partition(0).get(b"a") is None  # not yet written
    data._dbs.pop(1)  # partition 1 revoked: Faust let go of its database
    assert await writes.drain(5)
    topic = changelog(app)
    assert data._db_for_partition(0).get(b"a") == b"1"
    assert data.persisted_offset(TP(topic, 0)) == 0
    assert log.logs[(topic, 1)] == [(0, b"b", b"2")]  # the changelog has it
    assert data._db_for_partition(1).get(b"b") is None  # reopened: never written here
    assert data.persisted_offset(TP(topic, 1)) is None  # so no offset claims it
    writes.stop()


async def test_fausts_flush_at_a_revoke_waits_for_the_batches(tmp_path: Path) -> None:
    """At a revoke Faust waits for the agents, then flushes its producer
    (``App._on_partitions_revoked`` -> ``_producer_flush``, faust-streaming 0.15), so that
    the partition's next owner recovers every write: the open batches go with that flush,
    and it returns once the broker has them."""
    log = Log()
    app, table, writes = table_app(tmp_path, "rocksdb", log)
    with reading(1):
        writes[b"b"] = b"2"
    await app._producer_flush(app.log)
    topic = changelog(app)
    assert log.logs[(topic, 1)] == [(0, b"b", b"2")] and not writes._open
    assert table.data.persisted_offset(TP(topic, 1)) == 0
    writes.stop()


async def test_a_batch_refused_while_a_commit_drains_holds_that_commit(tmp_path: Path) -> None:
    log = Log()
    app, _table, writes = table_app(tmp_path, "memory", log)
    failures = ChangelogFailures(set())
    log.holding = True
    with reading(0):
        writes[b"k"] = b"v"
    assert changelog_failure(app, failures) is None  # the commit's first check passes

    async def refuse() -> None:
        await asyncio.sleep(0.05)
        log.refusing = RuntimeError("NotLeaderForPartition")
        log.release()

    refusing = asyncio.create_task(refuse())
    assert not await drain_producer(app.producer, 2)  # the drain says the write failed
    await refusing
    assert changelog_failure(app, failures) is not None  # and the commit then stops
    writes.stop()


async def test_an_answer_after_the_partition_was_dropped_is_not_claimed(tmp_path: Path) -> None:
    """A batch answered after a recovery dropped its partition's keys from the memory store
    must not put the partition in the snapshot (its keys are gone: a start reading it would
    replay only what follows and lose them): the snapshot is not written."""
    log = Log()
    app, table, writes = table_app(tmp_path, "memory", log)
    store = table.data
    with reading(0):
        writes[b"a"] = b"1"
    assert await writes.drain(1)
    log.holding = True
    with reading(1):
        writes[b"b"] = b"2"
    writes.flush()
    await asyncio.sleep(0.01)
    await store.on_recovery_completed({TP(changelog(app), 0)}, set())  # 1 revoked, dropped
    log.release()
    await asyncio.sleep(0.01)
    assert 1 not in store._persisted
    assert store.write_snapshot() is None
    writes.stop()


class RoundTrip(Log):
    """aiokafka's accumulator as ``send_batch`` meets it (``MessageAccumulator.add_batch``):
    a partition's batch is taken once the one before it has left in a request; the broker
    answers ``rtt`` seconds later."""

    def __init__(self, rtt: float) -> None:
        super().__init__()
        self.rtt = rtt
        self.left: dict[int, asyncio.Future[None]] = {}

    async def send_batch(self, builder: BatchBuilder, topic: str, *, partition: int) -> Any:
        if (previous := self.left.get(partition)) is not None:
            await previous
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[Any] = loop.create_future()
        left = self.left[partition] = loop.create_future()

        async def fly() -> None:
            await asyncio.sleep(self.rtt)
            left.set_result(None)
            self._answer(answered, builder, topic, partition)

        self.flying = asyncio.ensure_future(fly())
        return answered


async def test_a_round_trip_longer_than_the_linger_does_not_pile_batches_up(
    tmp_path: Path,
) -> None:
    """A partition's open batch is not handed over at the linger while its last one is
    unanswered (it keeps filling); past ``UNANSWERED_AT_MOST`` the writer's agent waits."""
    log = RoundTrip(rtt=0.02)
    app, _table, writes = table_app(tmp_path, "rocksdb", log, linger_s=0.005)
    most = 0
    for _ in range(200):  # 0.2 s at 4 k writes/s
        for partition in range(4):
            with reading(partition):
                writes[f"k{partition}".encode()] = b"v"
        most = max(most, len(writes._unanswered))
        await asyncio.sleep(0.001)
    assert most <= 8  # one batch a partition at a time (plus full ones)
    assert await writes.drain(5)
    assert sum(len(log.logs[(changelog(app), p)]) for p in range(4)) == 800
    for partition in range(4):  # many records a batch, not one batch a linger
        assert (
            len(log.logs[(changelog(app), partition)])
            / sum(1 for t, p, _ in log.batches if p == partition)
            > 2
        )
    writes.stop()


async def test_the_agent_waits_while_too_many_batches_are_unanswered(tmp_path: Path) -> None:
    log = Log(batch_size=100)  # a batch a record
    _app, _table, writes = table_app(tmp_path, "rocksdb", log)
    log.holding = True
    with reading(0):
        for n in range(UNANSWERED_AT_MOST + 3):
            writes[f"k{n}".encode()] = bytes(80)
    await asyncio.sleep(0.01)
    assert writes.behind()
    waiting = asyncio.create_task(writes.ebb())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    log.release()
    await asyncio.wait_for(waiting, 1)
    assert not writes.behind()
    writes.stop()
