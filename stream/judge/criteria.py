"""The answer format of rules that ask many criteria in one answer: a rubric (a verdict per
criterion) and a comparison (two responses rated per criterion, and a preference). The
JSON schema asked of the judge, and parsing its answer (``answers.py`` parses one verdict).
"""

from __future__ import annotations

from typing import Any

from ..engine.verdicts import ComparisonAnswers, Remarks, RubricAnswers
from ..ruleset.aggregators import CriterionAnswer
from ..ruleset.kinds import RESPONSE_FIELDS, ComparisonRule, CriteriaRule
from .answers import (
    NOTHING_QUOTED,
    InvalidAnswer,
    Quoted,
    closed_object,
    json_objects,
    unquoted,
    validate,
    verdict_object,
    verdict_schema,
)


def _criteria_schema(rule: CriteriaRule) -> dict[str, Any]:
    """One verdict object per criterion, then the aggregate's label as the judge states it
    (when the rule asks for it)."""
    criteria = {c.id: verdict_object(rule.output, no_na=not c.na_valid) for c in rule.criteria}
    if rule.stated_aggregate is not None:
        labels = rule.validated_aggregate.primary_labels()
        stated: dict[str, Any] = {"type": "string"}
        if labels:
            stated["enum"] = labels
        criteria[rule.stated_aggregate] = stated
    return criteria


def _notes_schema(rule: CriteriaRule) -> dict[str, Any]:
    return {note: {"type": "array", "items": {"type": "string"}} for note in rule.notes}


def _summaries_schema(rule: CriteriaRule) -> dict[str, Any]:
    return {name: {"type": "string"} for name in rule.summaries}


def rubric_schema(rule: CriteriaRule) -> dict[str, Any]:
    """Structured output for a rubric: the summaries asked for, one verdict object per
    criterion (and the stated aggregate), the notes; every one required."""
    return closed_object(
        {**_summaries_schema(rule), **_criteria_schema(rule), **_notes_schema(rule)}
    )


def comparison_schema(rule: ComparisonRule) -> dict[str, Any]:
    """Structured output for a comparison, in the order of the seed's report (its Example
    Evaluation Template): the summaries (Prompt Summary), each response's ratings (and its
    stated Overall Quality), then the preference and its justification, then the notes (Key
    Differentiators)."""
    preference = verdict_object(rule.preference)["properties"]
    verdict = rule.preference.verdict_field
    assert verdict is not None  # required by the rule (load time)
    responses = {name: closed_object(_criteria_schema(rule)) for name in RESPONSE_FIELDS.values()}
    ordered = {verdict: preference[verdict], rule.preference.reason_field: {"type": "string"}}
    return closed_object({**_summaries_schema(rule), **responses, **ordered, **_notes_schema(rule)})


def _criterion_answers(rule: CriteriaRule, obj: dict[str, Any]) -> RubricAnswers:
    """The answers per criterion in ``obj``: None for one outside the allowed values, absent
    for one left out."""
    spec = rule.output
    key, _ = verdict_schema(spec)
    answers = RubricAnswers()
    for criterion in rule.criteria:
        item = obj.get(criterion.id)
        if not isinstance(item, dict):
            continue
        try:
            parsed = validate(spec, item.get(key), item.get(spec.reason_field))
        except InvalidAnswer:
            answers[criterion.id] = None
        else:
            answers[criterion.id] = CriterionAnswer(parsed.raw_value, parsed.label, parsed.reason)
    if rule.stated_aggregate is not None:
        stated = obj.get(rule.stated_aggregate)
        if isinstance(stated, str) and stated.strip():
            answers.stated = stated.strip()
    return answers


def parse_rubric(
    rule: CriteriaRule, content: str, quoted: Quoted = NOTHING_QUOTED
) -> RubricAnswers:
    """Per-criterion answers from the last JSON object that answers any criterion.

    An answer that does not fit the output spec is kept as None (the seeds' ERROR); a
    criterion the judge left out is absent. No criterion answered at all is unusable.
    """
    ids = [c.id for c in rule.criteria]
    for obj in reversed(unquoted(json_objects(content), quoted)):
        if not any(isinstance(obj.get(cid), dict) for cid in ids):
            continue
        answers = _criterion_answers(rule, obj)
        answers.notes = _notes(rule, obj)
        return answers
    raise quoted.none_of_its_own(f"no JSON object answering the criteria {ids}")


def parse_comparison(
    rule: ComparisonRule, content: str, quoted: Quoted = NOTHING_QUOTED
) -> ComparisonAnswers:
    """Both responses' answers and the preference, from the last JSON object that rates both
    responses. A preference missing or outside its scale is kept as None with why (the
    ratings still count); no object rating both responses is unusable."""
    fields = list(RESPONSE_FIELDS.values())
    spec = rule.preference
    verdict = spec.verdict_field
    for obj in reversed(unquoted(json_objects(content), quoted)):
        if not all(isinstance(obj.get(name), dict) for name in fields):
            continue
        responses = {
            slot: _criterion_answers(rule, obj[name]) for slot, name in RESPONSE_FIELDS.items()
        }
        preference, error = None, None
        try:
            preference = validate(spec, obj.get(verdict), obj.get(spec.reason_field))
        except InvalidAnswer as exc:
            error = f"the judge's {verdict} is unusable: {exc}"
        return ComparisonAnswers(responses, preference, error, _notes(rule, obj))
    raise quoted.none_of_its_own(f"no JSON object rating both responses ({fields})")


def _notes(rule: CriteriaRule, obj: dict[str, Any]) -> Remarks:
    """The remarks the rule asks for, as the judge gave them: each note a list of strings
    (one string is read as a list of one), each summary a string."""
    notes: Remarks = {}
    for name in rule.notes:
        value = obj.get(name)
        if isinstance(value, str) and value.strip():
            value = [value]
        if isinstance(value, list) and (items := [str(v) for v in value if str(v).strip()]):
            notes[name] = items
    for name in rule.summaries:
        text = obj.get(name)
        if isinstance(text, str) and text.strip():
            notes[name] = text.strip()
    return notes
