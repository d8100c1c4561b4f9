"""A prompt over its cap, for any rule: cut in the middle, and said so in the score
(``details.prompt_cut``), in the decision record and on ``scorer_prompt_cuts_total``, whether
the judge then answers or fails; a rule's own cap (``judge.max_prompt_tokens``) is named as
the setting that cut it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures import settings
from prometheus_client import CollectorRegistry
from scripted_judge import MockJudge, Reply

from stream.engine.outcomes import TraceResult
from stream.engine.scorer import Scorer
from stream.judge.client import JudgeClient
from stream.metrics import ScorerMetrics
from stream.models import Trace
from stream.ruleset.loader import load_rules

WORKER_CAP = 2_000  # SCORER_JUDGE_MAX_PROMPT_TOKENS in these tests

JUDGED = {
    "id": "answer_quality",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"question": "input.question", "answer": "output.answer"},
    "output": {"min": 0, "max": 1},
    "prompt": "Rate the answer.\nQuestion: {{question}}\nAnswer: {{answer}}",
}
FANNED = {
    "id": "doc_relevance",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"question": "input.question", "doc": "metadata.documents"},
    "fan_out": {"variable": "doc", "max_items": 5},
    "output": {"type": "choice", "choices": {"yes": 1.0, "no": 0.0}},
    "prompt": "Is this document relevant?\nQuestion: {{question}}\nDocument: {{doc}}",
}


def ruleset(tmp_path: Path, *rules: dict[str, Any]) -> Any:
    pack = tmp_path / "demo"
    pack.mkdir(exist_ok=True)
    for rule in rules:
        (pack / f"{rule['id']}.yaml").write_text(yaml.safe_dump(rule))
    return load_rules(tmp_path)


async def scored(
    tmp_path: Path, judge: MockJudge, document: dict[str, Any], *rules: dict[str, Any]
) -> tuple[TraceResult, ScorerMetrics]:
    metrics = ScorerMetrics(CollectorRegistry())
    cfg = settings(openai_base_url=judge.base_url, openai_api_key="sk-test")
    client = JudgeClient(cfg.judge_config(), metrics)
    scorer = Scorer(
        ruleset(tmp_path, *rules),
        client,
        default_model=cfg.judge_model,
        observer=metrics,
        max_prompt_tokens=WORKER_CAP,
    )
    try:
        return await scorer.score_trace(Trace.model_validate(document), document), metrics
    finally:
        await client.close()


def trace(answer: str, documents: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": "t-1",
        "project_name": "shop",
        "input": {"question": "Where is my parcel?"},
        "output": {"answer": answer},
        "metadata": {"documents": documents or []},
    }


def cuts(metrics: ScorerMetrics, rule: str) -> float | None:
    labels = {"rule": rule, "pack": "demo"}
    return metrics.registry.get_sample_value("scorer_prompt_cuts_total", labels)


async def test_a_cut_prompt_is_said_in_the_score_the_decision_and_the_counter(
    tmp_path: Path,
) -> None:
    with MockJudge() as judge:
        judge.script("Rate the answer", '{"score": 1, "reason": "fine"}')
        answer = "HEAD " + "blah " * 20_000 + "TAIL"  # 100 005 characters
        result, metrics = await scored(tmp_path, judge, trace(answer), JUDGED)
        sent = judge.prompts()[0]
    (score,) = result.scores
    assert score.status == "ok" and score.details is not None
    cut = score.details["prompt_cut"]
    assert list(cut["variables"]) == ["answer"]
    assert 100_005 - WORKER_CAP * 4 < cut["characters"] < 100_005 - WORKER_CAP * 4 + 400
    assert cut["tokens"] == -(-cut["characters"] // 4)
    assert cut["prompt_tokens"] > 25_000
    assert (cut["cap_tokens"], cut["cap_setting"]) == (WORKER_CAP, "SCORER_JUDGE_MAX_PROMPT_TOKENS")
    assert "HEAD" in sent and "TAIL" in sent and len(sent) <= WORKER_CAP * 4
    (decision,) = result.decisions
    assert decision.outcome == "scored"
    assert decision.detail == (
        f"prompt cut to fit SCORER_JUDGE_MAX_PROMPT_TOKENS ({WORKER_CAP} tokens, about "
        f"{cut['prompt_tokens']} before the cut): {cut['characters']} characters of answer "
        "cut from the middle"
    )
    assert cuts(metrics, "answer_quality") == 1


async def test_a_prompt_within_its_cap_says_nothing_of_cuts(tmp_path: Path) -> None:
    with MockJudge() as judge:
        judge.script("Rate the answer", '{"score": 1, "reason": "fine"}')
        result, metrics = await scored(tmp_path, judge, trace("In the post."), JUDGED)
    (score,) = result.scores
    assert score.status == "ok" and "prompt_cut" not in (score.details or {})
    assert result.decisions[0].detail is None
    assert cuts(metrics, "answer_quality") is None


async def test_a_rules_own_cap_is_named_and_keeps_what_the_worker_cap_would_cut(
    tmp_path: Path,
) -> None:
    roomy = {**JUDGED, "judge": {"max_prompt_tokens": 40_000}}
    tight = {**JUDGED, "id": "answer_brevity", "judge": {"max_prompt_tokens": 1_000}}
    with MockJudge() as judge:
        judge.script("Rate the answer", '{"score": 1, "reason": "fine"}')
        answer = "word " * 20_000
        result, metrics = await scored(tmp_path, judge, trace(answer), roomy, tight)
    scores = {s.rule_id: s for s in result.scores}
    assert "prompt_cut" not in (scores["answer_quality"].details or {})  # 25 k tokens < 40 k
    cut = (scores["answer_brevity"].details or {})["prompt_cut"]
    assert (cut["cap_tokens"], cut["cap_setting"]) == (1_000, "judge.max_prompt_tokens")
    decisions = {d.rule_id: d for d in result.decisions}
    assert "judge.max_prompt_tokens (1000 tokens" in (decisions["answer_brevity"].detail or "")
    assert cuts(metrics, "answer_quality") is None and cuts(metrics, "answer_brevity") == 1


async def test_an_error_score_of_a_cut_prompt_still_says_what_was_cut(tmp_path: Path) -> None:
    with MockJudge() as judge:
        judge.script("Rate the answer", Reply(status=400, content="context length exceeded"))
        result, metrics = await scored(tmp_path, judge, trace("x" * 50_000), JUDGED)
    (score,) = result.scores
    assert score.status == "error" and score.details is not None
    assert list(score.details["prompt_cut"]["variables"]) == ["answer"]
    (decision,) = result.decisions
    assert decision.outcome == "error"
    assert decision.detail is not None
    reason, said = decision.detail.split("; prompt cut to fit ")
    assert reason == score.status_reason and "context length exceeded" in reason
    assert said.startswith(f"SCORER_JUDGE_MAX_PROMPT_TOKENS ({WORKER_CAP} tokens")
    assert cuts(metrics, "answer_quality") == 1
    assert "counted_as" not in score.details  # the rule does not count errors as a value


async def test_a_fan_out_says_how_many_of_its_calls_were_cut(tmp_path: Path) -> None:
    documents = ["short and relevant", "y" * 30_000, "also short", "z" * 20_000]
    with MockJudge() as judge:
        judge.script("Is this document relevant", '{"score": "yes", "reason": "on topic"}')
        result, metrics = await scored(tmp_path, judge, trace("ok", documents), FANNED)
    (score,) = result.scores
    assert score.status == "ok" and score.details is not None
    cut = score.details["prompt_cut"]
    assert cut["calls_cut"] == 2 and list(cut["variables"]) == ["doc"]
    assert cut["characters"] > (30_000 - WORKER_CAP * 4) + (20_000 - WORKER_CAP * 4)
    assert cut["prompt_tokens"] == pytest.approx(30_000 / 4, abs=100)  # the larger prompt
    assert cuts(metrics, "doc_relevance") == 1  # one rule on one trace, however many calls
