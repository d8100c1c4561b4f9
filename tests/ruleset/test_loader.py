"""Rule files: strict models, load-time checks, clear errors, and `scorer rules check`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from fixtures import RULES_DIR, as_trace, hub_trace
from typer.testing import CliRunner

from stream.cli import app
from stream.errors import RuleFileError
from stream.ruleset.loader import check_rules, load_rule_file, load_rules
from stream.ruleset.schema import LLMJudgeRule

RULE = "hub_answer_correctness"


@pytest.fixture
def rules_copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR, target)
    return target


def edit(rules_dir: Path, rule_id: str, **changes: object) -> Path:
    path = rules_dir / "fretcoach" / f"{rule_id}.yaml"
    data = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def problems(rules_dir: Path) -> list[str]:
    _, errors = check_rules(rules_dir)
    return [f"{Path(e.path).name}: {p}" for e in errors for p in e.problems]


def test_shipped_rules_load() -> None:
    ruleset = load_rules(RULES_DIR)
    assert {r.id for r in ruleset.rules} >= {RULE, "studio_live_coach_feedback_format"}
    assert len(ruleset.digest) == 12


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"temprature": 0.2},
            "hub_answer_correctness.yaml: field temprature: Extra inputs are not permitted",
        ),
        ({"sampling_rate": 1.5}, "field sampling_rate: Input should be less than or equal to 1"),
        ({"version": None}, "field version: Field required"),
        (
            {"scope": "span"},
            "field scope: Input should be 'trace', 'thread', 'pair' or 'tool_call'",
        ),
        (
            {"kind": "magic"},
            "Input tag 'magic' found using 'kind' does not match any of the expected tags",
        ),
        (
            {"id": "other_name"},
            "field id: 'other_name' must equal the file name 'hub_answer_correctness'",
        ),
        (
            {"variables": {"input": "input.messages[-1].content"}},
            "placeholders without a variable mapping or option: ['output']",
        ),
        (
            {
                "variables": {
                    "input": "input.messages[-1].content",
                    "output": "output.messages[-1].content",
                    "extra": "metadata.x",
                }
            },
            "variables or options not used in the prompt: ['extra']",
        ),
        (
            {"variables": {"input": "input.messages[-1.content", "output": "x"}},
            "variables.input: bad path",
        ),
        (
            {"output": {"type": "numeric", "min": 1, "max": 0}},
            "field output: min (1.0) must be below max (0.0)",
        ),
    ],
)
def test_a_bad_rule_file_names_the_file_and_field(
    rules_copy: Path, changes: dict, expected: str
) -> None:
    edit(rules_copy, RULE, **changes)
    found = problems(rules_copy)
    assert any(expected in p for p in found), found
    with pytest.raises(RuleFileError):
        load_rules(rules_copy)


def test_a_typo_in_a_nested_field_is_rejected(rules_copy: Path) -> None:
    edit(rules_copy, RULE, filter={"trace_name": ["hub-coach-chat"]})
    assert any(
        "field filter.trace_name: Extra inputs are not permitted" in p for p in problems(rules_copy)
    )


def test_unknown_check_and_wrong_variables_are_rejected(rules_copy: Path) -> None:
    edit(rules_copy, "studio_live_coach_feedback_format", check="no_such_check")
    edit(rules_copy, "studio_immediate_actionability_check", variables={"answer": "output.output"})
    found = problems(rules_copy)
    assert any("unknown check 'no_such_check'" in p for p in found)
    assert any("takes variables ['output'], mapped: ['answer']" in p for p in found)


def test_a_fan_out_names_one_of_the_rules_variables(rules_copy: Path) -> None:
    edit(rules_copy, "hub_answer_correctness", fan_out={"variable": "documents"})
    edit(rules_copy, "hub_response_clarity", fan_out={"variable": "input", "max_items": 0})
    found = problems(rules_copy)
    assert any(
        "hub_answer_correctness.yaml" in p and "fan_out.variable 'documents' is not one of" in p
        for p in found
    ), found
    assert any("hub_response_clarity.yaml" in p and "max_items" in p for p in found), found


def test_a_fan_out_bound_defaults_to_20_and_stays_within_100(rules_copy: Path) -> None:
    path = edit(rules_copy, RULE, fan_out={"variable": "input"})
    edit(rules_copy, "hub_response_clarity", fan_out={"variable": "input", "max_items": 101})
    found = problems(rules_copy)
    assert not any(f"{RULE}.yaml" in p for p in found), found
    assert any("hub_response_clarity.yaml" in p and "max_items" in p for p in found), found
    rule = load_rule_file(path)
    assert isinstance(rule, LLMJudgeRule) and rule.fan_out is not None
    assert (rule.fan_out.max_items, rule.fan_out.noun) == (20, "items")


def test_duplicate_ids_fail(rules_copy: Path) -> None:
    other = rules_copy / "other"
    other.mkdir()
    shutil.copy(rules_copy / "fretcoach" / f"{RULE}.yaml", other / f"{RULE}.yaml")
    edit(other.parent, RULE)  # untouched copy in fretcoach
    data = yaml.safe_load((other / f"{RULE}.yaml").read_text())
    data["pack"] = "other"
    (other / f"{RULE}.yaml").write_text(yaml.safe_dump(data))
    assert any("duplicate rule id 'hub_answer_correctness'" in p for p in problems(rules_copy))


def test_invalid_yaml_is_reported(rules_copy: Path) -> None:
    (rules_copy / "fretcoach" / f"{RULE}.yaml").write_text("id: [unclosed\n")
    assert any("not valid YAML" in p for p in problems(rules_copy))


def test_cli_rules_check_passes_on_shipped_rules() -> None:
    result = CliRunner().invoke(app, ["rules", "check", str(RULES_DIR)])
    assert result.exit_code == 0, result.output
    assert "0 files with errors" in result.output


def test_cli_rules_check_fails_on_a_broken_copy(rules_copy: Path) -> None:
    edit(rules_copy, RULE, sampling_rate=2)
    result = CliRunner().invoke(app, ["rules", "check", str(rules_copy)], terminal_width=300)
    assert result.exit_code == 1
    assert "hub_answer_correctness.yaml: field sampling_rate" in result.output


def test_filters_and_deterministic_sampling(rules_copy: Path) -> None:
    edit(
        rules_copy,
        RULE,
        sampling_rate=0.5,
        filter={
            "trace_names": ["hub-coach-chat"],
            "tags_all": ["hub"],
            "metadata": {"model": "gpt-4o-mini"},
        },
    )
    rule = next(r for r in load_rules(rules_copy).rules if r.id == RULE)
    trace = as_trace(hub_trace())
    assert rule.filter.matches(trace)
    assert not rule.filter.matches(trace.model_copy(update={"tags": ["studio"]}))
    assert not rule.filter.matches(trace.model_copy(update={"metadata": {"model": "other"}}))
    assert not rule.filter.matches(trace.model_copy(update={"name": "other"}))
    picks = [rule.sampled(f"trace-{i}") for i in range(2000)]
    assert picks == [rule.sampled(f"trace-{i}") for i in range(2000)]  # redelivery samples alike
    assert 0.45 < sum(picks) / len(picks) < 0.55


def test_thread_sections_are_checked(rules_copy: Path) -> None:
    edit(
        rules_copy,
        "hub_conversational_coherence",
        thread={"kind": "conversation", "user": "input.x"},
    )
    edit(rules_copy, "studio_live_feedback_effectiveness", thread=None)
    edit(rules_copy, RULE, thread={"kind": "session"})
    found = problems(rules_copy)
    assert any("a conversation thread needs user and assistant paths" in p for p in found), found
    assert any("a thread-scope rule needs a thread section" in p for p in found), found
    assert any("a thread section is for thread-scope rules only" in p for p in found), found


def test_conversation_rules_must_share_turn_paths(rules_copy: Path) -> None:
    edit(
        rules_copy,
        "hub_user_frustration_score",
        thread={
            "kind": "conversation",
            "user": "input.messages[0].content",
            "assistant": "output.messages[-1].content",
        },
    )
    found = problems(rules_copy)
    assert any(
        "user/assistant/end paths or inactivity_gap_s differ from rule "
        "'hub_conversational_coherence'" in p
        for p in found
    ), found


def test_session_rules_must_share_their_inactivity_gap(rules_copy: Path) -> None:
    edit(
        rules_copy,
        "studio_live_feedback_improvement",
        thread={"kind": "session", "inactivity_gap_s": 60},
    )
    found = problems(rules_copy)
    assert any("every session rule of a rule set must use the same ones" in p for p in found), found


PACK_BREAKAGES = [
    # pack, rule file, a change that breaks it, what `scorer rules check` must say
    (
        "mlflow",
        "correctness",
        {"variables": {"input": "input"}},
        "correctness.yaml: field (file): placeholders without a variable mapping or option: ['ground_truth', 'output']",
    ),
    (
        "mlflow",
        "answer_similarity",
        {
            "output": {
                "type": "choice",
                "choices": {"yes": 1, "no": 0},
                "answer_format": "score_lines",
            }
        },
        "answer_similarity.yaml: field output: score_lines answers are numeric",
    ),
    (
        "mlflow",
        "instructions",
        {"options": {}},
        "instructions.yaml: field (file): placeholders without a variable mapping or option: ['instructions']",
    ),
    (
        "critique",
        "response_critique",
        {"aggregate": {"name": "overall_quality"}},
        "response_critique.yaml: field (file): unknown aggregate 'overall_quality'",
    ),
    (
        "critique",
        "pleasantries",
        {"params": {"phrases": ["great question"], "minor_at": 3, "major_at": 1}},
        "pleasantries.yaml: field (file): major_at must be above minor_at",
    ),
    (
        "coaching",
        "coaching_transcript",
        {"criteria": [{"id": "CQ1", "name": "Accurate understanding"}]},
        "coaching_transcript.yaml: field (file): criteria not in the rubric",
    ),
    (
        "coaching",
        "coaching_question_endings",
        {"check": "question_ending"},
        "coaching_question_endings.yaml: field (file): unknown check 'question_ending'",
    ),
]


@pytest.mark.parametrize("pack", ["fretcoach", "mlflow", "critique", "coaching", "conversation"])
def test_cli_rules_check_passes_on_each_shipped_pack(pack: str) -> None:
    result = CliRunner().invoke(app, ["rules", "check", str(RULES_DIR), "--pack", pack])
    assert result.exit_code == 0, result.output
    assert f"ok  {pack}/" in result.output and "0 files with errors" in result.output


@pytest.mark.parametrize(("pack", "rule_id", "change", "message"), PACK_BREAKAGES)
def test_cli_rules_check_fails_clearly_on_a_broken_pack_copy(
    rules_copy: Path, pack: str, rule_id: str, change: dict, message: str
) -> None:
    path = rules_copy / pack / f"{rule_id}.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(change)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(
        app, ["rules", "check", str(rules_copy), "--pack", pack], terminal_width=400
    )
    assert result.exit_code == 1
    assert message in " ".join(result.output.split()), result.output


def test_docs_rules_md_lists_every_shipped_rule() -> None:
    readme = (RULES_DIR.parent / "docs" / "rules.md").read_text(encoding="utf-8")
    table = readme.split("### Shipped rules", 1)[1].split("\n\n", 2)[1]
    listed = {row.split("|")[2].strip().strip("`") for row in table.splitlines()[2:]}
    assert listed == {r.id for r in load_rules(RULES_DIR).rules}
