"""What the engine needs of a judge: the ``Judge`` protocol and the verdict it returns.

The engine never imports a provider SDK; ``stream.judge.client.JudgeClient`` (any OpenAI-compatible
endpoint) is one implementation, and tests can pass another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..models import TokenUsage
from ..ruleset.aggregators import CriterionAnswer
from ..ruleset.schema import PromptedRule

NO_JUDGE_REASON = (
    "no judge configured: set OPENAI_BASE_URL (and OPENAI_API_KEY if the endpoint needs one) "
    "to any OpenAI-compatible endpoint, e.g. Ollama http://localhost:11434/v1, "
    "vLLM http://localhost:8000/v1 or OpenAI https://api.openai.com/v1"
)


@dataclass(frozen=True)
class ParsedAnswer:
    """One verdict, validated against the rule's output spec."""

    raw_value: float
    label: str | None
    reason: str | None
    # a decision model's answer: each label's probability, the confidence and the expected
    # value on the rule's scale (``details.decision`` of the score); None from a chat judge
    decision: dict[str, Any] | None = None


# the remarks a rule asks for beside the ratings: lists (``notes``) and texts (``summaries``)
Remarks = dict[str, list[str] | str]


class RubricAnswers(dict[str, CriterionAnswer | None]):
    """A rubric's answers per criterion (None: an answer outside the allowed values; absent:
    left out), the remarks the rubric asks for beside them (``notes``: e.g. the critique's key
    strengths and weaknesses, and its summaries), and the aggregate's label as the judge
    stated it (``stated``, when the rule asks for it: e.g. seed 001's Overall Quality)."""

    def __init__(
        self,
        answers: dict[str, CriterionAnswer | None] | None = None,
        notes: Remarks | None = None,
        stated: str | None = None,
    ) -> None:
        super().__init__(answers or {})
        self.notes: Remarks = notes or {}
        self.stated = stated


@dataclass
class ComparisonAnswers:
    """A comparison's answer: each response's answers per criterion (``a`` and ``b``), the
    preference between them (None: missing or outside its scale, with ``preference_error``),
    and the remarks the rule asks for beside them (e.g. the prompt summary, the key
    differentiators)."""

    responses: dict[str, RubricAnswers]
    preference: ParsedAnswer | None
    preference_error: str | None = None
    notes: Remarks = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """A judge's validated answer for one rule and one prompt."""

    # a one-verdict rule's, a rubric's per criterion, or a comparison's
    answer: ParsedAnswer | RubricAnswers | ComparisonAnswers
    model: str
    latency_ms: float
    usage: TokenUsage | None  # None: the endpoint said nothing of the tokens used
    attempts: int
    # from the verdict cache: no call was made, nothing charged (usage None)
    cached: bool = False


class ToolBox(Protocol):
    """Tools a judge may call (``trace_tools.TraceTools``)."""

    definitions: list[dict[str, Any]]

    def call(self, name: str, arguments: str | None) -> str: ...


class Judge(Protocol):
    """Judges one rendered prompt for one rule; raises ``JudgeError`` when it cannot."""

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        """The verdict on ``prompt`` (with an optional system prompt), validated for ``rule``;
        ``quoted``: the trace's text as rendered into the prompt (a verdict copied from it is
        not the judge's own); ``tools``: what the judge may call to read the trace (a loop
        bounded by the rule's ``judge.max_tool_calls`` and ``max_tool_tokens``)."""
        ...
