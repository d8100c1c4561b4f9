"""A table's writes batched: to its local store at once, to its changelog as record batches
(design record 35).

Faust writes a table key by key (``Table.on_key_set``, faust-streaming 0.15): each write is a
``FutureMessage`` through the changelog topic's ``send_soon``, Faust's producer buffer and
its task, aiokafka's ``send`` (a future, the partitioner, the accumulator), a callback that
writes the persisted offset into RocksDB, and the conductor's wait for the buffer to ebb;
and a read asks the store twice (``__contains__``, then ``__getitem__``). With 100 000 open
threads that was about 90 of the 320 µs a session event cost the thread agent.

``BatchedWrites`` is a table as its one writer (an agent, in its stream's context) sees it:

- a read asks the store of the current record's partition once;
- a write is seen by the next read at once, and its changelog record joins the open record
  batch of the same changelog partition; the memory store is written at once, a RocksDB
  database when the partition's changelog batch is handed over, all of its writes since
  as one ``WriteBatch`` (one write-ahead log append, and one release of the GIL, where each
  ``put`` took one: about 13 µs a write in the worker);
- a batch is handed to the producer (in order per partition, by one task: ``Handover``) when
  it is full; ``linger_s`` after its first record unless its partition's last batch is
  unanswered (aiokafka takes a partition's batch only once the one before has left: a round
  trip longer than the linger would pile batches up), then once that is answered; and
  whenever the producer is drained (``drain_producer``: before every commit, before a worker
  leaves its group, before a close that deferred batch jobs is marked published) or flushed
  (the mended producer's ``flush``, which Faust awaits at a revoke), which then wait until
  the broker has every batch: mends 5 and 6 hold for these writes as for Faust's, and a
  partition's next owner recovers them; past ``UNANSWERED_AT_MOST`` unanswered batches the
  agent waits (``ebb``);
- once the broker has a batch, the store is told the offset of its last record (RocksDB's
  persisted offset; the memory store's snapshot offsets and its count of answered writes),
  as Faust's callback did for each record; a batch of a partition revoked meanwhile tells
  nothing (its database is closed, or the memory store dropped its keys; the next owner
  replays from the offset before);
- a batch the broker refuses is a failed changelog write (``failed``, read by
  ``commits.changelog_failure``): the drain says so, and the commit stops the worker before
  it passes the records that made it (mend 5).

Only stores whose partitions this module can reach are batched (``RawRocksStore``, our
memory store ``SnapshotStore``); any other store is written through the Faust table, as
before.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterator, MutableMapping
from typing import Any

import faust
from faust import current_event
from faust.types import TP

from .faust_state import aiokafka_producer
from .handover import Handover
from .rocksdb_store import RawRocksStore
from .snapshot_store import SnapshotStore
from .testhooks import CHANGELOG_DELAY_ENV, delay_from_env

log = logging.getLogger(__name__)

_UNKNOWN = object()  # the table's store, before it is first asked for
# batches handed over and not yet answered, past which the writer's agent waits (``ebb``):
# a produce round trip longer than the linger must not let batches pile up without bound
UNANSWERED_AT_MOST = 32
_writers: weakref.WeakKeyDictionary[Any, list[BatchedWrites]] = weakref.WeakKeyDictionary()


def batched_writers(app: Any) -> list[BatchedWrites]:
    """The batched tables of ``app`` (drained with its producer)."""
    return _writers.get(app, [])


class _Open:
    """The open record batch of one changelog partition (``stored``: its writes are in the
    store's database, so the offset of its last record may be persisted once it is
    answered)."""

    __slots__ = ("builder", "count", "drops", "stored")

    def __init__(self, builder: Any) -> None:
        self.builder = builder
        self.count = 0
        self.stored = True
        self.drops = 0  # the memory store's partition drops when it was handed over


class BatchedWrites(MutableMapping[bytes, bytes]):
    """``table`` (a raw Faust table) read and written by its one writer, its changelog
    written as record batches."""

    def __init__(self, app: faust.App, table: Any, *, linger_s: float) -> None:
        self.app = app
        self.table = table
        self.linger_s = linger_s
        self.topic = table.changelog_topic.get_topic_name()
        # a test hook: each batch as slow to reach aiokafka as Faust's writes are made
        self.handover = Handover(app, delay_s=delay_from_env(CHANGELOG_DELAY_ENV))
        self._open: dict[int, _Open] = {}
        self._flush_at: asyncio.TimerHandle | None = None
        self._unanswered: set[asyncio.Future[Any]] = set()
        self._in_flight: dict[int, int] = {}  # unanswered batches per changelog partition
        self._stopped = False
        self._store: Any = _UNKNOWN
        # RocksDB: writes not yet in the database, by partition (None: deleted); written as
        # one WriteBatch a partition when its changelog batch is handed over
        self._unwritten: dict[int, dict[bytes, bytes | None]] = {}
        self.failed: list[BaseException] = []
        _writers.setdefault(app, []).append(self)

    # -- the store, by partition -------------------------------------------------------

    @property
    def store(self) -> Any:
        """The table's store, or None when it is not one this module batches."""
        if self._store is _UNKNOWN:
            data = self.table.data
            self._store = data if isinstance(data, RawRocksStore | SnapshotStore) else None
        return self._store  # (not its truth: a store's truth is its length, a count)

    @staticmethod
    def _partition() -> int:
        event = current_event()
        if event is None:
            raise RuntimeError("a table is written in its agent's stream (no event in scope)")
        partition: int = event.message.partition
        return partition

    def get(self, key: bytes, default: Any = None) -> Any:
        store = self.store
        if store is None:
            return self.table.get(key, default)
        if isinstance(store, SnapshotStore):
            value = store.data.get(key)
        else:
            partition = self._partition()
            unwritten = self._unwritten.get(partition)
            if unwritten is not None and key in unwritten:
                value = unwritten[key]
            else:
                value = store._db_for_partition(partition).get(key)
        return default if value is None else value

    def __getitem__(self, key: bytes) -> bytes:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        result: bytes = value
        return result

    def __setitem__(self, key: bytes, value: bytes) -> None:
        store = self.store
        if store is None:
            self.table[key] = value
            return
        partition = self._partition()
        if isinstance(store, SnapshotStore):
            store.put(partition, key, value)
        else:
            store._db_for_partition(partition)  # open (a partition's first write)
            self._unwritten.setdefault(partition, {})[key] = value
            store._key_index[key] = partition  # as Faust's ``Store._set``
        self._log(partition, key, value)

    def __delitem__(self, key: bytes) -> None:
        store = self.store
        if store is None:
            del self.table[key]
            return
        partition = self._partition()
        if isinstance(store, SnapshotStore):
            del store[key]
        else:  # as Faust's: absent, no error
            store._db_for_partition(partition)
            self._unwritten.setdefault(partition, {})[key] = None
        self._log(partition, key, None)  # a tombstone

    def __iter__(self) -> Iterator[bytes]:
        self._write_all()
        return iter(self.table)

    def __len__(self) -> int:
        self._write_all()
        return len(self.table)

    def items(self) -> Any:
        self._write_all()
        return self.table.items()

    # -- RocksDB: the writes of a partition as one WriteBatch ---------------------------

    def _write(self, partition: int) -> bool:
        """Write ``partition``'s writes to its database as one batch (one write-ahead log
        append, one release of the GIL, against one each for every write); False when the
        partition was revoked meanwhile (its database closed: they are dropped here; the
        changelog has them for its next owner)."""
        unwritten = self._unwritten.pop(partition, None)
        if not unwritten:
            return True
        db = self.store._dbs.get(partition)
        if db is None:
            if (open_batch := self._open.get(partition)) is not None:
                open_batch.stored = False  # its writes were among those dropped
            return False
        from rocksdict import WriteBatch  # a RocksDB store: rocksdict imports

        batch = WriteBatch(raw_mode=True)
        for key, value in unwritten.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        db.write(batch)
        return True

    def _write_all(self) -> None:
        for partition in list(self._unwritten):
            self._write(partition)

    # -- the changelog, in batches ----------------------------------------------------

    def _log(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Append the write's changelog record to its partition's open batch."""
        batch = self._open.get(partition)
        if batch is None:
            batch = self._open[partition] = _Open(self._new_builder())
        if not batch.builder.append(timestamp=None, key=key, value=value, headers=[]):
            self._hand(partition, batch)  # full: this record opens the next one
            batch = self._open[partition] = _Open(self._new_builder())
            if not batch.builder.append(timestamp=None, key=key, value=value, headers=[]):
                size = len(value or b"")
                raise ValueError(f"a record batch refused a {size}-byte value of {self.topic}")
        batch.count += 1
        self._arm()

    def _new_builder(self) -> Any:
        return aiokafka_producer(self.app).create_batch()

    def flush(self) -> None:
        """Hand every open batch to the producer (a drain)."""
        self._linger_over(everything=True)

    def _linger_over(self, *, everything: bool = False) -> None:
        """Hand over the open batches (at the linger: those of partitions with no batch
        still unanswered; the others keep filling and go when it is answered, when full,
        or at a drain)."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        for partition in list(self._open):
            if everything or not self._in_flight.get(partition):
                self._hand(partition, self._open.pop(partition))
        if self._open:
            self._arm()

    def _arm(self) -> None:
        if self._flush_at is None and not self._stopped:
            loop = asyncio.get_running_loop()
            self._flush_at = loop.call_later(self.linger_s, self._linger_over)

    def behind(self) -> bool:
        """More than ``UNANSWERED_AT_MOST`` batches unanswered: the agent should ``ebb``."""
        return len(self._unanswered) > UNANSWERED_AT_MOST

    async def ebb(self) -> None:
        """Wait while more than ``UNANSWERED_AT_MOST`` batches are unanswered (the writer's
        agent calls this before each record, as Faust's conductor waits for its producer
        buffer to ebb)."""
        while self.behind():
            await asyncio.wait(list(self._unanswered), return_when=asyncio.FIRST_COMPLETED)

    def _hand(self, partition: int, batch: _Open) -> None:
        """Hand ``batch`` over, its partition's writes in the database first (so that the
        offset persisted once it is answered never runs ahead of the database)."""
        if self._unwritten:
            batch.stored = self._write(partition)
        if isinstance(store := self.store, SnapshotStore):
            batch.drops = store.drops
        delivered = self.handover.hand(batch.builder, self.topic, partition)
        self._unanswered.add(delivered)
        self._in_flight[partition] = self._in_flight.get(partition, 0) + 1
        tp = TP(self.topic, partition)
        delivered.add_done_callback(lambda done: self._answered(done, tp, batch))

    def _answered(self, done: asyncio.Future[Any], tp: TP, batch: _Open) -> None:
        count = batch.count
        self._unanswered.discard(done)
        self._in_flight[tp.partition] -= 1
        if tp.partition in self._open:
            self._arm()  # its open batch waited for this answer
        if done.cancelled():
            return  # never handed over: the worker is stopping, no commit passes its records
        if (exc := done.exception()) is not None:
            log.error("a batch of %d changelog writes to %s failed: %r", count, tp, exc)
            self.failed.append(exc)
            return
        last = done.result().offset + count - 1
        store = self.store
        if isinstance(store, SnapshotStore):
            if batch.drops == store.drops:  # else partitions were dropped since: not claimed
                store.answered(tp, last, count)
        elif batch.stored and tp.partition in store._dbs:  # else revoked meanwhile
            store.set_persisted_offset(tp, last)

    async def drain(self, timeout: float | None) -> bool:
        """Hand over every open batch and wait until the broker has every batch handed over
        so far; False after ``timeout`` seconds (None: no limit), when one was never handed
        over, or when any has failed."""
        self.flush()
        waiting = list(self._unanswered)
        if waiting:
            done, pending = await asyncio.wait(waiting, timeout=timeout)
            if pending or any(f.cancelled() for f in done):
                return False
        return not self.failed  # a failed batch: the worker stops at the commit (mend 5)

    def stop(self) -> None:
        """Stop handing batches over (once the worker has drained before leaving): queued
        batches are never delivered (their futures cancelled)."""
        self._stopped = True
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        self.handover.stop()
