"""The judge client against a real local OpenAI-compatible server with scripted answers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest
from fixtures import as_trace, fretcoach_rules, hub_trace, live_trace, scorer, settings
from scripted_judge import MockJudge, Reply

from stream.errors import JudgeError
from stream.judge.client import JudgeClient
from stream.models import TraceDecisions
from stream.ruleset.schema import LLMJudgeRule

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


async def test_garbage_answers_use_the_attempt_budget_then_an_error_quoting_the_last(
    judge: MockJudge,
) -> None:
    judge.script(CORRECTNESS_PROMPT, "I'd rather not say.", "Still no.", "No way.", "Never.")
    score = await score_of(judge, "hub_answer_correctness", hub_trace())
    assert score["status"] == "error"
    assert (
        "invalid_answer" in score["status_reason"]
        and "no score in the answer" in score["status_reason"]
        and "'Never.'" in score["status_reason"]  # the last answer is quoted
        and "after 4 attempts" in score["status_reason"]
    )
    assert score["value"] is None and score["raw_value"] is None
    assert sum(CORRECTNESS_PROMPT in p for p in judge.prompts()) == 4  # the whole budget
    # the four unusable answers were paid for: their tokens are on the error score
    (prompt,) = {p for p in judge.prompts() if CORRECTNESS_PROMPT in p}
    assert score["usage"]["prompt_tokens"] == 4 * (len(prompt) // 4)


async def test_an_unusable_answer_then_a_fresh_call_answered_gives_the_score(
    judge: MockJudge,
) -> None:
    judge.script(CORRECTNESS_PROMPT, "hmm", "let me think", '{"score": 0.8, "reason": "fine"}')
    score = await score_of(judge, "hub_answer_correctness", hub_trace())
    assert score["status"] == "ok" and score["value"] == 0.8
    # three calls answered, three calls' tokens on the score
    (prompt,) = {p for p in judge.prompts() if CORRECTNESS_PROMPT in p}
    assert score["usage"]["prompt_tokens"] == 3 * (len(prompt) // 4)


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


async def test_concurrency_is_bounded() -> None:
    with MockJudge(latency_s=0.05) as server:
        client = JudgeClient(
            settings(openai_base_url=server.base_url, judge_max_concurrency=3).judge_config()
        )
        rule = scorer(None).ruleset.rules[0]
        assert isinstance(rule, LLMJudgeRule)
        import asyncio

        await asyncio.gather(*(client.judge(rule, "prompt") for _ in range(12)))
        await client.close()
        assert server.max_concurrent <= 3


async def judge_failure(server: MockJudge, **overrides: object) -> JudgeError:
    """Call the judge client directly with the first LLM rule; return the error it raises."""
    client = JudgeClient(settings(openai_base_url=server.base_url, **overrides).judge_config())
    rule = next(r for r in scorer(None).ruleset.rules if isinstance(r, LLMJudgeRule))
    with pytest.raises(JudgeError) as info:
        await client.judge(rule, "p")
    await client.close()
    return info.value


async def test_a_judge_down_past_the_outage_limit_fails_as_unavailable() -> None:
    with MockJudge(default=Reply(status=503, content="down")) as server:
        started = time.monotonic()
        error = await judge_failure(server, judge_max_attempts=2, judge_outage_max_s=0.5)
        assert error.kind == "unavailable"
        assert "over SCORER_JUDGE_OUTAGE_MAX_S=0.5" in str(error)
        assert "judge server error (503)" in str(error)  # the last trouble seen
        assert time.monotonic() - started >= 0.5
        assert len(server.requests) >= 3  # the budget, then probes


async def test_a_judge_slower_than_the_timeout_is_retried_then_held_as_unavailable() -> None:
    with MockJudge(latency_s=1.0) as server:
        error = await judge_failure(
            server, judge_timeout_s=0.2, judge_max_attempts=2, judge_outage_max_s=0.5
        )
        assert error.kind == "unavailable" and "judge call timed out" in str(error)
        assert len(server.requests) >= 2


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


async def test_an_outage_delays_scores_and_errors_none() -> None:
    """Every call made while the judge is down waits and is answered once it is back."""
    with MockJudge() as server:
        server.script(CORRECTNESS_PROMPT, '{"score": 0.9, "reason": "good"}')
        s = scorer(server.base_url, judge_outage_max_s=30.0)
        document = hub_trace()
        server.go_down(1.0)
        started = time.monotonic()
        results = await asyncio.gather(
            *(s.score_trace(as_trace(document), document) for _ in range(6))
        )
        assert time.monotonic() - started >= 1.0
        scores = [x for r in results for x in r.scores if x.rule_id == "hub_answer_correctness"]
        assert [x.status for x in scores] == ["ok"] * 6
        assert {x.value for x in scores} == {0.9}
        assert 503 in server.statuses and server.statuses[-1] == 200
        assert s.judge is not None
        await s.judge.close()


async def test_a_refused_response_format_is_counted_and_said_once(
    caplog: pytest.LogCaptureFixture, metric_value
) -> None:
    with MockJudge(reject_response_format=True) as server:
        server.script(LIVE_PROMPT, "Score: 4\nReason: fine.")
        s = scorer(server.base_url)
        before = metric_value(
            "scorer_judge_calls_total", model="gpt-4o-mini", outcome="client_error"
        )
        document = live_trace()
        with caplog.at_level(logging.WARNING, logger="stream.judge.client"):
            await asyncio.gather(*(s.score_trace(as_trace(document), document) for _ in range(4)))
        refused = server.statuses.count(400)
        assert refused >= 1
        after = metric_value(
            "scorer_judge_calls_total", model="gpt-4o-mini", outcome="client_error"
        )
        assert after - before == refused  # every refused call counted, once
        said = [r for r in caplog.records if "rejects structured output" in r.getMessage()]
        assert len(said) == 1


async def test_rationed_429s_past_the_attempt_budget_wait_their_turn_while_others_are_answered() -> (
    None
):
    """A 429 is the provider rationing, not a fault of the request: while other calls are
    answered, a call refused more often than the attempt budget keeps its turn and is scored."""
    with MockJudge() as server:
        limited = Reply(status=429, content="slow down", headers={"retry-after-ms": "20"})
        server.script("RATIONED", *[limited] * 6, '{"score": 0.7, "reason": "at last"}')
        server.script("ANSWERED", Reply(content='{"score": 0.9, "reason": "ok"}', delay_s=0.02))
        client = JudgeClient(
            settings(
                openai_base_url=server.base_url, judge_max_attempts=3, judge_backoff_base_s=0.01
            ).judge_config()
        )
        rule = next(r for r in fretcoach_rules().rules if r.id == "hub_answer_correctness")
        assert isinstance(rule, LLMJudgeRule)

        async def others() -> None:
            for i in range(8):
                await client.judge(rule, f"{CORRECTNESS_PROMPT} ANSWERED {i}")

        rationed, _ = await asyncio.gather(
            client.judge(rule, f"{CORRECTNESS_PROMPT} RATIONED"), others()
        )
        await client.close()
        assert rationed.attempts == 7 and rationed.answer.raw_value == 0.7  # type: ignore[union-attr]
        assert client.health.available
