"""Golden tests: the response-critique pack (seed 001).

The rubric text in the prompt is the seed's (tests/seed_rubrics.py reads it by heading); the
overall quality is computed from the six ratings by the seed's table, tested on every row,
its boundaries, and all 729 combinations of ratings.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
from typing import Any

import orjson
import pytest
from fixtures import RULES_DIR, as_trace, scorer
from scripted_judge import MockJudge
from seed_rubrics import (
    CRITIQUE_SEED,
    critique_dimensions,
    critique_sections,
    overall_table,
    section,
)

from stream.engine.prompt import render_prompt, resolve_variables
from stream.judge.criteria import rubric_schema
from stream.models import Scale
from stream.ruleset.aggregators import CriterionAnswer, CriterionInfo, RubricInput
from stream.ruleset.loader import load_rule_file, load_rules
from stream.ruleset.schema import CheckRule, RubricRule

LABELS = {1: "Major Issues", 2: "Minor Issues", 3: "No Issues"}


@functools.cache
def rubric_rule() -> RubricRule:
    rule = load_rule_file(RULES_DIR / "critique" / "response_critique.yaml")
    assert isinstance(rule, RubricRule)
    return rule


def trace(prompt: str = "Write a Python function that reverses a string.") -> dict[str, Any]:
    return {
        "id": "trace-critique-1",
        "project_name": "code-assistant",
        "name": "chat",
        "input": {"messages": [{"role": "user", "content": prompt}]},
        "output": {
            "messages": [{"role": "assistant", "content": "def rev(s):\n    return s[::-1]"}]
        },
    }


def test_prompt_holds_the_seeds_rubric_verbatim_and_the_six_dimensions() -> None:
    rule = rubric_rule()
    for text in critique_sections():
        assert text in rule.prompt
    assert [c.name for c in rule.criteria] == critique_dimensions()
    assert len(rule.criteria) == 6
    assert "overall" not in rule.prompt.lower().split("## prompt")[-1]  # never asked
    document = trace()
    rendered = render_prompt(rule, resolve_variables(rule, document), document)
    assert "## Prompt\n\nWrite a Python function that reverses a string.\n\n" in rendered
    assert "## Response\n\ndef rev(s):\n    return s[::-1]\n\n" in rendered


def test_the_prompt_asks_for_key_strengths_and_weaknesses_in_the_seeds_words() -> None:
    rule = rubric_rule()
    workflow = section(
        CRITIQUE_SEED.read_text(encoding="utf-8"),
        "### For Single Response Evaluation:",
        "### For Response Comparison:",
    )
    step = re.search(r"^6\. (.+)$", workflow, re.MULTILINE)
    assert step is not None and step[1] == "Document key strengths and weaknesses"
    asked = rule.prompt.split("## Response\n")[-1].split("\n---\n", 1)[1]
    assert f'to "{step[1]}", "key_strengths" and "key_weaknesses", each a list' in asked
    # the example answer in the prompt has exactly the fields of the answer schema
    example = orjson.loads(asked.strip().splitlines()[-1])
    assert list(example) == rubric_schema(rule)["required"]
    assert list(example)[-2:] == rule.notes == ["key_strengths", "key_weaknesses"]


def seed_overall(major: int, minor: int) -> str:
    """The seed's Rating Framework, read literally (see test_the_table_is_the_seeds)."""
    if major >= 2:
        return "Unacceptable"
    if major == 1 or minor >= 5:
        return "Inadequate"
    if minor >= 3:
        return "Sufficient"
    if minor >= 1:
        return "Discrete"
    return "Excellent"


def test_the_table_is_the_seeds() -> None:
    table = overall_table()
    assert list(table) == ["Excellent", "Discrete", "Sufficient", "Inadequate", "Unacceptable"]
    assert table["Excellent"].startswith('All dimensions rated "No Issues"')
    assert table["Discrete"].startswith('At most 1-2 dimensions have "Minor Issues"')
    assert table["Sufficient"].startswith('3-4 dimensions have "Minor Issues"')
    assert table["Inadequate"].startswith(
        '1 dimension has "Major Issues" OR 5+ dimensions have "Minor Issues"'
    )
    assert table["Unacceptable"].startswith('2+ dimensions have "Major Issues"')


def overall(ratings: list[int]) -> Any:
    rule = rubric_rule()
    rubric = RubricInput(
        criteria=[CriterionInfo(c.id, c.name) for c in rule.criteria],
        answers={
            c.id: CriterionAnswer(float(r), LABELS[r], f"{c.name} reason")
            for c, r in zip(rule.criteria, ratings, strict=True)
        },
        scale=rule.output.scale,
    )
    return rule.aggregator.func(rubric, rule.validated_aggregate)


ROWS = [
    # six ratings (3 no issue, 2 minor, 1 major) -> overall label, raw value
    ([3, 3, 3, 3, 3, 3], "Excellent", 5),
    ([2, 3, 3, 3, 3, 3], "Discrete", 4),
    ([2, 2, 3, 3, 3, 3], "Discrete", 4),
    ([2, 2, 2, 3, 3, 3], "Sufficient", 3),
    ([2, 2, 2, 2, 3, 3], "Sufficient", 3),
    ([2, 2, 2, 2, 2, 3], "Inadequate", 2),
    ([2, 2, 2, 2, 2, 2], "Inadequate", 2),
    ([1, 3, 3, 3, 3, 3], "Inadequate", 2),
    ([1, 2, 2, 2, 2, 2], "Inadequate", 2),
    ([3, 3, 3, 3, 3, 1], "Inadequate", 2),
    ([1, 1, 3, 3, 3, 3], "Unacceptable", 1),
    ([1, 1, 1, 1, 1, 1], "Unacceptable", 1),
    ([2, 1, 2, 1, 3, 3], "Unacceptable", 1),
]


@pytest.mark.parametrize(("ratings", "label", "raw"), ROWS)
def test_every_row_of_the_overall_table(ratings: list[int], label: str, raw: int) -> None:
    scores = overall(ratings)
    top = scores[0]
    assert (top.name, top.label, top.raw_value) == ("overall", label, raw)
    assert top.value == (raw - 1) / 4
    assert [s.raw_value for s in scores[1:]] == [float(r) for r in ratings]
    assert [s.label for s in scores[1:]] == [LABELS[r] for r in ratings]


def test_all_729_rating_combinations_follow_the_seed() -> None:
    for ratings in itertools.product((1, 2, 3), repeat=6):
        top = overall(list(ratings))[0]
        assert top.label == seed_overall(ratings.count(1), ratings.count(2)), ratings


def test_a_missing_rating_is_an_error_not_a_guess() -> None:
    rule = rubric_rule()
    rubric = RubricInput(
        criteria=[CriterionInfo(c.id, c.name) for c in rule.criteria],
        answers={c.id: CriterionAnswer(3.0, "No Issues", None) for c in rule.criteria[:5]},
        scale=rule.output.scale,
    )
    scores = {s.name: s for s in rule.aggregator.func(rubric, rule.validated_aggregate)}
    assert scores["safety"].error and scores["safety"].value is None
    assert scores["overall"].error == "overall quality needs every rating; unrated: Safety"
    assert scores["overall"].scale == Scale(min=1, max=5)


def test_a_table_that_leaves_a_combination_unlabelled_fails_at_load(tmp_path: Any) -> None:
    import shutil

    import yaml

    from stream.ruleset.loader import check_rules

    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR / "critique", target / "critique")
    path = target / "critique" / "response_critique.yaml"
    data = yaml.safe_load(path.read_text())
    data["aggregate"]["params"]["rows"] = data["aggregate"]["params"]["rows"][1:]  # no 2+ major
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _, errors = check_rules(target)
    assert any(
        "no row covers 2 major and 0 minor issues over 6 criteria" in p
        for e in errors
        for p in e.problems
    )


def test_scored_through_a_judge_server_one_call_seven_scores() -> None:
    answer = {
        c: {"reason": f"{c} fine", "rating": 3} for c in (r.id for r in rubric_rule().criteria)
    }
    answer["code_quality"] = {"reason": "single-letter names", "rating": 2}
    report = {
        "key_strengths": ["Correct algorithm", "Handles empty input"],
        "key_weaknesses": ["Single-letter variable names"],
    }
    ruleset = load_rules(RULES_DIR, ["critique"])
    with MockJudge() as judge:
        judge.script("", orjson.dumps({**answer, **report}).decode())
        document = trace()
        result = asyncio.run(
            scorer(judge.base_url, ruleset).score_trace(as_trace(document), document)
        )
        requests = [r["body"] for r in judge.requests]
    assert len(requests) == 1
    schema = requests[0]["response_format"]["json_schema"]["schema"]
    # the six ratings, then the seed's report: key strengths and weaknesses
    assert schema["required"] == [c.id for c in rubric_rule().criteria] + [*report]
    assert schema["properties"]["key_strengths"] == {"type": "array", "items": {"type": "string"}}
    assert schema["properties"]["safety"]["required"] == ["reason", "rating"]
    scores = {s.criterion: s for s in result.scores if s.rule_id == "response_critique"}
    assert set(scores) == {"overall", *answer}
    assert (scores["overall"].label, scores["overall"].raw_value, scores["overall"].value) == (
        "Discrete",
        4.0,
        0.75,
    )
    assert scores["overall"].usage is not None and scores["code_quality"].usage is None
    assert scores["overall"].details is not None
    assert {k: scores["overall"].details[k] for k in report} == report
    assert not (scores["code_quality"].details or {}).get("key_strengths")
    assert (scores["code_quality"].label, scores["code_quality"].value) == ("Minor Issues", 0.5)
    assert len({s.score_id for s in scores.values()}) == 7
    decisions = [d for d in result.decisions if d.rule_id == "response_critique"]
    assert [(d.outcome, d.score_id) for d in decisions] == [("scored", scores["overall"].score_id)]
    pleasantries = next(s for s in result.scores if s.rule_id == "pleasantries")
    assert (pleasantries.raw_value, pleasantries.label) == (3.0, "No Issues")


def test_without_a_judge_the_rubric_publishes_one_skipped_score() -> None:
    ruleset = load_rules(RULES_DIR, ["critique"])
    document = trace()
    result = asyncio.run(scorer(None, ruleset).score_trace(as_trace(document), document))
    rubric = [s for s in result.scores if s.rule_id == "response_critique"]
    assert [(s.criterion, s.status) for s in rubric] == [("overall", "skipped")]


PLEASANTRIES = [
    ("def rev(s): return s[::-1]", 3.0, "No Issues", "0 pleasantries"),
    ("Great question! Use s[::-1].", 2.0, "Minor Issues", '1 pleasantry: "great question"'),
    (
        "I\u2019d be happy to help. Use s[::-1]. I hope this helps!",
        2.0,
        "Minor Issues",
        '2 pleasantries: "i\'d be happy to help", "i hope this helps"',
    ),
    (
        "Great question! Use s[::-1]. Hope this helps! Feel free to ask if anything is unclear.",
        1.0,
        "Major Issues",
        '3 pleasantries: "great question", "hope this helps", "feel free to ask"',
    ),
]


@pytest.mark.parametrize(("response", "raw", "label", "reason"), PLEASANTRIES)
def test_pleasantry_counting(response: str, raw: float, label: str, reason: str) -> None:
    rule = load_rule_file(RULES_DIR / "critique" / "pleasantries.yaml")
    assert isinstance(rule, CheckRule)
    result = rule.check_spec.func({"response": response}, rule.validated_params)
    assert (result.raw_value, result.label, result.reason) == (raw, label, reason)


def test_a_judge_that_gives_no_strengths_or_weaknesses_is_still_scored() -> None:
    answer = {c.id: {"reason": "fine", "rating": 3} for c in rubric_rule().criteria}
    answer["key_weaknesses"] = "Verbose."  # one string, not a list: read as one remark
    ruleset = load_rules(RULES_DIR, ["critique"])
    with MockJudge(reject_response_format=True) as judge:  # text answers: nothing enforced
        judge.script("", orjson.dumps(answer).decode())
        document = trace()
        result = asyncio.run(
            scorer(judge.base_url, ruleset).score_trace(as_trace(document), document)
        )
    overall = next(s for s in result.scores if s.criterion == "overall")
    assert (overall.status, overall.label) == ("ok", "Excellent")
    assert overall.details is not None
    assert overall.details.get("key_weaknesses") == ["Verbose."]
    assert "key_strengths" not in overall.details


def test_a_note_named_like_a_criterion_fails_at_load(tmp_path: Any) -> None:
    import shutil

    import yaml

    from stream.ruleset.loader import check_rules

    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR / "critique", target / "critique")
    path = target / "critique" / "response_critique.yaml"
    data = yaml.safe_load(path.read_text())
    data["notes"] = ["key_strengths", "safety"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _, errors = check_rules(target)
    assert any(
        "notes ['safety'] have the names of criteria" in p for e in errors for p in e.problems
    )
