"""Shadow judges (issue 29, item 3): a rule's ``shadow:`` variants judge a hashed sample of the
targets the rule judges, each with its own model and prompt; their scores carry the variant and
ids of their own, make no decision of their own, stay out of the quality metrics, and go to a
batch with the rule's own job."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures import RULES_DIR, as_trace, settings
from prometheus_client import CollectorRegistry
from scripted_judge import MockJudge, Reply

from stream.engine.deferred import Deferred, finish_deferred
from stream.engine.outcomes import TraceResult
from stream.engine.plan import JudgedRule
from stream.engine.scorer import Scorer
from stream.judge.client import JudgeClient
from stream.metrics import ScorerMetrics
from stream.models import score_id
from stream.ruleset.filters import sampled
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import RuleSet

PRIMARY_PROMPT = "Rate the answer.\nQuestion: {{question}}\nAnswer: {{answer}}"
STRICT_PROMPT = "Rate the answer strictly.\nQuestion: {{question}}\nAnswer: {{answer}}"


def rule(**overrides: Any) -> dict[str, Any]:
    """A demo llm_judge rule with a ``strict`` shadow (another model and prompt) on every
    target; ``overrides`` any field."""
    return {
        "id": "answer_quality",
        "pack": "demo",
        "version": 1,
        "scope": "trace",
        "kind": "llm_judge",
        "filter": {"projects": ["shop"]},
        "variables": {"question": "input.question", "answer": "output.answer"},
        "output": {"min": 0, "max": 1},
        "prompt": PRIMARY_PROMPT,
        "shadow": [
            {"name": "strict", "model": "gpt-shadow", "prompt": STRICT_PROMPT, "sampling_rate": 1}
        ],
        **overrides,
    }


def demo_rules(tmp_path: Path, data: dict[str, Any]) -> RuleSet:
    pack = tmp_path / "demo"
    pack.mkdir(parents=True, exist_ok=True)
    (pack / f"{data['id']}.yaml").write_text(yaml.safe_dump(data))
    return load_rules(tmp_path)


def parcel_trace(trace_id: str = "t-1", project: str = "shop", **extra: Any) -> dict[str, Any]:
    return {
        "id": trace_id,
        "project_name": project,
        "name": "reply",
        "input": {"question": "Where is my parcel?"},
        "output": {"answer": "It ships tomorrow."},
        **extra,
    }


@pytest.fixture
def server() -> Iterator[MockJudge]:
    with MockJudge() as judge:
        judge.script("Rate the answer.", '{"score": 0.75, "reason": "clear"}')
        judge.script("Rate the answer strictly.", '{"score": 0.25, "reason": "terse"}')
        yield judge


class Run:
    """A scorer over ``ruleset`` with a judge client of ``server`` and its own metrics."""

    def __init__(self, ruleset: RuleSet, server: MockJudge | None) -> None:
        self.metrics = ScorerMetrics(CollectorRegistry())
        cfg = settings(
            openai_base_url=server.base_url if server else None,
            openai_api_key="sk-test" if server else None,
        )
        self.client = JudgeClient(cfg.judge_config(), self.metrics) if server else None
        self.scorer = Scorer(
            ruleset, self.client, default_model="gpt-4o-mini", observer=self.metrics
        )

    async def score(self, document: dict[str, Any]) -> TraceResult:
        result = await self.scorer.score_trace(as_trace(document), document)
        for score in result.scores:  # as the agent reports what it published
            self.metrics.on_score_published(score)
        return result

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


# -- sampling ---------------------------------------------------------------------------------


def test_a_shadow_samples_by_hash_apart_from_the_rule_about_its_rate(tmp_path: Path) -> None:
    shadow = {"name": "strict", "model": "gpt-shadow", "sampling_rate": 0.3}
    ruleset = demo_rules(tmp_path, rule(shadow=[shadow], sampling_rate=0.5))
    scorer = Scorer(ruleset, None, default_model="gpt-4o-mini")
    scorer.context.judge = object()  # type: ignore[assignment]  # planned, never called
    ids = [f"trace-{i}" for i in range(4000)]

    def shadowed(trace_id: str) -> bool:
        document = parcel_trace(trace_id)
        plan = scorer.plan(as_trace(document), document)
        variants = [job.rule.variant for job in plan.judge_jobs]
        assert variants in ([], [None], [None, "strict"])
        return "strict" in variants

    taken = {i for i in ids if shadowed(i)}
    assert taken == {i for i in ids if shadowed(i)}  # deterministic
    judged = {i for i in ids if sampled("answer_quality", 0.5, i)}
    # the shadow's own key: of the targets the rule judges, the ones its hash takes
    assert taken == {i for i in judged if sampled("answer_quality@strict", 0.3, i)}
    assert 0.26 < len(taken) / len(judged) < 0.34


# -- scores, ids, what the judge was asked -----------------------------------------------------


async def test_a_shadow_scores_with_its_model_and_prompt_under_its_variant(
    tmp_path: Path, server: MockJudge
) -> None:
    run = Run(demo_rules(tmp_path, rule()), server)
    try:
        result = await run.score(parcel_trace())
    finally:
        await run.close()
    primary, shadow = sorted(result.scores, key=lambda s: s.variant or "")
    assert (primary.variant, primary.value, primary.judge_model) == (None, 0.75, "gpt-4o-mini")
    assert (shadow.variant, shadow.value, shadow.judge_model) == ("strict", 0.25, "gpt-shadow")
    assert (shadow.rule_id, shadow.pack, shadow.target_id) == ("answer_quality", "demo", "t-1")
    assert primary.score_id == score_id("answer_quality", 1, "trace", "t-1")
    assert shadow.score_id == score_id("answer_quality@strict", 1, "trace", "t-1")
    asked = sorted(
        (r["body"]["model"], r["body"]["messages"][-1]["content"]) for r in server.requests
    )
    assert asked == [
        (
            "gpt-4o-mini",
            "Rate the answer.\nQuestion: Where is my parcel?\nAnswer: It ships tomorrow.",
        ),
        (
            "gpt-shadow",
            "Rate the answer strictly.\nQuestion: Where is my parcel?\nAnswer: It ships tomorrow.",
        ),
    ]
    # the rule's decision is its own judge's: one decision, naming the primary score
    (decision,) = result.decisions
    assert (decision.outcome, decision.score_id) == ("scored", primary.score_id)
    assert (
        run.sample("scorer_decisions_total", rule="answer_quality", pack="demo", outcome="scored")
        == 1
    )


async def test_a_model_only_shadow_asks_the_rules_prompt_of_its_model(
    tmp_path: Path, server: MockJudge
) -> None:
    shadow = {"name": "mini", "model": "gpt-shadow", "sampling_rate": 1}
    run = Run(demo_rules(tmp_path, rule(shadow=[shadow])), server)
    try:
        result = await run.score(parcel_trace())
    finally:
        await run.close()
    by_variant = {s.variant: s for s in result.scores}
    assert by_variant["mini"].judge_model == "gpt-shadow" and by_variant["mini"].value == 0.75
    prompts = {(r["body"]["model"], r["body"]["messages"][-1]["content"]) for r in server.requests}
    assert len(prompts) == 2 and len({p for _, p in prompts}) == 1  # same prompt, two models


async def test_a_shadow_prompt_file_is_what_the_judge_reads(
    tmp_path: Path, server: MockJudge
) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "strict.txt").write_text(STRICT_PROMPT)
    shadow = {"name": "strict", "prompt_file": "strict.txt", "sampling_rate": 1}
    run = Run(demo_rules(tmp_path, rule(shadow=[shadow])), server)
    try:
        result = await run.score(parcel_trace())
    finally:
        await run.close()
    assert {(s.variant, s.value) for s in result.scores} == {(None, 0.75), ("strict", 0.25)}


async def test_a_shadows_judge_error_is_its_own_error_score(
    tmp_path: Path, server: MockJudge
) -> None:
    server.script("Rate the answer strictly.", Reply(content="bad request", status=400))
    run = Run(demo_rules(tmp_path, rule()), server)
    try:
        result = await run.score(parcel_trace())
    finally:
        await run.close()
    by_variant = {s.variant: s for s in result.scores}
    assert by_variant[None].status == "ok"
    assert by_variant["strict"].status == "error"
    assert by_variant["strict"].status_reason and "judge" in by_variant["strict"].status_reason
    assert [d.outcome for d in result.decisions] == ["scored"]


@pytest.mark.parametrize(
    ("document", "outcome"),
    [
        (parcel_trace(project="elsewhere"), "filtered"),
        (parcel_trace(output={}), "skipped"),  # the answer is missing
    ],
)
async def test_no_shadow_where_the_rule_does_not_judge(
    tmp_path: Path, server: MockJudge, document: dict[str, Any], outcome: str
) -> None:
    run = Run(demo_rules(tmp_path, rule()), server)
    try:
        result = await run.score(document)
    finally:
        await run.close()
    assert [d.outcome for d in result.decisions] == [outcome]
    assert all(s.variant is None for s in result.scores)
    assert server.requests == []


async def test_no_shadow_for_a_target_the_rule_samples_out(
    tmp_path: Path, server: MockJudge
) -> None:
    ids = [f"t-{i}" for i in range(40)]
    out = next(i for i in ids if not sampled("answer_quality", 0.5, i))
    run = Run(demo_rules(tmp_path, rule(sampling_rate=0.5)), server)
    try:
        result = await run.score(parcel_trace(out))
    finally:
        await run.close()
    assert [d.outcome for d in result.decisions] == ["sampled_out"]
    assert result.scores == [] and server.requests == []


async def test_no_judge_means_no_shadow(tmp_path: Path) -> None:
    run = Run(demo_rules(tmp_path, rule()), None)
    result = await run.score(parcel_trace())
    (score,) = result.scores
    assert (score.status, score.variant) == ("skipped", None)


# -- metrics ---------------------------------------------------------------------------------


async def test_shadow_scores_stay_out_of_the_quality_metrics(
    tmp_path: Path, server: MockJudge
) -> None:
    run = Run(demo_rules(tmp_path, rule()), server)
    try:
        for i in range(3):
            await run.score(parcel_trace(f"t-{i}"))
    finally:
        await run.close()
    labels = {"rule": "answer_quality", "pack": "demo", "criterion": "", "project": "shop"}
    assert run.sample("scorer_scores_total", **labels, status="ok") == 3
    assert run.sample("scorer_score_value_count", **labels) == 3
    assert run.sample("scorer_score_value_sum", **labels) == 3 * 0.75  # the primary's alone
    assert run.sample("scorer_low_scores_total", **labels) == 0  # 0.25 is the shadow's
    shadow = {"rule": "answer_quality", "pack": "demo", "variant": "strict", "status": "ok"}
    assert run.sample("scorer_shadow_scores_total", **shadow) == 3


# -- batch mode ------------------------------------------------------------------------------


class KeepingDeferrer:
    """A batch queue that keeps every job it is given."""

    def __init__(self) -> None:
        self.kept: list[Deferred] = []

    def holds(self, job: Any) -> bool:
        return False

    def defer(self, deferred: Deferred) -> str | None:
        self.kept.append(deferred)
        return None


async def test_a_batch_rule_defers_its_shadow_as_an_entry_of_its_own(
    tmp_path: Path, server: MockJudge
) -> None:
    batch = {"mode": "batch", "batch": {"max_jobs": 10, "max_wait_s": 60}}
    ruleset = demo_rules(tmp_path, rule(judge=batch))
    run = Run(ruleset, server)
    deferrer = KeepingDeferrer()
    run.scorer.context.deferrer = deferrer
    try:
        result = await run.score(parcel_trace())
        assert result.scores == [] and server.requests == []
        assert [d.outcome for d in result.decisions] == ["deferred"]  # the rule's alone
        primary, shadow = sorted(deferrer.kept, key=lambda d: d.variant or "")
        assert (primary.variant, primary.model) == (None, "gpt-4o-mini")
        assert (shadow.variant, shadow.model) == ("strict", "gpt-shadow")
        assert primary.key != shadow.key and set(primary.calls).isdisjoint(shadow.calls)
        assert shadow.prompts()[0][0].startswith("Rate the answer strictly.")
        kept = Deferred.decode(shadow.encode())  # as the table keeps it
        assert kept.variant == "strict"
        (loaded,) = ruleset.rules
        assert isinstance(loaded, JudgedRule)
        assert run.client is not None
        outcome = await finish_deferred(run.scorer.context, kept, loaded, run.client)
    finally:
        await run.close()
    score = outcome.score
    assert score is not None
    assert (score.variant, score.value, score.judge_model) == ("strict", 0.25, "gpt-shadow")
    assert score.score_id == score_id("answer_quality@strict", 1, "trace", "t-1")
    records = kept.records(outcome)
    assert [s.score_id for _, s in records.scores] == [score.score_id]
    assert records.decisions == []  # a shadow publishes no decision record


async def test_a_deferred_shadow_its_rule_no_longer_names_is_an_error_score(
    tmp_path: Path, server: MockJudge
) -> None:
    batch = {"mode": "batch", "batch": {"max_jobs": 10, "max_wait_s": 60}}
    run = Run(demo_rules(tmp_path, rule(judge=batch)), server)
    deferrer = KeepingDeferrer()
    run.scorer.context.deferrer = deferrer
    try:
        await run.score(parcel_trace())
        (shadow,) = [d for d in deferrer.kept if d.variant == "strict"]
        (edited,) = demo_rules(tmp_path / "edited", rule(judge=batch, shadow=[])).rules
        assert isinstance(edited, JudgedRule) and run.client is not None
        outcome = await finish_deferred(run.scorer.context, shadow, edited, run.client)
    finally:
        await run.close()
    assert outcome.score is not None
    assert (outcome.score.variant, outcome.score.status) == ("strict", "error")
    assert "has no shadow 'strict'" in (outcome.score.status_reason or "")
    assert server.requests == []


# -- the other judged kinds ------------------------------------------------------------------


async def test_a_fan_out_shadow_judges_every_item_under_its_variant(
    tmp_path: Path, server: MockJudge
) -> None:
    fanned = rule(
        variables={"question": "input.question", "answer": "metadata.documents"},
        fan_out={"variable": "answer", "max_items": 5},
    )
    run = Run(demo_rules(tmp_path, fanned), server)
    try:
        result = await run.score(parcel_trace(metadata={"documents": ["one", "two", "three"]}))
    finally:
        await run.close()
    by_variant = {s.variant: s for s in result.scores}
    assert set(by_variant) == {None, "strict"}
    assert (by_variant["strict"].value, by_variant["strict"].judge_model) == (0.25, "gpt-shadow")
    models = sorted(r["body"]["model"] for r in server.requests)
    assert models == ["gpt-4o-mini"] * 3 + ["gpt-shadow"] * 3


async def test_a_rubric_shadow_publishes_every_score_under_its_variant(tmp_path: Path) -> None:
    pack = tmp_path / "critique"
    shutil.copytree(RULES_DIR / "critique", pack)
    for other in ("pleasantries.yaml", "response_comparison.yaml"):
        (pack / other).unlink()
    path = pack / "response_critique.yaml"
    data = yaml.safe_load(path.read_text())
    data["shadow"] = [{"name": "big", "model": "gpt-big", "sampling_rate": 1}]
    path.write_text(yaml.safe_dump(data))
    document = {
        "id": "trace-critique-1",
        "project_name": "code-assistant",
        "name": "chat",
        "input": {"messages": [{"role": "user", "content": "Reverse a string in Python."}]},
        "output": {"messages": [{"role": "assistant", "content": "def rev(s): return s[::-1]"}]},
    }
    with MockJudge(answer_by_schema=True) as server:
        run = Run(load_rules(tmp_path), server)
        try:
            result = await run.score(document)
        finally:
            await run.close()
    primary = [s for s in result.scores if s.variant is None]
    shadow = [s for s in result.scores if s.variant == "big"]
    assert len(primary) == len(shadow) == 7  # six criteria and the overall quality
    assert all(s.status == "ok" and s.judge_model == "gpt-big" for s in shadow)
    assert [s.criterion for s in shadow] == [s.criterion for s in primary]
    assert not {s.score_id for s in shadow} & {s.score_id for s in primary}
    assert [d.outcome for d in result.decisions] == ["scored"]
