"""The trace agent: score each trace on arrival, and send its turn to its conversation."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TP, AgentT, Message
from pydantic import ValidationError

from ..app import Topics
from ..delivery.acking import Pending
from ..delivery.dead_letter import DeadLetters
from ..delivery.ordered import Delivery, OrderedDelivery
from ..delivery.publisher import Publisher, Send
from ..engine.outcomes import TraceResult
from ..engine.records import trace_records
from ..engine.scorer import Plan, Scorer
from ..kafka.mends.faust_state import scoring
from ..models import ScoreEvent, Trace, parse_trace
from ..observer import Observer
from ..references import ReferenceStore, with_reference
from ..sources.log import SourceLog, source_name
from ..threads.router import ThreadRouter
from .forward import Taken, register_batched

log = logging.getLogger(__name__)

# messages already handed to the producer, with their delivery futures
Early = tuple[list[Send], list[Awaitable[Any]]]


@dataclass
class Scored:
    """What one trace of a batch sends: its messages and scores now, or (``plan``) once
    the judge has answered; and its turn's messages, sent ahead either way."""

    sends: list[Send]
    scores: list[ScoreEvent] = field(default_factory=list)
    early: list[Send] = field(default_factory=list)
    plan: Plan | None = None
    trace: Trace | None = None


def source_of(message: Message) -> str:
    return source_name(message.topic, message.partition)


def register_trace_agent(
    app: faust.App,
    topics: Topics,
    scorer: Scorer,
    *,
    max_in_flight: int,
    batch_max: int = 64,
    batch_wait_s: float = 0.0,
    router: ThreadRouter | None = None,
    sources: SourceLog | None = None,
    observer: Observer | None = None,
    references: ReferenceStore | None = None,
) -> AgentT[bytes]:
    """The trace agent (``TraceAgent``) registered on ``app``: one actor, up to
    ``max_in_flight`` traces in flight at once, taken in batches of up to ``batch_max``."""
    agent = TraceAgent(
        app,
        topics,
        scorer,
        router=router,
        sources=sources,
        observer=observer,
        references=references,
    )
    return agent.register(
        max_in_flight=max_in_flight, batch_max=batch_max, batch_wait_s=batch_wait_s
    )


class TraceAgent:
    """Scores each trace on arrival, and sends its turn to its conversation.

    Synchronous work (parsing, filters, checks, rendering) runs inline in the actor; only
    traces that wait for the judge get a task. Each trace's messages are acknowledged by the
    broker before its offset may be acked, and offsets are acked in order per partition.
    A trace that belongs to a judged conversation also sends its turn to the thread-events
    topic at once (not after its own judge calls), in the same at-least-once set, and
    ``sources`` records how far each partition is read (after its turn is handed over).
    With ``references`` (the reference topic's store), no trace is scored before the store is
    loaded, and each is scored with its reference joined (design record 50).
    """

    def __init__(
        self,
        app: faust.App,
        topics: Topics,
        scorer: Scorer,
        *,
        router: ThreadRouter | None = None,
        sources: SourceLog | None = None,
        observer: Observer | None = None,
        references: ReferenceStore | None = None,
    ) -> None:
        self.app = app
        self.topics = topics
        self.scorer = scorer
        self.observer = observer or Observer()
        self.publisher = Publisher(app)
        self.dead_letters = DeadLetters(topics.dlq, self.observer)
        self.outbox = topics.outbox()  # what a scored trace publishes
        self.router = router if router is not None and router.wants_traces else None
        self.sources = sources if self.router is not None else None
        self.references = references

    def register(
        self, *, max_in_flight: int, batch_max: int = 64, batch_wait_s: float = 0.0
    ) -> AgentT[bytes]:
        """The agent on the traces topic (``forward.register_batched``: batches in, offsets
        acked in order)."""
        return register_batched(
            self.app,
            self.topics.traces,
            "score-traces",
            self.score_batch,
            declare=self.topics.outputs(),
            max_in_flight=max_in_flight,
            batch_max=batch_max,
            batch_wait_s=batch_wait_s,
            sources=self.sources,
            observer=self.observer,
            watch_in_flight=True,
        )

    async def judged(
        self,
        delivery: OrderedDelivery,
        tp: TP,
        entry: Pending,
        plan: Plan,
        trace: Trace,
        early: Early | None,
    ) -> None:
        """A trace that waited for the judge: finished, published, acked in order."""
        try:
            result = await self.scorer.finish(plan)
            engine_started = time.perf_counter()
            sends = self.outbox.sends(trace_records(result, trace))
            self.observer.on_scoring_overhead(
                entry.engine_seconds + time.perf_counter() - engine_started
            )
        except Exception as exc:
            failure = self.dead_letters.engine_failure(entry.event.message, exc)
            await delivery.deliver(tp, entry, failure, [])
            return
        await delivery.deliver(tp, entry, sends, result.scores, early)

    def score(self, entry: Pending, message: Message) -> Scored:
        """One trace's synchronous part: parsed, planned, its turn routed. Returns what it
        sends now (its scores and decisions, or a dead letter), or its plan when it waits
        for the judge; and its turn's messages (sent ahead, before any judge call)."""
        topics, observer, dead_letters = self.topics, self.observer, self.dead_letters
        topic = topics.input_topic(message.topic)  # assembled from spans: their topic
        started = entry.taken_at or time.perf_counter()  # its wait for the batch counts
        try:
            trace, document = parse_trace(message.value)
        except (ValueError, ValidationError) as exc:
            return Scored(dead_letters.invalid(message, exc))
        try:
            judged, joined = (
                with_reference(trace, document, self.references)
                if self.references is not None
                else (trace, document)
            )
            plan = self.scorer.plan(judged, joined, topic)
            early: list[Send] = []
            if self.router:
                routed = self.router.events_for_trace(
                    trace, document, topic, message.timestamp, source_of(message), message.key
                )
                early = [topics.to_threads(event) for event in routed]
        except Exception as exc:
            return Scored(dead_letters.engine_failure(message, exc))
        entry.moment = trace.start_time or trace.end_time
        entry.engine_seconds = time.perf_counter() - started
        if plan.waits:
            return Scored([], early=early, plan=plan, trace=trace)
        result = TraceResult(plan.decided())
        try:
            sends = self.outbox.sends(trace_records(result, trace))
        except Exception as exc:  # a bug: its turn (early) goes all the same
            return Scored(dead_letters.engine_failure(message, exc), early=early)
        observer.on_scoring_overhead(time.perf_counter() - started)
        return Scored(sends, result.scores, early)

    def count_consumed(self, taken: Taken) -> None:
        """The batch's traces counted as consumed, by topic (a batch's are from one or two)."""
        counts: dict[str, int] = {}
        for _, entry in taken:
            name = entry.event.message.topic
            counts[name] = counts.get(name, 0) + 1
        for name, count in counts.items():  # assembled from spans: counted for their topic
            self.observer.on_trace_consumed(self.topics.input_topic(name), count)

    async def send_turns(self, sends: list[Send]) -> list[Awaitable[Any]]:
        """The batch's turns handed to the producer; if it refuses them (its buffer full
        through a broker outage), they are sent until the broker has them before the batch
        goes on (no turn may be lost, and the batch's sources are read only past them)."""
        try:
            # in the producer before the sources are read past them (a progress report, sent
            # by the producer directly, must not pass them)
            return await self.publisher.send_batched(sends, at_once=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("handing %d turns to the producer failed (%s): retrying", len(sends), exc)
            await self.publisher.send_until_delivered(sends)
            delivered = asyncio.get_running_loop().create_future()
            delivered.set_result(None)
            return [delivered] * len(sends)

    async def score_batch(self, delivery: OrderedDelivery, taken: Taken) -> None:
        """A batch of traces: each scored as ``score`` says; the turns of the batch handed to
        the producer first (and the sources read up to them), then the judged traces' tasks
        started, then every other trace's messages sent as one producer batch."""
        if self.references is not None:  # never against half of the references
            await self.references.wait_loaded()
        self.observer.on_trace_batch(len(taken))
        self.count_consumed(taken)
        scored = []
        for _, entry in taken:
            with scoring(entry.event):  # its table writes (verdicts, batch jobs) in its partition
                scored.append(self.score(entry, entry.event.message))
        early_sends = [send for item in scored for send in item.early]
        early_futures = await self.send_turns(early_sends) if early_sends else []
        delivered: list[Delivery] = []
        at = 0
        for (tp, entry), item in zip(taken, scored, strict=True):
            early: Early | None = None
            if item.early:
                early = (item.early, early_futures[at : at + len(item.early)])
                at += len(item.early)
                delivery.watch(tp, entry, early[1])  # a failed turn holds its source back
            if self.sources:
                message = entry.event.message  # its turn is handed over: read up to it
                self.sources.read(
                    source_of(message), message.offset, message.timestamp, entry.moment
                )
            if item.plan is not None and item.trace is not None:
                with scoring(entry.event):  # the task's table writes: the record's partition
                    delivery.spawn(self.judged(delivery, tp, entry, item.plan, item.trace, early))
            else:
                delivered.append((tp, entry, item.sends, item.scores, early))
        await delivery.deliver_batch(delivered)
