"""A span's input and output as chat messages, from the attributes the instrumentations
write:

- GenAI semantic conventions: ``gen_ai.input.messages`` and ``gen_ai.output.messages``
  (JSON messages with typed parts), ``gen_ai.system_instructions``, and the deprecated
  flattened ``gen_ai.prompt.N.role/content`` and ``gen_ai.completion.N.role/content``;
- OpenInference: ``llm.input_messages.N.message.role/content``,
  ``llm.output_messages.N.message.role/content``, ``input.value`` and ``output.value``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson


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
    """GenAI messages (a JSON list) as chat messages; anything else (a number, an object: an
    instrumentation's bug or a hostile span) reads as none, never as an exception."""
    loaded = _json(value)
    messages = []
    for message in loaded if isinstance(loaded, list) else []:
        if not isinstance(message, dict):
            continue
        parts = message.get("parts")
        chat: dict[str, Any] = {"role": message.get("role"), "content": _parts_text(parts)}
        calls = [
            p
            for p in (parts if isinstance(parts, list) else [])
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
