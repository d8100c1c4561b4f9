"""The scripted judge as the README starts it (``python tests/scripted_judge.py PORT``): every
shipped rule of every pack, and a user's own, asked through the real judge client, is answered
at the first attempt in the format the rule asks for (a JSON schema, MLflow's score lines, a
trace read through tools first), and its values differ from one prompt to the next."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures import RULES_DIR, settings
from scripted_judge import MockJudge

from stream.engine.prompt import fit_prompt
from stream.engine.trace_tools import TraceTools
from stream.engine.verdicts import ComparisonAnswers, ParsedAnswer, RubricAnswers
from stream.judge.client import JudgeClient
from stream.kafka.broker import free_port
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import CriteriaRule, LLMJudgeRule, PromptedRule

HERE = Path(__file__).resolve().parent
PROMPTS = 6  # varied prompts per rule
SUBJECTS = ["tax forms", "a sourdough starter", "Rust lifetimes", "a flight refund", "knee pain"]
SHIPPED = [r for r in load_rules(RULES_DIR).rules if isinstance(r, PromptedRule)]

# a user's own rules, phrased as docs/rules.md's readers would write them
USER_RULES = {
    "helpfulness": """
id: helpfulness
pack: mine
version: 1
scope: trace
kind: llm_judge
variables:
  question: input.question
  answer: output.answer
output: {type: numeric, min: 1, max: 10, integer: true}
prompt: |-
  How helpful is this answer to the question, on a scale from 1 to 10?
  Question: {{question}}
  Answer: {{answer}}
  Reply as JSON: {"score": <1-10>, "reason": "<why>"}
""",
    "tone": """
id: tone
pack: mine
version: 1
scope: trace
kind: llm_judge
variables:
  answer: output.answer
output:
  type: choice
  choices: {friendly: 1.0, neutral: 0.5, rude: 0.0}
prompt: |-
  Is the tone of this reply friendly, neutral or rude?
  Reply: {{answer}}
""",
    "completeness": """
id: completeness
pack: mine
version: 1
scope: trace
kind: llm_judge
variables:
  question: input.question
  answer: output.answer
output: {type: numeric, min: 0, max: 100, integer: true, answer_format: score_lines}
prompt: |-
  Give the answer a completeness score between 0 and 100.
  Question: {{question}}
  Answer: {{answer}}
  Answer in two lines:
  score: <your score>
  justification: <your reasoning>
""",
    "groundedness_share": """
id: groundedness_share
pack: mine
version: 1
scope: trace
kind: llm_judge
variables:
  answer: output.answer
output: {type: numeric, min: 0.0, max: 1.0}
prompt: |-
  What share of the claims in this answer is grounded? Give a value between 0.0 and 1.0.
  Answer: {{answer}}
""",
}


@pytest.fixture(scope="module")
def judge_url() -> Iterator[str]:
    """The scripted judge started as the README starts it, on a free port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(HERE / "scripted_judge.py"), str(port)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE.parent,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == f"mock judge on http://127.0.0.1:{port}/v1", line
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def user_rules(tmp_path_factory: pytest.TempPathFactory) -> list[PromptedRule]:
    pack = tmp_path_factory.mktemp("rules") / "mine"
    pack.mkdir()
    for name, text in USER_RULES.items():
        (pack / f"{name}.yaml").write_text(text)
    return [r for r in load_rules(pack.parent).rules if isinstance(r, PromptedRule)]


def variable_values(rule: PromptedRule, k: int) -> dict[str, Any]:
    """Values for every variable of ``rule``, in the shape its format reads, the ``k``-th
    prompt's own (a fan-out rule's list given one item: one call's values)."""
    subject = SUBJECTS[k % len(SUBJECTS)]
    values: dict[str, Any] = {}
    for name, spec in rule.variable_specs.items():
        text = f"{name} number {k}, about {subject}"
        values[name] = {
            "transcript": [
                {"role": "user", "content": f"Help me with {subject} ({k})."},
                {"role": "assistant", "content": f"Here is what to know about {subject}."},
            ],
            "bullets": [text, f"a second fact about {subject}"],
            "tagged": [text],
            "tagged_fields": {"request": text, "response": f"a reply about {subject}"},
            "json": {"text": text},
        }.get(spec.format, text)
    return values


def trace_document(k: int) -> dict[str, Any]:
    """A trace for a judge that reads it through tools."""
    return {
        "id": f"trace-{k}",
        "name": "agent-run",
        "input": {"messages": [{"role": "user", "content": f"Book {SUBJECTS[k % 5]}"}]},
        "output": {"messages": [{"role": "assistant", "content": "Done."}]},
    }


def answered_values(answer: Any, rule: PromptedRule) -> tuple[Any, ...]:
    """What the judge's answer says, checked complete: a rubric's every criterion (and the
    aggregate it is asked to state), a comparison's every rating and its preference, answered
    within the rule's spec."""
    if isinstance(answer, ParsedAnswer):
        return (answer.raw_value,)
    assert isinstance(rule, CriteriaRule)
    criteria = {c.id for c in rule.criteria}
    rubrics = [answer] if isinstance(answer, RubricAnswers) else list(answer.responses.values())
    values: list[Any] = []
    for rubric in rubrics:
        assert set(rubric) == criteria, rubric
        values += [a.raw_value if a is not None else None for a in rubric.values()]
        assert None not in values, rubric
        assert (rubric.stated is None) == (rule.stated_aggregate is None), rubric
    if isinstance(answer, ComparisonAnswers):
        assert answer.preference is not None, answer.preference_error
        values.append(answer.preference.raw_value)
    return tuple(values)


async def answers_of(judge_url: str, rule: PromptedRule) -> list[tuple[Any, ...]]:
    """The judge client's verdicts for ``rule`` on ``PROMPTS`` varied prompts; each verdict
    had at the first attempt (two with a tool loop: the tool call, then the answer)."""
    client = JudgeClient(settings(openai_base_url=judge_url).judge_config())
    found = []
    try:
        for k in range(PROMPTS):
            fitted = fit_prompt(rule, variable_values(rule, k), {}, 100_000)
            tools = TraceTools(trace_document(k)) if rule.judge.tools == "trace" else None
            verdict = await client.judge(rule, fitted.prompt, fitted.system, fitted.quoted, tools)
            assert verdict.attempts == (2 if tools else 1), verdict
            assert verdict.usage is not None and verdict.usage.total_tokens > 0
            found.append(answered_values(verdict.answer, rule))
    finally:
        await client.close()
    return found


@pytest.mark.parametrize("rule", SHIPPED, ids=lambda r: f"{r.pack}/{r.id}")
async def test_every_shipped_rule_is_answered_in_its_format_with_varied_values(
    judge_url: str, rule: PromptedRule
) -> None:
    answers = await answers_of(judge_url, rule)
    assert len(set(answers)) > 1, f"{rule.id}: the same answer to every prompt: {answers}"


async def test_a_users_own_rules_are_answered_in_their_own_scales(
    judge_url: str, user_rules: list[PromptedRule]
) -> None:
    assert {r.id for r in user_rules} == set(USER_RULES)
    for rule in user_rules:
        assert isinstance(rule, LLMJudgeRule)
        values = [v for (v,) in await answers_of(judge_url, rule)]
        scale = rule.output.scale
        assert all(scale.min <= v <= scale.max for v in values)
        assert len(set(values)) > 2, f"{rule.id}: {values}"
        if rule.id == "groundedness_share":
            assert any(0 < v < 1 for v in values), values  # tenths, not only the ends


def test_the_classs_defaults_are_unchanged() -> None:
    """What the suite's tests rely on: a prompt no script matches gets the default reply, or
    with ``answer_by_schema`` the schema's first choice and top of the scale; varied answers
    are only the command line's (or ``vary_answers``)."""
    import orjson
    from openai import OpenAI

    schema = {
        "type": "object",
        "properties": {"result": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["result"],
        "additionalProperties": False,
    }
    ask = {
        "model": "m",
        "messages": [{"role": "user", "content": "Anything at all."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": schema, "strict": True},
        },
    }
    for judge, expected in [
        (MockJudge(), {"score": 1.0, "reason": "scripted"}),
        (MockJudge(answer_by_schema=True), {"result": "yes"}),
    ]:
        with judge:
            client = OpenAI(base_url=judge.base_url, api_key="not-needed", max_retries=0)
            for k in range(5):
                ask["messages"] = [{"role": "user", "content": f"Anything at all, {k}."}]
                completion = client.chat.completions.create(**ask)  # type: ignore[call-overload]
                assert orjson.loads(completion.choices[0].message.content) == expected
