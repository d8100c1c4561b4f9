"""The thread agent: thread state in a changelog-backed table, closes scored at least once.

One agent consumes the thread-events topic and is the only writer of the ``threads`` table,
which is co-partitioned with it, so each worker folds and closes only the threads of the
partitions it owns. When the sessions topic is co-partitioned with them too, the agent reads
it as well and folds each session event in its thread's partition where it is read
(``sessions.py``, design record 33). Faust's windowed tables are not used: they expire on
wall-clock time and do not expire keys restored from the changelog. Closing is decided by ``ThreadProcessor``
inside the agent (table writes need the stream's context); a timer on every worker sends a
``tick`` to each partition it owns, so idle threads close even when nothing else arrives.

A close is written to the table as pending, with the document the rules judge, before it is
scored; when its scores are on the broker a ``published`` event clears it. A worker that dies
in between (or loses the partition) leaves it pending, and whoever owns the partition after
recovery scores it again, with the same score ids.
"""

from __future__ import annotations

import asyncio
import logging

import faust
from faust.types import Message

from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher
from ..engine.outcomes import TraceResult
from ..engine.records import close_records
from ..engine.scorer import Scorer
from ..kafka.mends.commits import DRAIN_TIMEOUT_S, drain_producer
from ..observer import Observer
from ..settings import Settings
from ..sources.log import Position, SourceLog
from ..threads.events import ThreadEvent, progress, published, tick
from ..threads.gaps import inactivity_gaps
from ..threads.processor import ThreadProcessor
from ..threads.router import ThreadRouter
from ..threads.state import ThreadClose, ThreadLimits
from .keyed_table import KeyedTable, KeyedTableAgent
from .session_intake import SessionIntake

# the sessions topic co-partitioned with the thread events: the router, the partition count
SessionsHere = tuple[ThreadRouter, int]

log = logging.getLogger(__name__)

TABLE_NAME = "threads"
CLOSES_AT_ONCE = 64  # closes being scored and published at once (at most max_in_flight)
FOLDING = "folding the thread event"


def register_thread_agent(
    app: faust.App,
    topics: Topics,
    scorer: Scorer,
    settings: Settings,
    observer: Observer | None = None,
    sources: SourceLog | None = None,
    sessions: SessionsHere | None = None,
) -> ThreadProcessor:
    """The thread agent (``ThreadAgent``) registered on ``app``; returns its processor."""
    agent = ThreadAgent(app, topics, scorer, settings, observer, sources, sessions)
    agent.register()
    return agent.processor


class ThreadAgent(KeyedTableAgent[ThreadEvent]):
    """The thread table, the agent that folds thread events into it and scores closes, and
    the timer that ticks every owned partition (after telling every partition how far this
    worker has read its sources). ``sessions``: the sessions topic is co-partitioned with the
    thread events (its partition count, and the router): the agent reads it too and folds
    its events in place (``SessionIntake``)."""

    rebuilt_said = "thread index rebuilt: %d threads in partitions %s (%.2fs)"

    def __init__(
        self,
        app: faust.App,
        topics: Topics,
        scorer: Scorer,
        settings: Settings,
        observer: Observer | None = None,
        sources: SourceLog | None = None,
        sessions: SessionsHere | None = None,
    ) -> None:
        self.app = app
        self.topics = topics
        self.scorer = scorer
        self.settings = settings
        self.sources = sources
        self.observer = observer = observer or Observer()
        self.publisher = publisher = Publisher(app)
        self.dead_letters = dead_letters = DeadLetters(topics.dlq, observer)
        self.outbox = topics.outbox()  # what a scored close publishes
        self.keyed = threads = KeyedTable[ThreadEvent](
            app,
            table_name=TABLE_NAME,
            events=topics.thread_events,
            partitions=settings.topic_partitions,
            publisher=publisher,
            dead_letters=dead_letters,
            observer=observer,
        )
        self.processor = ThreadProcessor(
            threads.writes,
            gaps=inactivity_gaps(scorer.ruleset, settings.thread_inactivity_gap_s),
            limits=ThreadLimits(
                max_turns=settings.thread_max_turns, max_bytes=settings.thread_max_bytes
            ),
            retention_s=settings.thread_retention_s,
            sessions_topic=settings.sessions_topic,
            unheard_wait_s=settings.unheard_source_wait_s,
            observer=observer,
        )
        observer.watch_threads(self.processor.open_threads, self.processor.pending_closes)
        observer.watch_held("threads", self.processor.held_threads, None)
        self.in_flight: dict[tuple[str, str, int], asyncio.Task[None]] = {}
        # closes scored and published at once: a burst of closes (many threads idle
        # together, or pending closes resumed after a recovery) must not hand the producer
        # thousands of sends at once (every task blocked on a full batch is woken at each
        # drain: quadratic)
        self.scoring = asyncio.Semaphore(max(1, min(settings.max_in_flight, CLOSES_AT_ONCE)))
        self.source_topics = {*topics.traces.topics, *topics.sessions.topics}
        self.intake = None
        if sessions is not None:
            router, partitions = sessions
            self.intake = SessionIntake(
                topics,
                router,
                partitions,
                publisher=publisher,
                dead_letters=dead_letters,
                sources=sources,
                observer=observer,
            )

    def register(self) -> None:
        """The agent on the thread-events topic (and the co-partitioned sessions topic), its
        recovery's index rebuild, and its clock."""
        observer, intake = self.observer, self.intake
        self.keyed.on_recover(self.rebuild)
        self.keyed.agent(
            "fold-threads",
            decode=ThreadEvent.from_bytes,
            what="thread event",
            apply=self.fold,
            doing=FOLDING,
            declare=self.topics.outputs(),
            set_aside=lambda: observer.on_thread_event("failed"),
            stopped=self.cancel_in_flight,
            inputs=self.topics.sessions if intake is not None else None,
            take=self.take_session if intake is not None else None,
        )
        self.keyed.clock(self.settings.thread_tick_s, progress=self.positions, tick=tick)

    def expect(self, counts: dict[str, int]) -> None:
        self.processor.expect(counts)

    def rebuild_index(self, partitions: set[int]) -> int:
        return self.processor.rebuild(partitions)

    def report(self, now: float, read: dict[str, Position]) -> bytes:
        return progress(now, read)

    async def publish_close(self, close: ThreadClose, partition: int) -> None:
        async with self.scoring:
            await self.score_and_publish(close, partition)

    async def score_and_publish(self, close: ThreadClose, partition: int) -> None:
        try:
            # a rule judged in a batch keeps its job in this partition of the batch-jobs table
            result = await self.scorer.score_thread(close, partition)
            sends = self.outbox.sends(close_records(result, close))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("scoring close %d of %s failed", close.pending.close_seq, close.thread_id)
            kept = close.pending.model_dump_json().encode()
            where = {"scorer.thread.close_seq": str(close.pending.close_seq)}
            sends = self.dead_letters.kept(
                close.thread_id,
                kept,
                self.keyed.events_name,
                "scoring thread close",
                exc,
                where,
            )
            result = TraceResult([])
        await self.publisher.send_until_delivered(sends)
        for score in result.scores:
            self.observer.on_score_published(score)
        if any(decision.outcome == "deferred" for decision in result.decisions):
            # the marker clears the close: its deferred jobs' table writes go first (they
            # wait in Faust's producer buffer; the sends above do not)
            while not await drain_producer(self.app.producer, DRAIN_TIMEOUT_S):
                log.warning("close %s waits for its batch jobs to be written", close.thread_id)
        marker = published(close.kind, close.thread_id, close.pending.close_seq)
        await self.publisher.send_until_delivered([self.topics.to_threads(marker)])

    def schedule(self, close: ThreadClose, partition: int) -> None:
        key = (close.kind, close.thread_id, close.pending.close_seq)
        if key in self.in_flight:
            return  # already being scored by this worker
        task = asyncio.create_task(self.publish_close(close, partition))
        self.in_flight[key] = task
        task.add_done_callback(lambda _: self.in_flight.pop(key, None))

    async def fold(self, message: Message, event: ThreadEvent) -> None:
        for close in self.processor.apply(message.partition, event):
            self.schedule(close, message.partition)

    def cancel_in_flight(self) -> None:
        for task in list(self.in_flight.values()):
            task.cancel()

    async def take_session(self, message: Message) -> None:
        assert self.intake is not None
        await self.intake.take(message, self.fold)
