"""The judge client's policy around a decision model (issue 46, item 1).

A ``judge.api: decisions`` rule is judged by OpenAI's Decisions API on the judge's endpoint:
the rendered prompt (its system part as a system message) is the input, the rule's question
(``judge.instructions``, else its description) is asked in the shape of its output
(``decision_questions.question_of``), and the answer is read as a verdict on the rule's scale
with the probabilities, confidence and expected value in the score's ``details.decision``.
Attempts, Retry-After, pacing (one pacer per model), the judge's health and the call metrics
are the chat client's (``JudgeClient``), which this subclasses; the verdict cache, budgets and
prices apply around it as for any judge (the model's list price: ``engine/spend.py``). A
refused question is a refusal (``refused``: not asked again); an answer outside the rule's
labels is unusable (asked again, up to the attempt budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..engine.verdicts import ParsedAnswer, ToolBox, Verdict
from ..errors import JudgeError
from ..ruleset.schema import PromptedRule
from ..ruleset.specs import OutputSpec
from .answers import Quoted
from .calls import ToolRequest
from .client import JudgeClient
from .config import JudgeConfig
from .contract import AnswerParser
from .decision_questions import question_of, verdict_of
from .decisions_api import OpenAIDecisionsAPI
from .transport import Decided, DecisionRequest, DecisionsAPI


@dataclass
class RuleDecision(DecisionRequest):
    """A decision request for one rule, with the output its answer is read against."""

    output: OutputSpec | None = None


class DecisionClient(JudgeClient):
    """Verdicts from a decision model, with the chat client's policy around each call."""

    def __init__(
        self,
        config: JudgeConfig,
        observer: Any = None,
        decisions: DecisionsAPI | None = None,
        **options: Any,
    ) -> None:
        secret = config.api_key.get_secret_value() if config.api_key else None
        self.decisions_api = decisions or OpenAIDecisionsAPI(
            base_url=config.base_url, api_key=secret, timeout_s=config.timeout_s
        )
        super().__init__(config, observer, api=cast(Any, self.decisions_api), **options)

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        return await self.judged(rule, prompt, system, quoted, None)

    def _request(  # type: ignore[override]
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None,
        schema: dict[str, Any] | None,
        tools: ToolBox | None,
    ) -> RuleDecision:
        messages: list[dict[str, Any]] = []
        if system is not None:
            messages.append({"type": "message", "role": "system", "content": system})
        messages.append({"type": "message", "role": "user", "content": prompt})
        instructions = rule.judge.instructions or rule.description or rule.id
        question = question_of(rule.output, instructions, rule.id)
        model = rule.judge.model or self.default_model
        return RuleDecision(model, messages, [question], output=rule.output)

    async def _send(self, request: Any) -> Any:
        """One request to the Decisions API, paced by ``JudgeClient._call`` as a chat call
        is (``transport.estimate_tokens`` counts a decision request's characters / 4)."""
        return await self.decisions_api.decide(request)

    def _read(  # type: ignore[override]
        self,
        request: RuleDecision,
        answer: Decided,
        parse: AnswerParser,
        quoted: Quoted,
        elapsed: float | None,
    ) -> Verdict | ToolRequest | JudgeError:
        model, usage = request.model, answer.usage
        output = request.output
        assert output is not None
        try:
            if len(answer.answers) != 1:
                raise ValueError(f"{len(answer.answers)} answers to one question")
            verdict = verdict_of(output, answer.answers[0])
        except (ValueError, KeyError, TypeError) as exc:
            self._observe_call(model, "invalid_answer", elapsed, usage)
            message = f"unusable decision: {exc}; the answer was {str(answer.answers)[:300]!r}"
            return JudgeError(self._redact(message), kind="invalid_answer")
        if verdict is None:
            self._observe_call(model, "refused", elapsed, usage)
            return JudgeError("the decision model declined to answer", kind="refused")
        self._observe_call(model, "ok", elapsed, usage)
        label = verdict.label if output.type == "choice" else output.label_for(verdict.value)
        decision = {
            "probabilities": verdict.probabilities,
            "confidence": verdict.confidence,
            "expected": verdict.expected,
            "label": verdict.label,
        }
        parsed = ParsedAnswer(verdict.value, label, None, decision=decision)
        return Verdict(parsed, answer.model, (elapsed or 0.0) * 1000.0, usage, 1)


def judge_client(config: JudgeConfig, observer: Any = None) -> JudgeClient:
    """The worker's judge client: chat rules on the endpoint's chat completions, decision
    rules (``judge.api: decisions``) on its Decisions API, the same policy around each."""
    decisions = DecisionClient(config, observer, watched=False)
    return JudgeClient(config, observer, decisions=decisions)
