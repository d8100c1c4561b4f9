"""One tool call as one source of a trace shows it, before the sources are merged (``Found``),
and the readings every source shares: a call's arguments, its result, and whether the result
says the call failed.

A result says the call failed (``failure``) in exactly these shapes:

- a JSON object (or the text of one) with an ``error`` key whose value is not empty
  (``null``, ``false``, ``""``, ``{}`` and ``[]`` are empty): the error is that value's
  ``message`` where it is an object with one, else the value as text;
- a JSON object with ``"isError": true`` (an MCP tool result): the error is its text content;
- text that begins with ``Error:`` (any case; LangChain's tool node writes this), or with
  ``An error occurred while running the tool`` (the OpenAI Agents SDK's failure message);
- a tool message with ``"status": "error"`` (LangChain's ``ToolMessage``) or
  ``"is_error": true`` (``message_failure``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

# a call whose source had no arguments field (unknown arguments, not empty ones): its extra
MISSING = "arguments_missing"
AGENTS_SDK_FAILURE = "An error occurred while running the tool"
_EMPTY: tuple[Any, ...] = (None, False, "", {}, [])


@dataclass
class Found:
    """One call as one source shows it: ``call_id`` None where the source carries no id;
    ``arguments`` the raw value (text, or a JSON value where the source keeps one)."""

    call_id: str | None
    name: str
    arguments: Any = None
    result: Any = None
    error: str | None = None
    turn: int = 0
    user: str | None = None
    assistant: str | None = None
    source: str = "messages"
    extra: dict[str, Any] = field(default_factory=dict)


def json_value(value: Any) -> Any:
    """``value`` parsed where it is the text of a JSON object or array, else ``value``."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


class NotJSONError(ValueError):
    """A call's arguments are not JSON (the message names where, never the text)."""


def _no_constants(name: str) -> Any:
    raise NotJSONError(f"{name} is not JSON")


def parse_arguments(text: str) -> Any:
    """The JSON value of a call's raw arguments: empty (or blank) text is ``{}``, as OpenAI's
    Agents SDK reads a call without arguments; NaN and Infinity are not JSON. Raises
    ``NotJSONError`` saying where the text stops being JSON, never quoting it. The one reader
    of arguments: the calls' ``parsed`` and the checks agree on every text."""
    if not text.strip():
        return {}
    try:
        return json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:  # its message names a position, not the text
        raise NotJSONError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise NotJSONError("nested too deeply") from None


def arguments_of(value: Any) -> tuple[str, Any, bool]:
    """A call's arguments as (raw text, parsed JSON value, whether it parsed): the text as
    the model wrote it, read by ``parse_arguments``; a value a source kept as JSON is written
    back as JSON text. No arguments recorded (None: the source has no arguments field, or
    content capture was off) is ``""`` that did not parse: unknown, unlike empty text."""
    if value is None:
        return "", None, False
    if isinstance(value, str):
        try:
            return value, parse_arguments(value), True
        except NotJSONError:
            return value, None, False
    try:
        return orjson.dumps(value).decode(), value, True
    except TypeError:  # orjson.JSONEncodeError is one
        return str(value), None, False


def text_of(content: Any) -> str | None:
    """A message's content as text: a string as it is, content parts' text joined (OpenAI's
    ``{"type": "text", "text"}`` and the GenAI conventions' ``{"type": "text", "content"}``);
    None where there is no text."""
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        texts = [
            str(part.get("text", part.get("content", "")))
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text")
        ]
        return "\n".join(t for t in texts if t) or None
    return None


def failure(result: Any) -> str | None:
    """The error a tool's result reports, in the shapes the module's docstring lists."""
    value = json_value(result)
    if isinstance(value, dict):
        if value.get("error") not in _EMPTY:
            return _error_text(value["error"])
        if value.get("isError") is True:
            return text_of(value.get("content")) or _error_text(value)
        return None
    if isinstance(value, str):
        text = value.strip()
        if text[:6].lower() == "error:" or text.startswith(AGENTS_SDK_FAILURE):
            return text
    return None


def message_failure(message: dict[str, Any], content: Any) -> str | None:
    """The error a tool message reports: its own status, else its content's."""
    if message.get("status") == "error" or message.get("is_error") is True:
        return text_of(content) or (_error_text(content) if content not in _EMPTY else "error")
    return failure(content)


def _error_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        return str(value["message"])
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)
