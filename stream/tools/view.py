"""A tool call as the rules of scope ``tool_call`` read it: one JSON document per call
(``call_document``), and the call back from that document (``call_of``, for the shipped
``tools`` pack's checks, which read the document as any rule does).

The document (docs/rules.md, "Tool-call rules"):

- ``id`` the call's id (the target id of its scores), ``trace_id``, ``name``;
- ``arguments`` the raw text the model wrote, ``parsed`` its JSON value (null where it does not
  parse), ``parses``;
- ``result`` the tool's answer (JSON where it is the text of an object or array), ``error`` its
  error (null where the call succeeded);
- ``definition`` the declared tool of the call's name (``name``, ``description``,
  ``parameters``: its JSON schema), null where the request did not declare it; ``declared`` the
  names of every declared tool, ``tools`` every declared tool as ``definition`` is;
- ``user`` the user message and ``assistant`` the assistant turn it belongs to, ``position`` its
  index among the trace's calls, ``turn`` its assistant turn's index, ``source`` ``messages`` or
  ``spans``; ``recorded`` what its source did not record (``arguments``, ``content``);
- ``calls`` every call of the trace, each with ``id``, ``name``, ``arguments``, ``parsed``,
  ``error``, ``position`` and ``turn`` (the sequence a rule compares this call with);
- ``trace`` the whole trace as a trace rule's ``filter.when`` reads it.
"""

from __future__ import annotations

from typing import Any

from .found import MISSING
from .last import last_read
from .model import ToolCall, ToolDefinition


def definition_document(definition: ToolDefinition) -> dict[str, Any]:
    return {
        "name": definition.name,
        "description": definition.description,
        "parameters": definition.parameters,
    }


def brief(call: ToolCall) -> dict[str, Any]:
    """What ``calls`` holds of each call of the trace."""
    return {
        "id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "parsed": call.parsed,
        "error": call.error,
        "position": call.position,
        "turn": call.turn,
    }


def call_document(
    call: ToolCall,
    calls: list[dict[str, Any]],
    trace: dict[str, Any],
    tools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``call``'s document; ``calls`` is ``brief`` of every call of the trace and ``tools``
    ``definition_document`` of every declared tool (each made once per trace; None: made
    here), ``trace`` the trace's view."""
    definition = call.definition
    if tools is None:
        tools = [definition_document(d) for d in call.declared]
    return {
        "id": call.call_id,
        "trace_id": call.trace_id,
        "name": call.name,
        "arguments": call.arguments,
        "parsed": call.parsed,
        "parses": call.parses,
        "result": call.result,
        "error": call.error,
        "definition": definition_document(definition) if definition is not None else None,
        "declared": [d.name for d in call.declared],
        "tools": tools,
        "user": call.user,
        "assistant": call.assistant,
        "position": call.position,
        "turn": call.turn,
        "source": call.source,
        "recorded": {
            "arguments": not call.extra.get(MISSING),
            "content": not call.extra.get("content_missing"),
        },
        "calls": calls,
        "trace": trace,
    }


@last_read
def call_of(document: Any) -> ToolCall:
    """The call a ``call_document`` was made of, as far as the checks read it (its declared
    tools are its own definition and the declared names); ``ValueError`` when ``document`` is
    not a call's document. Read once for a call's rules (``last_read``)."""
    if not isinstance(document, dict) or not isinstance(document.get("name"), str):
        raise ValueError("not a tool call's document (scope: tool_call)")
    recorded = document.get("recorded") or {}
    extra: dict[str, Any] = {}
    if recorded.get("arguments") is False:
        extra[MISSING] = True
    if recorded.get("content") is False:
        extra["content_missing"] = True
    return ToolCall(
        trace_id=str(document.get("trace_id") or ""),
        call_id=str(document.get("id") or ""),
        name=document["name"],
        arguments=str(document.get("arguments") or ""),
        parsed=document.get("parsed"),
        parses=bool(document.get("parses")),
        result=document.get("result"),
        error=document.get("error"),
        declared=_declared(document),
        user=document.get("user"),
        assistant=document.get("assistant"),
        position=int(document.get("position") or 0),
        turn=int(document.get("turn") or 0),
        source=str(document.get("source") or "messages"),
        extra=extra,
    )


@last_read.by(lambda document: document.get("calls"))  # one list for a trace's calls
def calls_of(document: dict[str, Any]) -> list[ToolCall]:
    """The trace's calls from a call's document (``calls``), as the trace-wide checks read
    them: name, arguments, turn and position; read once for the trace (every call's document
    shares its list)."""
    trace_id = str(document.get("trace_id") or "")
    return [
        ToolCall(
            trace_id=trace_id,
            call_id=str(entry.get("id") or ""),
            name=str(entry.get("name") or ""),
            arguments=str(entry.get("arguments") or ""),
            parsed=entry.get("parsed"),
            error=entry.get("error"),
            position=int(entry.get("position") or 0),
            turn=int(entry.get("turn") or 0),
        )
        for entry in document.get("calls") or []
        if isinstance(entry, dict)
    ]


def _declared(document: dict[str, Any]) -> tuple[ToolDefinition, ...]:
    own = document.get("definition")
    declared = [
        ToolDefinition(str(own["name"]), own.get("description"), own.get("parameters"))
        if isinstance(own, dict) and own.get("name") == name
        else ToolDefinition(str(name))
        for name in document.get("declared") or []
    ]
    return tuple(declared)
