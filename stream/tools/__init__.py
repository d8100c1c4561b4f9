"""An agent's tool calls as targets of their own (issue 50, design record 49): each call in a
trace, from the trace model's messages or from OpenTelemetry spans (``calls``), and the
deterministic checks of one call (``checks``). Pure: imports no Kafka, Faust or judge code;
the ``tool_call`` scope that will score these calls is still to be built."""

from .calls import tool_calls
from .checks import (
    CallVerdict,
    arguments_valid,
    call_succeeded,
    calls_per_turn,
    not_repeated,
    tool_declared,
)
from .model import ToolCall, ToolDefinition

__all__ = [
    "CallVerdict",
    "ToolCall",
    "ToolDefinition",
    "arguments_valid",
    "call_succeeded",
    "calls_per_turn",
    "not_repeated",
    "tool_calls",
    "tool_declared",
]
