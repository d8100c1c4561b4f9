"""A rule's ``canary:`` block as the loader reads it: the items file beside the rule, read
and checked at load; every mistake refused with the file, the line and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from stream.errors import RuleFileError
from stream.ruleset.canary import seconds_of
from stream.ruleset.loader import load_rule_file
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
ITEM = {
    "id": "q1",
    "input": {"input": {"question": "What is 2 + 2?"}},
    "recorded": {"value": 1.0, "label": "yes", "model": "judge-m"},
}


def write(tmp_path: Path, lines: list[Any] | None = None, **overrides: Any) -> Path:
    pack = tmp_path / "demo"
    pack.mkdir(exist_ok=True)
    if lines is not None:
        text = "\n".join(x if isinstance(x, str) else orjson.dumps(x).decode() for x in lines)
        (pack / "canary.jsonl").write_text(text + "\n")
    path = pack / "answer_quality.yaml"
    path.write_text(yaml.safe_dump({**BASE, **overrides}))
    return path


def refusal(tmp_path: Path, lines: list[Any] | None = None, **overrides: Any) -> str:
    with pytest.raises(RuleFileError) as caught:
        load_rule_file(write(tmp_path, lines, **overrides))
    return str(caught.value)


def test_a_canary_reads_its_items_beside_the_rule_with_an_hour_by_default(tmp_path: Path) -> None:
    second = {**ITEM, "id": None, "recorded": {"value": 0.0, "model": "judge-m"}}
    path = write(tmp_path, [ITEM, "", second], canary={"items": "canary.jsonl"})
    rule = load_rule_file(path)
    assert isinstance(rule, LLMJudgeRule) and rule.canary is not None
    assert (rule.canary.every, rule.canary.tolerance) == (3600.0, 0.05)
    assert [i.id for i in rule.canary.reference] == ["q1", "line 3"]  # blank lines skipped
    assert rule.canary.reference[0].recorded.label == "yes"
    assert rule.canary.path == path.parent / "canary.jsonl"


@pytest.mark.parametrize(
    ("every", "seconds"),
    [(90, 90.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("1d", 86400.0)],
)
def test_a_period_is_seconds_or_a_number_with_its_unit(every: Any, seconds: float) -> None:
    assert seconds_of(every) == seconds


@pytest.mark.parametrize(
    ("canary", "lines", "said"),
    [
        ({"items": "missing.jsonl"}, None, "missing.jsonl: cannot be read"),
        ({"items": "canary.jsonl", "every": "soon"}, [ITEM], "'soon' is not a period"),
        ({"items": "canary.jsonl", "every": 0.1}, [ITEM], "every"),
        ({"items": "canary.jsonl", "tolerance": 2}, [ITEM], "tolerance"),
        ({"items": "canary.jsonl", "evry": "1h"}, [ITEM], "evry"),
        ({"items": "../canary.jsonl"}, [ITEM], "a path inside the rule file's folder"),
        ({"items": "canary.jsonl"}, [ITEM, "{not json"], "line 2: not JSON"),
        (
            {"items": "canary.jsonl"},
            [ITEM, {**ITEM, "id": "q2", "recorded": {"value": 1.5, "model": "m"}}],
            "line 2: field recorded.value",
        ),
        ({"items": "canary.jsonl"}, [{"input": {}, "recorded": {"value": 1}}], "recorded.model"),
        ({"items": "canary.jsonl"}, [{**ITEM, "extra": 1}], "line 1: field extra"),
        ({"items": "canary.jsonl"}, [ITEM, ITEM], "item ids repeat: ['q1']"),
        ({"items": "canary.jsonl"}, [""], "no items"),
    ],
)
def test_a_bad_canary_stops_the_load_naming_the_file_and_line(
    tmp_path: Path, canary: dict[str, Any], lines: list[Any] | None, said: str
) -> None:
    message = refusal(tmp_path, lines, canary=canary)
    assert "answer_quality.yaml" in message and "field canary" in message
    assert said in message


def test_a_check_rule_has_no_canary(tmp_path: Path) -> None:
    check = {
        "kind": "check",
        "check": "not_empty",
        "variables": {"text": "output.answer"},
        "prompt": None,
        "output": {"type": "numeric", "min": 0, "max": 1},
    }
    fields = {k: v for k, v in {**BASE, **check}.items() if v is not None}
    pack = tmp_path / "demo"
    pack.mkdir()
    (pack / "canary.jsonl").write_text(orjson.dumps(ITEM).decode())
    path = pack / "answer_quality.yaml"
    path.write_text(yaml.safe_dump({**fields, "canary": {"items": "canary.jsonl"}}))
    with pytest.raises(RuleFileError, match="field canary: Extra inputs are not permitted"):
        load_rule_file(path)
