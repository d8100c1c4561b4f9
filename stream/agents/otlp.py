"""The OpenTelemetry agents: spans in, whole traces out to the trace agent.

1. ``read-spans`` (a forwarder, ``forward.py``) consumes the spans topic (the Collector's Kafka exporter: one export batch
   per record, ``otlp_proto`` or ``otlp_json``), decodes each record and forwards the spans
   of each trace, keyed by trace id, to the internal assembly topic; a record that is not an
   export batch goes to the DLQ. Offsets are acked in order once the forwards are on the
   broker.
2. ``assemble-traces`` consumes the assembly topic and is the only writer of the
   ``otlp_traces`` table, co-partitioned with it: spans are gathered per trace
   (``TraceAssembler``), and at each tick the traces now whole are read as the trace model
   (``spans.trace_document``) and produced, keyed by trace id, to the internal traces topic
   that the trace agent reads alongside the traces topic, with the Kafka time of its last
   span record (so the threads it joins close by the data's times). A trace leaves the table (for a
   small marker) only once it is on the broker: a worker that dies in between assembles it
   again after recovery (the same score ids).
3. A timer on every worker tells every assembly partition how far this worker has read
   each spans partition it owns, and ticks the partitions it owns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from datetime import datetime

import faust
import orjson
from faust.types import Message, TopicT

from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher, Send
from ..kafka.mends.membership import still_ours
from ..observer import Observer
from ..otlp.assembler import TraceAssembler, Whole
from ..otlp.decode import decode
from ..otlp.document import trace_document
from ..otlp.events import AssemblyEvent, progress, spans_events, tick
from ..otlp.spans import Span
from ..settings import Settings
from ..sources.log import Position, SourceLog, source_name
from .forward import register_forwarder
from .keyed_table import KeyedTable, KeyedTableAgent

log = logging.getLogger(__name__)

TABLE_NAME = "otlp_traces"
BACKLOG_SAID_AFTER_S = 60.0  # a spans partition read this far behind is said in the log


def forwards(assembly: TopicT, spans: Iterable[Span], arrival: float) -> list[Send]:
    """The spans of one export record as assembly events, keyed by trace id."""
    by_trace: dict[str, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    return [
        (assembly, trace_id.encode(), value, None)
        for trace_id, of_trace in by_trace.items()
        for value in spans_events(trace_id, [s.stored() for s in of_trace], arrival)
    ]


def register_otlp_agents(
    app: faust.App, topics: Topics, settings: Settings, observer: Observer | None = None
) -> TraceAssembler:
    """The spans table, the agents that fill it and assemble traces, and their timer
    (``SpanAgents``); returns the assembler."""
    agents = SpanAgents(app, topics, settings, observer)
    agents.register()
    return agents.assembler


class SpanAgents(KeyedTableAgent[AssemblyEvent]):
    """``read-spans`` forwards each export record's spans to the assembly topic;
    ``assemble-traces`` gathers them per trace in the ``otlp_traces`` table and publishes
    each whole trace to the internal traces topic; a clock reports how far this worker has
    read the spans topic and ticks the partitions it owns."""

    rebuilt_said = "traces being gathered from spans: %d in partitions %s (%.2fs)"

    def __init__(
        self, app: faust.App, topics: Topics, settings: Settings, observer: Observer | None = None
    ) -> None:
        assert topics.otlp and topics.otlp_assembly and topics.otlp_traces, "OTLP input is off"
        self.app = app
        self.topics = topics
        self.settings = settings
        self.spans_topic, self.assembly, self.assembled = (
            topics.otlp,
            topics.otlp_assembly,
            topics.otlp_traces,
        )
        self.observer = observer = observer or Observer()
        self.publisher = publisher = Publisher(app)
        self.dead_letters = dead_letters = DeadLetters(topics.dlq, observer)
        self.keyed = traces = KeyedTable[AssemblyEvent](
            app,
            table_name=TABLE_NAME,
            events=self.assembly,
            partitions=settings.topic_partitions,
            publisher=publisher,
            dead_letters=dead_letters,
            observer=observer,
        )
        self.assembler = assembler = TraceAssembler(
            traces.writes,
            grace_s=settings.otlp_grace_s,
            max_wait_s=settings.otlp_max_wait_s,
            max_spans=settings.otlp_max_spans,
            max_bytes=settings.otlp_max_bytes,
            retention_s=settings.otlp_retention_s,
            unheard_wait_s=settings.unheard_source_wait_s,
        )
        observer.watch_otlp(assembler.gathering, lambda: assembler.clock_lag(time.time()))
        self.sources = SourceLog()
        self.spans_name = self.spans_topic.get_topic_name()
        self.source_topics = {self.spans_name}
        self.said = 0.0  # when a backlog was last said in the log

    def register(self) -> None:
        """The forwarder of the spans topic, the assembling agent, and their clock."""
        topics = self.topics
        register_forwarder(
            self.app,
            self.spans_topic,
            "read-spans",
            self.convert,
            declare=[self.assembly, self.assembled, topics.dlq],
            dead_letters=self.dead_letters,
            max_in_flight=self.settings.max_in_flight,
            sources=self.sources,
            observer=self.observer,
        )
        self.keyed.on_recover(self.rebuild)
        self.keyed.agent(
            "assemble-traces",
            decode=AssemblyEvent.from_bytes,
            what="assembly event",
            apply=self.assemble,
            doing="assembling traces",
            declare=[self.assembled, topics.dlq],
        )
        self.keyed.clock(
            self.settings.thread_tick_s,
            progress=self.positions,
            tick=tick,
            after=self.report_backlog,
        )

    def expect(self, counts: dict[str, int]) -> None:
        if count := counts.get(self.spans_name):
            self.assembler.expect(source_name(self.spans_name, p) for p in range(count))

    def rebuild_index(self, partitions: set[int]) -> int:
        return self.assembler.rebuild(partitions, time.time())

    def report(self, now: float, read: dict[str, Position]) -> bytes:
        return progress(now, {source: position[1] for source, position in read.items()})

    def convert(self, message: Message) -> tuple[list[Send], datetime | None]:
        try:
            spans = decode(message.value, self.settings.otlp_encoding)
        except ValueError as exc:
            return self.dead_letters.invalid(message, exc, what="OTLP export batch"), None
        return forwards(self.assembly, spans, message.timestamp), None

    def as_trace(self, whole: Whole) -> list[Send]:
        try:
            document = trace_document(whole.spans)
            document["otlp"] = whole.summary()
            value = orjson.dumps(document)
        except Exception as exc:  # a bug: keep the spans, with the error
            log.exception("reading the spans of trace %s as a trace failed", whole.trace_id)
            stored = [span.stored() for span in whole.spans]
            kept = orjson.dumps({"trace_id": whole.trace_id, "spans": stored})
            return self.dead_letters.kept(
                whole.trace_id, kept, self.spans_name, "reading spans as a trace", exc
            )
        return [(self.assembled, whole.trace_id.encode(), value, None)]

    async def publish(self, wholes: list[Whole]) -> None:
        # each at the Kafka time of its last span record, not now: a thread the trace joins
        # closes by the data's times, on a backlog as live
        send = self.publisher.send_until_delivered
        await asyncio.gather(*(send(self.as_trace(w), timestamp=w.arrival) for w in wholes))
        for whole in wholes:
            self.observer.on_otlp_trace("missing" if whole.root_missing else "ended")

    async def assemble(self, message: Message, item: AssemblyEvent) -> None:
        partition, assembler = message.partition, self.assembler
        if item.type == "spans":
            outcomes = assembler.add(partition, item.trace_id, item.spans, item.arrival)
            for outcome, count in outcomes.items():
                self.observer.on_otlp_spans(outcome, count)
        elif item.type == "progress":
            assembler.progress(partition, item.positions, item.arrival)
        elif wholes := assembler.due(partition, item.arrival):
            await self.publish(wholes)
            # marked done (a table write) only if the partition is still this worker's
            # after the sends, which can outlast a pause or a rebalance
            if await still_ours(self.app, message, self.observer):
                for whole in wholes:
                    assembler.done(whole.trace_id)

    def report_backlog(self, now: float) -> None:
        """Say (once a minute at most) when a spans partition's backlog holds traces back,
        or traces wait for a report on a spans partition after a recovery."""
        assembler = self.assembler
        if now - self.said <= 60 or not self.keyed.owned():
            return
        if unheard := assembler.unheard(now):
            if now - assembler.waited_since() > BACKLOG_SAID_AFTER_S:
                self.said = now
                log.info("traces from spans wait for a report on %s", ", ".join(unheard))
            return
        slowest = assembler.slowest()
        if slowest and now - slowest[1] > BACKLOG_SAID_AFTER_S:
            self.said = now
            source, read = slowest
            if read <= 0.0:
                log.info("traces from spans wait for %s: not read yet (a backlog)", source)
            else:
                log.info(
                    "traces from spans wait for %s: read up to %.0f s ago (a backlog)",
                    source,
                    now - read,
                )
