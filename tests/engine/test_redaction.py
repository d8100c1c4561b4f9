"""What leaves for the judge is redacted (issue 47, item 1): the prompt's variables masked in
the judge's copy, after rendering and before the cache key and the call, with placeholders
consistent across a target's rules; the score says how many of which kinds, never the
values; a rule with ``judge.redact: false`` reads the raw text. Through the scorer against
the scripted judge (a real HTTP endpoint), which keeps what it received."""

from __future__ import annotations

from typing import Any

import pytest
from decisions_double import yes_no_rule
from fixtures import settings
from prometheus_client import CollectorRegistry
from scripted_judge import MockJudge, Reply

from stream.engine.scorer import Scorer
from stream.judge.client import JudgeClient
from stream.metrics import ScorerMetrics
from stream.models import Trace
from stream.redact.policy import RedactionPolicy, UnknownKind
from stream.ruleset.schema import LLMJudgeRule, RuleSet

EMAIL, CARD, KEY = "ana.lopez@example.org", "4111 1111 1111 1111", "AKIAIOSFODNN7EXAMPLE"
PROMPT = "Judge the answer.\nQuestion: {{question}}\nAnswer: {{answer}}"


def rule(rule_id: str = "answer_correct", **judge: Any) -> LLMJudgeRule:
    made = yes_no_rule(judge, PROMPT)
    return made.model_copy(update={"id": rule_id}) if rule_id != made.id else made


def document() -> dict[str, Any]:
    question = f"I am {EMAIL}, my card {CARD} was charged twice. Key {KEY}?"
    return {
        "id": "t-1",
        "project_name": "shop",
        "input": {"messages": [{"role": "user", "content": question}]},
        "output": {"content": f"Refunded to {CARD}; we wrote to {EMAIL.upper()}."},
    }


async def judged(  # type: ignore[no-untyped-def]
    judge: MockJudge,
    *rules: LLMJudgeRule,
    policy: RedactionPolicy | None = None,
    doc: dict[str, Any] | None = None,
    metrics: ScorerMetrics | None = None,
):
    doc = doc or document()
    cfg = settings(openai_base_url=judge.base_url, openai_api_key="sk-test")
    client = JudgeClient(cfg.judge_config())
    scorer = Scorer(RuleSet(list(rules)), client, default_model="gpt-4o-mini", observer=metrics)
    if policy is not None:
        scorer.context.redaction = policy
    try:
        return await scorer.score_trace(Trace.model_validate(doc), doc)
    finally:
        await client.close()


async def test_the_judge_receives_placeholders_and_the_score_says_how_many() -> None:
    metrics = ScorerMetrics(CollectorRegistry())
    with MockJudge() as judge:
        judge.script("Judge the answer", '{"choice": "yes", "reason": "the card <CARD_1> ok"}')
        result = await judged(judge, rule(), metrics=metrics)
        (sent,) = judge.prompts()
    masked = {
        kind: metrics.registry.get_sample_value(
            "scorer_redacted_values_total", {"rule": "answer_correct", "pack": "p", "kind": kind}
        )
        for kind in ("EMAIL", "CARD", "SECRET", "PHONE")
    }
    assert masked == {"EMAIL": 2.0, "CARD": 2.0, "SECRET": 1.0, "PHONE": None}
    assert EMAIL not in sent and "4111" not in sent and KEY not in sent
    assert sent == (
        "Judge the answer.\nQuestion: I am <EMAIL_1>, my card <CARD_1> was charged twice. "
        "Key <SECRET_1>?\nAnswer: Refunded to <CARD_1>; we wrote to <EMAIL_1>."
    )
    (score,) = result.scores
    assert score.status == "ok" and score.label == "yes"
    assert score.details is not None
    assert score.details["redacted"] == {"EMAIL": 2, "CARD": 2, "SECRET": 1}
    assert score.reason == "the card <CARD_1> ok"  # as it came back: no re-identification
    assert EMAIL not in score.model_dump_json()


async def test_placeholders_are_the_same_in_every_rule_of_a_target_and_raw_where_off() -> None:
    with MockJudge() as judge:
        judge.script("Judge the answer", '{"choice": "no", "reason": "r"}')
        result = await judged(
            judge,
            rule("a_judge"),
            rule("b_judge", redact=["EMAIL"]),
            rule("leak_check", redact=False),
        )
        sent = {r["body"]["messages"][-1]["content"] for r in judge.requests}
    by_rule = {s.rule_id: s for s in result.scores}
    assert any("<EMAIL_1>" in p and "<CARD_1>" in p for p in sent)  # a_judge
    assert any("<EMAIL_1>" in p and CARD in p for p in sent)  # b_judge: e-mail only
    assert any(EMAIL in p and CARD in p and KEY in p for p in sent)  # leak_check: raw
    assert by_rule["a_judge"].details == {"redacted": {"EMAIL": 2, "CARD": 2, "SECRET": 1}}
    assert by_rule["b_judge"].details == {"redacted": {"EMAIL": 2}}
    assert by_rule["leak_check"].details is None


async def test_the_deployments_own_words_and_an_unknown_kind() -> None:
    policy = RedactionPolicy(own_words={"CUSTOMER": ["Ana Lopez"]})
    doc = document()
    doc["output"]["content"] = "Dear ANA LOPEZ, refunded."
    with MockJudge() as judge:
        judge.script("Judge the answer", '{"choice": "no", "reason": "r"}')
        await judged(judge, rule(), policy=policy, doc=doc)
        (sent,) = judge.prompts()
    assert sent.endswith("Answer: Dear <CUSTOMER_1>, refunded.")
    with pytest.raises(UnknownKind, match="NAMES"):
        policy.detectors(["NAMES"])
    assert policy.detectors(["CUSTOMER"]) and policy.detectors(False) == []


async def test_a_judge_reading_the_trace_through_tools_reads_it_masked() -> None:
    """The tool answers (spans listed, a search) come from the trace as masked, with the
    prompt's placeholders; a search for the raw value finds nothing."""
    tools_rule = rule(tools="trace")
    with MockJudge() as judge:
        tools = [("list_spans", {}), ("search_trace_regex", {"pattern": "ana"})]
        judge.script("Judge the answer", Reply(tool_calls=tools))
        # the double reads the last message: after the tools, the search's answer
        judge.script('{"matches"', '{"choice": "yes", "reason": "r"}')
        result = await judged(judge, tools_rule)
        last = judge.requests[-1]["body"]["messages"]  # the conversation so far
        answered = [m for m in last if m["role"] == "tool"]
    shown = " ".join(str(m["content"]) for m in answered)
    assert len(answered) == 2 and "<EMAIL_1>" in shown and "<CARD_1>" in shown
    assert EMAIL not in shown and EMAIL.upper() not in shown and "4111" not in shown
    assert '"matches":[]' in shown.replace(" ", "")  # "ana" only in the masked address
    (score,) = result.scores
    assert score.status == "ok", score.status_reason
    assert score.details is not None and score.details["redacted"]["EMAIL"] >= 2


def test_the_deployments_settings_are_checked_and_a_rule_naming_an_unknown_kind_is_said() -> None:
    with pytest.raises(ValueError, match="regions libphonenumber knows"):
        settings(redact_phone_regions=["XX"])
    with pytest.raises(ValueError, match="not a regular expression"):
        settings(redact_patterns={"TICKET": ["ACME-("]})
    policy = settings(redact_patterns={"TICKET": [r"ACME-\d{5}"]}).redaction_policy()
    assert policy.problems([("a", True), ("b", ["TICKET", "EMAIL"]), ("c", False)]) == []
    (problem,) = policy.problems([("d", ["NAMES"])])
    assert problem.startswith("rule d: judge.redact names ['NAMES']")
    assert policy.masking(["NAMES"]) == policy.detectors(True)  # masks more, never less


def test_required_redaction_refuses_raw_text_for_a_judge_outside_the_allowed_hosts() -> None:
    rules = [("masked", True), ("leak_check", False), ("emails_only", ["EMAIL"])]
    external = settings(openai_base_url="https://api.openai.com/v1", redact_required=True)
    assert external.judge_hosts() == {"api.openai.com"}
    problems = external.redaction_problems(rules)
    assert [p.split(":")[0] for p in problems] == ["rule leak_check", "rule emails_only"]
    assert "api.openai.com, which SCORER_REDACT_RAW_HOSTS does not list" in problems[0]
    inside = settings(
        openai_base_url="http://judge.internal:8000/v1",
        redact_required=True,
        redact_raw_hosts=["judge.internal"],
    )
    assert inside.redaction_problems(rules) == []  # a self-hosted judge may read raw text
    batch_outside = settings(
        openai_base_url="http://judge.internal:8000/v1",
        batch_base_url="https://api.openai.com/v1",
        redact_required=True,
        redact_raw_hosts=["judge.internal"],
    )
    assert len(batch_outside.redaction_problems(rules)) == 2
    assert settings(redact_required=False).redaction_problems(rules) == []


async def test_a_named_entity_detector_the_deployment_installs() -> None:
    """``SCORER_REDACT_ENTITIES`` names a factory (``entity_double:make``, the interface a
    Presidio or GLiNER adapter implements); its kinds are masked with the shipped ones."""
    policy = settings(redact_entities="entity_double:make").redaction_policy()
    doc = document()
    doc["output"]["content"] = "Dear Maria Garcia, we sent it to 12 Baker Street."
    with MockJudge() as judge:
        judge.script("Judge the answer", '{"choice": "no", "reason": "r"}')
        result = await judged(judge, rule(), policy=policy, doc=doc)
        (sent,) = judge.prompts()
    assert sent.endswith("Answer: Dear <PERSON_1>, we sent it to <ADDRESS_1>.")
    (score,) = result.scores
    assert score.details is not None and score.details["redacted"]["PERSON"] == 1
    for wrong, says in (("entity_double", "module:factory"), ("no_such:make", "cannot be")):
        with pytest.raises(ValueError, match=says):
            settings(redact_entities=wrong).redaction_policy()
