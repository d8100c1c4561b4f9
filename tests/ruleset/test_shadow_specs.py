"""A rule's ``shadow:`` judges as the loader reads them: each names another model or prompt
(inline or a file beside the rule) for the same variables; every mistake is refused at load
with the file, the field and what was wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stream.errors import RuleFileError
from stream.ruleset.loader import check_rules, load_rule_file
from stream.ruleset.schema import LLMJudgeRule

BASE: dict[str, Any] = {
    "id": "answer_quality",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"question": "input.question"},
    "output": {"type": "choice", "choices": {"yes": 1, "no": 0}},
    "prompt": "Is this answered? {{question}}",
}


def write(tmp_path: Path, **overrides: Any) -> Path:
    pack = tmp_path / "demo"
    pack.mkdir(exist_ok=True)
    path = pack / "answer_quality.yaml"
    path.write_text(yaml.safe_dump({**BASE, **overrides}))
    return path


def load(tmp_path: Path, **overrides: Any) -> LLMJudgeRule:
    rule = load_rule_file(write(tmp_path, **overrides))
    assert isinstance(rule, LLMJudgeRule)
    return rule


def refusal(tmp_path: Path, **overrides: Any) -> str:
    with pytest.raises(RuleFileError) as caught:
        load_rule_file(write(tmp_path, **overrides))
    return str(caught.value)


def test_a_shadow_defaults_to_a_tenth_of_the_targets_and_the_rules_prompt(tmp_path: Path) -> None:
    rule = load(tmp_path, shadow=[{"name": "mini", "model": "gpt-mini"}])
    (spec,) = rule.shadow
    assert (spec.sampling_rate, spec.prompt, spec.system_prompt) == (0.1, None, None)
    judged = rule.as_shadow("mini")
    assert (judged.variant, judged.judge.model, judged.prompt) == ("mini", "gpt-mini", rule.prompt)
    assert judged.shadow == [] and rule.variant is None and rule.judge.model is None
    with pytest.raises(KeyError, match="no shadow 'other'"):
        rule.as_shadow("other")


def test_a_shadow_prompt_file_is_read_beside_the_rule(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "strict.txt").write_text("Strictly: is this answered? {{question}}")
    rule = load(tmp_path, shadow=[{"name": "strict", "prompt_file": "strict.txt"}])
    judged = rule.as_shadow("strict")
    assert judged.prompt == "Strictly: is this answered? {{question}}"
    assert judged.judge == rule.judge  # the rule's model


def test_a_changed_prompt_file_changes_the_rule_sets_digest(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    prompt = tmp_path / "demo" / "strict.txt"
    prompt.write_text("Strictly: {{question}}")
    write(tmp_path, shadow=[{"name": "strict", "prompt_file": "strict.txt"}])
    before, errors = check_rules(tmp_path)
    prompt.write_text("Very strictly: {{question}}")
    after, _ = check_rules(tmp_path)
    assert errors == [] and before.digest != after.digest


@pytest.mark.parametrize(
    ("shadow", "said"),
    [
        (
            [{"name": "a", "model": "m"}, {"name": "a", "model": "n"}],
            "shadow names repeat: ['a']",
        ),
        ([{"name": "primary", "model": "m"}], "name 'primary' is the rule's own judge"),
        ([{"name": "Bad Name", "model": "m"}], "field shadow.0.name: String should match"),
        ([{"name": "same"}], "shadow same: the rule's own model and prompt"),
        ([{"name": "same", "model": None, "prompt": BASE["prompt"]}], "shadow same: the rule's"),
        (
            [{"name": "x", "prompt": "Answered? {{question}} {{answer}}"}],
            "shadow x: placeholders without a variable mapping or option: ['answer']",
        ),
        (
            [{"name": "x", "prompt": "Answered?"}],
            "shadow x: variables or options not used in the prompt: ['question']",
        ),
        ([{"name": "x", "model": "m", "sampling_rate": 0}], "shadow.0.sampling_rate"),
        ([{"name": "x", "model": "m", "sampling_rate": 1.5}], "shadow.0.sampling_rate"),
        (
            [{"name": "x", "prompt": "{{question}}", "prompt_file": "p.txt"}],
            "prompt and prompt_file are two ways to give one prompt",
        ),
        (
            [{"name": "x", "prompt_file": "missing.txt"}],
            "prompt_file 'missing.txt': cannot be read",
        ),
        ([{"name": "x", "prompt_file": "../outside.txt"}], "a path inside the rule file's folder"),
        ([{"name": "x", "prompt_file": "answer_quality.yaml"}], "is a rule, not a prompt"),
        ([{"name": "x", "model": "m", "temperature": 1}], "shadow.0.temperature: Extra inputs"),
    ],
)
def test_a_bad_shadow_is_refused_at_load(
    tmp_path: Path, shadow: list[dict[str, Any]], said: str
) -> None:
    message = refusal(tmp_path, shadow=shadow)
    assert "answer_quality.yaml" in message and said in message


def test_a_rule_reading_the_trace_through_tools_has_no_shadow(tmp_path: Path) -> None:
    message = refusal(tmp_path, judge={"tools": "trace"}, shadow=[{"name": "x", "model": "m"}])
    assert "shadow judges are not run for a rule with judge.tools: trace" in message


def test_a_check_rule_has_no_shadow(tmp_path: Path) -> None:
    check = {"kind": "check", "check": "anything", "prompt": None, "variables": {}}
    data = {k: v for k, v in {**BASE, **check}.items() if v is not None}
    pack = tmp_path / "demo"
    pack.mkdir()
    path = pack / "answer_quality.yaml"
    path.write_text(yaml.safe_dump({**data, "shadow": [{"name": "x", "model": "m"}]}))
    with pytest.raises(RuleFileError, match="a check has no judge to shadow"):
        load_rule_file(path)
