"""OTLP export records as the Collector's Kafka exporter writes them, for tests."""

from __future__ import annotations

import base64

import orjson
from google.protobuf.json_format import MessageToDict


def as_otlp_json(raw: bytes) -> bytes:
    """An ``otlp_proto`` record (ExportTraceServiceRequest bytes) in ``otlp_json``: protobuf's
    JSON mapping with the ids in hex, not base64."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    document = MessageToDict(ExportTraceServiceRequest.FromString(raw))
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return orjson.dumps(document)
