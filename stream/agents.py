"""Faust agents. They stay thin: parse, hand to the engine, publish, ack in order."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust
import orjson
from pydantic import ValidationError

from . import metrics
from .acking import InOrderAcker
from .app import Topics
from .models import ScoreEvent, Trace
from .scoring import Scorer

log = logging.getLogger(__name__)

PUBLISH_BACKOFF_MAX_S = 30.0


def describe_invalid(exc: Exception) -> tuple[str, str]:
    """(reason label from a closed set, human-readable error) for a message we cannot use."""
    if isinstance(exc, orjson.JSONDecodeError):
        return "invalid_json", f"not valid JSON: {exc}"
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(message)'}: {e['msg']}" for e in exc.errors()
        )
        return "invalid_event", f"not a valid trace event: {problems}"
    return "invalid_event", f"not a valid trace event: {exc}"


def parse_trace(raw: bytes | None) -> tuple[Trace, Any]:
    """Decode and validate one trace message; returns the model and the JSON document."""
    if raw is None:
        raise ValueError("empty message (no value)")
    document = orjson.loads(raw)
    if not isinstance(document, dict):
        raise ValueError(f"a trace must be a JSON object, got {type(document).__name__}")
    return Trace.model_validate(document), document


def observe_published(score: ScoreEvent) -> None:
    metrics.SCORES.labels(rule=score.rule_id, pack=score.pack, status=score.status).inc()
    if score.status == "ok" and score.value is not None:
        metrics.SCORE_VALUE.labels(rule=score.rule_id, pack=score.pack).observe(score.value)


class TracePipeline:
    """Everything the trace agent does for one message, publishing with at-least-once care."""

    def __init__(self, app: faust.App, topics: Topics, scorer: Scorer) -> None:
        self.app = app
        self.topics = topics
        self.scorer = scorer

    async def declare_topics(self) -> None:
        """Create the output topics up front: we publish through the producer directly."""
        for topic in (self.topics.scores, self.topics.decisions, self.topics.dlq):
            await topic.maybe_declare()

    async def _send_all(
        self, sends: list[tuple[Any, bytes | None, bytes, dict[str, bytes] | None]]
    ) -> None:
        """Send and wait until the broker has every message; retry until it does.

        A broker outage stalls the partition (its offset is not acked) instead of losing scores.
        """
        delay = 0.5
        while True:
            try:
                # the producer itself, not Topic.send: same aiokafka producer, a fraction of the
                # per-message bookkeeping (the Faust topic path dominated CPU per trace)
                producer = self.app.producer
                futures = [
                    await producer.send(topic.get_topic_name(), key, value, None, None, headers)
                    for topic, key, value, headers in sends
                ]
                await asyncio.gather(*futures)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("publish failed (%s), retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(PUBLISH_BACKOFF_MAX_S, delay * 2)

    async def dead_letter(self, event: Any, reason: str, error: str) -> None:
        message = event.message
        headers = {
            "scorer.error": error.encode()[:4000],
            "scorer.error.reason": reason.encode(),
            "scorer.source.topic": message.topic.encode(),
            "scorer.source.partition": str(message.partition).encode(),
            "scorer.source.offset": str(message.offset).encode(),
        }
        await self._send_all([(self.topics.dlq, message.key, message.value or b"", headers)])
        metrics.DLQ_MESSAGES.labels(topic=message.topic, reason=reason).inc()
        log.warning(
            "dead-lettered %s[%s]@%s: %s", message.topic, message.partition, message.offset, error
        )

    async def handle(self, event: Any) -> None:
        message = event.message
        metrics.TRACES_CONSUMED.labels(topic=message.topic).inc()
        started = time.perf_counter()
        try:
            trace, document = parse_trace(message.value)
        except (ValueError, ValidationError) as exc:
            reason, error = describe_invalid(exc)
            await self.dead_letter(event, reason, error)
            return
        result = await self.scorer.score_trace(trace, document, message.topic)
        key = trace.id.encode()
        sends: list[tuple[Any, bytes | None, bytes, dict[str, bytes] | None]] = [
            (self.topics.scores, key, score.to_bytes(), None) for score in result.scores
        ]
        sends += [(self.topics.decisions, key, d.to_bytes(), None) for d in result.decisions]
        await self._send_all(sends)
        for score in result.scores:
            observe_published(score)
        metrics.SCORING_OVERHEAD.observe(
            max(0.0, time.perf_counter() - started - result.judge_seconds)
        )


def register_trace_agent(
    app: faust.App, topics: Topics, scorer: Scorer, *, max_in_flight: int
) -> Any:
    """The trace agent: one actor, up to ``max_in_flight`` traces scored concurrently."""
    pipeline = TracePipeline(app, topics, scorer)

    @app.agent(topics.traces, concurrency=1, name="score-traces")
    async def score_traces(stream: Any) -> None:
        await pipeline.declare_topics()
        manual = stream.noack()
        acker = InOrderAcker(manual.ack)
        slots = asyncio.Semaphore(max_in_flight)
        tasks: set[asyncio.Task[None]] = set()

        async def run(event: Any, tp: Any, entry: Any) -> None:
            try:
                await pipeline.handle(event)
            except Exception:
                # A bug must not ack past the trace: leave it unacked so it is redelivered
                # after a restart, and keep serving the other partitions.
                log.exception("scoring failed for %s@%s; not acknowledged", tp, entry.offset)
                return
            finally:
                slots.release()
                metrics.IN_FLIGHT.dec()
            await acker.finish(tp, entry)

        async for event in manual.events():
            await slots.acquire()
            metrics.IN_FLIGHT.inc()
            message = event.message
            entry = acker.track(event, message.tp, message.offset)
            task = asyncio.create_task(run(event, message.tp, entry))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    return score_traces
