"""One judge call's bookkeeping: its attempts so far (``Tally``) and its tool loop, within the
rule's bounds. The policy that drives them is the client's (``client.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine.verdicts import ToolBox
from ..errors import JudgeError
from ..models import TokenUsage
from ..ruleset.schema import PromptedRule
from .transport import ChatRequest


@dataclass
class ToolRequest:
    """An answer that calls tools instead of giving the verdict: the assistant message (to
    send back) and its calls."""

    message: dict[str, Any]
    calls: list[dict[str, Any]]


@dataclass
class Tally:
    """One ``judge`` call's attempts so far, by what became of them."""

    attempts: int = 0
    trouble: int = 0  # provider-wide failures in a row
    streak_started: float = 0.0  # when this call's run of provider-wide failures began
    unusable: int = 0  # answers that were no verdict
    tool_calls: int = 0
    spent: TokenUsage | None = None  # every answered attempt's tokens, unusable ones too

    def spend(self, usage: TokenUsage | None) -> None:
        if usage is not None:
            self.spent = usage if self.spent is None else self.spent + usage

    def error(self, message: str, kind: str) -> JudgeError:
        """The call fails: ``message``, with the attempts made and the tokens they used."""
        return JudgeError(message, kind=kind, attempts=self.attempts, usage=self.spent)


def tool_bound(rule: PromptedRule, tool_calls: int, spent: TokenUsage | None) -> str | None:
    """Which of the rule's tool-loop bounds ``tool_calls`` calls and ``spent`` tokens passed."""
    if tool_calls > rule.judge.max_tool_calls:
        return f"more than judge.max_tool_calls ({rule.judge.max_tool_calls}) calls"
    if spent is not None and spent.total_tokens > rule.judge.max_tool_tokens:
        return f"{spent.total_tokens} tokens, over judge.max_tool_tokens ({rule.judge.max_tool_tokens})"
    return None


def answer_tools(
    rule: PromptedRule, request: ChatRequest, asked: ToolRequest, tools: ToolBox, tally: Tally
) -> list[str]:
    """Add the judge's tool calls and their results to the conversation, within the rule's
    bounds (past them the call fails as ``tool_budget``); returns the results."""
    tally.tool_calls += len(asked.calls)
    if bound := tool_bound(rule, tally.tool_calls, tally.spent):
        raise tally.error(f"the judge's tool loop stopped: {bound}", "tool_budget")
    request.messages.append(asked.message)
    results = []
    for call in asked.calls:
        result = tools.call(call["function"]["name"], call["function"].get("arguments"))
        request.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        results.append(result)
    return results
