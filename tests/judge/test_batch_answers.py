"""The judge a deferred job is finished with (``judge/batch_answers.py``): a batch's answer is
read by the judge client as a live one (the same parser, its tokens marked ``batch``, no
latency observed); a refused item or a failed batch is a ``JudgeError`` saying why; an item
that errored, expired, was cancelled or never came back, and an unusable answer, are asked
of the online judge, and ``fallbacks`` (and ``details()``) say why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from fixtures import settings

from stream.engine.verdicts import ParsedAnswer, ToolBox, Verdict
from stream.errors import JudgeError
from stream.judge.batch import ItemAnswered, ItemFailed
from stream.judge.batch_answers import BatchAnswers
from stream.judge.client import JudgeClient
from stream.models import TokenUsage
from stream.observer import Observer
from stream.ruleset.schema import RULE_ADAPTER, LLMJudgeRule, PromptedRule

PROMPT = "Rate the answer.\nQuestion: Where is my parcel?\nAnswer: It ships tomorrow."
SYSTEM = "You are a strict judge."
CALL = "judge-0001"


def rule() -> LLMJudgeRule:
    parsed = RULE_ADAPTER.validate_python(
        {
            "id": "answer_quality",
            "pack": "demo",
            "version": 1,
            "scope": "trace",
            "kind": "llm_judge",
            "variables": {"question": "input.question"},
            "output": {"min": 0, "max": 1},
            "prompt": "Rate the answer.\nQuestion: {{question}}",
            "judge": {"mode": "batch"},
        }
    )
    assert isinstance(parsed, LLMJudgeRule)
    return parsed


class Calls(Observer):
    """An observer recording each judge call it is told of (model, outcome, seconds, usage)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float | None, TokenUsage | None]] = []

    def on_judge_call(
        self,
        model: str,
        outcome: str,
        seconds: float | None,
        usage: TokenUsage | None = None,
        cost_usd: float | None = None,
    ) -> None:
        self.calls.append((model, outcome, seconds, usage))


class OnlineJudge:
    """The online judge: counts what it is asked and answers 0.5."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        self.asked.append((prompt, system))
        usage = TokenUsage(prompt_tokens=10, completion_tokens=5, total_tokens=15)
        return Verdict(ParsedAnswer(0.5, None, "asked online"), "gpt-4o-mini", 120.0, usage, 1)


def body(content: str | None, **message: Any) -> dict[str, Any]:
    finish = message.pop("finish_reason", "stop")
    return {
        "id": "chatcmpl-batch-1",
        "object": "chat.completion",
        "created": 1_800_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "message": {"role": "assistant", "content": content, **message},
            }
        ],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
    }


def answers(
    item: ItemAnswered | ItemFailed | None, observer: Observer | None = None
) -> tuple[BatchAnswers, OnlineJudge, JudgeClient]:
    cfg = settings(openai_base_url="http://127.0.0.1:9/v1", openai_api_key="sk-test")
    client = JudgeClient(cfg.judge_config(), observer)
    online = OnlineJudge()
    items = {CALL: item} if item is not None else {}
    return BatchAnswers(client, online, {(PROMPT, SYSTEM): CALL}, items), online, client


async def test_an_answered_item_is_the_verdict_read_as_live_priced_at_the_batch_rate() -> None:
    observer = Calls()
    item = ItemAnswered(CALL, body('{"score": 0.75, "reason": "clear"}'))
    batch, online, client = answers(item, observer)
    verdict = await batch.judge(rule(), PROMPT, SYSTEM)
    await client.close()
    assert verdict.answer == ParsedAnswer(0.75, None, "clear")
    assert verdict.usage is not None and verdict.usage.batch is True
    assert (verdict.usage.prompt_tokens, verdict.usage.completion_tokens) == (40, 12)
    assert verdict.latency_ms == 0.0 and not verdict.cached
    assert online.asked == [] and batch.fallbacks == []
    assert [(r.id, p, s, v) for r, p, s, v in batch.answered] == [
        ("answer_quality", PROMPT, SYSTEM, verdict)
    ]
    # counted as a call, its tokens at the batch rate, no latency: it waited for its batch
    ((model, outcome, seconds, usage),) = observer.calls
    assert (model, outcome, seconds) == ("gpt-4o-mini", "ok", None)
    assert usage is not None and usage.batch is True
    assert batch.details("batch_abc", 3600.04) == {"id": "batch_abc", "waited_s": 3600.0}


@pytest.mark.parametrize(
    ("item", "kind", "said"),
    [
        (
            ItemFailed(CALL, "refused", "judge refused the request (400): bad body", 400),
            "client_error",
            "in batch: judge refused the request (400): bad body",
        ),
        (
            ItemFailed(CALL, "batch_failed", "batch failed: line 1 has no model"),
            "batch_failed",
            "in batch: batch failed: line 1 has no model",
        ),
    ],
)
async def test_a_refused_item_or_failed_batch_is_an_error_saying_why(
    item: ItemFailed, kind: str, said: str
) -> None:
    batch, online, client = answers(item)
    with pytest.raises(JudgeError) as raised:
        await batch.judge(rule(), PROMPT, SYSTEM)
    await client.close()
    assert (raised.value.kind, str(raised.value)) == (kind, said)
    assert online.asked == [] and batch.fallbacks == [] and batch.answered == []


@pytest.mark.parametrize(
    ("item", "why"),
    [
        (ItemFailed(CALL, "error", "judge error (500): overloaded", 500), "judge error (500)"),
        (ItemFailed(CALL, "expired", "expired: the 24 h window ran out"), "expired"),
        (ItemFailed(CALL, "cancelled", "cancelled: the batch was cancelled"), "cancelled"),
        (ItemFailed(CALL, "missing", "missing: the batch said nothing of it"), "missing"),
        (None, "the batch has no item for this call"),
        (ItemAnswered(CALL, body("no idea, sorry")), "the batch's answer was unusable"),
        # a 200 body that is no chat completion (no "created", no "choices"): not a bug
        (ItemAnswered(CALL, {"id": "x", "model": "m"}), "the batch's answer could not be read"),
    ],
)
async def test_what_the_batch_did_not_answer_is_asked_online_saying_why(
    item: ItemAnswered | ItemFailed | None, why: str
) -> None:
    batch, online, client = answers(item)
    verdict = await batch.judge(rule(), PROMPT, SYSTEM)
    await client.close()
    assert online.asked == [(PROMPT, SYSTEM)]
    assert verdict.answer == ParsedAnswer(0.5, None, "asked online")
    assert verdict.usage is not None and verdict.usage.batch is False  # an online call's price
    (fallback,) = batch.fallbacks
    assert why in fallback
    assert batch.answered == []
    said = batch.details("batch_abc", 61.26)
    assert said == {"id": "batch_abc", "waited_s": 61.3, "fallback_calls": 1, "fallback": fallback}


async def test_a_call_the_batch_was_not_given_is_asked_online() -> None:
    item = ItemAnswered(CALL, body('{"score": 1, "reason": "x"}'))
    batch, online, client = answers(item)
    await batch.judge(rule(), "another prompt", SYSTEM)
    await client.close()
    assert online.asked == [("another prompt", SYSTEM)]
    assert batch.fallbacks == ["the batch has no item for this call"]


@pytest.mark.parametrize(
    ("item", "kind"),
    [
        (ItemAnswered(CALL, body(None, refusal="I can't help with that.")), "refused"),
        (ItemAnswered(CALL, body('{"score": 0.', finish_reason="length")), "answer_cut"),
    ],
)
async def test_a_declined_or_cut_answer_is_an_error_asking_again_would_repeat(
    item: ItemAnswered, kind: str
) -> None:
    batch, online, client = answers(item)
    with pytest.raises(JudgeError) as raised:
        await batch.judge(rule(), PROMPT, SYSTEM)
    await client.close()
    assert raised.value.kind == kind
    assert online.asked == [] and batch.fallbacks == []


async def test_each_call_reads_its_own_item() -> None:
    cfg = settings(openai_base_url="http://127.0.0.1:9/v1", openai_api_key="sk-test")
    client = JudgeClient(cfg.judge_config())
    online = OnlineJudge()
    calls = {("first", None): "judge-a", ("second", None): "judge-b"}
    items: dict[str, ItemAnswered | ItemFailed] = {
        "judge-a": ItemAnswered("judge-a", body('{"score": 0.25, "reason": "first"}')),
        "judge-b": ItemAnswered("judge-b", body('{"score": 1, "reason": "second"}')),
    }
    batch = BatchAnswers(client, online, calls, items)
    second = await batch.judge(rule(), "second")
    first = await batch.judge(rule(), "first")
    await client.close()
    assert (first.answer, second.answer) == (
        ParsedAnswer(0.25, None, "first"),
        ParsedAnswer(1.0, None, "second"),
    )
    assert online.asked == [] and batch.details("b", 0.0) == {"id": "b", "waited_s": 0.0}
