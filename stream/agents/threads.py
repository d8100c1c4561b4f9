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
from dataclasses import replace
from typing import Any, cast

import faust
from faust.transport.consumer import Consumer
from faust.types import TP, StreamT

from ..app import Topics, raw_table
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher, Send, scored
from ..engine.outcomes import TraceResult
from ..engine.planner import Scorer
from ..kafka.membership import still_ours
from ..models import ThreadDecisions, TraceDecisions
from ..observer import Observer
from ..ruleset.schema import RuleSet
from ..settings import Settings
from ..threads.events import ThreadEvent, progress, published, tick
from ..threads.processor import ThreadProcessor
from ..threads.sources import Position, SourceLog, source_name
from ..threads.state import ThreadClose, ThreadLimits

log = logging.getLogger(__name__)

TABLE_NAME = "threads"
CLOSES_AT_ONCE = 64  # closes being scored and published at once (at most max_in_flight)
FOLDING = "folding the thread event"


def close_outputs(topics: Topics, result: TraceResult, close: ThreadClose) -> list[Send]:
    """A close's score events and its decision record (a pair's: one per trace of it)."""
    if close.kind == "pair":
        return pair_outputs(topics, result, close)
    record = ThreadDecisions(
        thread_id=close.thread_id,
        kind=close.kind,
        close_seq=close.pending.close_seq,
        project_name=close.project_name,
        decisions=result.decisions,
    )
    return scored(topics.scores, topics.decisions, close.thread_id, result.scores, record)


def pair_outputs(topics: Topics, result: TraceResult, close: ThreadClose) -> list[Send]:
    """A pair's score events (each keyed by its target: the comparison key, or a trace) and
    a decision record for each trace of the pair, keyed by trace id: the comparison rules'
    decisions about the pair, and for a trace ignored while the pair waited, that it was."""
    document = close.pending.document
    sends: list[Send] = [
        (topics.scores, score.target_id.encode(), score.to_bytes(), None) for score in result.scores
    ]
    compared = {trace_id: variant for variant, trace_id in document.get("variants", {}).items()}
    # each trace's own project (a canary may report to its own); an ignored one: the pair's
    projects = {
        side.get("id"): side.get("project_name") or close.project_name
        for side in (document.get("a"), document.get("b"))
        if isinstance(side, dict)
    }
    for trace_id in [*compared, *document.get("ignored", [])]:
        if trace_id in compared:
            about = f"pair {close.thread_id!r} as variant {compared[trace_id]}"
            decisions = [
                replace(d, target_id=trace_id, detail=f"{about}: {d.detail}" if d.detail else about)
                for d in result.decisions
            ]
        else:
            why = (
                f"ignored: pair {close.thread_id!r} has this trace's variant from a trace that "
                "started first; one trace of each variant is judged"
            )
            decisions = [
                replace(d, target_id=trace_id, outcome="filtered", detail=why, score_id=None)
                for d in result.decisions
            ]
        project = projects.get(trace_id, close.project_name)
        decisions = [replace(d, project_name=project) for d in decisions]
        record = TraceDecisions(trace_id=trace_id, project_name=project, decisions=decisions)
        sends.append((topics.decisions, trace_id.encode(), record.to_bytes(), None))
    return sends


def read_positions(
    app: faust.App, sources: SourceLog, topics: set[str], now: float
) -> dict[str, Position]:
    """How far this worker has read each partition of ``topics`` it owns (``SourceLog``).

    A partition paused (Faust pauses every one while its tables recover after a rebalance)
    is not fetched: the high watermark of its last fetch says nothing of what has arrived
    since, so it is not reported caught up, only read up to its last message."""
    consumer = cast(Consumer, app.consumer)  # Faust's, with its record of committed offsets
    committed = consumer._committed_offset
    paused = consumer._paused_partitions
    fetching = not app.rebalancing

    def highwater(tp: TP) -> int | None:
        return consumer.highwater(tp) if fetching and tp not in paused else None

    owned = [tp for tp in app.assignor.assigned_actives() if tp.topic in topics]
    assigned = {
        source_name(tp.topic, tp.partition): (highwater(tp), committed.get(tp)) for tp in owned
    }
    return sources.positions(assigned, now, last_fetched(consumer, owned))


def partition_count(consumer: Any, topic: str) -> int | None:
    """How many partitions ``topic`` has, from the consumer's cluster metadata (None: not
    known yet). Not Faust's ``topic_partitions``: it reads aiokafka's snapshot of the group's
    subscription, which only the group's leader takes (aiokafka ``GroupCoordinator``:
    ``_metadata_snapshot`` stays empty on every other member), so on every worker but one the
    sources were never expected and a partition taken over did not wait for them."""
    client = getattr(getattr(consumer, "_thread", None), "_consumer", None)
    cluster = getattr(getattr(client, "_client", None), "cluster", None)
    if cluster is None:
        return None
    partitions = cluster.partitions_for_topic(topic)
    return len(partitions) if partitions else None


def last_fetched(consumer: Consumer, partitions: list[TP]) -> dict[str, float]:
    """When aiokafka last had a fetch answered for each partition (epoch seconds), where
    known: the moment its high watermark is from."""
    client = getattr(getattr(consumer, "_thread", None), "_consumer", None)
    if client is None:
        return {}
    fetched = {}
    for tp in partitions:
        try:
            stamp = client.last_poll_timestamp(tp)
        except (AssertionError, AttributeError):  # not assigned to aiokafka (yet), or gone
            continue
        if stamp is not None:
            fetched[source_name(tp.topic, tp.partition)] = stamp / 1000
    return fetched


def inactivity_gap(ruleset: RuleSet, kind: str, settings: Settings) -> float:
    """The rule set's gap for threads of ``kind``, else the deployment's (a pair: how long
    its first trace waits for its partner)."""
    if kind == "pair":
        pair = ruleset.pair_spec()
        return pair.window_s if pair else settings.thread_inactivity_gap_s
    spec = ruleset.thread_spec(kind)
    return (spec.inactivity_gap_s if spec else None) or settings.thread_inactivity_gap_s


def register_thread_agent(
    app: faust.App,
    topics: Topics,
    scorer: Scorer,
    settings: Settings,
    observer: Observer | None = None,
    sources: SourceLog | None = None,
) -> ThreadProcessor:
    """The thread table, the agent that folds thread events into it and scores closes, and
    the timer that ticks every owned partition (after telling every partition how far this
    worker has read its sources); returns the processor."""
    observer = observer or Observer()
    gaps = {
        kind: inactivity_gap(scorer.ruleset, kind, settings)
        for kind in ("conversation", "session", "pair")
    }
    table = raw_table(app, TABLE_NAME, settings.topic_partitions)
    processor = ThreadProcessor(
        table,
        gaps=gaps,
        limits=ThreadLimits(
            max_turns=settings.thread_max_turns, max_bytes=settings.thread_max_bytes
        ),
        retention_s=settings.thread_retention_s,
        sessions_topic=settings.sessions_topic,
        unheard_wait_s=settings.unheard_source_wait_s,
        observer=observer,
    )
    observer.watch_threads(processor.open_threads, processor.pending_closes)
    publisher = Publisher(app)
    dead_letters = DeadLetters(topics.dlq, observer)
    events_topic = topics.thread_events.get_topic_name()
    in_flight: dict[tuple[str, str, int], asyncio.Task[None]] = {}
    # closes scored and published at once: a burst of closes (many threads idle together, or
    # pending closes resumed after a recovery) must not hand the producer thousands of sends
    # at once (every task blocked on a full batch is woken at each drain: quadratic)
    scoring = asyncio.Semaphore(max(1, min(settings.max_in_flight, CLOSES_AT_ONCE)))

    def owned() -> set[int]:
        return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == events_topic}

    source_topics = {*topics.traces.topics, *topics.sessions.topics}

    def expect_source_partitions() -> None:
        """Tell the processor the source topics' partitions (from the consumer's metadata)."""
        counts = {topic: partition_count(app.consumer, topic) for topic in source_topics}
        processor.expect({topic: count for topic, count in counts.items() if count})

    @table.on_recover
    async def rebuild_index() -> None:
        started = time.perf_counter()
        partitions = owned()
        expect_source_partitions()
        count = processor.rebuild(partitions)
        log.info(
            "thread index rebuilt: %d threads in partitions %s (%.2fs)",
            count,
            sorted(partitions),
            time.perf_counter() - started,
        )

    async def publish_close(close: ThreadClose) -> None:
        async with scoring:
            await score_and_publish(close)

    async def score_and_publish(close: ThreadClose) -> None:
        try:
            result = await scorer.score_thread(close)
            sends = close_outputs(topics, result, close)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("scoring close %d of %s failed", close.pending.close_seq, close.thread_id)
            result, sends = TraceResult([]), dead_letters.close_failure(close, exc, events_topic)
        await publisher.send_until_delivered(sends)
        for score in result.scores:
            observer.on_score_published(score)
        marker = published(close.kind, close.thread_id, close.pending.close_seq)
        await publisher.send_until_delivered([topics.to_threads(marker)])

    def schedule(close: ThreadClose) -> None:
        key = (close.kind, close.thread_id, close.pending.close_seq)
        if key in in_flight:
            return  # already being scored by this worker
        task = asyncio.create_task(publish_close(close))
        in_flight[key] = task
        task.add_done_callback(lambda _: in_flight.pop(key, None))

    async def set_aside(sends: list[Send]) -> None:
        """A thread event that could not be folded: counted, and its dead letter on the broker."""
        observer.on_thread_event("failed")
        await publisher.send_until_delivered(sends)

    @app.agent(topics.thread_events, concurrency=1, name="fold-threads")
    async def fold_threads(stream: StreamT[bytes]) -> None:
        await publisher.declare(topics.outputs())
        try:
            async for event in stream.events():
                message = event.message
                if not await still_ours(app, message, observer):
                    continue  # a record of a partition this worker may have lost (a long pause)
                # internal events, written by the workers only: one that fails is a bug (or a
                # stranger's record), dead-lettered with the error before the stream acks it
                # (at the next event), so that it is neither lost nor read again for ever
                try:
                    thread_event = ThreadEvent.from_bytes(event.value)
                except ValueError as exc:
                    await set_aside(dead_letters.invalid(message, exc, what="thread event"))
                    continue
                try:
                    closes = processor.apply(message.partition, thread_event)
                except Exception as exc:
                    await set_aside(dead_letters.engine_failure(message, exc, FOLDING))
                    continue
                for close in closes:
                    schedule(close)
        finally:
            for task in list(in_flight.values()):
                task.cancel()

    all_partitions = range(topics.thread_events.partitions or settings.topic_partitions)

    @app.timer(settings.thread_tick_s)
    async def send_ticks() -> None:
        """How far this worker has read its sources, into every partition; then the wall
        clock, into every partition this worker owns (each behind what is queued)."""
        now = time.time()
        expect_source_partitions()
        if sources is not None and (positions := read_positions(app, sources, source_topics, now)):
            await publisher.to_partitions(events_topic, progress(now, positions), all_partitions)
        await publisher.to_partitions(events_topic, tick(now), sorted(owned()))

    return processor
