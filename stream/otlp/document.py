"""One trace's spans read as the trace model rules read.

``trace_document`` reads the spans of one trace as a trace (``input.messages`` /
``output.messages`` in chat form, as an OpenAI or Opik export has them): each span's
messages as ``messages.py`` reads them from its attributes; ``gen_ai.conversation.id`` or
``session.id`` is the thread, the resource's ``service.name`` the project, the root span's
name the trace's name, its id ``root_span_id`` (the span a trace's scores evaluate); every
span is kept under ``spans`` for rules that read them.

The input is the first model call's, the output the last one's (an agent's trace holds
several). Message capture is opt-in in the instrumentations: a trace whose spans carry no
message content says so in ``content_missing``, and its rules are skipped with that reason.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .messages import input_messages, output_messages
from .spans import Span

NO_CONTENT = (
    "the trace's spans carry no message content: message capture is off in the "
    "instrumentation (opentelemetry-instrumentation-openai-v2: "
    "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY)"
)


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
        # the span a trace-scope score evaluates (its evaluation event's parent)
        "root_span_id": root.span_id,
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
