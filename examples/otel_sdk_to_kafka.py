"""OpenTelemetry spans straight from your app to the scorer, without a Collector.

    python examples/otel_sdk_to_kafka.py --bootstrap 127.0.0.1:9092

``KafkaSpanExporter`` is an OpenTelemetry SDK span exporter: it encodes each batch of finished
spans as OTLP protobuf (an ``ExportTraceServiceRequest``, with the SDK's own OTLP encoder, what
the Collector's Kafka exporter writes as ``otlp_proto``) and produces it to the scorer's spans
topic (``otlp_spans``, the worker's ``SCORER_OTLP_TOPIC``): one record per trace, keyed by its
trace id in 32 hex digits (as the Collector's ``partition_traces_by_id`` does), so a trace's
spans stay in one partition. The worker gathers a trace's spans from every record they came in
and scores the trace once its root span has ended (``docs/operations.md``, OpenTelemetry input).

In your app, put it behind a ``BatchSpanProcessor`` (it exports from a thread of its own)::

    provider.add_span_processor(BatchSpanProcessor(KafkaSpanExporter("broker:9092")))

``export`` returns once the broker has acknowledged every record (``acks="all"``); a broker
that cannot be reached makes the batch fail, logged, and the app goes on. Keyword arguments
go to aiokafka's producer (``security_protocol``, ``sasl_mechanism``, ``ssl_context``...).

Run as a script, a tiny support bot answers one question: a root span and a model-call span
with the GenAI semantic conventions' attributes (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.conversation.id``, ``gen_ai.usage.*``), which the scorer
reads as the trace's input, output, thread and usage. A real app gets these from its
instrumentation (``opentelemetry-instrumentation-openai-v2`` with message capture on); here
they are set by hand so the example runs offline. Its answer carries two pleasantries, so the
critique pack's ``pleasantries`` check scores it without a judge.

Needs ``pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-common aiokafka``
(not the scorer's package).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import logging
import os
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Tracer

try:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
except ImportError as exc:  # the SDK's OTLP encoder is a package of its own
    raise ImportError("pip install opentelemetry-exporter-otlp-proto-common") from exc

log = logging.getLogger(__name__)
T = TypeVar("T")

# under Kafka's default 1 MB message size (the broker's message.max.bytes, aiokafka's
# max_request_size), with room for the record's own overhead
MAX_RECORD_BYTES = 900_000


def records(
    spans: Sequence[ReadableSpan], max_bytes: int = MAX_RECORD_BYTES
) -> list[tuple[bytes, bytes]]:
    """An export batch as Kafka records (key, value): an ``ExportTraceServiceRequest`` per
    trace, keyed by its trace id; a trace whose spans do not fit in ``max_bytes`` goes in
    several records (the worker gathers them), a span too large on its own as it is."""
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.context.trace_id if span.context else 0, []).append(span)
    return [
        (f"{trace_id:032x}".encode(), value)
        for trace_id, of_trace in by_trace.items()
        for value in _encoded(of_trace, max_bytes)
    ]


def _encoded(spans: list[ReadableSpan], max_bytes: int) -> list[bytes]:
    value = bytes(encode_spans(spans).SerializeToString())
    if len(value) <= max_bytes or len(spans) == 1:
        return [value]
    half = len(spans) // 2
    return _encoded(spans[:half], max_bytes) + _encoded(spans[half:], max_bytes)


class KafkaSpanExporter(SpanExporter):
    """Finished spans, OTLP-encoded, to a Kafka topic. The SDK calls it from its own threads;
    aiokafka runs on an event loop of the exporter's own, in a thread of its own."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = "otlp_spans",
        *,
        timeout_s: float = 30.0,
        max_record_bytes: int = MAX_RECORD_BYTES,
        **producer_options: Any,
    ) -> None:
        self.topic = topic
        self.timeout_s = timeout_s
        self.max_record_bytes = max_record_bytes
        self._options = {"bootstrap_servers": bootstrap_servers, "acks": "all", **producer_options}
        self._producer: AIOKafkaProducer | None = None
        self._starting = asyncio.Lock()  # exports from several threads start one producer
        self._stopped = False
        self.failed_batches = 0  # batches that could not be exported (each one logged)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Produce ``spans`` and wait for the broker's acknowledgements."""
        if self._stopped:
            return SpanExportResult.FAILURE
        try:
            self._call(self._send(records(spans, self.max_record_bytes)))
        except Exception:  # an exporter never raises into the app: the batch fails, logged
            log.exception("exporting %d spans to Kafka topic %s failed", len(spans), self.topic)
            self.failed_batches += 1
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # export returns once the broker has the records: nothing waits here

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._call(self._stop())
        except Exception:
            log.exception("stopping the Kafka producer failed")
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self.timeout_s)
            if not self._thread.is_alive():
                self._loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def _send(self, batch: list[tuple[bytes, bytes]]) -> None:
        # the exporter's own Kafka calls are not traced (an instrumented aiokafka would
        # otherwise make spans of exporting spans), as the SDK's batch processor does
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            producer = await self._started()
            sent = [await producer.send(self.topic, key=key, value=value) for key, value in batch]
            await asyncio.gather(*sent)
        finally:
            detach(token)

    async def _started(self) -> AIOKafkaProducer:
        """The producer, started at the first export (and again after a failed start)."""
        async with self._starting:
            if self._producer is None:
                producer = AIOKafkaProducer(**self._options)
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer
            return self._producer

    async def _stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None


# --- the demo app ----------------------------------------------------------------------------

MODEL = "gpt-4o-mini"
SYSTEM = "You are the support assistant of a bicycle shop. Answer in two sentences."


def model_reply(question: str) -> str:
    """The demo's stand-in for a model call (a real app calls its model here)."""
    return (
        "Great question! Squealing disc brakes are usually contaminated pads: clean the rotor "
        "with isopropyl alcohol and sand the pads lightly. I hope this helps."
    )


def _text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def answer(tracer: Tracer, conversation_id: str, question: str) -> str:
    """Answer ``question`` as one trace (a root span, and a model-call span with the GenAI
    conventions' attributes); its trace id."""
    with tracer.start_as_current_span("support-chat") as root:
        root.set_attribute("gen_ai.conversation.id", conversation_id)
        with tracer.start_as_current_span(f"chat {MODEL}", kind=SpanKind.CLIENT) as call:
            reply = model_reply(question)
            call.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": MODEL,
                    "gen_ai.conversation.id": conversation_id,
                    # structured values are JSON strings on a span (attributes are flat)
                    "gen_ai.system_instructions": json.dumps([{"type": "text", "content": SYSTEM}]),
                    "gen_ai.input.messages": json.dumps([_text("user", question)]),
                    "gen_ai.output.messages": json.dumps([_text("assistant", reply)]),
                    "gen_ai.usage.input_tokens": len(f"{SYSTEM} {question}".split()),
                    "gen_ai.usage.output_tokens": len(reply.split()),
                }
            )
        return f"{root.get_span_context().trace_id:032x}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        help="host:port (default: KAFKA_BOOTSTRAP_SERVERS, else the embedded broker's port)",
    )
    parser.add_argument("--topic", default="otlp_spans", help="the worker's SCORER_OTLP_TOPIC")
    parser.add_argument("--service", default="bike-shop", help="service.name: the project")
    parser.add_argument("--conversation", default="conversation-1", help="gen_ai.conversation.id")
    parser.add_argument("--question", default="Why do my disc brakes squeal?")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    provider = TracerProvider(resource=Resource.create({"service.name": args.service}))
    exporter = KafkaSpanExporter(args.bootstrap, args.topic)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace_id = answer(provider.get_tracer("bike-shop.support"), args.conversation, args.question)
    provider.shutdown()  # exports the spans still held, then stops the producer
    if exporter.failed_batches:
        raise SystemExit(f"trace {trace_id} was not sent to {args.topic} on {args.bootstrap}")
    print(
        f"trace {trace_id} sent to {args.topic} on {args.bootstrap}; a worker scores it once "
        "its root span has ended and SCORER_OTLP_GRACE_S (5 s) has passed"
    )


if __name__ == "__main__":
    main()
