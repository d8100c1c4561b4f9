"""One skeleton for a keyed table closed by clocks: the thread table and the span assembly.

Each is a changelog-backed table written by one agent only, co-partitioned with the internal
topic the agent reads (its events, keyed by what the table is keyed by), so each worker
keeps only the keys of the partitions it owns:

- the agent reads and writes the table through ``writes``: each write to the local store at
  once, the changelog in record batches (``kafka/mends/changelog.py``, design record 35);
- the table's index is rebuilt from the table after every recovery (``on_recover``);
- the agent applies each event while the worker is surely still a member of its group
  (``still_ours``); an event that cannot be read, or meets a bug when applied, is
  dead-lettered with the error before the stream acks it (at the next event), so that it is
  neither lost nor read again for ever (these are internal events, written by the workers:
  one that fails is a bug, or a stranger's record);
- a timer on every worker tells every partition how far this worker has read the sources
  that feed the table (``progress``), then sends the wall clock (``tick``) to each partition
  it owns, each behind what is queued there.

What the table holds and decides (``ThreadProcessor``, ``TraceAssembler``) is pure and
lives in ``threads/`` and ``otlp/``. The two agents are ``KeyedTableAgent``s: the steps both
take around their table (tell it the source topics' partitions, rebuild its index after a
recovery, report how far this worker has read the sources) are written here once; each
agent says what its table makes of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

import faust
from faust.types import Message, StreamT, TopicT

from ..app import raw_table
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher, Send
from ..kafka.mends.changelog import BatchedWrites
from ..kafka.mends.faust_state import owned_partitions, partition_count, read_positions
from ..kafka.mends.membership import still_ours
from ..observer import Observer
from ..sources.log import Position, SourceLog

E = TypeVar("E")

log = logging.getLogger(__name__)


class KeyedTable(Generic[E]):
    """A table written by one agent reading ``events``, with a clock on every worker."""

    def __init__(
        self,
        app: faust.App,
        *,
        table_name: str,
        events: TopicT,
        partitions: int,
        publisher: Publisher,
        dead_letters: DeadLetters,
        observer: Observer,
    ) -> None:
        self.app = app
        self.table = raw_table(app, table_name, partitions)
        # what the agent reads and writes: the table, its changelog written in batches
        self.writes = BatchedWrites(app, self.table, linger_s=app.conf.producer_linger)
        self.events = events
        self.events_name = events.get_topic_name()
        self.all_partitions = range(events.partitions or partitions)
        self.publisher = publisher
        self.dead_letters = dead_letters
        self.observer = observer

    def owned(self) -> set[int]:
        """The partitions of the table this worker owns now."""
        return owned_partitions(self.app, self.events_name)

    def on_recover(self, rebuild: Callable[[set[int]], None]) -> None:
        """Rebuild the index of the owned partitions from the table after each recovery."""

        @self.table.on_recover
        async def rebuild_index() -> None:
            rebuild(self.owned())

    def agent(
        self,
        name: str,
        *,
        decode: Callable[[bytes], E],
        what: str,
        apply: Callable[[Message, E], Awaitable[None]],
        doing: str,
        declare: Iterable[TopicT],
        set_aside: Callable[[], None] = lambda: None,
        stopped: Callable[[], None] = lambda: None,
        inputs: TopicT | None = None,
        take: Callable[[Message], Awaitable[None]] | None = None,
    ) -> None:
        """The one agent that writes the table: each event ``decode``-d and ``apply``-ed;
        one that fails either way is dead-lettered (``set_aside`` is told first).

        ``inputs``: a topic co-partitioned with the events that the agent reads too (the
        same partition count, so Faust's assignor gives a worker the same partitions of
        both), each record of it handed to ``take`` as it is, in the record's context."""
        outputs = list(declare)
        channel: TopicT = self.events
        side: set[str] = set()
        if inputs is not None and take is not None:
            side = set(inputs.topics)
            channel = self.app.topic(
                *self.events.topics,
                *inputs.topics,
                key_type=bytes,
                value_type=bytes,
                key_serializer="raw",
                value_serializer="raw",
                partitions=self.events.partitions,
                internal=self.events.internal,  # declared (each only if it does not exist)
            )

        async def dead_letter(sends: list[Send]) -> None:
            set_aside()
            await self.publisher.send_until_delivered(sends)

        async def run(stream: StreamT[bytes]) -> None:
            await self.publisher.declare(outputs)
            try:
                async for event in stream.events():
                    message = event.message
                    if self.writes.behind():  # the changelog's batches wait for the broker
                        await self.writes.ebb()
                    if not await still_ours(self.app, message, self.observer):
                        continue  # a record of a partition this worker may have lost
                    if take is not None and message.topic in side:
                        try:
                            await take(message)
                        except Exception as exc:
                            failure = self.dead_letters.engine_failure(message, exc, doing)
                            await dead_letter(failure)
                        continue
                    try:
                        item = decode(event.value)
                    except ValueError as exc:
                        await dead_letter(self.dead_letters.invalid(message, exc, what=what))
                        continue
                    try:
                        await apply(message, item)
                    except Exception as exc:
                        await dead_letter(self.dead_letters.engine_failure(message, exc, doing))
            finally:
                stopped()

        run.__name__ = run.__qualname__ = name.replace("-", "_")  # Faust's label for it
        self.app.agent(channel, concurrency=1, name=name)(run)

    def clock(
        self,
        interval_s: float,
        *,
        progress: Callable[[float], bytes | None],
        tick: Callable[[float], bytes],
        before: Callable[[], None] = lambda: None,
        after: Callable[[float], None] = lambda now: None,
    ) -> None:
        """Every ``interval_s`` on every worker: ``before()``; the ``progress`` report (if
        any) into every partition; then ``tick`` into every partition this worker owns."""

        async def send_clock() -> None:
            now = time.time()
            before()
            if (report := progress(now)) is not None:
                await self.publisher.to_partitions(self.events_name, report, self.all_partitions)
            await self.publisher.to_partitions(self.events_name, tick(now), sorted(self.owned()))
            after(now)

        self.app.timer(interval_s, name=f"{self.events_name}-clock")(send_clock)


class KeyedTableAgent(Generic[E]):
    """An agent on the skeleton: its ``keyed`` table, the topics whose partitions feed it
    (``source_topics``) and how far this worker has read them (``sources``). Subclasses say
    what their table is told of the sources' partitions (``expect``), how its index is
    rebuilt (``rebuild_index``) and what a progress report says (``report``)."""

    app: faust.App
    keyed: KeyedTable[E]
    source_topics: set[str]
    sources: SourceLog | None
    rebuilt_said = "index rebuilt: %d entries in partitions %s (%.2fs)"

    def expect(self, counts: dict[str, int]) -> None:
        """The table is told each source topic's partition count (those known)."""
        raise NotImplementedError

    def rebuild_index(self, partitions: set[int]) -> int:
        """The table's index rebuilt for ``partitions``; returns the entries found."""
        raise NotImplementedError

    def report(self, now: float, read: dict[str, Position]) -> bytes:
        """The progress event that tells every partition how far this worker has read."""
        raise NotImplementedError

    def expect_source_partitions(self) -> None:
        """Tell the table the source topics' partitions (from the consumer's metadata)."""
        counts = {topic: partition_count(self.app.consumer, topic) for topic in self.source_topics}
        self.expect({topic: count for topic, count in counts.items() if count})

    def rebuild(self, partitions: set[int]) -> None:
        """After a recovery: the sources' partitions told, the index rebuilt, said."""
        started = time.perf_counter()
        self.expect_source_partitions()
        count = self.rebuild_index(partitions)
        log.info(self.rebuilt_said, count, sorted(partitions), time.perf_counter() - started)

    def positions(self, now: float) -> bytes | None:
        """How far this worker has read the sources it owns, as a report (None: nothing)."""
        self.expect_source_partitions()
        sources = self.sources
        if sources is not None and (
            read := read_positions(self.app, sources, self.source_topics, now)
        ):
            return self.report(now, read)
        return None
