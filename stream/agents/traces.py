"""The trace agent: score each trace on arrival, and send its turn to its conversation."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any

import faust
from faust.types import TP, AgentT, Message
from pydantic import ValidationError

from ..app import Topics
from ..delivery.acking import Pending
from ..delivery.dead_letter import DeadLetters
from ..delivery.ordered import OrderedDelivery
from ..delivery.publisher import Publisher, Send, sends_of
from ..engine.outcomes import TraceResult
from ..engine.records import trace_records
from ..engine.scorer import Plan, Scorer
from ..models import Trace, parse_trace
from ..observer import Observer
from ..threads.router import ThreadRouter
from ..threads.sources import SourceLog, source_name
from .agreement import agreement_sends
from .forward import register_in_order

# messages already handed to the producer, with their delivery futures
Early = tuple[list[Send], list[Awaitable[Any]]]


def register_trace_agent(
    app: faust.App,
    topics: Topics,
    scorer: Scorer,
    *,
    max_in_flight: int,
    router: ThreadRouter | None = None,
    sources: SourceLog | None = None,
    observer: Observer | None = None,
) -> AgentT[bytes]:
    """The trace agent: one actor, up to ``max_in_flight`` traces in flight at once.

    Synchronous work (parsing, filters, checks, rendering) runs inline in the actor; only
    traces that wait for the judge get a task. Each trace's messages are acknowledged by the
    broker before its offset may be acked, and offsets are acked in order per partition.
    A trace that belongs to a judged conversation also sends its turn to the thread-events
    topic at once (not after its own judge calls), in the same at-least-once set, and
    ``sources`` records how far each partition is read (after its turn is handed over).
    """
    observer = observer or Observer()
    publisher = Publisher(app)
    dead_letters = DeadLetters(topics.dlq, observer)
    router = router if router is not None and router.wants_traces else None
    sources = sources if router is not None else None

    async def judged(
        delivery: OrderedDelivery,
        tp: TP,
        entry: Pending,
        plan: Plan,
        trace: Trace,
        early: Early | None,
    ) -> None:
        try:
            result = await scorer.finish(plan)
            engine_started = time.perf_counter()
            sends = sends_of(topics.scores, topics.decisions, trace_records(result, trace))
            sends += agreement_sends(topics, result.scores)  # judged scores meet their labels
            observer.on_scoring_overhead(
                entry.engine_seconds + time.perf_counter() - engine_started
            )
        except Exception as exc:
            failure = dead_letters.engine_failure(entry.event.message, exc)
            await delivery.deliver(tp, entry, failure, [])
            return
        await delivery.deliver(tp, entry, sends, result.scores, early)

    async def score(delivery: OrderedDelivery, tp: TP, entry: Pending, message: Message) -> None:
        deliver = delivery.deliver
        topic = topics.input_topic(message.topic)  # assembled from spans: their topic
        observer.on_trace_consumed(topic)
        started = time.perf_counter()
        source = source_name(message.topic, message.partition)
        try:
            trace, document = parse_trace(message.value)
        except (ValueError, ValidationError) as exc:
            await deliver(tp, entry, dead_letters.invalid(message, exc), [])
            if sources:
                sources.read(source, message.offset, message.timestamp, None)
            return
        try:
            plan = scorer.plan(trace, document, topic)
            routed = (
                router.events_for_trace(
                    trace, document, topic, message.timestamp, source, message.key
                )
                if router
                else []
            )
            early_sends = [topics.to_threads(event) for event in routed]
        except Exception as exc:
            await deliver(tp, entry, dead_letters.engine_failure(message, exc), [])
            if sources:
                sources.read(source, message.offset, message.timestamp, None)
            return
        early: Early | None = None
        entry.moment = trace.start_time or trace.end_time
        if early_sends:
            early = (early_sends, await publisher.send(early_sends))
            delivery.watch(tp, entry, early[1])  # a failed turn holds its source back
        if sources:
            sources.read(source, message.offset, message.timestamp, entry.moment)
        entry.engine_seconds = time.perf_counter() - started
        if plan.judge_jobs:
            delivery.spawn(judged(delivery, tp, entry, plan, trace, early))
            return
        result = TraceResult(plan.outcomes)
        try:
            sends = sends_of(topics.scores, topics.decisions, trace_records(result, trace))
        except Exception as exc:  # a bug: its turn (early) goes all the same
            await deliver(tp, entry, dead_letters.engine_failure(message, exc), [], early)
            return
        observer.on_scoring_overhead(time.perf_counter() - started)
        await deliver(tp, entry, sends, result.scores, early)

    return register_in_order(
        app,
        topics.traces,
        "score-traces",
        score,
        declare=topics.outputs(),
        max_in_flight=max_in_flight,
        sources=sources,
        observer=observer,
        watch_in_flight=True,
    )
