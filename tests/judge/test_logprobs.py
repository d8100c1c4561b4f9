"""A chat judge's verdict read through its log-probabilities (``judge.logprobs``; issue 46,
item 2): the reading of the tokens (``label_probs``), and the client against a real HTTP
endpoint that answers them as OpenAI's chat completions do, returns none, or refuses the
parameter as OpenAI's reasoning models do (``scripted_judge.MockJudge(logprobs=...)``)."""

from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from decisions_double import yes_no_rule
from fixtures import RULES_DIR, settings
from pydantic import ValidationError
from scripted_judge import MockJudge, Reply, token_logprobs

from stream.engine.verdicts import ParsedAnswer
from stream.judge.client import JudgeClient
from stream.judge.label_probs import read_probabilities
from stream.ruleset.loader import check_rules
from stream.ruleset.schema import LLMJudgeRule
from stream.ruleset.specs import OutputSpec

YES_NO = OutputSpec.model_validate({"type": "choice", "choices": {"yes": 1.0, "no": 0.0}})
FIVE = OutputSpec.model_validate({"type": "numeric", "min": 1, "max": 5, "integer": True})
TEN = OutputSpec.model_validate({"type": "numeric", "min": 1, "max": 10, "integer": True})


def tokens(content: str, alternatives: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    return token_logprobs(Reply(content=content, alternatives=alternatives), 20)


def test_an_integer_verdict_reads_each_levels_probability_at_its_token() -> None:
    content = '{"score": 4, "reason": "mostly right"}'
    read = read_probabilities(
        FIVE,
        ParsedAnswer(4.0, None, "mostly right"),
        content,
        tokens(content, {"4": {"4": 0.7, "3": 0.2, "5": 0.05, "I": 0.05}}),
    )
    assert read is not None
    assert read["probabilities"] == pytest.approx({"4": 0.7, "3": 0.2, "5": 0.05})
    assert read["confidence"] == pytest.approx(0.7)
    assert read["coverage"] == pytest.approx(0.95)  # "I" is no level
    assert read["expected"] == pytest.approx((4 * 0.7 + 3 * 0.2 + 5 * 0.05) / 0.95)
    assert (read["label"], read["source"]) == ("4", "logprobs")


def test_the_verdict_is_read_at_its_field_not_at_a_later_mention() -> None:
    content = '{"result": "no", "reason": "the user said yes but the answer is wrong"}'
    spec = OutputSpec.model_validate(
        {"type": "choice", "choices": {"yes": 1.0, "no": 0.0}, "verdict_field": "result"}
    )
    alternatives = {"no": {"no": 0.6, "yes": 0.4}, "yes": {"yes": 0.99, "no": 0.01}}
    # the double scripts the last "no" token: the verdict's own, the only one
    read = read_probabilities(
        spec, ParsedAnswer(0.0, "no", None), content, tokens(content, alternatives)
    )
    assert read is not None
    assert read["probabilities"] == pytest.approx({"no": 0.6, "yes": 0.4})
    assert read["confidence"] == pytest.approx(0.6)


def test_labels_of_several_tokens_are_followed_down_their_tokens() -> None:
    spec = OutputSpec.model_validate(
        {"type": "choice", "choices": {"very clear": 1.0, "very unclear": 0.0, "clear": 0.7}}
    )
    content = '{"choice": "very clear", "reason": "r"}'
    walked = tokens(
        content, {"very": {"very": 0.8, "clear": 0.2}, "clear": {"clear": 0.75, "unclear": 0.25}}
    )
    # the double's tokens split the space off: "very", " ", "clear"; the space is certain
    read = read_probabilities(spec, ParsedAnswer(1.0, "very clear", "r"), content, walked)
    assert read is not None
    assert read["probabilities"] == pytest.approx(
        {"very clear": 0.6, "very unclear": 0.2, "clear": 0.2}
    )
    assert read["confidence"] == pytest.approx(0.6)


def test_a_token_that_is_a_whole_label_is_not_read_as_the_start_of_a_longer_one() -> None:
    content = '{"score": 1, "reason": "r"}'
    read = read_probabilities(
        TEN, ParsedAnswer(1.0, None, "r"), content, tokens(content, {"1": {"1": 0.5, "10": 0.5}})
    )
    assert read is not None and read["probabilities"] == pytest.approx({"1": 0.5, "10": 0.5})


def test_score_lines_and_an_unreadable_verdict() -> None:
    content = "The answer is fine.\nscore: 3\njustification: ok"
    read = read_probabilities(
        FIVE, ParsedAnswer(3.0, None, "ok"), content, tokens(content, {"3": {"3": 0.9, "2": 0.1}})
    )
    assert read is not None and read["probabilities"] == pytest.approx({"3": 0.9, "2": 0.1})
    # a verdict the tokens do not hold, or a value off the scale's levels: nothing to read
    assert (
        read_probabilities(FIVE, ParsedAnswer(2.0, None, ""), content, tokens(content, {})) is None
    )
    assert (
        read_probabilities(FIVE, ParsedAnswer(2.5, None, ""), content, tokens(content, {})) is None
    )


def logprob_rule(**judge: Any) -> LLMJudgeRule:
    return yes_no_rule({"logprobs": True, **judge}, "Judge the answer: {{question}} {{answer}}")


async def judged(judge: MockJudge, rule: LLMJudgeRule, times: int = 1) -> list[Any]:
    cfg = settings(openai_base_url=judge.base_url, openai_api_key="sk-test")
    client = JudgeClient(cfg.judge_config())
    try:
        return [await client.judge(rule, "Judge the answer: 2+2? 4") for _ in range(times)]
    finally:
        await client.close()


async def test_a_logprobs_rule_asks_for_them_and_its_verdict_carries_the_distribution() -> None:
    with MockJudge() as judge:
        answer = '{"choice": "yes", "reason": "right"}'
        judge.script(
            "Judge the answer", Reply(answer, alternatives={"yes": {"yes": 0.8, "no": 0.2}})
        )
        (verdict,) = await judged(judge, logprob_rule())
        (sent,) = [r["body"] for r in judge.requests]
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 20)
    assert verdict.answer.label == "yes"  # the verdict the judge wrote, published as before
    assert verdict.answer.decision["probabilities"] == pytest.approx({"yes": 0.8, "no": 0.2})
    assert verdict.answer.decision["confidence"] == pytest.approx(0.8)


async def test_a_rule_without_logprobs_sends_what_it_sent_before() -> None:
    with MockJudge() as judge:
        judge.script("Judge the answer", '{"choice": "yes", "reason": "right"}')
        (verdict,) = await judged(
            judge, yes_no_rule({}, "Judge the answer: {{question}} {{answer}}")
        )
        (sent,) = [r["body"] for r in judge.requests]
    assert "logprobs" not in sent and "top_logprobs" not in sent
    assert verdict.answer.decision is None


async def test_an_endpoint_without_logprobs_is_said_once_and_verdicts_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    with MockJudge(logprobs="none") as judge:
        judge.script("Judge the answer", '{"choice": "no", "reason": "wrong"}')
        verdicts = await judged(judge, logprob_rule(), times=3)
    assert [v.answer.label for v in verdicts] == ["no"] * 3
    assert all(v.answer.decision is None for v in verdicts)
    said = [r for r in caplog.records if "no log-probabilities" in r.getMessage()]
    assert len(said) == 1


@pytest.mark.parametrize("refusal", ["refuse", "refuse_plainly"])
async def test_a_model_refusing_logprobs_is_asked_without_them_from_then_on(
    caplog: pytest.LogCaptureFixture, refusal: str
) -> None:
    caplog.set_level(logging.WARNING)
    with MockJudge(logprobs=refusal) as judge:
        judge.script("Judge the answer", '{"choice": "yes", "reason": "right"}')
        verdicts = await judged(judge, logprob_rule(), times=2)
        sent = [("logprobs" in r["body"]) for r in judge.requests]
        statuses = list(judge.statuses)
    assert [v.answer.label for v in verdicts] == ["yes", "yes"]
    assert sent == [True, False, False] and statuses == [400, 200, 200]
    assert any("does not take logprobs" in r.getMessage() for r in caplog.records)


def test_logprobs_need_a_chat_judge_and_a_levelled_output() -> None:
    with pytest.raises(ValidationError, match="api: chat and no tools"):
        logprob_rule(api="decisions")
    continuous = logprob_rule().model_dump(mode="json", exclude_none=True)
    continuous["output"] = {"type": "numeric", "min": 0.0, "max": 1.0}
    with pytest.raises(ValidationError, match="continuous scale"):
        LLMJudgeRule.model_validate(continuous)


def test_probabilities_reported_are_those_sent() -> None:
    # the double's log-probabilities are the natural logs of the scripted shares
    (token,) = [t for t in tokens("yes", {"yes": {"yes": 0.25, "no": 0.75}}) if t["token"] == "yes"]
    assert math.exp(token["logprob"]) == pytest.approx(0.25)
    assert [t["token"] for t in token["top_logprobs"]] == ["no", "yes"]


@pytest.mark.parametrize("judge", ["logprobs: true", "api: decisions"])
def test_a_rubric_reads_no_probabilities(tmp_path: Path, judge: str) -> None:
    """A rubric's judge answers several verdicts in one text: no one-verdict judging."""
    pack = tmp_path / "mycrit"
    shutil.copytree(RULES_DIR / "critique", pack)
    for rule in pack.glob("*.yaml"):
        rule.write_text(rule.read_text().replace("pack: critique", "pack: mycrit"))
    critique = pack / "response_critique.yaml"
    critique.write_text(critique.read_text().replace("\njudge:\n", f"\njudge:\n  {judge}\n", 1))
    _, errors = check_rules([tmp_path], ["mycrit"])
    (error,) = errors
    assert "response_critique.yaml" in str(error) and "not a rubric rule" in str(error)


PREFIXED = OutputSpec.model_validate(
    {
        "type": "choice",
        "choices": {"relevant": 1.0, "relevant but incomplete": 0.5, "irrelevant": 0.0},
    }
)


def test_a_label_that_begins_a_longer_one_is_followed_down_to_where_they_part() -> None:
    """The judge writes the longer label: its tokens are followed past the shorter one."""
    content = '{"choice": "relevant but incomplete", "reason": "r"}'
    walked = tokens(content, {"relevant": {"relevant": 0.8, "irrelevant": 0.2}})
    read = read_probabilities(
        PREFIXED, ParsedAnswer(0.5, "relevant but incomplete", "r"), content, walked
    )
    assert read is not None
    assert read["probabilities"] == pytest.approx(
        {"relevant but incomplete": 0.8, "irrelevant": 0.2}
    )
    # the judge writes the shorter one, weighing the longer at the token after it
    content = '{"reason": "r", "choice": "relevant"}'  # its last quote: the one after it
    walked = tokens(
        content, {"relevant": {"relevant": 0.9, "irrelevant": 0.1}, '"': {'"': 0.6, " ": 0.4}}
    )
    read = read_probabilities(PREFIXED, ParsedAnswer(1.0, "relevant", "r"), content, walked)
    assert read is not None
    # after "relevant", a quote ends it (0.6) and a space may go on into the longer label,
    # which the walk cannot follow down an alternative's path: left unread (coverage)
    assert read["probabilities"] == pytest.approx({"relevant": 0.54, "irrelevant": 0.1})
    assert read["confidence"] == pytest.approx(0.54)


def test_a_verdict_under_a_key_the_parser_reads_is_read_there_not_in_the_reason() -> None:
    content = '{"label": "no", "reason": "no evidence"}'  # structured output off
    walked = tokens(content, {"no": {"no": 0.97, "yes": 0.03}})  # the double scripts the last
    read = read_probabilities(YES_NO, ParsedAnswer(0.0, "no", "no evidence"), content, walked)
    # the verdict's own token (certain), not the reason's "no" (0.97)
    assert read is not None and read["confidence"] == 1.0
