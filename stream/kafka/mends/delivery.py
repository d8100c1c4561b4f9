"""What Faust's consumer delivers, mended: mends 2 and 3 (``consumer.py`` lists them all).

2. **Records queued while a rebalance completes** (faust-streaming #596). At the end of
   recovery Faust resumes the stream partitions, awaits the seek to committed offsets (one
   round trip per partition), then clears every agent queue: what was fetched and queued
   during the seek was dropped, and the fetcher had moved past it. Here the stream partitions
   are held from the start of that seek until the queues are cleared (nothing of them is
   delivered), then each is sought back to its committed offset.
3. **Every record in order, gaps fetched again** (``continuity.py``). Faust took any jump in
   the offsets a fetch returned as done, and its read offsets meant "the last delivered" in one
   place and "the next to read" in another, so a record skipped after a seek was never
   noticed. Here one guard decides what is delivered: the partition's next offset, nothing
   else; a record past a gap is skipped and the gap fetched again (the embedded broker can
   serve a later batch before an earlier one is written), and only a gap that persists is
   delivered past (logged with its offsets, recorded so the commit can pass it). Faust's own
   read offsets are switched off. Counted in ``scorer_offset_gaps_total``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, cast

from faust.types import TP, Message

from .commits import CommittingConsumer
from .consumer_thread import MendedConsumerThread
from .continuity import Action, Admit, ContinuityGuard, GapEvent
from .testhooks import GAP_PATIENCE_ENV, SEEK_DELAY_ENV, delay_from_env

log = logging.getLogger(__name__)


class _NoReadOffsets(dict[TP, int | None]):
    """Faust's read offsets, switched off (mend 3): its fetch loop reads None for every
    partition, so it delivers what the continuity guard lets through and adds no gaps."""

    def __getitem__(self, tp: TP) -> None:
        return None

    def __setitem__(self, tp: TP, offset: int | None) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


class DeliveringConsumer(CommittingConsumer):
    """Faust's aiokafka consumer with its commits (``commits.py``) and what it delivers
    (mends 2 and 3) mended."""

    # how long a gap in the offsets of a fetch is fetched again before it is accepted as real
    # (a real Kafka cluster never serves records past unwritten ones: one refetch confirms it)
    gap_patience_s: ClassVar[float] = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_offset = _NoReadOffsets()
        patience = os.environ.get(GAP_PATIENCE_ENV)
        self._continuity = ContinuityGuard(float(patience) if patience else self.gap_patience_s)
        self._strict: dict[str, bool] = {}
        self._seeking_back: set[asyncio.Future[None]] = set()

    async def perform_seek(self) -> None:
        """Seek every partition to its committed offset (as Faust does), telling the guard
        where each one now starts. When the fetch loop is running (the end of a recovery),
        the stream partitions are held until the agent queues are cleared (mend 2)."""
        if self.flow_active:
            self._continuity.hold(tp for tp in self.assignment() if not self._is_changelog_tp(tp))
        # None: nothing committed (Faust's own driver returns aiokafka's mapping as it is)
        committed = cast(Mapping[TP, int | None], await self.seek_to_committed())
        self._committed_offset.update(
            {TP(tp.topic, tp.partition): o or None for tp, o in committed.items() if o is not None}
        )
        heads: dict[TP, int] = getattr(self._thread, "heads", {})
        for tp, head in heads.items():
            self._continuity.sought(tp, head)
        self._heads.update(heads)
        if delay := delay_from_env(SEEK_DELAY_ENV):
            await asyncio.sleep(delay)

    def resume_flow(self) -> None:
        """Faust calls this right after clearing the agent queues: the held partitions go back
        to their committed offsets (records skipped while held may have moved the fetcher)."""
        super().resume_flow()
        released = self._continuity.release()
        if released:
            task = asyncio.ensure_future(self._seek_back(released))
            self._seeking_back.add(task)
            task.add_done_callback(self._seeking_back.discard)

    async def _seek_back(self, offsets: Mapping[Any, int]) -> None:
        thread: MendedConsumerThread = self._thread  # type: ignore[assignment]
        for tp, offset in offsets.items():
            await thread.call_thread(thread.seek_now, tp, offset)

    async def seek_wait(self, partitions: Mapping[TP, int]) -> None:
        await super().seek_wait(partitions)
        for tp, offset in partitions.items():
            self._continuity.sought(tp, offset)

    async def seek(self, partition: TP, offset: int) -> None:
        await super().seek(partition, offset)
        self._continuity.sought(partition, offset)

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        self._continuity.forget(revoked)
        await super().on_partitions_revoked(revoked)

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        """Faust's fetch, each record through the continuity guard (mend 3)."""
        guard = self._continuity
        guard.new_batch()
        now = time.monotonic()
        async for tp, message in super().getmany(timeout):
            admit = guard.admit(tp, message.offset, now, self._is_strict(tp.topic))
            if admit.event is not None:
                await self._on_gap_event(tp, admit)
            if admit.action is Action.DELIVER:
                yield tp, message
            elif admit.action is Action.REFETCH:
                assert admit.offset is not None
                await self._seek_back({tp: admit.offset})

    def _is_strict(self, topic: str) -> bool:
        """Gaps are fetched again on topics whose offsets are acked (not changelogs)."""
        try:
            return self._strict[topic]
        except KeyError:
            strict = self._strict[topic] = self.app.topics.acks_enabled_for(topic) and (
                topic not in self.app.tables.changelog_topics
            )
            return strict

    async def _on_gap_event(self, tp: TP, admit: Admit) -> None:
        gap, event = admit.gap, admit.event
        assert gap is not None and event is not None
        self.observer.on_offset_gap(tp.topic, event.value)
        if event is GapEvent.DETECTED:
            log.info(
                "%s[%d]: offsets %d-%d missing from a fetch (next there: %d); fetching them again",
                tp.topic, tp.partition, gap.expected, gap.found - 1, gap.found,
            )  # fmt: skip
        elif event is GapEvent.FILLED:
            log.info(
                "%s[%d]: offsets from %d fetched again after %d refetches",
                tp.topic, tp.partition, gap.expected, gap.refetches,
            )  # fmt: skip
        else:
            log.warning(
                "%s[%d]: offsets %d-%d still missing after %d refetches over %.1f s; going on "
                "from %d (a compacted topic, transaction markers or deleted records)",
                tp.topic, tp.partition, gap.expected, gap.found - 1, gap.refetches,
                time.monotonic() - gap.since, gap.found,
            )  # fmt: skip
            await self._add_gap(tp, gap.expected, gap.found - 1)
