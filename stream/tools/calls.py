"""Every tool call of one trace, as the workers hold the trace: ``tool_calls(trace)``.

Two sources, merged into one record per call id:

1. The trace model's messages (OpenAI's chat API and Opik's exports): assistant messages'
   ``tool_calls`` (``{"id", "function": {"name", "arguments"}}``, or the GenAI conventions'
   ``{"type": "tool_call", "id", "name", "arguments"}`` parts ``stream.otlp`` writes; the legacy
   ``function_call``) answered by ``{"role": "tool", "tool_call_id", "content"}`` messages (or
   ``tool_call_response`` parts; a tool or legacy ``function`` message without an id answers
   the oldest unanswered call without one; an id given again to a call of another tool or
   other arguments, as providers that number ids per response do, is a call of its own, its
   id suffixed ``#2``, ``#3`` by its order, answered by the next answer of that id). The
   messages are ``input.messages``, each model
   call span's messages, ``output.messages`` and ``output.choices[*].message``, read as one
   conversation: a list that repeats the end of the conversation so far (an export's output
   often holds the whole history) adds only what follows the repeat. A call without a name is
   no call.
2. Tool execution spans under ``spans`` (``span_calls``).

A call in both keeps the message's id, name, arguments, user message and turn, and takes the
span's result and error where the span carries either (spans win: they saw the tool run);
``source`` is then ``spans``. A span without a call id joins a message call by tool and
arguments (``_merge``). Calls only in spans follow those from messages, in span order. A result
that is the text of a JSON object or array is read as JSON, other text kept as it is; which
results count as errors: ``found``. Declared tools: ``input.tools`` and ``metadata.tools`` (OpenAI's
``{"type": "function", "function": {...}}``, or flat ``{"name", "description", "parameters"}``;
Anthropic's ``input_schema``) and the spans' definitions, the first of each name kept.

``turn`` is the index of the call's assistant message among the conversation's assistant
messages, ``user`` the last user message before it, ``assistant`` its text (None where it has
none); ``position`` the index among the trace's calls after the merge. Nothing here raises on a
malformed trace: what cannot be read is left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .found import MISSING, Found, arguments_of, json_value, message_failure, text_of
from .model import ToolCall, ToolDefinition
from .span_calls import span_calls, span_definitions, span_list, span_messages


def tool_calls(trace: dict[str, Any]) -> list[ToolCall]:
    """Every tool call of one trace, in order (see the module's docstring)."""
    if not isinstance(trace, dict):
        return []
    trace_id = str(trace.get("id") or "")
    spans = span_list(trace)
    merged = _merge(message_calls(conversation(trace, spans)), span_calls(spans))
    declared = declared_tools(trace, spans)
    calls = []
    for position, found in enumerate(merged):
        arguments, parsed, parses = arguments_of(found.arguments)
        extra = found.extra if found.arguments is not None else {**found.extra, MISSING: True}
        calls.append(
            ToolCall(
                trace_id=trace_id,
                call_id=found.call_id or f"{trace_id}:{position}",
                name=found.name,
                arguments=arguments,
                parsed=parsed,
                parses=parses,
                result=found.result,
                error=found.error,
                declared=declared,
                user=found.user,
                assistant=found.assistant,
                position=position,
                turn=found.turn,
                source=found.source,
                extra=extra,
            )
        )
    return calls


def conversation(trace: dict[str, Any], spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace's messages as one conversation, each list's repeat of what came before dropped."""
    lists: list[Any] = [_path(trace, "input", "messages"), *span_messages(spans)]
    lists.append(_path(trace, "output", "messages"))
    choices = _path(trace, "output", "choices")
    if isinstance(choices, list):
        lists.append([c.get("message") for c in choices if isinstance(c, dict)])
    merged: list[dict[str, Any]] = []
    for messages in lists:
        if isinstance(messages, list):
            _extend(merged, [m for m in messages if isinstance(m, dict)])
    return merged


def _extend(merged: list[dict[str, Any]], messages: list[dict[str, Any]]) -> None:
    """Append ``messages`` without their longest prefix that repeats the end of ``merged``
    (compared by role, text and call ids: sources differ in how they spell the rest)."""
    ends = [_key(m) for m in merged[-len(messages) :]] if messages else []
    starts = [_key(m) for m in messages[: len(ends)]]
    for overlap in range(len(ends), 0, -1):
        if ends[len(ends) - overlap :] == starts[:overlap]:
            break
    else:
        overlap = 0
    merged.extend(messages[overlap:])


def _key(message: dict[str, Any]) -> tuple[Any, ...]:
    requests = tuple((call_id, name) for call_id, name, _ in _requests(message))
    answers = (
        tuple(call_id for call_id, _ in _answers(message)) if message.get("role") == "tool" else ()
    )
    return message.get("role"), text_of(message.get("content")), requests, answers


def message_calls(messages: list[dict[str, Any]]) -> list[Found]:
    """The calls the conversation's assistant messages made, with the results answering them."""
    found: list[Found] = []
    by_id: dict[str, list[Found]] = {}  # the calls made under each id the model gave
    waiting: list[Found] = []  # calls without an id, answered in order
    user: str | None = None
    turn = -1
    for message in messages:
        role = message.get("role")
        if role == "user":
            user = text_of(message.get("content"))
        elif role == "assistant":
            turn += 1
            assistant = text_of(message.get("content"))
            for call_id, name, arguments in _requests(message):
                earlier = by_id.get(call_id, []) if call_id is not None else []
                if any(f.name == name and _same_arguments(f.arguments, arguments) for f in earlier):
                    continue  # the same call, seen again in a repeated history
                # an id the model gave before to another call (ids numbered per response):
                # a call of its own, its id made unique by its order
                unique = f"{call_id}#{len(earlier) + 1}" if earlier else call_id
                call = Found(unique, name, arguments, turn=turn, user=user, assistant=assistant)
                found.append(call)
                if call_id is None:
                    waiting.append(call)
                else:
                    by_id.setdefault(call_id, []).append(call)
        elif role in ("tool", "function"):
            for call_id, content in _answers(message):
                answered = (
                    next((f for f in by_id.get(call_id, []) if _unanswered(f)), None)
                    if call_id
                    else (waiting.pop(0) if waiting else None)
                )
                if answered is not None and _unanswered(answered):
                    answered.result = json_value(content)
                    answered.error = message_failure(message, content)
    return found


def _unanswered(call: Found) -> bool:
    return call.result is None and call.error is None


def _same_arguments(ours: Any, theirs: Any) -> bool:
    """Whether two calls' arguments are the same (their JSON values, else their text)."""
    a, b = arguments_of(ours), arguments_of(theirs)
    return a[1:] == b[1:] if a[2] and b[2] else a[0] == b[0]


def _requests(message: dict[str, Any]) -> Iterable[tuple[str | None, str, Any]]:
    """An assistant message's calls as (id, name, arguments)."""
    entries = message.get("tool_calls")
    entries = entries if isinstance(entries, list) else []
    if isinstance(message.get("function_call"), dict):
        entries = [*entries, {"function": message["function_call"]}]
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        function = entry.get("function")
        body = function if isinstance(function, dict) else entry
        name = body.get("name")
        if isinstance(name, str) and name:
            yield _id(entry.get("id")), name, body.get("arguments")


def _answers(message: dict[str, Any]) -> Iterable[tuple[str | None, Any]]:
    """A tool message's results as (call id, content): one, or one per response part."""
    content = message.get("content")
    parts = (
        [p for p in content or [] if isinstance(p, dict) and p.get("type") == "tool_call_response"]
        if isinstance(content, list)
        else []
    )
    if parts and message.get("tool_call_id") is None:
        return [(_id(p.get("id")), p.get("response")) for p in parts]
    return [(_id(message.get("tool_call_id")), content)]


def _merge(from_messages: list[Found], from_spans: list[Found]) -> list[Found]:
    """One record per call: a span joins the message call of its call id; a span without one
    (its id is its span id) joins the first message call not yet joined of the same tool and
    the same arguments (any arguments, where the span kept none); a later span of a call id
    already seen (the tool run again: a retry) replaces the earlier one's result and error."""
    merged = list(from_messages)
    by_id = {f.call_id: i for i, f in enumerate(merged) if f.call_id is not None}
    joined: set[int] = set()
    alone: dict[str | None, Found] = {}
    for span in from_spans:
        index = by_id.get(span.call_id) if span.call_id is not None else None
        if index is None and span.call_id == span.extra.get("span_id"):
            index = next(
                (i for i, f in enumerate(from_messages) if i not in joined and _same(f, span)),
                None,
            )
        if index is None:
            alone[span.call_id] = span  # a retry's span: the last attempt's outcome
        else:
            joined.add(index)
            merged[index] = _joined(merged[index], span)
    return merged + list(alone.values())


def _same(message: Found, span: Found) -> bool:
    if message.name != span.name:
        return False
    return span.arguments is None or _same_arguments(message.arguments, span.arguments)


def _joined(message: Found, span: Found) -> Found:
    """The message's call with the span's result and error where the span carries either."""
    carries = span.result is not None or span.error is not None
    return replace(
        message,
        arguments=message.arguments if message.arguments is not None else span.arguments,
        result=span.result if span.result is not None else message.result,
        error=span.error if carries else message.error,
        source="spans",
        extra={**message.extra, **span.extra},
    )


def declared_tools(
    trace: dict[str, Any], spans: list[dict[str, Any]]
) -> tuple[ToolDefinition, ...]:
    """The tools the request declared (see the module's docstring), the first of each name."""
    raw: list[Any] = []
    for path in (("input", "tools"), ("metadata", "tools")):
        value = _path(trace, *path)
        raw.extend(value if isinstance(value, list) else [])
    raw.extend(span_definitions(spans))
    declared: dict[str, ToolDefinition] = {}
    for entry in raw:
        definition = _definition(entry)
        if definition is not None and definition.name not in declared:
            declared[definition.name] = definition
    return tuple(declared.values())


def _definition(entry: Any) -> ToolDefinition | None:
    if not isinstance(entry, dict):
        return None
    body = entry["function"] if isinstance(entry.get("function"), dict) else entry
    name = body.get("name")
    if not isinstance(name, str) or not name:
        return None
    description = body.get("description")
    parameters = json_value(body.get("parameters", body.get("input_schema")))
    return ToolDefinition(
        name=name,
        description=description if isinstance(description, str) else None,
        parameters=parameters if isinstance(parameters, dict) else None,
    )


def _path(document: dict[str, Any], *keys: str) -> Any:
    value: Any = document
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _id(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None
