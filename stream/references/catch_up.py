"""When a reader of every partition of a topic has read it to the end it had when the reader
started: what the reference topic's reader waits for before the store is ``loaded``.

The end of each partition is its end offset as the broker reports it (ListOffsets). The
embedded broker reports less, the last record batch's base offset + 1 (design record 03), but
its fetch responses carry the right high watermark: the first fetch answered for a partition
raises the partition's end to that high watermark (on Kafka the two agree, or the high
watermark is later by what was written since). The end is fixed then: records written while
the reader catches up are read after it, as it follows the topic. It only falls: a later high
watermark below it (the log truncated by an unclean leader election, or the topic deleted
and made again, smaller) lowers it there, so the reader never waits for offsets that are
gone. A partition whose first offset is its end (empty, or emptied by retention) is read at
once.
"""

from __future__ import annotations

from collections.abc import Mapping


class ReferenceCatchUp:
    """Which partitions are still to be read to their end (partition -> offset)."""

    def __init__(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> None:
        self.ends = dict(ends)
        self._waiting = {p for p, end in ends.items() if end > starts.get(p, 0)}
        self._fetched: set[int] = set()

    @property
    def done(self) -> bool:
        return not self._waiting

    def waiting(self) -> list[int]:
        """The partitions not read to their end yet."""
        return sorted(self._waiting)

    def fetched(self, partition: int, highwater: int | None) -> None:
        """A fetch of ``partition`` was answered, with this high watermark (None: unknown)."""
        if highwater is None or partition not in self.ends:
            return
        if partition not in self._fetched:
            self._fetched.add(partition)
            self.ends[partition] = max(self.ends[partition], highwater)
        elif highwater < self.ends[partition]:  # the log shrank under the reader
            self.ends[partition] = highwater

    def read(self, partition: int, position: int) -> None:
        """``partition`` is read up to ``position`` (the next offset to read)."""
        if partition in self._fetched and position >= self.ends[partition]:
            self._waiting.discard(partition)
