"""The no-Collector recipe (``examples/otel_sdk_to_kafka.py``, docs/operations.md): an app's
spans, made by the real OpenTelemetry SDK and exported through a ``BatchSpanProcessor`` by the
example's ``KafkaSpanExporter`` straight to the spans topic, one record per trace keyed by its
trace id (or several, when a trace does not fit in one), are assembled and scored by a worker,
its GenAI attributes read as the trace's input, output, thread and usage."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from stream.kafka.broker import EmbeddedBroker
from stream.otlp.decode import decode

from .harness import Names, Worker, read, read_scores

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "otel_sdk_to_kafka.py"


def load_example() -> ModuleType:
    """The example as a module, as an app would import it."""
    spec = importlib.util.spec_from_file_location("otel_sdk_to_kafka", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_app(
    recipe: ModuleType, service: str, questions: dict[str, str], **exporter: Any
) -> tuple[list[str], Any]:
    """An app of ``service`` answering each conversation's question, its spans exported by
    the recipe; the trace ids, and the exporter."""
    kafka = recipe.KafkaSpanExporter(**exporter)
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(kafka))
    tracer = provider.get_tracer(f"{service}.support")
    ids = [recipe.answer(tracer, conversation, q) for conversation, q in questions.items()]
    provider.shutdown()  # the batch processor exports what it holds, then the exporter stops
    return ids, kafka


async def test_sdk_spans_produced_without_a_collector_are_assembled_and_scored(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    recipe = load_example()
    workers.append(
        Worker(
            broker.bootstrap,
            names,
            tmp_path,
            SCORER_PACKS='["critique"]',  # its pleasantries check needs no judge
            SCORER_OTLP_GRACE_S="1",
        ).start()
    )
    shop, exporter = await asyncio.to_thread(
        run_app,
        recipe,
        "bike-shop",
        {"conv-brakes": "Why do my disc brakes squeal?", "conv-chain": "How often to oil a chain?"},
        bootstrap_servers=broker.bootstrap,
        topic=names.otlp,
    )
    # a trace too large for one record goes in several, under its one key
    (canary,), small = await asyncio.to_thread(
        run_app,
        recipe,
        "bike-shop-canary",
        {"conv-gears": "My gears skip under load."},
        bootstrap_servers=broker.bootstrap,
        topic=names.otlp,
        max_record_bytes=1,
    )
    assert exporter.failed_batches == small.failed_batches == 0

    sent = await read(broker.bootstrap, names.otlp, until=lambda rs: len(rs) >= 4)
    spans_by_key: dict[bytes, list[int]] = {}
    for record in sent:
        spans = decode(record.value)
        assert {s.trace_id.encode() for s in spans} == {record.key}
        spans_by_key.setdefault(record.key, []).append(len(spans))
    assert spans_by_key == {
        shop[0].encode(): [2],
        shop[1].encode(): [2],
        canary.encode(): [1, 1],
    }

    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: len({s["target_id"] for s in rs if s["rule_id"] == "pleasantries"}) >= 3,
        timeout=120,
    )
    pleasantries = {s["target_id"]: s for s in scores if s["rule_id"] == "pleasantries"}
    assert set(pleasantries) == {*shop, canary}
    for score in pleasantries.values():
        assert (score["status"], score["raw_value"], score["label"]) == (
            "ok",
            2.0,
            "Minor Issues",
        )
        assert score["reason"] == '2 pleasantries: "great question", "i hope this helps"'
    assert pleasantries[canary]["project_name"] == "bike-shop-canary"

    assembled = await read(
        broker.bootstrap, f"{names.group}-otlp-traces", until=lambda rs: len(rs) >= 3
    )
    documents = {doc["id"]: doc for doc in (orjson.loads(r.value) for r in assembled)}
    brakes = documents[shop[0]]
    assert brakes["project_name"] == "bike-shop"
    assert brakes["thread_id"] == "conv-brakes"
    assert brakes["input"]["messages"] == [
        {"role": "system", "content": recipe.SYSTEM},
        {"role": "user", "content": "Why do my disc brakes squeal?"},
    ]
    reply = recipe.model_reply("Why do my disc brakes squeal?")
    assert brakes["output"]["messages"] == [{"role": "assistant", "content": reply}]
    assert brakes["usage"]["completion_tokens"] == len(reply.split())
    for trace in (*shop, canary):
        assert documents[trace]["otlp"] == {
            "span_count": 2,
            "root_missing": False,
            "dropped_spans": 0,
            "cut_spans": 0,
        }
