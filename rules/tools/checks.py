"""The deterministic checks of one tool call (issue 50): each a rule of scope ``tool_call`` in
this pack, reading the call's document (``call: "@"``) and giving 1 (pass) or 0 (fail). A
check with nothing to check (no declared tools, a schema that is not JSON Schema, arguments the
trace did not record) is skipped with its reason, never failed. The checks themselves are
``stream.tools.checks`` (through ``stream.pack``); this module only fits them to the rule files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from stream.pack import (
    CallVerdict,
    CheckParams,
    CheckResult,
    NotApplicable,
    ToolCall,
    arguments_valid,
    call_of,
    call_succeeded,
    calls_of,
    calls_per_turn,
    check,
    not_repeated,
    tool_declared,
)


class RepeatParams(CheckParams):
    max_repeats: int = Field(
        default=2, ge=1, description="The same tool with the same arguments, at most this often"
    )


class PerTurnParams(CheckParams):
    max_calls: int = Field(default=10, ge=1, description="At most this many calls in one turn")


def _result(verdict: CallVerdict) -> CheckResult:
    if verdict.skipped or verdict.value is None:
        raise NotApplicable(verdict.reason)
    return CheckResult(verdict.value, verdict.reason, verdict.label)


def _of_call(values: Mapping[str, Any], judged: Callable[[ToolCall], CallVerdict]) -> CheckResult:
    return _result(judged(call_of(values["call"])))


@check("arguments_valid", variables=("call",))
def check_arguments_valid(values: Mapping[str, Any], params: Any) -> CheckResult:
    """The arguments are JSON, an object, and fit the declared tool's JSON schema."""
    return _of_call(values, arguments_valid)


@check("call_succeeded", variables=("call",))
def check_call_succeeded(values: Mapping[str, Any], params: Any) -> CheckResult:
    """The call carries no error."""
    return _of_call(values, call_succeeded)


@check("tool_declared", variables=("call",))
def check_tool_declared(values: Mapping[str, Any], params: Any) -> CheckResult:
    """The tool is among those the request declared."""
    return _of_call(values, tool_declared)


@check("not_repeated", variables=("call",), params=RepeatParams)
def check_not_repeated(values: Mapping[str, Any], params: Any) -> CheckResult:
    """The same call (tool and arguments, key order ignored) at most ``max_repeats`` times in
    the trace: its later occurrences fail."""
    assert isinstance(params, RepeatParams)
    document = values["call"]
    return _result(not_repeated(call_of(document), calls_of(document), params.max_repeats))


@check("calls_per_turn", variables=("call",), params=PerTurnParams)
def check_calls_per_turn(values: Mapping[str, Any], params: Any) -> CheckResult:
    """At most ``max_calls`` calls in the call's assistant turn."""
    assert isinstance(params, PerTurnParams)
    document = values["call"]
    return _result(calls_per_turn(call_of(document), calls_of(document), params.max_calls))
