"""The tools a trace-based judge reads a trace with (MLflow's trace-based instructions judge).

The judge is not shown the trace in its prompt: it asks for what it needs, one tool call at a
time, as seed 002's "Instructions Judge Trace Prompt" describes: fetch the trace's metadata,
timing and execution details (``get_trace_info``), list its spans with inputs and outputs
(``list_spans``), search text or a pattern across the trace (``search_trace_regex``) and get
one span by id (``get_span``). Spans come from the trace's ``spans`` field (as OpenTelemetry
input writes it: ``span_id``, ``parent_span_id``, ``name``, ``start_time``, ``end_time``,
``attributes``, ``status``); a trace without spans is one span made of its own input and
output. Every answer is JSON text, cut to ``max_chars`` so that a large trace cannot flood
the judge's context; a bad call (unknown tool, bad arguments, a span that does not exist)
answers with an error the judge can read, never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from ..otlp.messages import input_messages, output_messages

MAX_CHARS = 20_000  # the most one tool answer carries
MAX_MATCHES = 50

_OBJECT = {"type": "object", "additionalProperties": False}
DEFINITIONS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_trace_info",
            "description": "The trace's metadata, timing and execution details: id, name, "
            "project, thread, start and end time, duration, span count, status, tags, usage.",
            "parameters": {**_OBJECT, "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_spans",
            "description": "Every span of the trace with its id, parent, name, timing, status, "
            "inputs and outputs (long values cut).",
            "parameters": {**_OBJECT, "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_trace_regex",
            "description": "Search the whole trace (input, output, metadata and every span) "
            "for a regular expression (case-insensitive); returns where it matches, with the "
            "text around each match.",
            "parameters": {
                **_OBJECT,
                "properties": {"pattern": {"type": "string", "description": "A regex"}},
                "required": ["pattern"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_span",
            "description": "One span, whole: its attributes, inputs and outputs.",
            "parameters": {
                **_OBJECT,
                "properties": {"span_id": {"type": "string"}},
                "required": ["span_id"],
            },
        },
    },
]


class TraceTools:
    """The tools over one trace document."""

    definitions = DEFINITIONS

    def __init__(self, document: dict[str, Any], max_chars: int = MAX_CHARS) -> None:
        self.document = document
        self.max_chars = max_chars
        spans = document.get("spans")
        if isinstance(spans, list) and spans:
            self.spans = [s for s in spans if isinstance(s, dict)]
        else:  # a trace without spans: one span of its own input and output
            self.spans = [
                {
                    "span_id": str(document.get("id", "root")),
                    "parent_span_id": None,
                    "name": document.get("name"),
                    "start_time": document.get("start_time"),
                    "end_time": document.get("end_time"),
                    "attributes": {
                        "input": document.get("input"),
                        "output": document.get("output"),
                    },
                }
            ]
        self._tools: dict[str, Callable[..., Any]] = {
            "get_trace_info": self.get_trace_info,
            "list_spans": self.list_spans,
            "search_trace_regex": self.search_trace_regex,
            "get_span": self.get_span,
        }

    def call(self, name: str, arguments: str | None) -> str:
        """The answer to one tool call, as JSON text (an error the judge can read when the
        call is not one it can make)."""
        tool = self._tools.get(name)
        if tool is None:
            return self._json({"error": f"no tool named {name!r}; tools: {sorted(self._tools)}"})
        try:
            kwargs = orjson.loads(arguments or "{}")
            if not isinstance(kwargs, dict):
                raise TypeError("arguments must be a JSON object")
            return self._json(tool(**kwargs))
        except (orjson.JSONDecodeError, TypeError) as exc:
            return self._json({"error": f"bad arguments for {name}: {exc}"})

    def get_trace_info(self) -> dict[str, Any]:
        d = self.document
        info = {
            key: d.get(key)
            for key in ("id", "name", "project_name", "thread_id", "start_time", "end_time")
        }
        info["duration_ms"] = _duration_ms(d.get("start_time"), d.get("end_time"))
        info["span_count"] = len(self.spans)
        errors = [s.get("span_id") for s in self.spans if s.get("status") == "error"]
        info["status"] = "error" if errors else "ok"
        if errors:
            info["error_spans"] = errors
        for key in ("tags", "usage", "metadata"):
            if d.get(key):
                info[key] = d[key]
        return info

    def list_spans(self) -> dict[str, Any]:
        return {"spans": [self._summary(s) for s in self.spans]}

    def get_span(self, span_id: str) -> dict[str, Any]:
        for span in self.spans:
            if str(span.get("span_id")) == str(span_id):
                return {
                    **span,
                    "duration_ms": _duration_ms(span.get("start_time"), span.get("end_time")),
                }
        known = [s.get("span_id") for s in self.spans]
        return {"error": f"no span with id {span_id!r} in this trace; its spans: {known}"}

    def search_trace_regex(self, pattern: str) -> dict[str, Any]:
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            return {"error": f"not a regular expression: {exc}"}
        places = [("trace", key, self.document.get(key)) for key in ("input", "output", "metadata")]
        places += [(str(s.get("span_id")), "span", s) for s in self.spans]
        matches = []
        for where, field, value in places:
            text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
            for match in regex.finditer(text):
                start, end = max(0, match.start() - 80), min(len(text), match.end() + 80)
                matches.append(
                    {
                        "where": where,
                        "field": field,
                        "match": match.group(0),
                        "context": text[start:end],
                    }
                )
                if len(matches) >= MAX_MATCHES:
                    return {"matches": matches, "more": True}
        return {"matches": matches}

    def _summary(self, span: dict[str, Any]) -> dict[str, Any]:
        attributes = span.get("attributes") or {}
        return {
            "span_id": span.get("span_id"),
            "parent_span_id": span.get("parent_span_id"),
            "name": span.get("name"),
            "start_time": span.get("start_time"),
            "duration_ms": _duration_ms(span.get("start_time"), span.get("end_time")),
            "status": span.get("status"),
            "inputs": _cut(_side(attributes, "input"), 1000),
            "outputs": _cut(_side(attributes, "output"), 1000),
        }

    def _json(self, value: Any) -> str:
        text = orjson.dumps(value, default=str).decode()
        if len(text) > self.max_chars:
            cut = len(text) - self.max_chars
            text = text[: self.max_chars] + f"... [{cut} characters cut: ask get_span for one span]"
        return text


def _side(attributes: dict[str, Any], side: str) -> Any:
    """A span's inputs or outputs: its model-call messages as OpenTelemetry input reads them
    (GenAI conventions, flattened or OpenInference), else the plain ``input`` / ``output``
    of a trace without spans."""
    messages = (input_messages if side == "input" else output_messages)(attributes)
    return messages or attributes.get(side)


def _cut(value: Any, chars: int) -> Any:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= chars else text[:chars] + f"... [{len(text) - chars} more]"


def _duration_ms(start: Any, end: Any) -> float | None:
    try:
        began = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        ended = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return None
    return round((ended - began).total_seconds() * 1000.0, 3)
