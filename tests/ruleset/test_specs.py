"""A rule's judge block: batch mode and its submission bounds, checked where the rule loads."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from fixtures import RULES_DIR
from pydantic import ValidationError

from stream.ruleset.judge_specs import BatchSpec, JudgeSpec
from stream.ruleset.loader import check_rules, load_rule_file
from stream.ruleset.schema import LLMJudgeRule
from stream.ruleset.specs import OutputSpec

RULE = "hub_answer_correctness"


def test_a_rule_is_judged_online_unless_it_says_batch() -> None:
    judge = JudgeSpec()
    assert judge.mode == "online"
    assert (judge.batch.max_jobs, judge.batch.max_wait_s) == (1000, 3600.0)
    batched = JudgeSpec(mode="batch", batch={"max_jobs": 50_000, "max_wait_s": 86_400})
    assert batched.batch == BatchSpec(max_jobs=50_000, max_wait_s=86_400.0)
    assert JudgeSpec(mode="batch", cache=False).cache is False  # allowed together


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        ({"max_jobs": 0}, "max_jobs"),
        ({"max_jobs": 50_001}, "max_jobs"),  # the Batch API's limit of requests per batch
        ({"max_wait_s": 0}, "max_wait_s"),
        ({"max_wait_s": 86_401}, "max_wait_s"),
        ({"max_job": 10}, "max_job"),  # a typo is refused, not ignored
    ],
)
def test_batch_bounds_are_checked(batch: dict, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        JudgeSpec(mode="batch", batch=batch)


def test_a_mode_is_online_or_batch() -> None:
    with pytest.raises(ValidationError, match="mode"):
        JudgeSpec(mode="later")


def test_batch_mode_with_a_tool_loop_is_refused_with_why() -> None:
    with pytest.raises(ValidationError, match=r"mode batch cannot use tools: trace .*answers"):
        JudgeSpec(mode="batch", tools="trace")
    assert JudgeSpec(mode="online", tools="trace").tools == "trace"


def test_a_rule_file_in_batch_mode_loads_and_a_bad_one_names_its_file(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(RULES_DIR, rules, ignore=shutil.ignore_patterns("__pycache__"))
    path = rules / "fretcoach" / f"{RULE}.yaml"
    data = yaml.safe_load(path.read_text())
    data["judge"] = {**data.get("judge", {}), "mode": "batch", "batch": {"max_wait_s": 600}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    rule = load_rule_file(path)
    assert isinstance(rule, LLMJudgeRule)
    assert (rule.judge.mode, rule.judge.batch.max_wait_s) == ("batch", 600.0)

    data["judge"]["tools"] = "trace"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _, errors = check_rules(rules)
    found = [f"{Path(e.path).name}: {p}" for e in errors for p in e.problems]
    assert any(f"{RULE}.yaml" in p and "mode batch cannot use tools" in p for p in found), found


def test_choice_labels_yaml_read_as_booleans_are_refused_saying_to_quote_them() -> None:
    """YAML 1.1 reads a bare yes/no as booleans: the rule file's error says to quote them."""
    choices = yaml.safe_load("{yes: 1.0, no: 0.0}")
    assert set(choices) == {True, False}
    with pytest.raises(ValidationError, match=re.escape('quote the labels, e.g. {"yes": 1.0')):
        OutputSpec(type="choice", choices=choices)
    assert OutputSpec(type="choice", choices=yaml.safe_load('{"yes": 1.0, "no": 0.0}')).choices
