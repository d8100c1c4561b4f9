"""Human labels read from the labels topic: checked against the shipped rule packs, each
refusal with the reason a dead letter carries, and values read on the rule's own scale."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

import orjson
import pytest
from fixtures import RULES_DIR, score_event

from stream.agreement.labels import (
    HumanLabel,
    LabelError,
    Reference,
    default_label_id,
    parse_label,
    score_kinds,
)
from stream.models import Scale
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import RuleSet


@cache
def rules() -> RuleSet:
    # safety: choice yes/no; coaching_transcript: a YES/NO/NA rubric (YES and NA both 1.0);
    # response_critique: a 1..3 integer rubric with labels; response_comparison: a pair's
    # preference -2..2; hub_actionability: numeric 0..1; retrieval_relevance: a fan-out
    return load_rules(RULES_DIR, ["mlflow", "coaching", "critique", "fretcoach"])


def label(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "trace_id": "t-1",
        "rule_id": "safety",
        "value": "yes",
        "annotator": "ana@example.com",
        "labelled_at": "2026-11-01T10:00:00Z",
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def parse(record: dict[str, Any] | bytes) -> tuple[HumanLabel, Reference]:
    raw = record if isinstance(record, bytes) else orjson.dumps(record)
    return parse_label(raw, rules())


def refusal(record: dict[str, Any] | bytes) -> str:
    with pytest.raises(LabelError) as caught:
        parse(record)
    return str(caught.value)


def test_a_choice_label_by_name() -> None:
    parsed, ref = parse(label(project_name="shop", comment="fine"))
    assert ref == Reference("choice", label="yes")
    assert (parsed.target_id, parsed.rule_id, parsed.criterion) == ("t-1", "safety", None)
    assert parsed.labelled_at == datetime(2026, 11, 1, 10, tzinfo=UTC)
    assert (parsed.project_name, parsed.comment) == ("shop", "fine")


def test_a_choice_label_by_its_value_is_read_as_the_label() -> None:
    assert parse(label(value=0))[1] == Reference("choice", label="no")
    assert parse(label(value=1.0))[1] == Reference("choice", label="yes")


@pytest.mark.parametrize("field", ["target_id", "trace_id", "thread_id"])
def test_the_target_may_be_named_as_a_trace_or_a_thread(field: str) -> None:
    record = {**label(trace_id=None), field: "th-9"}
    assert parse(record)[0].target_id == "th-9"


def test_the_default_label_id_is_the_same_for_the_same_annotator_target_rule_criterion() -> None:
    first, _ = parse(label(value="yes", labelled_at="2026-11-01T10:00:00Z"))
    again, _ = parse(label(value="no", labelled_at="2026-11-02T10:00:00Z"))
    other, _ = parse(label(annotator="bo@example.com"))
    assert (
        first.label_id == again.label_id == default_label_id("t-1", "safety", None, first.annotator)
    )
    assert other.label_id != first.label_id
    assert parse(label(label_id="mine"))[0].label_id == "mine"


def test_a_naive_time_is_utc() -> None:
    parsed, _ = parse(label(labelled_at="2026-11-01T10:00:00"))
    assert parsed.labelled_at == datetime(2026, 11, 1, 10, tzinfo=UTC)


def test_a_rubric_criterion_takes_the_rubric_choices() -> None:
    parsed, ref = parse(label(rule_id="coaching_transcript", criterion="CQ1", value="NA"))
    assert parsed.criterion == "CQ1"
    assert ref == Reference("choice", label="NA")
    assert parse(label(rule_id="coaching_transcript", criterion="CQ8", value=0))[1] == (
        Reference("choice", label="NO")
    )


def test_a_numeric_rubric_criterion_takes_a_number_or_its_label() -> None:
    record = label(rule_id="response_critique", criterion="technical_accuracy")
    assert parse({**record, "value": 2})[1] == Reference("numeric", raw_value=2.0)
    assert parse({**record, "value": "No Issues"})[1] == Reference("numeric", raw_value=3.0)


def test_a_rubric_labelled_as_a_whole_is_its_primary_score() -> None:
    parsed, ref = parse(label(rule_id="coaching_transcript", value=0.8))
    assert parsed.criterion == "score"  # weighted_categories' primary
    assert ref == Reference("numeric", raw_value=0.8)
    annotator = parsed.annotator
    assert parsed.label_id == default_label_id("t-1", "coaching_transcript", "score", annotator)
    explicit, _ = parse(label(rule_id="coaching_transcript", criterion="score", value=0.8))
    assert explicit.label_id == parsed.label_id  # the same label, however it was named


def test_a_comparison_labelled_as_a_whole_is_its_preference() -> None:
    parsed, ref = parse(
        label(trace_id=None, target_id="cmp-1", rule_id="response_comparison", value=-2)
    )
    assert (parsed.criterion, ref) == ("preference", Reference("numeric", raw_value=-2.0))


def test_a_numeric_rule() -> None:
    assert parse(label(rule_id="hub_actionability", value=0.25))[1] == Reference(
        "numeric", raw_value=0.25
    )


def test_a_fan_out_choice_rule_is_labelled_as_the_share_of_items() -> None:
    assert parse(label(rule_id="retrieval_relevance", value=0.5))[1] == Reference(
        "numeric", raw_value=0.5
    )
    assert "from 0 to 1" in refusal(label(rule_id="retrieval_relevance", value="yes"))


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a label: a JSON object is expected, got list"),
        (label(annotator=None), "not a label: annotator: Field required"),
        (label(trace_id=None), "target_id (or trace_id, thread_id): Field required"),
        (label(thread_id="th-1"), "give one of target_id, trace_id, thread_id, not"),
        (label(score=1), "not a label: score: Extra inputs are not permitted"),
        (label(labelled_at="yesterday"), "labelled_at: Input should be a valid datetime"),
        (label(value=True), "value is a number or a choice label, not true/false"),
        (label(value=None), "value: Field required"),
        (label(annotator=""), "annotator: String should have at least 1 character"),
        (label(rule_id="safty"), "rule_id 'safty' names no loaded rule; did you mean 'safety'"),
        (label(rule_id="nothing_like_it"), "rule_id 'nothing_like_it' names no loaded rule"),
        (label(criterion="CQ1"), "rule 'safety' has no criteria; drop criterion 'CQ1'"),
        (
            label(rule_id="coaching_transcript", criterion="CQ99"),
            "rule 'coaching_transcript' has no criterion 'CQ99'; it has ['CQ1'",
        ),
        (label(value="Yes"), "value 'Yes' is not one of the choices ['no', 'yes'] (did you mean"),
        (label(value=0.5), "value 0.5 is not the value of any choice"),
        (
            label(rule_id="coaching_transcript", criterion="CQ2", value=1),
            "value 1 is the value of several choices ['YES', 'NA']: give the label",
        ),
        (label(rule_id="hub_actionability", value=1.5), "value 1.5 is not a number from 0 to 1"),
        (label(rule_id="hub_actionability", value=-0.1), "not a number from 0 to 1"),
        (
            label(rule_id="response_critique", criterion="safety", value=2.5),
            "value 2.5 is not an integer from 1 to 3 (or one of its labels",
        ),
        (
            label(rule_id="response_critique", criterion="safety", value="Great"),
            "value 'Great' is not an integer from 1 to 3",
        ),
    ],
)
def test_refusals_say_why(record: dict[str, Any] | bytes, reason: str) -> None:
    assert reason in refusal(record)


def test_a_nan_value_is_refused() -> None:
    with pytest.raises(ValueError, match="not nan"):
        HumanLabel.model_validate({**label(), "value": float("nan")})


def test_a_disabled_rule_takes_labels() -> None:
    disabled = load_rules(RULES_DIR, ["mlflow"], disabled=["safety"])
    parsed, _ = parse_label(orjson.dumps(label()), disabled)
    assert parsed.rule_id == "safety"


def test_score_kinds_read_scores_by_their_rule() -> None:
    kind_of = score_kinds(rules)
    unit = Scale(min=0, max=1)
    numeric_with_labels = score_event(
        rule_id="response_critique", criterion="safety", label="No Issues", raw_value=3.0
    )
    assert kind_of(numeric_with_labels) == "numeric"
    assert kind_of(score_event(rule_id="safety", label="yes", scale=unit)) == "choice"
    assert kind_of(score_event(rule_id="coaching_transcript", criterion="CQ1")) == "choice"
    assert kind_of(score_event(rule_id="coaching_transcript", criterion="passed")) == "numeric"
    assert kind_of(score_event(rule_id="retrieval_relevance")) == "numeric"
    assert kind_of(score_event(rule_id="gone")) is None
