"""An OTLP export batch decoded into ``Span`` records.

The OpenTelemetry Collector's Kafka exporter writes one ``ExportTraceServiceRequest`` per
record, as protobuf bytes (``otlp_proto``, its default) or as OTLP/JSON (``otlp_json``:
camelCase fields, hex trace and span ids, 64-bit integers as strings). ``decode`` reads
either into plain ``Span`` records; a batch that is neither is a ``ValueError`` that says
why (for OTLP/JSON, which field of which span was wrong).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import orjson

from .spans import Span

Encoding = Literal["otlp_proto", "otlp_json"]
T = TypeVar("T")


def _time(nanos: int | str | None) -> datetime | None:
    value = int(nanos or 0)
    return datetime.fromtimestamp(value / 1e9, UTC) if value else None


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
    """The spans of an OTLP/JSON export batch; a field of the wrong type is a ``_FieldError``
    that says where."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not OTLP/JSON: {exc}") from None
    if not isinstance(document, dict) or "resourceSpans" not in document:
        raise ValueError("not OTLP/JSON trace data: no resourceSpans")
    batches = _field(document, "resourceSpans", lambda value: _items(value, _json_resource_spans))
    return [span for spans in batches for span in spans]


class _FieldError(ValueError):
    """A field of an OTLP/JSON batch of the wrong type, or out of range. Its message says
    where: ``resourceSpans[0].scopeSpans[0].spans[3].startTimeUnixNano: expected ...``."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []

    def within(self, step: str | int) -> _FieldError:
        """The same problem, one step further out (a field name, or an index)."""
        self.path.insert(0, f"[{step}]" if isinstance(step, int) else f".{step}")
        return self

    def __str__(self) -> str:
        where = "".join(self.path).removeprefix(".")
        return f"{where}: {self.problem}" if where else self.problem


def _field(document: dict[str, Any], name: str, read: Callable[[Any], T]) -> T:
    """``read`` of a field (None when it is left out); a problem says the field's name."""
    try:
        return read(document.get(name))
    except _FieldError as exc:
        raise exc.within(name) from None


def _items(value: Any, read: Callable[[Any], T]) -> list[T]:
    """``read`` of each item of a JSON array (null: none); a problem says the item's index."""
    items = []
    for index, item in enumerate(_array(value)):
        try:
            if item is None:  # a field left out is null, an item never is
                raise _FieldError("expected an item, got null")
            items.append(read(item))
        except _FieldError as exc:
            raise exc.within(index) from None
    return items


def _json_resource_spans(value: Any) -> list[Span]:
    resource_spans = _object(value)
    resource = _field(
        resource_spans,
        "resource",
        lambda resource: _field(_object(resource), "attributes", _json_attributes),
    )

    def scope(value: Any) -> list[Span]:
        return _field(_object(value), "spans", lambda spans: _items(spans, read))

    def read(span: Any) -> Span:
        return _json_span(_object(span), resource)

    scopes = _field(resource_spans, "scopeSpans", lambda value: _items(value, scope))
    return [span for spans in scopes for span in spans]


def _json_span(span: dict[str, Any], resource: dict[str, Any]) -> Span:
    return Span(
        trace_id=_field(span, "traceId", _text).lower(),
        span_id=_field(span, "spanId", _text).lower(),
        parent_span_id=_field(span, "parentSpanId", _text).lower() or None,
        name=_field(span, "name", _text),
        start=_time(_field(span, "startTimeUnixNano", _uint64)),
        end=_time(_field(span, "endTimeUnixNano", _uint64)),
        attributes=_field(span, "attributes", _json_attributes),
        resource=resource,
        status=_field(span, "status", lambda status: _field(_object(status), "code", _status)),
        remote_parent=bool(_field(span, "flags", _uint32) & REMOTE_PARENT),
    )


_JSON_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
INT64 = (-(2**63), 2**63 - 1)
# attribute values nested deeper than this are refused: a span travels on as JSON, and a
# document nested much deeper could not be written again (orjson stops at 254 levels)
MAX_VALUE_DEPTH = 64
_DECIMAL = re.compile(r"-?[0-9]{1,20}")


def _kind(value: Any) -> str:
    """A JSON value's type, as JSON names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _object(value: Any) -> dict[str, Any]:
    """``value`` as a JSON object; null (a field left out) is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _FieldError(f"expected an object, got {_kind(value)}")
    return value


def _array(value: Any) -> list[Any]:
    """``value`` as a JSON array; null (a field left out) is an empty one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _FieldError(f"expected an array, got {_kind(value)}")
    return value


def _text(value: Any) -> str:
    """``value`` as a string; null (a field left out) is an empty one."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _FieldError(f"expected a string, got {_kind(value)}")
    return value


def _integer(value: Any, low: int, high: int) -> int:
    """A protobuf integer in its JSON form (a number, or a decimal string: 64-bit ones are
    written so), from ``low`` to ``high``; null (a field left out) is 0."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # orjson reads an integer past 64 bits as a float
    elif isinstance(value, str) and _DECIMAL.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _FieldError(f"expected an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise _FieldError(f"{value} is out of range ({low} to {high})")
    return value


def _uint64(value: Any) -> int:
    return _integer(value, 0, 2**64 - 1)


def _uint32(value: Any) -> int:
    return _integer(value, 0, 2**32 - 1)


def _double(value: Any) -> float:
    """A protobuf double in its JSON form: a number, or a string ("NaN", "Infinity", "1.5")."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise _FieldError(f"expected a number, got {_kind(value)}")


def _status(code: Any) -> str | None:
    """A span's status code (a number, or its enum name) as ``ok`` or ``error`` (else None)."""
    if isinstance(code, str):
        code = _JSON_STATUS.get(code)
    elif code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        raise _FieldError(f"expected a status code, got {_kind(code)}")
    return _STATUS.get(code) if code is not None else None


def _json_attributes(attributes: Any, depth: int = 0) -> dict[str, Any]:
    """OTLP/JSON key-value pairs (``[{"key": ..., "value": {...}}]``) as a dict; a pair
    without a key is skipped."""

    def pair(kv: Any) -> tuple[str, Any] | None:
        kv = _object(kv)
        if "key" not in kv:
            return None
        return _field(kv, "key", _key), _field(kv, "value", lambda v: _json_value(v, depth))

    return dict(kv for kv in _items(attributes, pair) if kv is not None)


def _key(value: Any) -> str:
    if not isinstance(value, str):
        raise _FieldError(f"expected a string, got {_kind(value)}")
    return value


def _json_value(value: Any, depth: int) -> Any:
    """An OTLP/JSON ``AnyValue`` as a plain value; an empty or unknown one is None."""
    value = _object(value)
    if not value:
        return None
    if depth > MAX_VALUE_DEPTH:
        raise _FieldError(f"an attribute value nested deeper than {MAX_VALUE_DEPTH} levels")
    kind = next(iter(value))
    read = _VALUE_KINDS.get(kind)
    if read is None:
        return None  # a kind this version of OTLP does not have
    return _field(value, kind, lambda inner: read(inner, depth))


def _json_bool(value: Any, depth: int) -> bool:
    if not isinstance(value, bool):
        raise _FieldError(f"expected a boolean, got {_kind(value)}")
    return value


_VALUE_KINDS: dict[str, Callable[[Any, int], Any]] = {
    "stringValue": lambda inner, _: _text(inner),
    "bytesValue": lambda inner, _: _text(inner),  # base64 text
    "boolValue": _json_bool,
    "intValue": lambda inner, _: _integer(inner, *INT64),
    "doubleValue": lambda inner, _: _double(inner),
    "arrayValue": lambda inner, depth: _field(
        _object(inner), "values", lambda vs: _items(vs, lambda v: _json_value(v, depth + 1))
    ),
    "kvlistValue": lambda inner, depth: _field(
        _object(inner), "values", lambda kvs: _json_attributes(kvs, depth + 1)
    ),
}
