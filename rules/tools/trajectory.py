"""The trajectory check of this pack (issue 50, design record 50): a trace's tool calls against
the trajectory expected of it, at trace scope. The rule reads the whole trace (``trace: "@"``)
and the expected trajectory (a list of steps, or ``{"calls": [...], "match": "<mode>"}``); its
``match`` param is the mode where the expected value names none. An expected trajectory that
cannot be read is skipped with what is wrong with it (the trace's problem, not the agent's).
The comparison itself is ``stream.tools.trajectory`` (through ``stream.pack``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from stream.pack import (
    CheckParams,
    CheckResult,
    NotApplicable,
    TrajectoryError,
    TrajectoryMode,
    check,
    expected_trajectory,
    match_trajectory,
    tool_calls,
)


class TrajectoryParams(CheckParams):
    match: TrajectoryMode = Field(
        default="in_order",
        description="How the calls are compared with the expected steps (exact, in_order, "
        "any_order, subset, superset), where the expected value does not say",
    )


@check("trajectory_match", variables=("trace", "expected"), params=TrajectoryParams)
def check_trajectory_match(values: Mapping[str, Any], params: Any) -> CheckResult:
    """The trace's tool calls against the expected trajectory: 1 pass, 0 fail."""
    assert isinstance(params, TrajectoryParams)
    try:
        steps, mode = expected_trajectory(values["expected"], params.match)
    except TrajectoryError as exc:
        raise NotApplicable(f"the expected trajectory cannot be read: {exc}") from None
    trace = values["trace"]
    verdict = match_trajectory(tool_calls(trace if isinstance(trace, dict) else {}), steps, mode)
    if verdict.skipped or verdict.value is None:
        raise NotApplicable(verdict.reason)
    return CheckResult(verdict.value, f"{mode}: {verdict.reason}", verdict.label)
