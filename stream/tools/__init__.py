"""An agent's tool calls as targets of their own (issue 50, design record 49): each call in a
trace, from the trace model's messages or from OpenTelemetry spans (``calls``), and the
deterministic checks of one call (``checks``), and a trace's calls against an expected
trajectory (``trajectory``). Pure: imports no Kafka, Faust or judge code."""

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
from .trajectory import (
    MODES,
    Step,
    TrajectoryError,
    TrajectoryMode,
    expected_trajectory,
    match_trajectory,
)

__all__ = [
    "MODES",
    "CallVerdict",
    "Step",
    "ToolCall",
    "ToolDefinition",
    "TrajectoryError",
    "TrajectoryMode",
    "arguments_valid",
    "call_succeeded",
    "calls_per_turn",
    "expected_trajectory",
    "match_trajectory",
    "not_repeated",
    "tool_calls",
    "tool_declared",
]
