"""OpenTelemetry spans in: an OTLP export batch decoded, and a trace's spans read as a trace.

The OpenTelemetry Collector's Kafka exporter writes one ``ExportTraceServiceRequest`` per
record, as protobuf bytes (``otlp_proto``, its default) or as OTLP/JSON (``otlp_json``:
camelCase fields, hex trace and span ids, 64-bit integers as strings). ``decode`` reads
either into plain ``Span`` records; ``trace_document`` reads the spans of one trace as the
trace model rules read (``input.messages`` / ``output.messages`` in chat form, as an
OpenAI or Opik export has them), from the attributes the instrumentations write:

- GenAI semantic conventions: ``gen_ai.input.messages`` and ``gen_ai.output.messages``
  (JSON messages with typed parts), ``gen_ai.system_instructions``, and the deprecated
  flattened ``gen_ai.prompt.N.role/content`` and ``gen_ai.completion.N.role/content``;
- OpenInference: ``llm.input_messages.N.message.role/content``,
  ``llm.output_messages.N.message.role/content``, ``input.value`` and ``output.value``;
- ``gen_ai.conversation.id`` or ``session.id`` is the thread, the resource's
  ``service.name`` the project, the root span's name the trace's name; every span is kept
  under ``spans`` for rules that read them.

The input is the first model call's, the output the last one's (an agent's trace holds
several). Message capture is opt-in in the instrumentations: a trace whose spans carry no
message content says so in ``content_missing``, and its rules are skipped with that reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

Encoding = Literal["otlp_proto", "otlp_json"]

NO_CONTENT = (
    "the trace's spans carry no message content: message capture is off in the "
    "instrumentation (opentelemetry-instrumentation-openai-v2: "
    "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY)"
)


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start: datetime | None
    end: datetime | None
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    # the parent is in another process (context propagated to this service): a local root
    remote_parent: bool = False

    @property
    def is_root(self) -> bool:
        """No parent, or a parent in another process (this service's part of the trace)."""
        return self.parent_span_id is None or self.remote_parent

    def as_dict(self) -> dict[str, Any]:
        extra = {"remote_parent": True} if self.remote_parent else {}
        return {
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "start_time": self.start.isoformat() if self.start else None,
            "end_time": self.end.isoformat() if self.end else None,
            "attributes": self.attributes,
            "status": self.status,
            **extra,
        }

    def stored(self) -> dict[str, Any]:
        """The span as it travels and is kept while its trace is gathered."""
        return {**self.as_dict(), "resource": self.resource}

    @classmethod
    def from_stored(cls, trace_id: str, stored: dict[str, Any]) -> Span:
        def moment(text: str | None) -> datetime | None:
            return datetime.fromisoformat(text) if text else None

        return cls(
            trace_id=trace_id,
            span_id=stored["span_id"],
            parent_span_id=stored.get("parent_span_id"),
            name=stored.get("name", ""),
            start=moment(stored.get("start_time")),
            end=moment(stored.get("end_time")),
            attributes=stored.get("attributes") or {},
            resource=stored.get("resource") or {},
            status=stored.get("status"),
            remote_parent=bool(stored.get("remote_parent")),
        )


def _time(nanos: int | str | None) -> datetime | None:
    value = int(nanos or 0)
    return datetime.fromtimestamp(value / 1e9, UTC) if value else None


# -- decoding --------------------------------------------------------------------------


def detect(raw: bytes) -> Encoding:
    """The encoding of an export record: OTLP/JSON is an object, protobuf starts with a tag."""
    return "otlp_json" if raw.lstrip()[:1] == b"{" else "otlp_proto"


def decode(raw: bytes | None, encoding: Encoding | Literal["auto"] = "otlp_proto") -> list[Span]:
    """The spans of one export batch (``ValueError`` when it is not one)."""
    if not raw:
        raise ValueError("empty message (no value)")
    if encoding == "auto":
        encoding = detect(raw)
    if encoding == "otlp_json":
        return _decode_json(raw)
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    try:
        request = ExportTraceServiceRequest.FromString(raw)
    except DecodeError as exc:
        raise ValueError(f"not an OTLP ExportTraceServiceRequest: {exc}") from None
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _proto_value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        start=_time(span.start_time_unix_nano),
                        end=_time(span.end_time_unix_nano),
                        attributes={kv.key: _proto_value(kv.value) for kv in span.attributes},
                        resource=resource,
                        status=_STATUS.get(span.status.code),
                        remote_parent=bool(span.flags & REMOTE_PARENT),
                    )
                )
    if not spans and raw and not request.resource_spans:
        raise ValueError("not an OTLP ExportTraceServiceRequest: no resource spans")
    return spans


_STATUS = {0: None, 1: "ok", 2: "error"}
REMOTE_PARENT = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK: the parent span is remote


def _proto_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_proto_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _proto_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def _decode_json(raw: bytes) -> list[Span]:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not OTLP/JSON: {exc}") from None
    if not isinstance(document, dict) or "resourceSpans" not in document:
        raise ValueError("not OTLP/JSON trace data: no resourceSpans")
    spans = []
    for resource_spans in document["resourceSpans"] or []:
        resource = _json_attributes((resource_spans.get("resource") or {}).get("attributes"))
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                status = (span.get("status") or {}).get("code")
                spans.append(
                    Span(
                        trace_id=str(span.get("traceId", "")).lower(),
                        span_id=str(span.get("spanId", "")).lower(),
                        parent_span_id=str(span.get("parentSpanId") or "").lower() or None,
                        name=span.get("name", ""),
                        start=_time(span.get("startTimeUnixNano")),
                        end=_time(span.get("endTimeUnixNano")),
                        attributes=_json_attributes(span.get("attributes")),
                        resource=resource,
                        status=_STATUS.get(_JSON_STATUS.get(status, status)),  # type: ignore[arg-type]
                        remote_parent=bool(int(span.get("flags") or 0) & REMOTE_PARENT),
                    )
                )
    return spans


_JSON_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _json_attributes(attributes: Any) -> dict[str, Any]:
    return {kv["key"]: _json_value(kv.get("value")) for kv in attributes or [] if "key" in kv}


def _json_value(value: Any) -> Any:
    if not isinstance(value, dict) or not value:
        return None
    kind, inner = next(iter(value.items()))
    if kind == "intValue":
        return int(inner)
    if kind == "doubleValue":
        return float(inner)
    if kind == "arrayValue":
        return [_json_value(v) for v in (inner or {}).get("values") or []]
    if kind == "kvlistValue":
        return _json_attributes((inner or {}).get("values"))
    return inner  # stringValue, boolValue, bytesValue (base64 text)


# -- the trace -------------------------------------------------------------------------


def root_of(spans: list[Span]) -> Span | None:
    """The span without a parent among them (the earliest, if several)."""
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if s.is_root or s.parent_span_id not in ids]
    started = [s for s in roots if s.start] or roots
    return min(started, key=lambda s: s.start or datetime.max.replace(tzinfo=UTC), default=None)


def trace_document(spans: list[Span]) -> dict[str, Any]:
    """One trace's spans as the trace model: what rules read (see the module's docstring)."""
    root = root_of(spans)
    assert root is not None, "a trace has at least one span"
    ordered = sorted(spans, key=lambda s: (s.start or root.start or datetime.min, s.span_id))
    calls = [(s, input_messages(s.attributes), output_messages(s.attributes)) for s in ordered]
    calls = [c for c in calls if c[1] or c[2]]
    document: dict[str, Any] = {
        "id": root.trace_id,
        "name": root.name,
        "project_name": root.resource.get("service.name") or "default",
        "start_time": root.start.isoformat() if root.start else None,
        "end_time": root.end.isoformat() if root.end else None,
        "metadata": {k: v for k, v in root.attributes.items() if _scalar(v)},
        "spans": [s.as_dict() for s in ordered],
    }
    thread = _first(spans, "gen_ai.conversation.id", "session.id")
    if thread is not None:
        document["thread_id"] = str(thread)
    if calls:
        document["input"] = {"messages": calls[0][1]}
        document["output"] = {"messages": calls[-1][2]}
    else:
        document["content_missing"] = NO_CONTENT
    usage = _usage(spans)
    if usage:
        document["usage"] = usage
    return document


def _first(spans: list[Span], *names: str) -> Any:
    for name in names:
        for span in spans:
            if span.attributes.get(name) is not None:
                return span.attributes[name]
    return None


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _usage(spans: list[Span]) -> dict[str, int]:
    prompt = sum(int(s.attributes.get("gen_ai.usage.input_tokens") or 0) for s in spans)
    completion = sum(int(s.attributes.get("gen_ai.usage.output_tokens") or 0) for s in spans)
    if not (prompt or completion):
        return {}
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return value


def _parts_text(parts: Any) -> Any:
    """GenAI message parts as chat content: the text parts joined, else the parts."""
    if not isinstance(parts, list):
        return parts
    texts = [
        str(p.get("content", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text"
    ]
    return "\n".join(texts) if texts else parts


def _genai_messages(value: Any) -> list[dict[str, Any]]:
    messages = []
    for message in _json(value) or []:
        if not isinstance(message, dict):
            continue
        chat: dict[str, Any] = {
            "role": message.get("role"),
            "content": _parts_text(message.get("parts")),
        }
        calls = [
            p
            for p in message.get("parts") or []
            if isinstance(p, dict) and p.get("type") == "tool_call"
        ]
        if calls:
            chat["tool_calls"] = calls
        messages.append(chat)
    return messages


def _indexed(attributes: dict[str, Any], pattern: str) -> list[dict[str, Any]]:
    """Flattened messages (``prefix.N.role``, ``prefix.N.content``) in N order."""
    found: dict[int, dict[str, Any]] = {}
    regex = re.compile(pattern)
    for key, value in attributes.items():
        if match := regex.fullmatch(key):
            found.setdefault(int(match["n"]), {})[match["field"]] = value
    return [
        {"role": m.get("role"), "content": m.get("content")}
        for _, m in sorted(found.items())
        if m.get("content") is not None or m.get("role") is not None
    ]


@dataclass(frozen=True)
class Side:
    """Where one side of a model call (its input or its output) is found, in order."""

    genai: str  # the GenAI convention's JSON messages
    flattened: tuple[str, ...]  # the deprecated and OpenInference ``N`` forms
    value: str  # OpenInference's plain value
    role: str  # the role a plain value gets


INPUT = Side(
    "gen_ai.input.messages",
    (
        r"gen_ai\.prompt\.(?P<n>\d+)\.(?P<field>role|content)",
        r"llm\.input_messages\.(?P<n>\d+)\.message\.(?P<field>role|content)",
    ),
    "input.value",
    "user",
)
OUTPUT = Side(
    "gen_ai.output.messages",
    (
        r"gen_ai\.completion\.(?P<n>\d+)\.(?P<field>role|content)",
        r"llm\.output_messages\.(?P<n>\d+)\.message\.(?P<field>role|content)",
    ),
    "output.value",
    "assistant",
)


def _side(attributes: dict[str, Any], side: Side) -> list[dict[str, Any]]:
    if side.genai in attributes:
        messages = _genai_messages(attributes[side.genai])
        system = _json(attributes.get("gen_ai.system_instructions")) if side is INPUT else None
        if system:
            messages.insert(0, {"role": "system", "content": _parts_text(system)})
        return messages
    for pattern in side.flattened:
        if flat := _indexed(attributes, pattern):
            return flat
    if (value := attributes.get(side.value)) is not None:
        return [{"role": side.role, "content": value}]
    return []


def input_messages(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    """A span's input as chat messages, from whichever convention its attributes follow."""
    return _side(attributes, INPUT)


def output_messages(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    """A span's output as chat messages, from whichever convention its attributes follow."""
    return _side(attributes, OUTPUT)
