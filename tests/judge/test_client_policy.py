"""The judge client's policy over a scripted transport: what it does with each provider-neutral
outcome, whatever the endpoint behind it."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from fixtures import fretcoach_rules, settings
from prometheus_client import CollectorRegistry

from stream.engine.verdicts import ParsedAnswer
from stream.errors import JudgeError
from stream.judge.client import JudgeClient
from stream.judge.transport import Answered, ChatRequest, Failed
from stream.metrics import ScorerMetrics, sample_value
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
    # for this rule on this model only: it asks without a schema from now on, and another
    # rule still asks with one
    api.outcomes += [answered('{"score": 1, "reason": "r"}')] * 2
    await client.judge(rule(), "p")
    other = next(r for r in fretcoach_rules().rules if r.id == "hub_response_clarity")
    assert isinstance(other, LLMJudgeRule)
    await client.judge(other, "p")
    assert api.requests[2].schema is None and api.requests[3].schema is not None


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
    big, default = client.limiter_for("big"), client.limiter_for(client.default_model)
    assert big is not default
    refused = [s.refused for s in (big.requests.segment, *big.requests.closing) if s]
    assert sum(refused) == 1  # the 429 is "big"'s to measure
    assert default.requests.segment is not None and default.requests.segment.refused == 0


async def test_an_exhausted_quota_fails_at_once_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OpenAI answers 429 ``insufficient_quota`` when billing, not a rate, stops the calls:
    waiting would not help, so the score says so at once instead of after an outage's wait."""
    quota = Failed(
        "quota_exhausted", "the judge's quota is exhausted (429 insufficient_quota)", 429
    )
    client = client_over(ScriptedAPI(quota, quota))
    with caplog.at_level(logging.WARNING, logger="stream.judge.client"):
        for _ in range(2):
            with pytest.raises(JudgeError) as info:
                await client.judge(rule(), "p")
            assert (info.value.kind, info.value.attempts) == ("quota_exhausted", 1)
    assert sum("quota exhausted" in r.getMessage() for r in caplog.records) == 1


async def test_a_model_that_refuses_temperature_and_max_tokens_is_asked_without_them() -> None:
    """Reasoning models answer 400 ``unsupported_value`` for a temperature other than their own
    and ``unsupported_parameter`` for max_tokens (they take max_completion_tokens): the call is
    asked again at once without them, and so is every later call to that model."""
    capped = rule().model_copy(
        update={"judge": rule().judge.model_copy(update={"max_tokens": 300})}
    )
    api = ScriptedAPI(
        Failed("unsupported_parameter", "no temperature", 400, param="temperature"),
        Failed("unsupported_parameter", "no max_tokens", 400, param="max_tokens"),
        answered('{"score": 0.5, "reason": "r"}'),
        answered('{"score": 0.5, "reason": "r"}'),
    )
    client = client_over(api)
    verdict = await client.judge(capped, "p")
    assert verdict.attempts == 3
    first, second, third = api.requests[:3]
    assert (first.temperature, first.max_tokens_name) == (0.0, "max_tokens")
    assert (second.temperature, second.max_tokens_name) == (None, "max_tokens")
    assert (third.temperature, third.max_tokens_name) == (None, "max_completion_tokens")
    await client.judge(capped, "p")
    assert (api.requests[3].temperature, api.requests[3].max_tokens_name) == (
        None,
        "max_completion_tokens",
    )


async def test_a_parameter_the_judge_cannot_do_without_fails_at_once() -> None:
    api = ScriptedAPI(Failed("unsupported_parameter", "no messages", 400, param="messages"))
    with pytest.raises(JudgeError) as info:
        await client_over(api).judge(rule(), "p")
    assert (info.value.kind, info.value.attempts) == ("unsupported_parameter", 1)


async def test_an_answer_cut_at_its_token_cap_fails_at_once_saying_so() -> None:
    cut = replace(
        answered('{"score": 0.5, "reason": "the answer went on and'), finish_reason="length"
    )
    with pytest.raises(JudgeError) as info:
        await client_over(ScriptedAPI(cut)).judge(rule(), "p")
    assert (info.value.kind, info.value.attempts) == ("answer_cut", 1)
    assert "finish_reason: length" in str(info.value)
    assert info.value.usage == USAGE  # it cost tokens all the same


async def test_a_declined_answer_fails_at_once_quoting_the_refusal() -> None:
    declined = replace(answered(""), content=None, refusal="I can't help with that.")
    with pytest.raises(JudgeError) as info:
        await client_over(ScriptedAPI(declined)).judge(rule(), "p")
    assert (info.value.kind, info.value.attempts) == ("refused", 1)
    assert "I can't help with that." in str(info.value)


async def test_an_answer_without_usage_has_no_usage_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bare = replace(answered('{"score": 0.5, "reason": "r"}'), usage=None)
    client = client_over(ScriptedAPI(bare, bare))
    with caplog.at_level(logging.WARNING, logger="stream.judge.client"):
        verdicts = [await client.judge(rule(), "p") for _ in range(2)]
    assert [v.usage for v in verdicts] == [None, None]
    assert sum("no token usage" in r.getMessage() for r in caplog.records) == 1


async def test_each_model_s_pace_and_announced_token_limit_are_exported() -> None:
    """``scorer_judge_pace_rps{model,reason}`` and ``scorer_judge_token_limit_per_minute``:
    read at scrape time from each model's pacer."""
    metrics = ScorerMetrics(CollectorRegistry())
    announced = {"x-ratelimit-limit-requests": "600", "x-ratelimit-limit-tokens": "60000"}
    api = ScriptedAPI(
        replace(answered('{"score": 0.5, "reason": "r"}'), headers=announced),
    )
    client = JudgeClient(settings(openai_api_key="k").judge_config(), metrics, api=api)
    client.limiter_for("quiet")
    await client.judge(rule(), "p")
    page = metrics.exposition()[0].decode()
    model = client.default_model
    pace = sample_value(page, "scorer_judge_pace_rps", model=model, reason="announced")
    assert pace == pytest.approx(600 / 60 * 0.985)
    assert sample_value(page, "scorer_judge_token_limit_per_minute", model=model) == 60000
    assert 'scorer_judge_pace_rps{model="quiet",reason="none"} 0.0' in page
    assert 'scorer_judge_token_limit_per_minute{model="quiet"} NaN' in page


def test_every_call_refused_for_a_minute_is_an_outage_to_the_operator() -> None:
    """429s never take the judge down (pacing holds the calls), but a model whose every call
    has been refused for a minute shows as unavailable (``scorer_judge_available``, and so
    the ``ScorerJudgeUnavailable`` alert after two minutes more)."""
    now = [1000.0]
    client = JudgeClient(
        settings(openai_api_key="k").judge_config(), api=ScriptedAPI(), clock=lambda: now[0]
    )
    limiter = client.limiter_for("big")
    limiter._hold(now[0], 0.0, "requests")
    assert client.available()
    now[0] += 61.0
    assert not client.available()


async def test_a_probe_that_fails_past_its_attempts_hands_probing_on() -> None:
    """A call whose own run of 5xx began while other calls were still answered, then became
    the probe of a down judge: its last failure is the outage's, not the request's, and the
    next probe must be able to go (before, it raised with the probe still marked in flight,
    and every waiting call waited for the outage limit: found by the real-clock bench)."""
    overloaded = Failed("server_error", "judge server error (503): overloaded", 503)
    client: JudgeClient

    class OutageAPI(ScriptedAPI):
        async def complete(self, request: ChatRequest) -> Answered | Failed:
            if len(self.requests) == 1:
                client.health.answered(False)  # another call answered after this one's run began
                client.health._go_down("overloaded")  # then the judge went down
            return await super().complete(request)

    api = OutageAPI(*[overloaded] * 6, answered('{"score": 0.9, "reason": "good"}'))
    client = client_over(api)
    verdict = await client.judge(rule(), "p")
    assert verdict.attempts == 7  # waited out the outage as probes, then judged
    assert client.health.available and not client.health._probing
