"""Human labels (the ``human-labels`` topic's records): the model, and each label checked
against the rule set and read as a reference a judge's score is compared with.

A label names what it judges as the scores do: a target (a trace id, a thread id for a
thread's close, a comparison key for a pair's preference), a rule and, for a rubric, a
criterion. Its value is on the rule's own raw scale: a number in the rule's range (or one
of a numeric rule's labels, read as its number), or one of a choice rule's choices (or a
number equal to exactly one choice's value, read as that choice). What a rule's scores
look like is ``score_spec``'s answer, and the join (``join.py``) compares a score the same
way: choice rules by label, numeric ones by raw value.
"""

from __future__ import annotations

import difflib
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..models import ScoreEvent
from ..ruleset.schema import AnyRule, ComparisonRule, CriteriaRule, LLMJudgeRule, RuleSet

Kind = Literal["choice", "numeric"]

LABEL_ID_NAMESPACE = uuid.UUID("0b6a3c7e-2f49-4d0f-8a1e-6c5d9e3f7a21")
TARGET_FIELDS = ("target_id", "trace_id", "thread_id")
PREFERENCE = "preference"  # a comparison's preference score (stream/engine/kinds/comparison.py)


class LabelError(ValueError):
    """A record of the labels topic that cannot be used, and why (it is dead-lettered)."""


def default_label_id(target_id: str, rule_id: str, criterion: str | None, annotator: str) -> str:
    """The id of a label sent without one: the same annotator labelling the same target,
    rule and criterion again replaces the first label."""
    name = "\x1f".join((target_id, rule_id, criterion or "", annotator))
    return str(uuid.uuid5(LABEL_ID_NAMESPACE, name))


def _target_aliases(schema: dict[str, Any]) -> None:
    """The published schema takes ``trace_id`` or ``thread_id`` for ``target_id``, one of the
    three exactly."""
    props = schema["properties"]
    for name, what in (("trace_id", "a trace's id"), ("thread_id", "a thread's id")):
        props[name] = {**props["target_id"], "title": name, "description": f"target_id: {what}"}
    schema["required"] = [r for r in schema["required"] if r != "target_id"]
    schema["oneOf"] = [{"required": [name]} for name in TARGET_FIELDS]


class HumanLabel(BaseModel):
    """A person's judgement of what a rule scores, for one target (and criterion)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_target_aliases)

    label_id: str | None = Field(
        default=None,
        min_length=1,
        description="Default: a digest of target, rule, criterion and annotator, so a label "
        "re-sent by the same annotator replaces the first",
    )
    target_id: str = Field(
        min_length=1,
        validation_alias=AliasChoices(*TARGET_FIELDS),
        description="What was judged: a trace id (or trace_id), a thread id (or thread_id: "
        "its closes' scores), or a comparison key",
    )
    rule_id: str = Field(min_length=1)
    criterion: str | None = Field(
        default=None,
        min_length=1,
        description="A rubric's criterion id, or its aggregate's own score; null for a "
        "rubric: the score that stands for it",
    )
    value: float | str = Field(
        description="On the rule's raw scale: a number, or a choice label (a numeric rule's "
        "label is read as its number)",
    )
    annotator: str = Field(min_length=1)
    labelled_at: datetime = Field(description="Without a time zone: UTC")
    project_name: str | None = None
    comment: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_target(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = [name for name in TARGET_FIELDS if name in data]
            if len(given) > 1:
                raise ValueError(f"give one of target_id, trace_id, thread_id, not {given}")
            value = data.get("value")
            if isinstance(value, bool):
                raise ValueError("value is a number or a choice label, not true/false")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"value is a number or a choice label, not {value}")
        return data

    @model_validator(mode="after")
    def _defaults(self) -> HumanLabel:
        if self.labelled_at.tzinfo is None:
            self.labelled_at = self.labelled_at.replace(tzinfo=UTC)
        if self.label_id is None:
            self.label_id = default_label_id(
                self.target_id, self.rule_id, self.criterion, self.annotator
            )
        return self

    @property
    def id(self) -> str:
        """The label's id (given, or its default)."""
        assert self.label_id is not None  # set by the validator
        return self.label_id


@dataclass(frozen=True)
class ScoreSpec:
    """What the scores of one rule (and criterion) are: choices compared by label, or
    numbers on a raw scale compared by value."""

    kind: Kind
    choices: dict[str, float] | None = None
    min: float | None = None
    max: float | None = None
    integer: bool = False
    labels: dict[int, str] | None = None

    def describe(self) -> str:
        if self.choices is not None:
            return f"one of the choices {sorted(self.choices)}"
        scale = f"a{'n integer' if self.integer else ' number'} from {self.min:g} to {self.max:g}"
        if self.labels:
            scale += f" (or one of its labels {sorted(self.labels.values())})"
        return scale


@dataclass(frozen=True)
class Reference:
    """A label's value as the join compares it: a choice label, or a raw number."""

    kind: Kind
    label: str | None = None
    raw_value: float | None = None

    @property
    def value(self) -> str | float:
        value = self.label if self.kind == "choice" else self.raw_value
        assert value is not None
        return value


def _rule(ruleset: RuleSet, rule_id: str) -> AnyRule | None:
    rules = [*ruleset.rules, *(d.rule for d in ruleset.disabled)]
    return next((r for r in rules if r.id == rule_id), None)


def _criteria(rule: CriteriaRule) -> list[str]:
    """What a label may name as a rubric's criterion: its criteria and its aggregate's own
    (primary) score, and a comparison's preference."""
    named = [c.id for c in rule.criteria] + [rule.aggregator.primary]
    return [*named, PREFERENCE] if isinstance(rule, ComparisonRule) else named


def labelled_criterion(rule: AnyRule, criterion: str | None) -> str | None:
    """The criterion a label's scores carry: a rubric labelled as a whole is its primary
    score (a comparison: its preference); raises ``LabelError`` for one the rule lacks."""
    if not isinstance(rule, CriteriaRule):
        if criterion is not None:
            raise LabelError(f"rule {rule.id!r} has no criteria; drop criterion {criterion!r}")
        return None
    if criterion is None:
        return PREFERENCE if isinstance(rule, ComparisonRule) else rule.aggregator.primary
    if criterion not in _criteria(rule):
        raise LabelError(
            f"rule {rule.id!r} has no criterion {criterion!r}; it has {_criteria(rule)}"
        )
    return criterion


def score_spec(rule: AnyRule, criterion: str | None) -> ScoreSpec:
    """How the scores of ``rule`` with ``criterion`` read: its output's choices or scale for
    its own score and each rubric criterion; a comparison's preference scale; a number on the
    aggregate's scale for a rubric's aggregate score; the mean of the items (a number, even
    for a choice output) for a fan-out rule."""
    output = rule.output
    if isinstance(rule, ComparisonRule) and criterion == PREFERENCE:
        output = rule.preference
    elif isinstance(rule, CriteriaRule) and criterion not in {c.id for c in rule.criteria}:
        scale = rule.primary_scale()
        return ScoreSpec("numeric", min=scale.min, max=scale.max)
    elif isinstance(rule, LLMJudgeRule) and rule.fan_out is not None:
        return ScoreSpec("numeric", min=output.scale.min, max=output.scale.max)
    if output.type == "choice":
        return ScoreSpec("choice", choices=dict(output.choices or {}))
    return ScoreSpec(
        "numeric", min=output.min, max=output.max, integer=output.integer, labels=output.labels
    )


def reference(spec: ScoreSpec, value: float | str) -> Reference:
    """``value`` read on ``spec``'s scale, or ``LabelError`` saying what the scale takes."""
    if spec.kind == "choice":
        assert spec.choices is not None
        if isinstance(value, str):
            if value in spec.choices:
                return Reference("choice", label=value)
            near = difflib.get_close_matches(value, list(spec.choices), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise LabelError(f"value {value!r} is not {spec.describe()}{hint}")
        matching = [label for label, raw in spec.choices.items() if raw == value]
        if len(matching) == 1:
            return Reference("choice", label=matching[0])
        if matching:
            raise LabelError(
                f"value {value:g} is the value of several choices {matching}: give the label"
            )
        raise LabelError(
            f"value {value:g} is not the value of any choice: give {spec.describe()} "
            f"(values {spec.choices})"
        )
    assert spec.min is not None and spec.max is not None
    if isinstance(value, str):
        by_label = {text: raw for raw, text in (spec.labels or {}).items()}
        if value not in by_label:
            raise LabelError(f"value {value!r} is not {spec.describe()}")
        return Reference("numeric", raw_value=float(by_label[value]))
    if not spec.min <= value <= spec.max or (spec.integer and not float(value).is_integer()):
        raise LabelError(f"value {value:g} is not {spec.describe()}")
    return Reference("numeric", raw_value=float(value))


def _short(exc: ValidationError) -> str:
    """Pydantic's errors, one line each without its documentation links."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "label"
        if where == "target_id":
            where = "target_id (or trace_id, thread_id)"
        parts.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def parse_label(raw: bytes, ruleset: RuleSet) -> tuple[HumanLabel, Reference]:
    """A labels-topic record as a label checked against ``ruleset`` and its value as the
    reference scores are compared with; ``LabelError`` with the reason otherwise. A rubric
    labelled without a criterion is its primary score (the label says so)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise LabelError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise LabelError(f"not a label: a JSON object is expected, got {type(data).__name__}")
    try:
        label = HumanLabel.model_validate(data)
    except ValidationError as exc:
        raise LabelError(f"not a label: {_short(exc)}") from exc
    rule = _rule(ruleset, label.rule_id)
    if rule is None:
        known = sorted(ruleset.ids)
        near = difflib.get_close_matches(label.rule_id, known, n=3)
        hint = f"; did you mean {' or '.join(map(repr, near))}?" if near else ""
        raise LabelError(f"rule_id {label.rule_id!r} names no loaded rule{hint}")
    criterion = labelled_criterion(rule, label.criterion)
    if criterion != label.criterion:
        update: dict[str, Any] = {"criterion": criterion}
        if label.label_id == default_label_id(
            label.target_id, label.rule_id, label.criterion, label.annotator
        ):
            update["label_id"] = default_label_id(
                label.target_id, label.rule_id, criterion, label.annotator
            )
        label = label.model_copy(update=update)
    return label, reference(score_spec(rule, criterion), label.value)


def score_kinds(ruleset: Callable[[], RuleSet]) -> Callable[[ScoreEvent], Kind | None]:
    """How the join reads a score (``AgreementJoin(kind_of=...)``): by its rule in the
    current rule set (``ruleset()``, so a reload is seen); None for a rule no longer loaded
    or a criterion it no longer has (the score is not joined)."""

    def kind_of(score: ScoreEvent) -> Kind | None:
        rule = _rule(ruleset(), score.rule_id)
        if rule is None:
            return None
        try:
            criterion = labelled_criterion(rule, score.criterion)
        except LabelError:
            # a rubric aggregate's other outputs (e.g. passed, category:x): numbers
            return "numeric" if isinstance(rule, CriteriaRule) else None
        return score_spec(rule, criterion).kind

    return kind_of


def shadowed(ruleset: Callable[[], RuleSet]) -> Callable[[ScoreEvent], bool]:
    """Whether a primary score's rule has shadow judges now (``ruleset()``: a reload is
    seen): the worker keeps such a score a while for its shadows to meet."""

    def has_shadows(score: ScoreEvent) -> bool:
        rule = _rule(ruleset(), score.rule_id)
        return score.variant is None and bool(getattr(rule, "shadow", None))

    return has_shadows


def label_digest(*parts: str) -> str:
    """A deterministic id from ``parts`` (the join's agreement ids)."""
    return str(uuid.uuid5(LABEL_ID_NAMESPACE, "\x1f".join(parts)))
