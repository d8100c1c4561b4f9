"""The thread agent: thread state in a changelog-backed table, closes scored at least once.

One agent consumes the thread-events topic and is the only writer of the ``threads`` table,
which is co-partitioned with it, so each worker folds and closes only the threads of the
partitions it owns. Faust's windowed tables are not used: they expire on wall-clock time and
do not expire keys restored from the changelog. Closing is decided by ``ThreadProcessor``
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
import time
from typing import Any

import faust

from . import metrics
from .agents import Send, TracePipeline, observe_published
from .app import Topics
from .models import ThreadDecisions
from .rules import RuleSet
from .scoring import Scorer, ThreadClose, TraceResult
from .settings import Settings
from .thread_events import ThreadEvent, published, tick
from .thread_processor import ThreadProcessor
from .threads import ThreadLimits

log = logging.getLogger(__name__)

TABLE_NAME = "threads"


def close_outputs(pipeline: TracePipeline, result: TraceResult, close: ThreadClose) -> list[Send]:
    key = close.thread_id.encode()
    topics = pipeline.topics
    sends: list[Send] = [(topics.scores, key, s.to_bytes(), None) for s in result.scores]
    record = ThreadDecisions(
        thread_id=close.thread_id,
        kind=close.kind,
        close_seq=close.pending.close_seq,
        project_name=close.project_name,
        decisions=result.decisions,
    )
    sends.append((topics.decisions, key, record.to_bytes(), None))
    return sends


def close_dead_letter(pipeline: TracePipeline, close: ThreadClose, exc: Exception) -> list[Send]:
    """A bug met this close: keep what it would have judged, with the error, on the DLQ."""
    error = f"scoring thread close failed: {type(exc).__name__}: {exc}"
    source = pipeline.topics.thread_events.get_topic_name()
    headers = {
        "scorer.error": error.encode()[:4000],
        "scorer.error.reason": b"engine_error",
        "scorer.source.topic": source.encode(),
        "scorer.thread.close_seq": str(close.pending.close_seq).encode(),
    }
    metrics.DLQ_MESSAGES.labels(topic=source, reason="engine_error").inc()
    return [
        (
            pipeline.topics.dlq,
            close.thread_id.encode(),
            close.pending.model_dump_json().encode(),
            headers,
        )
    ]


def inactivity_gap(ruleset: RuleSet, kind: str, settings: Settings) -> float:
    """The rule set's gap for threads of ``kind``, else the deployment's."""
    spec = ruleset.thread_spec(kind)
    return (spec.inactivity_gap_s if spec else None) or settings.thread_inactivity_gap_s


def register_thread_agent(
    app: faust.App, topics: Topics, scorer: Scorer, settings: Settings
) -> ThreadProcessor:
    gaps = {
        kind: inactivity_gap(scorer.ruleset, kind, settings) for kind in ("conversation", "session")
    }
    table = app.Table(
        TABLE_NAME,
        default=None,
        partitions=settings.topic_partitions,
        key_type=bytes,  # bytes in, bytes out: the raw codec, we serialise ourselves
        value_type=bytes,
    )
    processor = ThreadProcessor(
        table,
        gaps=gaps,
        limits=ThreadLimits(
            max_turns=settings.thread_max_turns, max_bytes=settings.thread_max_bytes
        ),
        retention_s=settings.thread_retention_s,
        sessions_topic=settings.sessions_topic,
    )
    metrics.THREADS_OPEN.set_function(processor.open_threads)
    metrics.THREAD_PENDING_CLOSES.set_function(processor.pending_closes)
    pipeline = TracePipeline(app, topics, scorer)
    events_topic = topics.thread_events.get_topic_name()
    in_flight: dict[tuple[str, str, int], asyncio.Task[None]] = {}

    def owned() -> set[int]:
        return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == events_topic}

    @table.on_recover
    async def rebuild_index() -> None:
        started = time.perf_counter()
        partitions = owned()
        count = processor.rebuild(partitions)
        log.info(
            "thread index rebuilt: %d threads in partitions %s (%.2fs)",
            count,
            sorted(partitions),
            time.perf_counter() - started,
        )

    async def publish_close(close: ThreadClose) -> None:
        try:
            result = await scorer.score_thread(close)
            sends = close_outputs(pipeline, result, close)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("scoring close %d of %s failed", close.pending.close_seq, close.thread_id)
            result, sends = TraceResult([]), close_dead_letter(pipeline, close, exc)
        await pipeline.send_until_delivered(sends)
        for score in result.scores:
            observe_published(score)
        marker = published(close.kind, close.thread_id, close.pending.close_seq)
        await pipeline.send_until_delivered([pipeline.thread_event(marker)])

    def schedule(close: ThreadClose) -> None:
        key = (close.kind, close.thread_id, close.pending.close_seq)
        if key in in_flight:
            return  # already being scored by this worker
        task = asyncio.create_task(publish_close(close))
        in_flight[key] = task
        task.add_done_callback(lambda _: in_flight.pop(key, None))

    @app.agent(topics.thread_events, concurrency=1, name="fold-threads")
    async def fold_threads(stream: Any) -> None:
        await pipeline.declare_topics()
        try:
            async for event in stream.events():
                try:
                    thread_event = ThreadEvent.from_bytes(event.value)
                    closes = processor.apply(event.message.partition, thread_event)
                except Exception:  # internal events: a failure here is a bug, never input
                    log.exception(
                        "thread event %s[%s]@%s failed",
                        event.message.topic,
                        event.message.partition,
                        event.message.offset,
                    )
                    metrics.thread_events("failed").inc()
                    continue
                for close in closes:
                    schedule(close)
        finally:
            for task in list(in_flight.values()):
                task.cancel()

    @app.timer(settings.thread_tick_s)
    async def send_ticks() -> None:
        """The wall clock, into every partition this worker owns (behind what is queued)."""
        payload = tick(time.time())
        producer = app.producer
        for partition in sorted(owned()):
            await producer.send(events_topic, None, payload, partition, None, None)

    return processor
