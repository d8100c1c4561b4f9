"""The judge client's policy over a scripted transport: what it does with each provider-neutral
outcome, whatever the endpoint behind it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fixtures import fretcoach_rules, settings

from stream.engine.verdicts import ParsedAnswer
from stream.errors import JudgeError
from stream.judge.client import JudgeClient
from stream.judge.transport import Answered, ChatRequest, Failed
from stream.models import TokenUsage
from stream.ruleset.schema import LLMJudgeRule

USAGE = TokenUsage(prompt_tokens=10, completion_tokens=5, total_tokens=15)


class ScriptedAPI:
    """A transport that gives its outcomes in order and keeps what it was asked."""

    def __init__(self, *outcomes: Answered | Failed) -> None:
        self.outcomes = list(outcomes)
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> Answered | Failed:
        self.requests.append(replace(request, messages=list(request.messages)))
        return self.outcomes.pop(0)

    async def close(self) -> None:
        pass


def answered(content: str) -> Answered:
    return Answered(content=content, tool_calls=[], usage=USAGE, model="m-1", headers={})


def client_over(api: ScriptedAPI) -> JudgeClient:
    config = settings(openai_api_key="sk-test-secret").judge_config()
    return JudgeClient(config, api=api)


def rule() -> LLMJudgeRule:
    found = next(r for r in fretcoach_rules().rules if r.id == "hub_answer_correctness")
    assert isinstance(found, LLMJudgeRule)
    return found


async def test_a_refused_schema_is_dropped_and_the_question_asked_again_at_once() -> None:
    api = ScriptedAPI(
        Failed("structured_output", "structured output rejected (400)", 400),
        answered("score: 0.5\nreason: half right"),
    )
    client = client_over(api)
    verdict = await client.judge(rule(), "p")
    assert isinstance(verdict.answer, ParsedAnswer) and verdict.answer.raw_value == 0.5
    assert (verdict.model, verdict.attempts) == ("m-1", 2)
    assert api.requests[0].schema is not None and api.requests[1].schema is None
    assert not client.structured


async def test_a_refused_request_fails_at_once_without_the_key() -> None:
    api = ScriptedAPI(
        Failed("client_error", "judge refused the request (401): sk-test-secret", 401)
    )
    with pytest.raises(JudgeError) as info:
        await client_over(api).judge(rule(), "p")
    assert info.value.kind == "client_error" and info.value.attempts == 1
    assert str(info.value) == "judge refused the request (401): ***"


async def test_transient_trouble_is_retried_and_the_answered_tokens_add_up() -> None:
    api = ScriptedAPI(
        Failed("connection", "cannot reach the judge: refused"),
        answered("no idea"),
        answered('{"score": 0.9, "reason": "good"}'),
    )
    verdict = await client_over(api).judge(rule(), "p")
    assert verdict.attempts == 3 and verdict.usage == USAGE + USAGE


async def test_each_model_has_its_own_pacer() -> None:
    """Two rules on two models of one endpoint: a 429 on one does not slow the other."""
    api = ScriptedAPI(
        Failed("rate_limited", "rate limited (429)", 429, None, {}),
        answered('{"score": 0.5, "reason": "r"}'),
        answered('{"score": 0.5, "reason": "r"}'),
    )
    client = client_over(api)
    slow = rule().model_copy(update={"judge": rule().judge.model_copy(update={"model": "big"})})
    await client.judge(slow, "p")
    await client.judge(rule(), "p")
    assert [r.model for r in api.requests] == ["big", "big", client.default_model]
    assert client.limiter_for("big").limit < client.limiter_for(client.default_model).limit
    assert client.limiter_for("big") is not client.limiter
