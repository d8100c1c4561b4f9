"""The judge client against a real local OpenAI-compatible server with scripted answers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fixtures import as_trace, hub_trace, live_trace, scorer, settings

from stream.errors import JudgeError
from stream.judge import AdaptiveLimiter, JudgeClient, retry_after_seconds
from stream.mockjudge import MockJudge, Reply
from stream.models import TraceDecisions
from stream.rules import LLMJudgeRule

LIVE_PROMPT = "evaluating live guitar coach feedback quality"
CORRECTNESS_PROMPT = "evaluating an assistant's response quality"


@pytest.fixture
def judge() -> Iterator[MockJudge]:
    with MockJudge() as server:
        yield server


async def score_of(server: MockJudge, rule_id: str, document: dict) -> dict:
    s = scorer(server.base_url)
    result = await s.score_trace(as_trace(document), document)
    (score,) = [x for x in result.scores if x.rule_id == rule_id]
    assert s.judge is not None
    await s.judge.close()
    return score.model_dump()


async def test_live_coach_score_is_normalised_with_raw_value_and_label(judge: MockJudge) -> None:
    judge.script(LIVE_PROMPT, '{"score": 3, "reason": "Right metric, wordy."}')
    score = await score_of(judge, "studio_live_coach_feedback_quality", live_trace())
    assert score["status"] == "ok"
    assert score["raw_value"] == 3.0
    assert score["value"] == pytest.approx(2 / 3)
    assert score["scale"] == {"min": 1.0, "max": 4.0}
    assert score["label"] == "Very Good"
    assert score["reason"] == "Right metric, wordy."
    assert score["usage"]["total_tokens"] > 0
    request = judge.requests[-1]
    assert request["body"]["response_format"]["json_schema"]["schema"]["properties"]["score"] == {
        "type": "integer"
    }
    assert request["body"]["temperature"] == 0.0


async def test_garbage_answer_is_retried_once_then_an_error_score(judge: MockJudge) -> None:
    judge.script(CORRECTNESS_PROMPT, "I'd rather not say.")
    score = await score_of(judge, "hub_answer_correctness", hub_trace())
    assert score["status"] == "error"
    assert (
        "invalid_answer" in score["status_reason"]
        and "no score in the answer" in score["status_reason"]
    )
    assert score["value"] is None and score["raw_value"] is None
    assert sum(CORRECTNESS_PROMPT in p for p in judge.prompts()) == 2


async def test_out_of_range_then_valid_answer_gives_the_valid_score(judge: MockJudge) -> None:
    judge.script(
        CORRECTNESS_PROMPT, '{"score": 7, "reason": "x"}', '{"score": 0.4, "reason": "partial"}'
    )
    score = await score_of(judge, "hub_answer_correctness", hub_trace())
    assert (score["status"], score["value"], score["reason"]) == ("ok", 0.4, "partial")


async def test_out_of_range_every_time_is_an_error(judge: MockJudge) -> None:
    judge.script(CORRECTNESS_PROMPT, '{"score": 7, "reason": "x"}')
    score = await score_of(judge, "hub_answer_correctness", hub_trace())
    assert score["status"] == "error"
    assert "outside the scale [0, 1]" in score["status_reason"]


async def test_429_then_success_honours_retry_after(judge: MockJudge) -> None:
    judge.script(
        CORRECTNESS_PROMPT,
        Reply(status=429, content="slow down", headers={"retry-after": "0.3"}),
        '{"score": 0.9, "reason": "good"}',
    )
    started = time.monotonic()
    score = await score_of(judge, "hub_answer_correctness", hub_trace())
    assert score["status"] == "ok" and score["value"] == 0.9
    assert time.monotonic() - started >= 0.3


async def test_500s_until_the_budget_is_spent_give_an_error_score(
    judge: MockJudge, metric_value
) -> None:
    judge.script(CORRECTNESS_PROMPT, Reply(status=500, content="boom"))
    before = metric_value("scorer_judge_retries_total", model="gpt-4o-mini", reason="server_error")
    score = await score_of(judge, "hub_answer_correctness", hub_trace())
    assert score["status"] == "error"
    assert "server_error" in score["status_reason"] and "after 4 attempts" in score["status_reason"]
    assert sum(CORRECTNESS_PROMPT in p for p in judge.prompts()) == 4
    assert (
        metric_value("scorer_judge_retries_total", model="gpt-4o-mini", reason="server_error")
        - before
        == 3
    )


async def test_the_api_key_is_sent_but_never_in_scores(judge: MockJudge) -> None:
    judge.script(CORRECTNESS_PROMPT, Reply(status=400, content="bad key sk-test-secret"))
    s = scorer(judge.base_url)
    document = hub_trace()
    result = await s.score_trace(as_trace(document), document)
    assert judge.requests[0]["headers"]["Authorization"] == "Bearer sk-test-secret"
    decisions = TraceDecisions(document["id"], "fretcoach", result.decisions)
    blob = b"".join(x.to_bytes() for x in result.scores) + decisions.to_bytes()
    assert b"sk-test-secret" not in blob
    assert b"bad key ***" in blob


async def test_unreachable_judge_is_an_error_score_not_a_crash() -> None:
    s = scorer("http://127.0.0.1:9/v1", judge_max_attempts=2)
    document = hub_trace()
    result = await s.score_trace(as_trace(document), document)
    statuses = {x.status for x in result.scores}
    assert statuses == {"error"}


async def test_no_judge_configured_gives_skipped_scores_saying_how() -> None:
    s = scorer(None)
    document = live_trace()
    result = await s.score_trace(as_trace(document), document)
    by_rule = {x.rule_id: x for x in result.scores}
    assert by_rule["studio_live_coach_feedback_quality"].status == "skipped"
    assert "OPENAI_BASE_URL" in by_rule["studio_live_coach_feedback_quality"].status_reason
    assert by_rule["studio_live_coach_feedback_format"].status == "ok"  # checks need no judge


async def test_missing_path_is_a_skipped_score_naming_it() -> None:
    document = hub_trace(5)  # output is null: an upstream error
    result = await scorer(None).score_trace(as_trace(document), document)
    score = next(x for x in result.scores if x.rule_id == "hub_answer_correctness")
    assert score.status == "skipped"
    assert "'output.messages[-1].content' is missing" in score.status_reason
    decision = next(d for d in result.decisions if d.rule_id == "hub_answer_correctness")
    assert decision.outcome == "skipped"


async def test_filtered_rules_only_leave_a_decision() -> None:
    document = live_trace()
    result = await scorer(None).score_trace(as_trace(document), document)
    filtered = {d.rule_id for d in result.decisions if d.outcome == "filtered"}
    assert "hub_answer_correctness" in filtered
    assert not any(x.rule_id == "hub_answer_correctness" for x in result.scores)


async def test_concurrency_is_bounded() -> None:
    with MockJudge(latency_s=0.05) as server:
        client = JudgeClient(settings(openai_base_url=server.base_url, judge_max_concurrency=3))
        rule = scorer(None).ruleset.rules[0]
        assert isinstance(rule, LLMJudgeRule)
        import asyncio

        await asyncio.gather(*(client.judge(rule, "prompt") for _ in range(12)))
        await client.close()
        assert server.max_concurrent <= 3


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({}) is None


async def judge_failure(server: MockJudge, **overrides: object) -> JudgeError:
    """Call the judge client directly with the first LLM rule; return the error it raises."""
    client = JudgeClient(settings(openai_base_url=server.base_url, **overrides))
    rule = next(r for r in scorer(None).ruleset.rules if isinstance(r, LLMJudgeRule))
    with pytest.raises(JudgeError) as info:
        await client.judge(rule, "p")
    await client.close()
    return info.value


async def test_judge_error_carries_kind() -> None:
    with MockJudge(default=Reply(status=503, content="down")) as server:
        error = await judge_failure(server, judge_max_attempts=2)
        assert error.kind == "server_error" and error.attempts == 2


async def test_a_judge_slower_than_the_timeout_is_retried_then_an_error() -> None:
    with MockJudge(latency_s=1.0) as server:
        error = await judge_failure(server, judge_timeout_s=0.2, judge_max_attempts=2)
        assert error.kind == "timeout" and error.attempts == 2
        assert len(server.requests) == 2


def test_limiter_paces_to_an_announced_rate() -> None:
    limiter = AdaptiveLimiter(8)
    limiter.on_success({"x-ratelimit-limit-requests": "600"})
    assert limiter.announced
    assert limiter.interval == pytest.approx(0.1 / 0.985)


def test_limiter_measures_a_silent_limit_and_probes_back_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr("stream.judge.time.monotonic", lambda: clock[0])
    limiter = AdaptiveLimiter(8)
    for _ in range(100):  # 20 successes a second for 5 s
        clock[0] += 0.05
        limiter.on_success({})
    limiter.on_rate_limited(0.2, {})
    assert limiter.interval == pytest.approx(1 / (20 * 0.95), rel=0.02)
    assert limiter.limit == 4  # concurrency halved too
    cut = limiter.interval
    limiter.on_rate_limited(None, {})  # the same burst: no second cut within a second
    assert limiter.interval == cut
    for _ in range(20):  # a second of successes raises the pace by about 3 %
        clock[0] += 0.05
        limiter.on_success({})
    assert cut / limiter.interval == pytest.approx(1.03, rel=0.005)


async def test_an_endpoint_without_structured_output_gets_plain_requests() -> None:
    with MockJudge(reject_response_format=True) as server:
        server.script(LIVE_PROMPT, "Score: 4\nReason: compliant and precise.")
        s = scorer(server.base_url)
        for _ in range(2):
            document = live_trace()
            result = await s.score_trace(as_trace(document), document)
            score = next(
                x for x in result.scores if x.rule_id == "studio_live_coach_feedback_quality"
            )
            assert (score.status, score.raw_value, score.reason) == (
                "ok",
                4.0,
                "compliant and precise.",
            )
        assert server.statuses == [400, 200, 200]  # asked once with response_format, never again
        assert "response_format" not in server.requests[-1]["body"]
