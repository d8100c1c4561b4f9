"""What the worker reads of Faust's and aiokafka's consumer state, in one named place.

Faust keeps no public record of what it has committed, which partitions it has paused, or
when a partition's high watermark was fetched; aiokafka keeps the cluster's metadata behind
the consumer thread. Everything of theirs that the thread table and the span assembly read
to say how far a worker has read its sources goes through here, so an upgrade of either
library has one module to check (faust-streaming 0.15: ``Consumer._committed_offset``,
``Producer._ensure_producer``,
``Consumer._paused_partitions``, ``ThreadDelegateConsumer._thread._consumer``, the stream's
current event ``faust.streams._current_event``; aiokafka
0.14: ``AIOKafkaConsumer.last_poll_timestamp``, ``_client.cluster``)."""

from __future__ import annotations

import weakref
from typing import Any, cast

import faust
from faust.streams import _current_event
from faust.transport.consumer import Consumer
from faust.types import TP, EventT

from ...sources.log import Position, SourceLog, source_name
from .snapshot_store import SnapshotStore


def aiokafka_producer(app: faust.App) -> Any:
    """The aiokafka producer behind Faust's (started with it): record batches are built and
    sent on it (``create_batch``, ``send_batch``), which Faust's producer has no call for
    (faust-streaming 0.15: ``Producer._ensure_producer``)."""
    return cast(Any, app.producer)._ensure_producer()


def _aiokafka(consumer: Any) -> Any:
    """The aiokafka consumer behind Faust's (None before it runs)."""
    return getattr(getattr(consumer, "_thread", None), "_consumer", None)


def partition_count(consumer: Any, topic: str) -> int | None:
    """How many partitions ``topic`` has, from the consumer's cluster metadata (None: not
    known yet). Not Faust's ``topic_partitions``: it reads aiokafka's snapshot of the group's
    subscription, which only the group's leader takes (aiokafka ``GroupCoordinator``:
    ``_metadata_snapshot`` stays empty on every other member), so on every worker but one the
    sources were never expected and a partition taken over did not wait for them."""
    cluster = getattr(getattr(_aiokafka(consumer), "_client", None), "cluster", None)
    if cluster is None:
        return None
    partitions = cluster.partitions_for_topic(topic)
    return len(partitions) if partitions else None


def last_fetched(consumer: Consumer, partitions: list[TP]) -> dict[str, float]:
    """When aiokafka last had a fetch answered for each partition (epoch seconds), where
    known: the moment its high watermark is from."""
    client = _aiokafka(consumer)
    if client is None:
        return {}
    fetched = {}
    for tp in partitions:
        try:
            stamp = client.last_poll_timestamp(tp)
        except (AssertionError, AttributeError):  # not assigned to aiokafka (yet), or gone
            continue
        if stamp is not None:
            fetched[source_name(tp.topic, tp.partition)] = stamp / 1000
    return fetched


def owned_partitions(app: faust.App, topic: str) -> set[int]:
    """The partitions of ``topic`` assigned to this worker as active."""
    return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic}


def read_positions(
    app: faust.App, sources: SourceLog, topics: set[str], now: float
) -> dict[str, Position]:
    """How far this worker has read each partition of ``topics`` it owns (``SourceLog``).

    A partition paused (Faust pauses every one while its tables recover after a rebalance)
    is not fetched: the high watermark of its last fetch says nothing of what has arrived
    since, so it is not reported caught up, only read up to its last message."""
    consumer = cast(Consumer, app.consumer)  # Faust's, with its record of committed offsets
    committed = consumer._committed_offset
    paused = consumer._paused_partitions
    fetching = not app.rebalancing

    def highwater(tp: TP) -> int | None:
        return consumer.highwater(tp) if fetching and tp not in paused else None

    owned = [tp for tp in app.assignor.assigned_actives() if tp.topic in topics]
    assigned = {
        source_name(tp.topic, tp.partition): (highwater(tp), committed.get(tp)) for tp in owned
    }
    return sources.positions(assigned, now, last_fetched(consumer, owned))


def put_in_partition(table: Any, partition: int, key: bytes, value: bytes) -> None:
    """Write ``key`` into ``table``'s local store as the value of ``partition``, with no
    stream event in scope (a timer's write; the caller sends the changelog record itself).

    Faust's stores pick the partition of a write from the current event: the memory store
    keeps one map for every partition, but the RocksDB store (``stores/rocksdb.py``
    ``Store._set``, faust-streaming 0.15) asserts there is an event and writes into that
    partition's database. Here the partition's database is written directly, and its key
    index told where the key is, as ``_set`` does; our memory store is told the key's
    partition, which its snapshot records."""
    store = table.data
    if isinstance(store, SnapshotStore):  # the memory store, told the key's partition
        store.put(partition, key, value)
        return
    open_db = getattr(store, "_db_for_partition", None)
    if open_db is None:  # Faust's own memory store
        store[key] = value
        return
    open_db(partition).put(key, value)
    store._key_index[key] = partition


class scoring:  # noqa: N801 (a context manager, named as contextlib's are)
    """``event`` the current event while the block runs (and in the tasks it starts), as
    Faust's stream makes each event it yields current (``faust.streams._current_event``,
    faust-streaming 0.15). A table write picks its partition from the current event: an
    agent that handles records away from the stream's own task (the batched trace agent's
    batches) makes each current while it is scored, or the write finds no event.

    A class rather than ``@contextmanager``: it is entered for every trace, and a generator's
    context manager costs several times as much."""

    __slots__ = ("event", "token")

    def __init__(self, event: EventT[Any]) -> None:
        self.event = event

    def __enter__(self) -> None:
        self.token = _current_event.set(weakref.ref(self.event))

    def __exit__(self, *exc_info: object) -> None:
        _current_event.reset(self.token)
