"""The verdict cache's entries in a changelog-backed table (design record 22).

A verdict is written in the partition of the record that asked for it: the trace's message
partition for trace rules, the thread table's partition for a thread or pair close (the
judge is called from the task the agent spawned for that record, so Faust's current event is
that record). The table is co-partitioned with those topics (same partition count, Faust's
assignor gives the same partition numbers to the same worker), so its entries move with
their partition at a rebalance: a replayed or duplicated trace, keyed by its trace or thread
id, lands on the worker that holds its entry. ``SCORER_STORE=rocksdb`` keeps them on local
disk across a restart; the memory store rebuilds them from the changelog.

Bounded like the in-memory cache: each entry carries the wall-clock time it was stored (so
its TTL holds across restarts) and the partition it was written in; a timer drops the
expired entries of the partitions this worker owns with a changelog tombstone each, and a
partition holding more than ``max_entries`` drops its oldest at once. The table is an
optimisation only: a write that fails, or a record whose topic is not co-partitioned with
the table, leaves the verdict in memory, and a retry pays again.

Values are the stored time, the partition and the pickled verdict, read back by an
unpickler that admits only the verdict's own classes: the changelog is an internal topic,
but what a stranger writes there must not run code.
"""

from __future__ import annotations

import contextlib
import io
import logging
import pickle
import struct
import sys
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable

import faust
from faust.exceptions import PartitionsMismatch
from faust.streams import current_event

from ..app import raw_table
from ..engine.verdicts import Verdict
from ..kafka.mends.faust_state import owned_partitions, put_in_partition

log = logging.getLogger(__name__)

TABLE_NAME = "verdicts"
HEADER = struct.Struct(">dI")
# bytes an entry's index holds in Python (the key, its slot in the ordered index with when it
# was stored, its slot in the sizes), and a value's slot in the memory store's dict: measured
# with tracemalloc (tests/agents/test_verdict_table.py)
INDEX_ENTRY = 260
TABLE_SLOT = 40  # stored at (seconds since the epoch), partition written in

# the classes a pickled verdict is made of, and nothing else
VERDICT_CLASSES = {
    ("stream.engine.verdicts", "Verdict"),
    ("stream.engine.verdicts", "ParsedAnswer"),
    ("stream.engine.verdicts", "RubricAnswers"),
    ("stream.engine.verdicts", "ComparisonAnswers"),
    ("stream.ruleset.aggregators", "CriterionAnswer"),
    ("stream.models", "TokenUsage"),
}


class _VerdictUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in VERDICT_CLASSES:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a verdict")
        found: type = super().find_class(module, name)
        return found


def encode_entry(verdict: Verdict, stored_at: float, partition: int) -> bytes:
    """A table value: when and in which partition ``verdict`` was stored, then the verdict."""
    return HEADER.pack(stored_at, partition) + pickle.dumps(verdict, pickle.HIGHEST_PROTOCOL)


def entry_header(value: bytes) -> tuple[float, int]:
    """When and in which partition an entry was stored (``ValueError`` if unreadable)."""
    if len(value) < HEADER.size:
        raise ValueError("a verdict entry shorter than its header")
    stored_at, partition = HEADER.unpack_from(value)
    return stored_at, partition


def decode_entry(value: bytes) -> tuple[float, int, Verdict]:
    """The stored time, partition and verdict of a table value (``ValueError`` if it is not
    one ``encode_entry`` wrote)."""
    stored_at, partition = entry_header(value)
    try:
        verdict = _VerdictUnpickler(io.BytesIO(value[HEADER.size :])).load()
    except Exception as exc:
        raise ValueError(f"an unreadable verdict entry: {exc}") from exc
    if not isinstance(verdict, Verdict):
        raise ValueError(f"a verdict entry holding a {type(verdict).__name__}")
    return stored_at, partition, verdict


def sweep_interval(ttl_s: float) -> float:
    """How often expired entries are dropped: a tenth of the TTL, between 1 s and a minute."""
    return min(60.0, max(1.0, ttl_s / 10))


class VerdictTable:
    """The ``VerdictStore`` of a worker: verdicts in the ``verdicts`` table, bounded by
    ``ttl_s`` (from when each was stored), ``max_entries`` per partition and, when given,
    ``max_bytes`` per partition of what it holds in Python: the index of every entry, and
    with ``values_in_memory`` (the memory store) the values too."""

    def __init__(
        self,
        app: faust.App,
        *,
        partitions: int,
        ttl_s: float,
        max_entries: int,
        clock: Callable[[], float] = time.time,
        max_bytes: int | None = None,
        values_in_memory: bool = True,
    ) -> None:
        if ttl_s <= 0 or max_entries <= 0:
            raise ValueError("a verdict table keeps entries for a positive time and count")
        self.app = app
        self.table = raw_table(app, TABLE_NAME, partitions)
        self.changelog_name = self.table.changelog_topic.get_topic_name()
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.values_in_memory = values_in_memory
        self.clock = clock
        # partition -> key -> stored at, oldest first: what the sweep and the bound drop
        self._index: defaultdict[int, OrderedDict[bytes, float]] = defaultdict(OrderedDict)
        self._sizes: defaultdict[int, dict[bytes, int]] = defaultdict(dict)  # key and value
        self.bytes: defaultdict[int, int] = defaultdict(int)
        self._not_copartitioned: set[str] = set()

        @self.table.on_recover
        async def rebuild_index() -> None:
            self.rebuild(self.owned())

        self.app.timer(sweep_interval(ttl_s), name="verdicts-sweep")(self._sweep)

    def owned(self) -> set[int]:
        """The table's partitions this worker owns now."""
        return owned_partitions(self.app, self.changelog_name)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._index.values())

    def rebuild(self, partitions: set[int]) -> int:
        """The index of ``partitions`` from the table's entries (after each recovery)."""
        self._index.clear()
        self._sizes.clear()
        self.bytes.clear()
        count = 0
        for key, value in list(self.table.data.items()):
            try:
                stored_at, partition = entry_header(value)
            except ValueError:
                continue  # never written by this class: left alone, read as a miss
            if partition in partitions:
                self._index[partition][key] = stored_at
                self._sizes[partition][key] = size = self._held(value)
                self.bytes[partition] += size
                count += 1
        for partition, entries in self._index.items():
            self._index[partition] = OrderedDict(sorted(entries.items(), key=lambda kv: kv[1]))
        log.info("verdict index rebuilt: %d verdicts in partitions %s", count, sorted(partitions))
        return count

    def get(self, key: str) -> tuple[Verdict, float] | None:
        """The verdict stored under ``key`` (in the asking record's partition with RocksDB)
        and its age, unless absent, expired or unreadable."""
        try:
            value = self.table.get(key.encode())
        except Exception:
            log.exception("reading the verdict table failed: asking the judge")
            return None
        if value is None:
            return None
        try:
            stored_at, _, verdict = decode_entry(value)
        except ValueError as exc:
            log.warning("verdict entry ignored: %s", exc)
            return None
        age = max(0.0, self.clock() - stored_at)
        if age >= self.ttl_s:
            return None  # the sweep drops it
        return verdict, age

    def put(self, key: str, verdict: Verdict, partition: int | None = None) -> None:
        """Write ``verdict`` in the partition of the record being scored (none outside an
        agent, or for a topic not co-partitioned with the table: memory only), or in
        ``partition`` when given (a batch's verdict, kept in its job's partition), then drop
        that partition's oldest entries past the bound."""
        raw_key = key.encode()
        now = self.clock()
        if partition is not None:
            value = encode_entry(verdict, now, partition)
            self.table.send_changelog(partition, raw_key, value, value_serializer="raw")
            put_in_partition(self.table, partition, raw_key, value)  # no event in scope
            self._indexed(partition, raw_key, now, self._held(value))
            return
        event = current_event()
        if event is None:
            return
        topic, partition = event.message.topic, event.message.partition
        if topic in self._not_copartitioned:
            return
        value = encode_entry(verdict, now, partition)
        try:
            self.table[raw_key] = value
        except PartitionsMismatch as exc:
            self._not_copartitioned.add(topic)
            log.warning("verdicts of %s are kept in memory only: %s", topic, exc)
            return
        except Exception:
            log.exception("writing the verdict table failed: the verdict is kept in memory")
            return
        self._indexed(partition, raw_key, now, self._held(value))

    def _held(self, value: bytes) -> int:
        """What one entry holds in Python: its index entry (the key, when, its size), and
        its value and table slot where the store keeps values in memory."""
        if self.values_in_memory:
            return INDEX_ENTRY + sys.getsizeof(value) + TABLE_SLOT
        return INDEX_ENTRY

    def _indexed(self, partition: int, raw_key: bytes, now: float, size: int) -> None:
        """Index an entry just written, and drop its partition's oldest past the bounds."""
        entries, sizes = self._index[partition], self._sizes[partition]
        entries.pop(raw_key, None)
        entries[raw_key] = now
        self.bytes[partition] += size - sizes.get(raw_key, 0)
        sizes[raw_key] = size
        while len(entries) > self.max_entries or (
            self.max_bytes is not None
            and self.bytes[partition] > self.max_bytes
            and len(entries) > 1
        ):
            self._drop(partition, next(iter(entries)))

    def sweep(self) -> int:
        """Drop the expired entries of the partitions this worker owns; how many."""
        owned = self.owned()
        for partition in [p for p in self._index if p not in owned]:
            del self._index[partition]  # moved away: its new owner sweeps it
            self._sizes.pop(partition, None)
            self.bytes.pop(partition, None)
        now = self.clock()
        dropped = 0
        for partition, entries in list(self._index.items()):
            while entries:
                key, stored_at = next(iter(entries.items()))
                if now - stored_at < self.ttl_s:
                    break
                self._drop(partition, key)
                dropped += 1
        return dropped

    async def _sweep(self) -> None:
        if dropped := self.sweep():
            log.debug("verdict table: %d expired entries dropped", dropped)

    def _drop(self, partition: int, key: bytes) -> None:
        """Tombstone ``key`` in ``partition``'s changelog and drop it from the store."""
        self._index[partition].pop(key, None)
        self.bytes[partition] -= self._sizes[partition].pop(key, 0)
        self.table.send_changelog(partition, key, None, value_serializer="raw")
        with contextlib.suppress(KeyError):  # already gone
            del self.table.data[key]
