"""The judge canary against the scripted judge: a rule's reference items judged again on the
leader only, the verdict cache bypassed, out of the scores and score metrics; the round
before the judge shifts reports nothing changed, the round after the changed count and the
mean shift exactly, on the gauges, on the canary topic and in ``scorer agreement``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from agent_tools import RecordingPublisher, Worker, counted
from fixtures import settings
from scripted_judge import MockJudge

from stream.agents.canary import JudgeCanary, tick_every
from stream.agreement.canary_report import canary_lines, canary_summary
from stream.canary import rounds_of
from stream.engine.scorer import Scorer
from stream.judge.cache import CachingJudge
from stream.judging import judge_of
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import RuleSet

RULE: dict[str, Any] = {
    "id": "answer_quality",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"question": "input.question"},
    "output": {"type": "numeric", "min": 1, "max": 5, "integer": True},
    "prompt": "Rate the answer to {{question}} from 1 to 5.",
    "canary": {"items": "canary.jsonl", "every": "1h"},
}
QUESTIONS = ("Q-one", "Q-two", "Q-three", "Q-four")


def four(score: int) -> str:
    return orjson.dumps({"score": score, "reason": "scripted"}).decode()


def rules_with_canary(tmp_path: Path) -> Any:
    pack = tmp_path / "rules" / "demo"
    pack.mkdir(parents=True)
    items = [
        {
            "id": q,
            "input": {"id": q, "project_name": "p", "input": {"question": q}},
            "recorded": {"value": 0.75, "raw_value": 4, "model": "judge-m"},
        }
        for q in QUESTIONS
    ]
    (pack / "canary.jsonl").write_text("\n".join(orjson.dumps(i).decode() for i in items))
    (pack / "answer_quality.yaml").write_text(yaml.safe_dump(RULE))
    return load_rules(tmp_path / "rules")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def judge() -> Any:
    with MockJudge() as judge:
        judge.script("Q-", four(4))
        yield judge


def canary(worker: Worker, judge: MockJudge, tmp_path: Path, leads: list[bool]) -> JudgeCanary:
    app, _, _, metrics = worker
    config = settings(
        openai_base_url=judge.base_url, openai_api_key="sk-test", judge_model="judge-m"
    )
    scorer = Scorer(
        rules_with_canary(tmp_path),
        judge_of(config, metrics),  # the worker's judge: the client behind the verdict cache
        default_model=config.judge_model,
        observer=metrics,
    )
    assert isinstance(scorer.judge, CachingJudge)
    return JudgeCanary(
        app,
        scorer,
        config,
        metrics,
        publisher=RecordingPublisher(app),
        is_leader=lambda: leads[0],
        clock=Clock(),
    )


def gauges(worker: Worker) -> tuple[float, ...]:
    labels = {"rule": "answer_quality", "pack": "demo", "model": "judge-m"}
    names = ("items", "changed", "mean_shift", "last_round_timestamp_seconds", "period_seconds")
    return tuple(counted(worker[3], f"scorer_canary_{name}", **labels) for name in names)


async def test_a_shift_in_the_judge_is_found_in_the_next_round_and_only_the_leader_asks(
    worker: Worker, judge: MockJudge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RecordingPublisher, "sent", [])
    leads = [False]
    runs = canary(worker, judge, tmp_path, leads)
    assert await runs.tick() == [] and judge.requests == []  # not the leader: no round

    leads[0] = True
    clock = runs.clock
    assert isinstance(clock, Clock)
    (before,) = await runs.tick()
    assert (before.items, before.changed, before.mean_shift, before.failed) == (4, 0, 0.0, 0)
    assert gauges(worker) == (4.0, 0.0, 0.0, clock.now, 3600.0)
    assert len(judge.requests) == 4

    clock.now += 1800  # within the hour: not due
    assert await runs.tick() == [] and len(judge.requests) == 4

    judge.script("Q-one", four(2))  # the provider changes the model behind the name
    judge.script("Q-two", four(1))
    clock.now += 1800
    (after,) = await runs.tick()
    # the same prompts asked again, not answered from the verdict cache
    assert len(judge.requests) == 8
    assert (after.items, after.changed, after.failed) == (4, 2, 0)
    # 0.75 -> 0.25 and 0.75 -> 0.0, the others unchanged; lower is worse: a positive shift
    assert after.mean_shift == pytest.approx((0.5 + 0.75) / 4)
    assert sorted((c.id, c.now) for c in after.changes) == [("Q-one", 0.25), ("Q-two", 0.0)]
    assert gauges(worker) == (4.0, 2.0, pytest.approx(0.3125), clock.now, 3600.0)
    labels = {"rule": "answer_quality", "pack": "demo", "model": "judge-m"}
    assert after.tokens == before.tokens > 0  # the canary's own spend, counted apart
    assert counted(worker[3], "scorer_canary_tokens_total", **labels) == 2 * before.tokens

    # a canary verdict is not a score: nothing on the scores topic, no score or decision metric
    metrics = worker[3]
    sent = RecordingPublisher.sent
    assert {topic.get_topic_name() for topic, *_ in sent} == {"llm-trace-scorer-canary"}
    of_rule = [
        line.split("{")[0]
        for line in metrics.exposition()[0].decode().splitlines()
        if 'rule="answer_quality"' in line and not line.startswith("#")
    ]
    assert of_rule and all(name.startswith("scorer_canary_") for name in of_rule), of_rule
    rounds = rounds_of(value for _, _, value, _ in sent)
    assert [(r.changed, r.mean_shift) for r in rounds] == [(0, 0.0), (2, pytest.approx(0.3125))]

    # a reload that drops the canary drops its gauges
    scorer = runs.scorer
    kept = scorer.ruleset
    scorer.use(RuleSet([r.model_copy(update={"canary": None}) for r in kept.rules], "other"))
    assert await runs.tick() == []
    assert "scorer_canary_items{" not in metrics.exposition()[0].decode()
    scorer.use(kept)
    (again,) = await runs.tick()  # back: its round runs at once
    assert again.changed == 2 and len(judge.requests) == 12

    # another worker leads now: this one clears its gauges, and runs nothing
    leads[0] = False
    assert await runs.tick() == []
    assert "scorer_canary_items{" not in metrics.exposition()[0].decode()
    assert len(judge.requests) == 12


def test_the_leader_is_fausts_and_the_timer_looks_often_enough(worker: Worker) -> None:
    app, _, config, metrics = worker
    runs = JudgeCanary(
        app,
        Scorer(load_rules(Path("rules"), ["conversation"]), None, default_model="m"),
        config,
        metrics,
    )
    assert runs.is_leader == app.is_leader  # what app.timer(on_leader=True) asks
    assert tick_every([]) == 30.0


def test_agreement_shows_each_rules_last_round_with_an_interval() -> None:
    def round_at(hour: int, changed: int, shift: float) -> bytes:
        found = {
            "rule": "answer_quality",
            "pack": "demo",
            "model": "judge-m",
            "items": 20,
            "changed": changed,
            "mean_shift": shift,
            "tolerance": 0.05,
            "every_s": 3600.0,
            "at": f"2027-01-15T{hour:02d}:00:00Z",
        }
        return orjson.dumps(found)

    records = [round_at(9, 5, 0.125), round_at(8, 0, 0.0), b"not a round"]
    rounds = rounds_of(records)
    assert [r.at.hour for r in rounds] == [8, 9]  # oldest first, the unreadable one skipped
    (summary,) = canary_summary(rounds)
    assert (summary["items"], summary["changed"], summary["mean_shift"]) == (20, 5, 0.125)
    assert summary["rounds"] == 2 and summary["at"] == "2027-01-15T09:00:00+00:00"
    share = summary["changed_share"]
    assert share["value"] == 0.25 and 0.11 < share["low"] < 0.12 and 0.46 < share["high"] < 0.47
    (_, line) = canary_lines(rounds)
    assert line == (
        "  demo/answer_quality (judge-m): 5 of 20 verdicts changed, share 0.250 [0.112, 0.469]; "
        "mean shift +0.125; at 2027-01-15 09:00:00 UTC, 2 rounds read"
    )
    assert canary_lines([]) == ["judge canary: no round yet (nothing on the canary topic)"]
