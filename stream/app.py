"""The Faust app, its topics and the /metrics page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust

from . import __version__, metrics
from .partitioning import cached_murmur2_partitioner
from .settings import Settings


def broker_urls(bootstrap: str, kind: str = "kafka") -> list[str]:
    """``host1:9092,host2:9092`` -> Faust broker URLs (``tansu://`` for the embedded broker)."""
    if kind == "tansu":
        from . import tansu  # registers the transport

        kind = tansu.SCHEME
    return [f"{kind}://{h.strip()}" for h in bootstrap.split(",") if h.strip()]


@dataclass
class Topics:
    traces: Any
    scores: Any
    decisions: Any
    dlq: Any
    sessions: Any = None
    thread_events: Any = None

    def outputs(self) -> list[Any]:
        """Topics the worker writes to (declared up front)."""
        return [
            t for t in (self.scores, self.decisions, self.dlq, self.thread_events) if t is not None
        ]


def create_app(settings: Settings, bootstrap: str) -> tuple[faust.App, Topics]:
    """Build the Faust app and declare its topics (raw bytes: we validate ourselves)."""
    app = faust.App(
        settings.app_id,
        broker=broker_urls(bootstrap, settings.broker_kind),
        store="memory://",
        datadir=str(settings.data_dir),
        web_port=settings.web_port,
        web_host=settings.web_host,
        web_bind=settings.web_host,
        topic_partitions=settings.topic_partitions,
        topic_allow_declare=True,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_partitioner=cached_murmur2_partitioner,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 3),
        broker_commit_interval=1.0,
        stream_wait_empty=True,
        table_standby_replicas=0,  # the memory store drops standby data after each recovery
        web_enabled=True,
    )

    def raw_topic(name: str, **options: Any) -> Any:
        return app.topic(
            name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            **options,
        )

    topics = Topics(
        traces=raw_topic(settings.traces_topic),
        scores=raw_topic(settings.scores_topic),
        decisions=raw_topic(settings.decisions_topic),
        dlq=raw_topic(settings.dlq_topic),
        sessions=raw_topic(settings.sessions_topic),
        # internal: turns of one thread meet in one partition, co-partitioned with the table
        thread_events=raw_topic(
            settings.thread_events_topic_name, partitions=settings.topic_partitions, internal=True
        ),
    )

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        body, content_type = metrics.exposition()
        return web.bytes(body, content_type=content_type)

    metrics.WORKER_INFO.labels(version=__version__, ruleset="unloaded").set(0)
    return app, topics
