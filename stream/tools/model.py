"""One tool call of an agent's trace, as a rule of scope ``tool_call`` reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool the request declared: its name, description and JSON schema of its arguments
    (``parameters``; None where the trace carries no schema)."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call: ``call_id`` is stable across redeliveries (the call's own id, or the span id
    of an ``execute_tool`` span, or ``<trace id>:<position>`` where neither exists);
    ``arguments`` is the raw text the model produced (it may not be JSON) and ``parsed`` its
    JSON value where it parses; ``result`` the tool's answer (text or JSON), ``error`` its error
    where the call failed; ``declared`` the tools the request declared (empty where the trace
    carries none); ``user`` the user message and ``assistant`` the assistant turn the call
    belongs to; ``position`` its 0-based index among the trace's calls and ``turn`` the index of
    the assistant turn that made it."""

    trace_id: str
    call_id: str
    name: str
    arguments: str
    parsed: Any = None
    parses: bool = False
    result: Any = None
    error: str | None = None
    declared: tuple[ToolDefinition, ...] = ()
    user: str | None = None
    assistant: str | None = None
    position: int = 0
    turn: int = 0
    source: str = "messages"  # messages | spans
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def definition(self) -> ToolDefinition | None:
        """The declared tool of this call's name, if the request declared it."""
        return next((d for d in self.declared if d.name == self.name), None)
