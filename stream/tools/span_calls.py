"""Tool calls, declared tools and chat messages read from the spans a trace keeps under
``spans`` (``Span.as_dict``: ``span_id``, ``name``, ``attributes``, ``status`` as ``ok`` or
``error``), in the order the trace lists them (by start time, as ``trace_document`` sorts them).

- Calls: the GenAI conventions' ``execute_tool`` spans (``gen_ai.operation.name``;
  ``gen_ai.tool.name``, ``.call.id``, ``.call.arguments``, ``.call.result`` (JSON text read as
  JSON), ``.type``, ``.description``) and OpenInference's TOOL spans
  (``openinference.span.kind``; ``tool.name``, ``tool_call.id``, ``input.value`` the arguments,
  ``output.value`` the result, ``tool.description`` and ``tool.parameters`` the tool's own
  schema). The call id is the call id attribute, else the span id; a span without a tool name
  (nor a span name to take it from) is no call. A span failed where it has ``error.type``, or
  its status is ``error`` (the error is ``error.type``, else ``exception.message``, else ``span
  status error``), or its result is a failure (``found.failure``). A call's turn is the index
  of the last model call span (GenAI ``chat``, ``text_completion``, ``generate_content``;
  OpenInference ``LLM``) that started before it.
- Declared tools: ``gen_ai.tool.definitions`` (a JSON array) and OpenInference's
  ``llm.tools.N.tool.json_schema``, on any span.
- Messages: model call spans' ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (read by
  ``stream.otlp.messages``: tool calls are ``tool_call`` parts, results ``tool_call_response``
  parts) and OpenInference's flattened ``llm.input_messages.N.message.*`` with their
  ``tool_calls.M.tool_call.*`` and ``tool_call_id``, so an agent traced only by its model
  client (no tool spans) still shows its calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from stream.otlp.messages import input_messages, output_messages

from .found import Found, failure, json_value

MODEL_OPERATIONS = ("chat", "text_completion", "generate_content")
_FLAT = re.compile(r"llm\.(?P<side>input|output)_messages\.(?P<n>\d+)\.message\.(?P<field>.+)")
_FLAT_CALL = re.compile(r"tool_calls\.(?P<m>\d+)\.tool_call\.(?P<field>.+)")
_FLAT_TOOL = re.compile(r"llm\.tools\.\d+\.tool\.json_schema")


def span_list(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace's spans that are objects with attributes that are objects."""
    spans = trace.get("spans")
    if not isinstance(spans, list):
        return []
    return [s for s in spans if isinstance(s, dict) and isinstance(s.get("attributes"), dict)]


def is_model_call(attributes: dict[str, Any]) -> bool:
    return (
        attributes.get("gen_ai.operation.name") in MODEL_OPERATIONS
        or attributes.get("openinference.span.kind") == "LLM"
    )


def span_calls(spans: list[dict[str, Any]]) -> list[Found]:
    """The tool execution spans' calls, in span order (see the module's docstring)."""
    found = []
    model_calls = 0
    for span in spans:
        attributes = span["attributes"]
        if is_model_call(attributes):
            model_calls += 1
        elif attributes.get("gen_ai.operation.name") == "execute_tool":
            found.append(_execute_tool(span, attributes, max(model_calls - 1, 0)))
        elif attributes.get("openinference.span.kind") == "TOOL":
            found.append(_openinference_tool(span, attributes, max(model_calls - 1, 0)))
    return [f for f in found if f.name]  # a call without a name is no call


def _execute_tool(span: dict[str, Any], attributes: dict[str, Any], turn: int) -> Found:
    name = attributes.get("gen_ai.tool.name")
    if not isinstance(name, str) or not name:
        name = str(span.get("name") or "").removeprefix("execute_tool").strip()
    extra = {
        "tool_type": attributes.get("gen_ai.tool.type"),
        "description": attributes.get("gen_ai.tool.description"),
    }
    return _span_found(span, attributes, turn, name, "gen_ai.tool.call", extra)


def _openinference_tool(span: dict[str, Any], attributes: dict[str, Any], turn: int) -> Found:
    name = attributes.get("tool.name")
    if not isinstance(name, str) or not name:
        name = str(span.get("name") or "")
    extra = {
        "description": attributes.get("tool.description"),
        "parameters": json_value(attributes.get("tool.parameters")),
    }
    return _span_found(span, attributes, turn, name, "openinference", extra)


def _span_found(
    span: dict[str, Any],
    attributes: dict[str, Any],
    turn: int,
    name: str,
    convention: str,
    extra: dict[str, Any],
) -> Found:
    if convention == "gen_ai.tool.call":
        call_id = attributes.get("gen_ai.tool.call.id")
        arguments = attributes.get("gen_ai.tool.call.arguments")
        result = _json_any(attributes.get("gen_ai.tool.call.result"))
    else:
        call_id = attributes.get("tool_call.id")
        arguments = attributes.get("input.value")
        result = json_value(attributes.get("output.value"))
    error = attributes.get("error.type")
    if error in (None, "") and span.get("status") == "error":
        error = attributes.get("exception.message") or "span status error"
    span_id = span.get("span_id")
    return Found(
        call_id=str(call_id) if call_id not in (None, "") else (str(span_id) if span_id else None),
        name=name,
        arguments=arguments,
        result=result,
        error=str(error) if error not in (None, "") else failure(result),
        turn=turn,
        source="spans",
        extra={
            "span_id": span_id,
            **{k: v for k, v in extra.items() if v is not None},
            # content capture is opt-in: such a span says which tool ran, not with what
            **({"content_missing": True} if arguments is None and result is None else {}),
        },
    )


def _json_any(value: Any) -> Any:
    """A GenAI attribute of type any: JSON text where the exporter could not keep structure."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def span_definitions(spans: list[dict[str, Any]]) -> Iterator[Any]:
    """The raw tool definitions the spans declare (each still to be read as a definition)."""
    for span in spans:
        attributes = span["attributes"]
        definitions = _json_any(attributes.get("gen_ai.tool.definitions"))
        if isinstance(definitions, list):
            yield from definitions
        for key, value in attributes.items():
            if _FLAT_TOOL.fullmatch(key):
                yield json_value(value)


def span_messages(spans: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Each model call span's input, then its output, as chat messages, in span order."""
    for span in spans:
        attributes = span["attributes"]
        for key, read in (
            ("gen_ai.input.messages", input_messages),
            ("gen_ai.output.messages", output_messages),
        ):
            if key in attributes:
                yield _guarded(read, attributes)
        if any(key.startswith("llm.") and _FLAT.fullmatch(key) for key in attributes):
            yield from _openinference_messages(attributes)


def _guarded(
    read: Callable[[dict[str, Any]], list[dict[str, Any]]], attributes: dict[str, Any]
) -> list[dict[str, Any]]:
    # stream.otlp.messages trusts the JSON's shape (``parts: 5`` raises TypeError), and one
    # malformed span must not hide a trace's other calls
    try:
        return read(attributes)
    except (TypeError, AttributeError):
        return []


def _openinference_messages(attributes: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    sides: dict[str, dict[int, dict[str, Any]]] = {"input": {}, "output": {}}
    for key, value in attributes.items():
        if not (match := _FLAT.fullmatch(key)):
            continue
        message = sides[match["side"]].setdefault(int(match["n"]), {})
        if call := _FLAT_CALL.fullmatch(match["field"]):
            calls = message.setdefault("tool_calls", {})
            calls.setdefault(int(call["m"]), {})[call["field"]] = value
        else:
            message[match["field"]] = value
    for side in ("input", "output"):
        messages = []
        for _, message in sorted(sides[side].items()):
            calls = message.pop("tool_calls", {})
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c.get("id"),
                        "function": {
                            "name": c.get("function.name"),
                            "arguments": c.get("function.arguments"),
                        },
                    }
                    for _, c in sorted(calls.items())
                ]
            messages.append(message)
        if messages:
            yield messages
