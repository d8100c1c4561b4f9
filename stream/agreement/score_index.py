"""Where a target's judged scores lie in a partition of the internal agreement-events topic,
so that a label that comes after its scores reads back only what may hold them (design
record 36): pure, over the join's key-value store, no Kafka here.

The partition is cut into buckets, runs of its offsets in arrival order. A bucket is open
while the worker that owns the partition reads it, and closes at ``BUCKET_TARGETS`` targets,
``BUCKET_RECORDS`` scores or, at a clock tick, ``BUCKET_SPAN_S`` after it opened; a
closed bucket is stored in the join's table as its offsets, its first and last score's
arrival and the sorted 32-bit fingerprints of the targets whose scores it holds, 4 bytes a
target (a data-skipping index, as ClickHouse keeps one per granule; a 32-bit fingerprint
rather than a Bloom filter, so that a look-up among a week of buckets reads a false one about
once in a thousand labels). A bucket with no score closes too, moving only the mark. A mark
per partition says through which offset the stored buckets cover it.

After a rebalance or a restart, the run between the mark and the first record this worker
reads (what the previous owner read after its last close) is ``unseen``: a look-back reads
it whole and ``fill``-s the open bucket with its targets, and the bucket closes only once
it is filled. Buckets whose last score is older than the retention are dropped at a tick.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field

BUCKET_TARGETS = 1024  # a bucket closes at this many targets (4 KiB of fingerprints)
BUCKET_RECORDS = 4000  # or this many scores (what a look-back reads at most per bucket)
BUCKET_SPAN_S = 300.0  # or, at a tick, this long after it was opened

BUCKET_PREFIX = b"\x00agreement-bucket"
MARK_PREFIX = b"\x00agreement-mark"
_HEAD = struct.Struct("<qqdd")  # first and last offset, first and last score's arrival
_PRINT = struct.Struct("<I")
_PARTITION = struct.Struct(">i")
_OFFSET = struct.Struct(">q")

Range = tuple[int, int]  # first and last offset, both included


def fingerprint(target_id: bytes) -> int:
    """A target id's 32-bit fingerprint."""
    return int.from_bytes(hashlib.blake2b(target_id, digest_size=4).digest(), "little")


def bucket_key(partition: int, first: int) -> bytes:
    return BUCKET_PREFIX + _PARTITION.pack(partition) + _OFFSET.pack(first)


def mark_key(partition: int) -> bytes:
    return MARK_PREFIX + _PARTITION.pack(partition)


def is_index_key(key: bytes) -> bool:
    """A key of this index in the join's table (not a join state's)."""
    return key.startswith((BUCKET_PREFIX, MARK_PREFIX))


@dataclass
class Bucket:
    """A closed run of a partition's offsets and the fingerprints of its scores' targets."""

    partition: int
    first: int
    last: int
    since: float
    until: float
    prints: bytes | memoryview  # sorted, unique, little-endian 32-bit

    @property
    def key(self) -> bytes:
        return bucket_key(self.partition, self.first)

    def to_bytes(self) -> bytes:
        return _HEAD.pack(self.first, self.last, self.since, self.until) + bytes(self.prints)

    @classmethod
    def from_stored(cls, key: bytes, value: bytes) -> Bucket:
        (partition,) = _PARTITION.unpack_from(key, len(BUCKET_PREFIX))
        first, last, since, until = _HEAD.unpack_from(value)
        return cls(partition, first, last, since, until, memoryview(value)[_HEAD.size :])

    def may_hold(self, print_: int) -> bool:
        """Whether a target of this fingerprint has a score here (a binary search)."""
        low, high = 0, len(self.prints) // 4
        while low < high:
            middle = (low + high) // 2
            (found,) = _PRINT.unpack_from(self.prints, middle * 4)
            if found < print_:
                low = middle + 1
            elif found > print_:
                high = middle
            else:
                return True
        return False


@dataclass
class OpenBucket:
    """The run being read: from ``first`` on, its targets' fingerprints; ``unseen`` is what
    of it another worker read (known only by reading it back)."""

    first: int
    last: int
    opened: float  # when this worker opened it (wall clock)
    since: float | None = None
    until: float | None = None
    prints: set[int] = field(default_factory=set)
    records: int = 0
    unseen: Range | None = None

    def add(self, offset: int, print_: int, arrived: float) -> None:
        self.prints.add(print_)
        self.records += 1
        self.last = max(self.last, offset)
        self.since = arrived if self.since is None else min(self.since, arrived)
        self.until = arrived if self.until is None else max(self.until, arrived)

    def full(self) -> bool:
        return len(self.prints) >= BUCKET_TARGETS or self.records >= BUCKET_RECORDS

    def closed(self, partition: int) -> Bucket:
        prints = b"".join(_PRINT.pack(p) for p in sorted(self.prints))
        assert self.since is not None and self.until is not None
        return Bucket(partition, self.first, self.last, self.since, self.until, prints)


@dataclass
class Partition:
    closed: list[Bucket] = field(default_factory=list)  # by first offset
    through: int | None = None  # the stored buckets cover the partition through here
    open: OpenBucket | None = None


class ScoreIndex:
    """The buckets of the partitions this worker owns, kept in ``store`` (the join's
    table, written in the record's partition: each method is called while an event of
    that partition is applied)."""

    def __init__(self, retention_s: float) -> None:
        self.retention_s = retention_s
        self.partitions: dict[int, Partition] = {}

    # -- what the table holds ------------------------------------------------------------

    def rebuild(self, items: Iterable[tuple[bytes, bytes]], owned: set[int]) -> int:
        """The owned partitions' buckets and marks from the table's ``items`` (after a
        recovery); how many buckets."""
        self.partitions = {p: Partition() for p in owned}
        count = 0
        for key, value in items:
            if key.startswith(BUCKET_PREFIX):
                bucket = Bucket.from_stored(key, value)
                if bucket.partition in self.partitions:
                    self.partitions[bucket.partition].closed.append(bucket)
                    count += 1
            elif key.startswith(MARK_PREFIX):
                (partition,) = _PARTITION.unpack_from(key, len(MARK_PREFIX))
                if partition in self.partitions:
                    self.partitions[partition].through = _OFFSET.unpack(value)[0]
        for part in self.partitions.values():
            part.closed.sort(key=lambda b: b.first)
        return count

    def _partition(self, partition: int) -> Partition:
        return self.partitions.setdefault(partition, Partition())

    def reading(
        self, store: MutableMapping[bytes, bytes], partition: int, offset: int, now: float
    ) -> OpenBucket | None:
        """The open bucket a record at ``offset`` belongs to (None: one the stored buckets
        already cover, a redelivery). The first record read in a partition that has no
        mark starts the index there (a new topic, or one written before this index)."""
        part = self._partition(partition)
        if part.through is None:
            part.through = offset - 1
            store[mark_key(partition)] = _OFFSET.pack(part.through)
        if offset <= part.through:
            return None
        if part.open is None:
            start = part.through + 1
            unseen = (start, offset - 1) if offset > start else None
            part.open = OpenBucket(first=start, last=offset, opened=now, unseen=unseen)
        return part.open

    def add(
        self,
        store: MutableMapping[bytes, bytes],
        partition: int,
        offset: int,
        target_id: bytes,
        arrived: float,
        now: float,
    ) -> bool:
        """A score of ``target_id`` read at ``offset`` (``arrived`` on the topic); whether its
        bucket is full (closed now if nothing of it is unseen: else after ``fill``)."""
        bucket = self.reading(store, partition, offset, now)
        if bucket is None:
            return False
        bucket.add(offset, fingerprint(target_id), arrived)
        if bucket.full() and bucket.unseen is None:
            self.close(store, partition)
        return bucket.full()

    def seen(
        self, store: MutableMapping[bytes, bytes], partition: int, offset: int, now: float
    ) -> None:
        """A record that is not a score (a label, a tick) read at ``offset``."""
        if (bucket := self.reading(store, partition, offset, now)) is not None:
            bucket.last = max(bucket.last, offset)

    def unseen(self, partition: int) -> Range | None:
        """The run of the open bucket another worker read, to be read back and filled."""
        part = self.partitions.get(partition)
        return part.open.unseen if part is not None and part.open is not None else None

    def fill(self, partition: int, scores: Iterable[tuple[int, bytes, float]]) -> None:
        """The unseen run read back: each score's offset, target id and arrival."""
        bucket = self._partition(partition).open
        if bucket is None:
            return
        for offset, target_id, arrived in scores:
            bucket.add(offset, fingerprint(target_id), arrived)
        bucket.unseen = None

    def close(self, store: MutableMapping[bytes, bytes], partition: int) -> Bucket | None:
        """Store the open bucket (it must have nothing unseen) and move the mark past it."""
        part = self._partition(partition)
        bucket = part.open
        if bucket is None:
            return None
        assert bucket.unseen is None, "a bucket closes once what another worker read is filled"
        part.open = None
        if bucket.since is None:  # no score in it: only the mark moves
            part.through = bucket.last
            store[mark_key(partition)] = _OFFSET.pack(part.through)
            return None
        closed = bucket.closed(partition)
        store[closed.key] = closed.to_bytes()
        # one stored by a predecessor that died before moving the mark has the same key
        part.closed = [b for b in part.closed if b.first != closed.first] + [closed]
        part.through = closed.last
        store[mark_key(partition)] = _OFFSET.pack(part.through)
        return closed

    def due(self, partition: int, now: float) -> bool:
        """Whether the open bucket should close at this tick (full, or old enough; one with
        no score moves the mark, so a new owner has nothing of it to read back)."""
        part = self.partitions.get(partition)
        bucket = part.open if part is not None else None
        if bucket is None:
            return False
        return bucket.full() or now - bucket.opened >= BUCKET_SPAN_S

    def expire(self, store: MutableMapping[bytes, bytes], partition: int, now: float) -> int:
        """Drop the partition's buckets whose newest score is older than the retention."""
        part = self.partitions.get(partition)
        if part is None:
            return 0
        old = [b for b in part.closed if now - b.until > self.retention_s]
        for bucket in old:
            store.pop(bucket.key, None)
        part.closed = [b for b in part.closed if now - b.until <= self.retention_s]
        return len(old)

    # -- a look-back -----------------------------------------------------------------------

    def candidates(self, partition: int, target_id: bytes, before: int, now: float) -> list[Range]:
        """The runs of ``partition`` before offset ``before`` that may hold a score of
        ``target_id`` that arrived within the retention of ``now``; adjacent runs merged."""
        part = self.partitions.get(partition)
        if part is None:
            return []
        print_ = fingerprint(target_id)
        runs: list[Range] = [
            (b.first, min(b.last, before - 1))
            for b in part.closed
            if now - b.until <= self.retention_s and b.first < before and b.may_hold(print_)
        ]
        bucket = part.open
        if bucket is not None and bucket.first < before:
            if bucket.unseen is not None:
                runs.append((bucket.unseen[0], min(bucket.unseen[1], before - 1)))
            if print_ in bucket.prints:
                runs.append((bucket.first, min(bucket.last, before - 1)))
        merged: list[Range] = []
        for first, last in sorted(runs):
            if merged and first <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        return merged

    # -- what it holds -------------------------------------------------------------------

    def sizes(self) -> tuple[int, int]:
        """Buckets held (closed and open) and the bytes of their fingerprints."""
        buckets = sum(len(p.closed) + (p.open is not None) for p in self.partitions.values())
        size = sum(
            sum(len(b.prints) for b in p.closed) + (4 * len(p.open.prints) if p.open else 0)
            for p in self.partitions.values()
        )
        return buckets, size
