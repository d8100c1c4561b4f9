"""Mapped values as prompt text, in the formats a rule file can name."""

from __future__ import annotations

from typing import Any

import orjson


def format_value(value: Any, fmt: str, tag: str | None = None) -> str:
    """Render a mapped value in one of the variable formats a rule file can name."""
    if fmt == "json":
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    if fmt == "bullets" and isinstance(value, list):
        return "\n- ".join(["", *(render_value(item) for item in value)])
    if fmt == "tagged":
        items = value if isinstance(value, list) else [value]
        return "\n".join(f"<{tag}>{render_value(item)}</{tag}>" for item in items)
    if fmt == "tagged_fields" and isinstance(value, dict):
        return "\n".join(f"<{key}>{render_value(item)}</{key}>" for key, item in value.items())
    if fmt == "transcript" and isinstance(value, list):
        return "\n\n".join(_transcript_line(message) for message in value)
    return render_value(value)


def _transcript_line(message: Any) -> str:
    if isinstance(message, dict) and "content" in message:
        role = str(message.get("role") or "message")
        return f"{role[:1].upper()}{role[1:]}: {render_value(message['content'])}"
    return render_value(message)


def render_value(value: Any) -> str:
    """Turn a mapped value into prompt text.

    Strings go in verbatim. Chat content given as a list of parts (OpenAI/Anthropic style)
    becomes the text of its text parts, one per line, with a placeholder for non-text parts.
    Anything else (numbers, objects, lists of messages) becomes indented JSON, as Opik does.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(_is_content_part(p) for p in value):
        return "\n".join(_render_part(p) for p in value)
    if isinstance(value, bool | int | float):
        return orjson.dumps(value).decode()
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def _is_content_part(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("type"), str)


def _render_part(part: dict[str, Any]) -> str:
    if isinstance(part.get("text"), str):
        return str(part["text"])
    return f"[{part['type']}]"
