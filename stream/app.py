"""The Faust app, its topics and the /metrics page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TableT, TopicT
from faust.web import Request, Response, View

from . import __version__
from .delivery.outbox import Outbox
from .delivery.publisher import Send
from .errors import ScorerError
from .kafka.mends import rocksdb_store, snapshot_store
from .kafka.mends.consumer import producer_batch_cap, report_to
from .kafka.mends.monitor import QuietMonitor
from .kafka.mends.partitioning import cached_murmur2_partitioner
from .kafka.mends.tables import PromptTableManager
from .metrics import ScorerMetrics
from .settings import Settings
from .threads.events import ThreadEvent


def broker_urls(bootstrap: str, kind: str = "kafka") -> list[str]:
    """``host1:9092,host2:9092`` -> Faust broker URLs (``tansu://`` for the embedded broker).
    Both transports are Faust's aiokafka one with its at-least-once defects mended
    (``kafka/mends/consumer.py``, which takes over ``kafka://`` when imported)."""
    if kind == "tansu":
        from .kafka.mends import tansu  # registers the transport

        kind = tansu.SCHEME
    return [f"{kind}://{h.strip()}" for h in bootstrap.split(",") if h.strip()]


@dataclass
class Topics:
    """The worker's topics (Faust topic objects; raw bytes in and out)."""

    traces: TopicT
    scores: TopicT
    decisions: TopicT
    dlq: TopicT
    sessions: TopicT
    thread_events: TopicT
    # OpenTelemetry input (None when off): the spans topic, the internal topic a trace's
    # spans are assembled in, and the internal topic assembled traces go to (the trace
    # agent reads it with ``traces``)
    otlp: TopicT | None = None
    otlp_assembly: TopicT | None = None
    otlp_traces: TopicT | None = None
    # human labels (read with the scores topic), the joins out, and the internal topics the
    # join table and the measuring agent read (design record 26)
    labels: TopicT | None = None
    agreement: TopicT | None = None
    agreement_events: TopicT | None = None
    agreement_measure: TopicT | None = None
    # internal topic -> the input topic its traces came from (what rule filters see)
    seen_as: dict[str, str] = field(default_factory=dict)

    def input_topic(self, topic: str) -> str:
        """The input topic a trace read from ``topic`` came in on."""
        return self.seen_as.get(topic, topic)

    def outputs(self) -> list[TopicT]:
        """Topics the worker writes to (declared up front)."""
        joins = [self.agreement_events] if self.agreement_events is not None else []
        return [self.scores, self.decisions, self.dlq, self.thread_events, *joins]

    def outbox(self) -> Outbox:
        """Where a scored target's records go: scores, decisions, and the join's events."""
        return Outbox(self.scores, self.decisions, self.agreement_events)

    def to_threads(self, event: ThreadEvent) -> Send:
        """``event`` on the thread-events topic, keyed by its thread (``placement_key``)."""
        return (self.thread_events, event.placement, event.to_bytes(), None)


def raw_table(app: faust.App, name: str, partitions: int) -> TableT[bytes, bytes]:
    """A changelog-backed table of bytes (the raw codec: its users serialise themselves),
    co-partitioned with the internal topic of ``partitions`` that feeds it."""
    return app.Table(name, default=None, partitions=partitions, key_type=bytes, value_type=bytes)


def create_app(
    settings: Settings, bootstrap: str, metrics: ScorerMetrics | None = None
) -> tuple[faust.App, Topics]:
    """Build the Faust app and declare its topics (raw bytes: we validate ourselves); its
    /metrics page serves ``metrics`` (default: the process's own)."""
    metrics = metrics or ScorerMetrics.default()
    if settings.store == "rocksdb":
        try:
            import rocksdict  # noqa: F401 - Faust's RocksDB store reads it
        except ImportError:
            raise ScorerError(
                "SCORER_STORE=rocksdb needs rocksdict (a dependency of llm-trace-scorer: "
                "pip install rocksdict), or SCORER_STORE=memory"
            ) from None
        rocksdb_store.configure(settings.memory_mb)  # one block cache for every database
    app = faust.App(
        settings.app_id,
        broker=broker_urls(bootstrap, settings.broker_kind),
        # Faust's stores: RocksDB reading raw tables as they are, memory with a snapshot at a
        # clean stop (design record 34)
        store=f"{rocksdb_store.SCHEME}://"
        if settings.store == "rocksdb"
        else f"{snapshot_store.SCHEME}://",
        TableManager=PromptTableManager,  # every table is declared before the worker starts
        Monitor=QuietMonitor,  # no statistics kept for each record (the worker exports its own)
        datadir=str(settings.data_dir),
        web_port=settings.web_port,
        web_host=settings.web_host,
        web_bind=settings.web_host,
        topic_partitions=settings.topic_partitions,
        topic_allow_declare=True,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger=settings.producer_linger_ms / 1000,
        # tests only: one record per batch, so that the embedded broker's end offsets (the last
        # batch's base offset + 1) are right for the transport a real cluster gets
        producer_max_batch_size=producer_batch_cap() or 16384,
        producer_partitioner=cached_murmur2_partitioner,
        broker_session_timeout=settings.session_timeout(),
        broker_heartbeat_interval=min(3.0, settings.session_timeout() / 3),
        # static membership (record 53): None, a dynamic member, unless SCORER_INSTANCE_ID
        consumer_group_instance_id=settings.instance_id or None,
        broker_commit_interval=1.0,
        stream_wait_empty=True,
        # the memory store drops standby data after each recovery; none for either store
        table_standby_replicas=0,
        web_enabled=True,
        broker_credentials=settings.kafka.faust_credentials(),
    )

    def raw_topic(*names: str, **options: Any) -> TopicT:
        return app.topic(
            *names,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            **options,
        )

    otlp: dict[str, Any] = {}
    traces = raw_topic(settings.traces_topic)
    if settings.otlp_topic:
        internal = {"partitions": settings.topic_partitions, "internal": True}
        otlp = {
            "otlp": raw_topic(settings.otlp_topic),
            # a trace's spans meet in one partition, co-partitioned with the table
            "otlp_assembly": raw_topic(settings.otlp_assembly_topic, **internal),
            "otlp_traces": raw_topic(settings.otlp_traces_topic, **internal),
            "seen_as": {settings.otlp_traces_topic: settings.otlp_topic},
        }
        traces = raw_topic(settings.traces_topic, settings.otlp_traces_topic)
    agreement: dict[str, Any] = {}
    if settings.labels_topic:  # "" turns the labels join off
        internal_joins = {"partitions": settings.topic_partitions, "internal": True}
        agreement = {
            "labels": raw_topic(settings.labels_topic),
            "agreement": raw_topic(settings.agreement_topic),
            # the join reads a label's earlier scores back from it (design record 36): kept a
            # day longer than a label waits for them
            "agreement_events": raw_topic(
                settings.agreement_events_topic,
                retention=settings.label_retention_s + 86_400.0,
                **internal_joins,
            ),
            "agreement_measure": raw_topic(
                settings.agreement_measure_topic, partitions=1, internal=True
            ),
        }
    topics = Topics(
        traces=traces,
        scores=raw_topic(settings.scores_topic),
        decisions=raw_topic(settings.decisions_topic),
        dlq=raw_topic(settings.dlq_topic),
        sessions=raw_topic(settings.sessions_topic),
        # internal: turns of one thread meet in one partition, co-partitioned with the table
        thread_events=raw_topic(
            settings.thread_events_topic_name, partitions=settings.topic_partitions, internal=True
        ),
        **otlp,
        **agreement,
    )

    @app.page("/metrics")
    async def metrics_page(web: View, request: Request) -> Response:
        body, content_type = metrics.exposition()
        return web.bytes(body, content_type=content_type)

    metrics.worker_info.labels(version=__version__, ruleset="unloaded").set(0)
    report_to(app, metrics)  # the consumer's offset gaps and held commits
    return app, topics
