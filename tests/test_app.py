"""The Faust app: broker URLs, topics named by the settings, thread events on their topic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import faust
import pytest
from prometheus_client import CollectorRegistry

from stream import __version__
from stream.app import Topics, broker_urls, create_app
from stream.kafka.mends import tansu
from stream.metrics import ScorerMetrics
from stream.settings import Settings
from stream.threads.events import ThreadEvent, published

# nothing listens here: building the app must not connect anywhere
NO_BROKER = "127.0.0.1:1"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Topic names and partitions come from the test, not the machine's SCORER_* variables."""
    for name in list(os.environ):
        if name.upper().startswith("SCORER_"):
            monkeypatch.delenv(name)


def build(tmp_path: Path, **overrides: Any) -> tuple[faust.App, Topics, CollectorRegistry]:
    registry = CollectorRegistry()
    settings = Settings(data_dir=tmp_path / "data", **overrides)
    app, topics = create_app(settings, NO_BROKER, ScorerMetrics(registry))
    return app, topics, registry


def test_broker_urls_for_kafka() -> None:
    assert broker_urls("k1:9092, k2:9093 ,,") == ["kafka://k1:9092", "kafka://k2:9093"]
    assert broker_urls("localhost:9092", "kafka") == ["kafka://localhost:9092"]


def test_broker_urls_for_the_embedded_broker() -> None:
    assert broker_urls(" 127.0.0.1:9092 ,", "tansu") == [f"{tansu.SCHEME}://127.0.0.1:9092"]
    assert tansu.SCHEME == "tansu"


def test_broker_urls_of_blanks_are_empty() -> None:
    assert broker_urls("") == []
    assert broker_urls(" , ,", "tansu") == []


def test_create_app_does_not_need_a_running_broker(tmp_path: Path) -> None:
    app, _, _ = build(tmp_path, app_id="scorer-test")

    assert app.conf.id == "scorer-test"
    assert [str(url) for url in app.conf.broker] == ["kafka://127.0.0.1:1"]
    assert app.conf.topic_partitions == 4
    # nothing is written to the data dir until the worker starts
    assert not (tmp_path / "data").exists()


def test_create_app_uses_the_embedded_broker_transport(tmp_path: Path) -> None:
    app, _, _ = build(tmp_path, broker_kind="tansu")

    assert [str(url) for url in app.conf.broker] == ["tansu://127.0.0.1:1"]


def test_topics_have_the_configured_names(tmp_path: Path) -> None:
    _, topics, _ = build(
        tmp_path,
        app_id="eu",
        traces_topic="t-in",
        sessions_topic="s-in",
        scores_topic="s-out",
        decisions_topic="d-out",
        dlq_topic="dead",
        topic_partitions=6,
        otlp_topic="",  # off: the trace agent reads the traces topic alone
    )

    assert topics.traces.get_topic_name() == "t-in"
    assert topics.sessions.get_topic_name() == "s-in"
    assert topics.scores.get_topic_name() == "s-out"
    assert topics.decisions.get_topic_name() == "d-out"
    assert topics.dlq.get_topic_name() == "dead"
    assert topics.thread_events.get_topic_name() == "eu-thread-events"
    assert topics.thread_events.partitions == 6
    assert topics.thread_events.internal is True
    assert topics.traces.internal is False


def test_otlp_topics_feed_the_trace_agent_which_sees_them_as_the_spans_topic(
    tmp_path: Path,
) -> None:
    _, topics, _ = build(tmp_path, app_id="eu", traces_topic="t-in", topic_partitions=6)

    assert topics.otlp is not None and topics.otlp.get_topic_name() == "otlp_spans"
    assert topics.otlp.internal is False
    assert topics.otlp_assembly is not None and topics.otlp_traces is not None
    for internal, name in [
        (topics.otlp_assembly, "eu-otlp-assembly"),
        (topics.otlp_traces, "eu-otlp-traces"),
    ]:
        assert internal.get_topic_name() == name
        assert (internal.partitions, internal.internal) == (6, True)
    assert list(topics.traces.topics) == ["t-in", "eu-otlp-traces"]
    assert topics.input_topic("eu-otlp-traces") == "otlp_spans"
    assert topics.input_topic("t-in") == "t-in"


def test_thread_events_topic_can_be_named(tmp_path: Path) -> None:
    _, topics, _ = build(tmp_path, thread_events_topic="threads-internal")

    assert topics.thread_events.get_topic_name() == "threads-internal"


def test_topics_carry_raw_bytes(tmp_path: Path) -> None:
    _, topics, _ = build(tmp_path)

    declared: list[Any] = [topics.traces, topics.sessions, *topics.outputs()]
    for topic in declared:
        assert topic.key_type is bytes
        assert topic.value_type is bytes
        assert topic.key_serializer == "raw"
        assert topic.value_serializer == "raw"


def test_outputs_are_the_topics_the_worker_writes(tmp_path: Path) -> None:
    _, topics, _ = build(tmp_path)

    # + the internal topic judged scores go to for the labels join (SCORER_LABELS_TOPIC set)
    assert topics.outputs() == [
        topics.scores,
        topics.decisions,
        topics.dlq,
        topics.thread_events,
        topics.agreement_events,
    ]
    assert topics.traces not in topics.outputs()
    assert topics.sessions not in topics.outputs()


def test_to_threads_sends_the_event_keyed_by_its_thread(tmp_path: Path) -> None:
    _, topics, _ = build(tmp_path)
    event = ThreadEvent(type="end", kind="session", thread_id="s-1", end_key="end-9")

    topic, key, value, headers = topics.to_threads(event)

    assert topic is topics.thread_events
    assert key == b"s-1"  # a session by its session id: where its producer puts it
    assert value == event.to_bytes()
    assert ThreadEvent.from_bytes(value) == event
    assert headers is None


def test_to_threads_with_stand_in_topics() -> None:
    stand_ins = [object() for _ in range(6)]
    topics = Topics(*stand_ins)  # type: ignore[arg-type]
    event = published("conversation", "th-4", 2)

    assert topics.to_threads(event) == (stand_ins[5], b"conversation/th-4", event.to_bytes(), None)
    assert topics.outputs() == [stand_ins[1], stand_ins[2], stand_ins[3], stand_ins[5]]


def test_create_app_reports_the_worker_version_before_rules_load(tmp_path: Path) -> None:
    _, _, registry = build(tmp_path)

    labels = {"version": __version__, "ruleset": "unloaded"}
    assert registry.get_sample_value("scorer_worker_info", labels) == 0.0


def test_apps_can_be_built_more_than_once(tmp_path: Path) -> None:
    first, first_topics, _ = build(tmp_path / "a", app_id="one")
    second, second_topics, _ = build(tmp_path / "b", app_id="two")

    assert first is not second
    assert (first.conf.id, second.conf.id) == ("one", "two")
    assert first_topics.thread_events.get_topic_name() == "one-thread-events"
    assert second_topics.thread_events.get_topic_name() == "two-thread-events"


def test_faust_keeps_no_statistics_for_each_record(tmp_path: Path) -> None:
    """Faust's monitor counts and times every record and table access (about 7 µs a record);
    the worker's monitor keeps only its commit, send and rebalance figures."""
    app, _ = create_app(
        Settings(data_dir=tmp_path), "127.0.0.1:9092", ScorerMetrics(CollectorRegistry())
    )
    monitor = app.monitor
    tp = faust.types.TP("traces", 0)
    message = faust.types.Message(
        topic="traces",
        partition=0,
        offset=7,
        timestamp=0.0,
        timestamp_type=0,
        headers=[],
        key=b"k",
        value=b"v",
        checksum=None,
    )
    monitor.on_message_in(tp, 7, message)
    monitor.on_message_out(tp, 7, message)
    assert monitor.messages_received_total == 0 and monitor.tp_read_offsets == {}
    monitor.on_stream_event_in(tp, 7, None, None)  # type: ignore[arg-type]
    assert list(monitor.stream_inbound_time) == [tp]  # Faust's stalled-stream check reads it
    assert monitor.events_total == 0
    state = monitor.on_commit_initiated(None)  # type: ignore[arg-type]  # (unread)
    monitor.on_commit_completed(None, state)  # type: ignore[arg-type]
    assert len(monitor.commit_latency) == 1  # what is not per record is still kept
