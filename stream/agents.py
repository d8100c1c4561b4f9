"""Faust agents. They stay thin: parse, hand to the engine, publish, ack in order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from functools import partial
from typing import Any

import faust
import orjson
from pydantic import ValidationError

from . import metrics
from .acking import InOrderAcker, Pending
from .app import Topics
from .models import ScoreEvent, Trace, TraceDecisions
from .scoring import Scorer, TraceResult
from .thread_events import SessionEvent, ThreadEvent, ThreadRouter, parse_session

log = logging.getLogger(__name__)

PUBLISH_BACKOFF_MAX_S = 30.0

Send = tuple[Any, bytes | None, bytes, dict[str, bytes] | None]


def describe_invalid(exc: Exception, what: str = "trace event") -> tuple[str, str]:
    """(reason label from a closed set, human-readable error) for a message we cannot use."""
    if isinstance(exc, orjson.JSONDecodeError):
        return "invalid_json", f"not valid JSON: {exc}"
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(message)'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        return "invalid_event", f"not a valid {what}: {problems}"
    return "invalid_event", f"not a valid {what}: {exc}"


def parse_trace(raw: bytes | None) -> tuple[Trace, Any]:
    """Decode and validate one trace message; returns the model and the JSON document."""
    if raw is None:
        raise ValueError("empty message (no value)")
    document = orjson.loads(raw)
    if not isinstance(document, dict):
        raise ValueError(f"a trace must be a JSON object, got {type(document).__name__}")
    return Trace.model_validate(document), document


def observe_published(score: ScoreEvent) -> None:
    criterion = score.criterion or ""
    metrics.scores(score.rule_id, score.pack, criterion, score.status).inc()
    if score.status == "ok" and score.value is not None:
        metrics.score_values(score.rule_id, score.pack, criterion).observe(score.value)
        # the low-score series exists from a rule's first ok score, so its share reads 0, not
        # nothing, until a low score comes
        low = metrics.low_scores(score.rule_id, score.pack, criterion)
        low.inc(1 if metrics.is_low(score.value, score.higher_is_better) else 0)


class TracePipeline:
    """Everything the trace agent does for one message, publishing with at-least-once care."""

    def __init__(self, app: faust.App, topics: Topics, scorer: Scorer) -> None:
        self.app = app
        self.topics = topics
        self.scorer = scorer

    async def declare_topics(self) -> None:
        """Create the output topics up front: we publish through the producer directly (and the
        thread-events topic must exist with its partition count before anything is keyed to it)."""
        for topic in self.topics.outputs():
            await topic.maybe_declare()

    async def send(self, sends: list[Send]) -> list[Awaitable[Any]]:
        """Hand messages to the producer; return their delivery futures.

        The producer itself, not ``Topic.send``: the same aiokafka producer with a fraction
        of the per-message bookkeeping (the Faust topic path dominated CPU per trace).
        """
        producer = self.app.producer
        return [
            await producer.send(topic.get_topic_name(), key, value, None, None, headers)
            for topic, key, value, headers in sends
        ]

    async def send_until_delivered(self, sends: list[Send]) -> None:
        """Send and wait until the broker has every message; retry until it does.

        A broker outage stalls the partition (its offset is not acked) instead of losing scores.
        """
        delay = 0.5
        while True:
            try:
                await asyncio.gather(*await self.send(sends))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("publish failed (%s), retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(PUBLISH_BACKOFF_MAX_S, delay * 2)

    def engine_failure(self, message: Any, exc: Exception) -> list[Send]:
        """A bug met this trace. Dead-letter it with the error rather than leave it unacked:
        an unacked trace would hold back every later commit of its partition, and fail again
        after each restart. The DLQ keeps the original bytes for a replay once fixed."""
        log.exception(
            "scoring failed for %s[%s]@%s", message.topic, message.partition, message.offset
        )
        return self.dead_letter(
            message,
            exc,
            reason="engine_error",
            error=f"scoring failed: {type(exc).__name__}: {exc}",
        )

    def dead_letter(
        self,
        message: Any,
        exc: Exception,
        *,
        reason: str | None = None,
        error: str | None = None,
        what: str = "trace event",
    ) -> list[Send]:
        if reason is None or error is None:
            reason, error = describe_invalid(exc, what)
        headers = {
            "scorer.error": error.encode()[:4000],
            "scorer.error.reason": reason.encode(),
            "scorer.source.topic": message.topic.encode(),
            "scorer.source.partition": str(message.partition).encode(),
            "scorer.source.offset": str(message.offset).encode(),
        }
        metrics.DLQ_MESSAGES.labels(topic=message.topic, reason=reason).inc()
        log.warning(
            "dead-lettered %s[%s]@%s: %s", message.topic, message.partition, message.offset, error
        )
        return [(self.topics.dlq, message.key, message.value or b"", headers)]

    def outputs(self, result: TraceResult, trace: Trace) -> list[Send]:
        key = trace.id.encode()
        sends: list[Send] = [
            (self.topics.scores, key, score.to_bytes(), None) for score in result.scores
        ]
        record = TraceDecisions(
            trace_id=trace.id, project_name=trace.project_name, decisions=result.decisions
        )
        sends.append((self.topics.decisions, key, record.to_bytes(), None))
        return sends

    def thread_event(self, event: ThreadEvent) -> Send:
        return (self.topics.thread_events, event.key, event.to_bytes(), None)


class OrderedDelivery:
    """Publish what each consumed message produced; ack its offset once the broker has all of
    it and every earlier offset of its partition is acked too (at-least-once, in order).

    At most ``max_in_flight`` messages are in flight; a failed send is retried in the
    background until it succeeds (the offset stays unacked meanwhile).
    """

    def __init__(self, pipeline: TracePipeline, ack: Any, max_in_flight: int) -> None:
        self.pipeline = pipeline
        self.acker = InOrderAcker(ack)
        self.slots = asyncio.Semaphore(max_in_flight)
        self.finished: asyncio.Queue[tuple[Any, Pending]] = asyncio.Queue()
        self.background: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def start(self) -> None:
        self.spawn(self._ack_finished())

    def stop(self) -> None:
        for task in list(self.background):
            task.cancel()

    async def admit(self, event: Any) -> tuple[Any, Pending]:
        await self.slots.acquire()
        message = event.message
        return message.tp, self.acker.track(event, message.tp, message.offset)

    async def _ack_finished(self) -> None:
        while True:
            tp, entry = await self.finished.get()
            try:
                await self.acker.finish(tp, entry)
            except Exception:  # never let one failed ack stop every later ack
                log.exception("acking %s@%s failed", tp, entry.offset)

    def _published(self, tp: Any, entry: Pending, scores: list[ScoreEvent]) -> None:
        """The broker has every message of this entry: count its scores, free its slot, and
        let the acker ack it once the offsets before it are done too."""
        for score in scores:
            observe_published(score)
        self.slots.release()
        self.finished.put_nowait((tp, entry))

    def _delivered(
        self,
        tp: Any,
        entry: Pending,
        sends: list[Send],
        scores: list[ScoreEvent],
        handed: float,
        delivery: asyncio.Future[Any],
    ) -> None:
        if delivery.cancelled() or delivery.exception() is not None:
            self.spawn(self._redeliver(tp, entry, sends, scores))
            return
        metrics.PUBLISH_LATENCY.observe(time.perf_counter() - handed)
        self._published(tp, entry, scores)

    async def _redeliver(
        self, tp: Any, entry: Pending, sends: list[Send], scores: list[ScoreEvent]
    ) -> None:
        await self.pipeline.send_until_delivered(sends)
        self._published(tp, entry, scores)

    async def deliver(
        self,
        tp: Any,
        entry: Pending,
        sends: list[Send],
        scores: list[ScoreEvent],
        early: tuple[list[Send], list[Awaitable[Any]]] | None = None,
    ) -> None:
        """Hand ``sends`` to the producer; the offset is acked once the broker has them all,
        and the ``early`` messages (already sent, with their delivery futures) too."""
        early_sends, early_futures = early or ([], [])
        try:
            futures = await self.pipeline.send(sends)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.spawn(self._redeliver(tp, entry, early_sends + sends, scores))
            return
        delivery = asyncio.gather(*early_futures, *futures)
        delivery.add_done_callback(
            partial(self._delivered, tp, entry, early_sends + sends, scores, time.perf_counter())
        )


def register_trace_agent(
    app: faust.App,
    topics: Topics,
    scorer: Scorer,
    *,
    max_in_flight: int,
    router: ThreadRouter | None = None,
) -> Any:
    """The trace agent: one actor, up to ``max_in_flight`` traces in flight at once.

    Synchronous work (parsing, filters, checks, rendering) runs inline in the actor; only
    traces that wait for the judge get a task. Each trace's messages are acknowledged by the
    broker before its offset may be acked, and offsets are acked in order per partition.
    A trace that belongs to a judged conversation also sends its turn to the thread-events
    topic at once (not after its own judge calls), in the same at-least-once set.
    """
    pipeline = TracePipeline(app, topics, scorer)
    router = router if router is not None and router.wants_conversations else None

    @app.agent(topics.traces, concurrency=1, name="score-traces")
    async def score_traces(stream: Any) -> None:
        await pipeline.declare_topics()
        manual = stream.noack()
        delivery = OrderedDelivery(pipeline, manual.ack, max_in_flight)
        metrics.IN_FLIGHT.set_function(delivery.acker.in_flight)  # read at scrape time
        deliver = delivery.deliver

        async def judged(tp: Any, entry: Pending, plan: Any, trace: Trace, early: Any) -> None:
            try:
                result = await scorer.finish(plan)
                engine_started = time.perf_counter()
                sends = pipeline.outputs(result, trace)
                metrics.SCORING_OVERHEAD.observe(
                    entry.engine_seconds + time.perf_counter() - engine_started
                )
            except Exception as exc:
                await deliver(tp, entry, pipeline.engine_failure(entry.event.message, exc), [])
                return
            await deliver(tp, entry, sends, result.scores, early)

        delivery.start()
        try:
            async for event in manual.events():
                tp, entry = await delivery.admit(event)
                message = event.message
                metrics.traces_consumed(message.topic).inc()
                started = time.perf_counter()
                try:
                    trace, document = parse_trace(message.value)
                except (ValueError, ValidationError) as exc:
                    await deliver(tp, entry, pipeline.dead_letter(message, exc), [])
                    continue
                try:
                    plan = scorer.plan(trace, document, message.topic)
                    turn = router and router.from_trace(
                        trace,
                        document,
                        message.topic,
                        message.timestamp,
                        f"{message.topic}:{message.partition}",
                    )
                except Exception as exc:
                    await deliver(tp, entry, pipeline.engine_failure(message, exc), [])
                    continue
                early = None
                if turn:
                    early_sends = [pipeline.thread_event(turn)]
                    early = (early_sends, await pipeline.send(early_sends))
                entry.engine_seconds = time.perf_counter() - started
                if plan.judge_jobs:
                    delivery.spawn(judged(tp, entry, plan, trace, early))
                else:
                    result = TraceResult(plan.outcomes)
                    sends = pipeline.outputs(result, trace)
                    metrics.SCORING_OVERHEAD.observe(time.perf_counter() - started)
                    scores = result.scores
                    await deliver(tp, entry, sends, scores, early)
        finally:
            delivery.stop()

    return score_traces


def register_session_agent(
    app: faust.App, topics: Topics, scorer: Scorer, router: ThreadRouter, *, max_in_flight: int
) -> Any:
    """Validate coaching-session events and forward them, keyed by session, to thread events.

    An invalid event goes to the DLQ with its bytes and error; offsets are acked in order once
    the forwarded event (or the DLQ copy) is on the broker.
    """
    pipeline = TracePipeline(app, topics, scorer)

    @app.agent(topics.sessions, concurrency=1, name="forward-sessions")
    async def forward_sessions(stream: Any) -> None:
        await pipeline.declare_topics()
        manual = stream.noack()
        delivery = OrderedDelivery(pipeline, manual.ack, max_in_flight)
        delivery.start()
        try:
            async for event in manual.events():
                tp, entry = await delivery.admit(event)
                message = event.message
                try:
                    session: SessionEvent = parse_session(message.value)
                    source = f"{message.topic}:{message.partition}"
                    thread_event = router.from_session(session, message.timestamp, source)
                    sends = [pipeline.thread_event(thread_event)]
                except (ValueError, ValidationError) as exc:
                    sends = pipeline.dead_letter(message, exc, what="session event")
                await delivery.deliver(tp, entry, sends, [])
        finally:
            delivery.stop()

    return forward_sessions
