"""Rubric aggregators: how a rubric's per-criterion answers become scores.

A rubric rule asks the judge for every criterion in one call (structured output keyed by
criterion id). The engine validates each answer against the rule's output spec; an
aggregator, registered here by name and referenced from the rule file, turns the answers
into the scores to publish: one per criterion plus its own (an overall rating, a weighted
score with a pass/fail gate). Aggregators are pure functions of the answers and their
params, so golden tests can run them against the seeds' own scoring code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .models import Scale


@dataclass(frozen=True, slots=True)
class CriterionAnswer:
    """The judge's answer for one criterion, validated against the rule's output spec."""

    raw_value: float
    label: str | None
    reason: str | None
    forced: str | None = None  # why the engine set the answer itself (a criterion's na_when)


@dataclass(frozen=True, slots=True)
class CriterionInfo:
    id: str
    name: str


@dataclass(frozen=True)
class RubricInput:
    """What an aggregator sees. ``answers`` holds the criteria the judge answered, in criterion
    order; None marks an answer that was there but unusable (the seeds' ERROR). A criterion
    the judge left out is absent."""

    criteria: Sequence[CriterionInfo]
    answers: Mapping[str, CriterionAnswer | None]
    scale: Scale  # the rule's per-criterion answer scale


@dataclass(frozen=True)
class RubricScore:
    """One score an aggregator publishes; ``name`` is the score event's ``criterion``."""

    name: str
    raw_value: float | None
    scale: Scale
    label: str | None = None
    reason: str | None = None
    higher_is_better: bool = True
    details: dict[str, Any] | None = None
    error: str | None = None  # set: published with status error and this reason

    @property
    def value(self) -> float | None:
        if self.raw_value is None or self.error is not None:
            return None
        return self.scale.normalise(self.raw_value)


class AggregateParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def check_criteria(self, ids: Sequence[str]) -> None:
        """Raise ``ValueError`` when the params name criteria the rubric does not have."""

    def primary_scale(self) -> Scale | None:
        """The scale of the primary score (None: the rule's answer scale)."""
        return None


AggregateFunc = Callable[[RubricInput, Any], list[RubricScore]]


@dataclass(frozen=True)
class AggregateSpec:
    name: str
    func: AggregateFunc
    params_model: type[AggregateParams]
    primary: str  # the score that stands for the rule (its id in decisions, error scores)

    def validate_params(self, params: Mapping[str, Any], criteria: Sequence[str]) -> Any:
        model = self.params_model.model_validate(params)
        model.check_criteria(criteria)
        return model


_REGISTRY: dict[str, AggregateSpec] = {}


def aggregate(
    name: str, *, params: type[AggregateParams], primary: str
) -> Callable[[AggregateFunc], AggregateFunc]:
    """Register ``func`` as the rubric aggregator ``name``."""

    def register(func: AggregateFunc) -> AggregateFunc:
        if name in _REGISTRY:
            raise ValueError(f"aggregate {name!r} registered twice")
        _REGISTRY[name] = AggregateSpec(name, func, params, primary)
        return func

    return register


def get(name: str) -> AggregateSpec | None:
    return _REGISTRY.get(name)


def names() -> list[str]:
    return list(_REGISTRY)


def _unknown(named: Sequence[str], ids: Sequence[str]) -> list[str]:
    return sorted(set(named) - set(ids))


# ---------------------------------------------------------------------------------------
# A table over issue counts: each criterion is rated on an ordinal scale whose levels are
# "no / minor / major issue"; the overall label is the first row whose count ranges hold.
# ---------------------------------------------------------------------------------------


class IssueRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    value: int = Field(description="Raw value of the overall score for this label")
    min_major: int = 0
    max_major: int | None = None
    min_minor: int = 0
    max_minor: int | None = None

    def matches(self, major: int, minor: int) -> bool:
        return (
            self.min_major <= major
            and (self.max_major is None or major <= self.max_major)
            and self.min_minor <= minor
            and (self.max_minor is None or minor <= self.max_minor)
        )


class IssueTableParams(AggregateParams):
    minor: list[int] = Field(description="Criterion ratings that count as a minor issue")
    major: list[int] = Field(description="Criterion ratings that count as a major issue")
    rows: list[IssueRow] = Field(min_length=1, description="First matching row wins")

    @model_validator(mode="after")
    def _scale(self) -> IssueTableParams:
        if set(self.minor) & set(self.major):
            raise ValueError("a rating cannot be both a minor and a major issue")
        return self

    def check_criteria(self, ids: Sequence[str]) -> None:
        # every combination of counts must land on a row, or some ratings would have no label
        n = len(ids)
        for major in range(n + 1):
            for minor in range(n - major + 1):
                if not any(row.matches(major, minor) for row in self.rows):
                    raise ValueError(
                        f"no row covers {major} major and {minor} minor issues over {n} criteria"
                    )

    def primary_scale(self) -> Scale:
        values = [row.value for row in self.rows]
        return Scale(min=min(values), max=max(values))

    def overall(self, major: int, minor: int) -> IssueRow:
        return next(row for row in self.rows if row.matches(major, minor))


@aggregate("issue_table", params=IssueTableParams, primary="overall")
def issue_table(rubric: RubricInput, params: IssueTableParams) -> list[RubricScore]:
    """Publish each criterion's rating, then the overall label from the counts of minor and
    major issues (the response-critique rubric's "Overall Quality Assessment" table)."""
    scores: list[RubricScore] = []
    ratings: dict[str, int] = {}
    for criterion in rubric.criteria:
        answer = rubric.answers.get(criterion.id)
        if answer is None:
            why = "missing" if criterion.id not in rubric.answers else "not a valid rating"
            scores.append(
                RubricScore(
                    criterion.id,
                    None,
                    rubric.scale,
                    error=f"the judge's rating of {criterion.name} is {why}",
                )
            )
            continue
        ratings[criterion.id] = int(answer.raw_value)
        scores.append(
            RubricScore(criterion.id, answer.raw_value, rubric.scale, answer.label, answer.reason)
        )
    scale = params.primary_scale()
    if len(ratings) < len(rubric.criteria):
        unrated = [c.name for c in rubric.criteria if c.id not in ratings]
        scores.append(
            RubricScore(
                "overall",
                None,
                scale,
                error=f"overall quality needs every rating; unrated: {', '.join(unrated)}",
            )
        )
        return scores
    names = {c.id: c.name for c in rubric.criteria}
    major = [names[c] for c, r in ratings.items() if r in params.major]
    minor = [names[c] for c, r in ratings.items() if r in params.minor]
    row = params.overall(len(major), len(minor))
    reason = f"{len(major)} major issue(s)" + (f" ({', '.join(major)})" if major else "")
    reason += f", {len(minor)} minor issue(s)" + (f" ({', '.join(minor)})" if minor else "")
    scores.insert(
        0,
        RubricScore(
            "overall",
            float(row.value),
            scale,
            row.label,
            reason,
            details={"major": major, "minor": minor, "ratings": ratings},
        ),
    )
    return scores


# ---------------------------------------------------------------------------------------
# Weighted categories with a gate: criteria answered YES / NO / NA, category means, a
# weighted sum, a pass threshold and gate criteria that reject regardless of the score
# (the coaching rubric's compute_score).
# ---------------------------------------------------------------------------------------


class Category(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float = Field(ge=0)
    criteria: list[str]


class WeightedParams(AggregateParams):
    categories: dict[str, Category] = Field(min_length=1)
    gate: list[str] = Field(default_factory=list, description="Any failure here rejects")
    na_invalid: list[str] = Field(default_factory=list, description="NA counts as a failure")
    pass_threshold: float = Field(ge=0, le=1)
    yes: str = "YES"
    no: str = "NO"
    na: str = "NA"
    error: str = "ERROR"

    def check_criteria(self, ids: Sequence[str]) -> None:
        named = [c for cat in self.categories.values() for c in cat.criteria]
        problems = []
        if unknown := _unknown(named + self.gate + self.na_invalid, ids):
            problems.append(f"criteria not in the rubric: {unknown}")
        if unused := sorted(set(ids) - set(named) - set(self.gate)):
            problems.append(f"criteria in no category and not in the gate: {unused}")
        if abs(sum(c.weight for c in self.categories.values()) - 1.0) > 1e-9:
            problems.append("category weights must sum to 1")
        if problems:
            raise ValueError("; ".join(problems))

    def primary_scale(self) -> Scale:
        return Scale(min=0.0, max=1.0)


def _answer_label(answer: CriterionAnswer | None, params: WeightedParams) -> str:
    return params.error if answer is None or answer.label is None else answer.label


@aggregate("weighted_categories", params=WeightedParams, primary="score")
def weighted_categories(rubric: RubricInput, params: WeightedParams) -> list[RubricScore]:
    """YES counts 1, NA counts 1 (0 for NA-invalid criteria), NO and missing/ERROR count 0;
    category score = mean of its criteria; final = weighted sum of categories; pass = final
    at or above the threshold and no gate failure (NO, ERROR, or NA where NA is invalid)."""
    answers = {cid: _answer_label(a, params) for cid, a in rubric.answers.items()}
    na_invalid = set(params.na_invalid)

    def criterion_score(cid: str, answer: str) -> float:
        if answer == params.yes:
            return 1.0
        if answer == params.na:
            return 0.0 if cid in na_invalid else 1.0
        return 0.0

    def failed(cid: str, answer: str) -> bool:
        return answer in (params.no, params.error) or (answer == params.na and cid in na_invalid)

    category_scores = {}
    for name, category in params.categories.items():
        marks = [criterion_score(c, answers.get(c, params.error)) for c in category.criteria]
        category_scores[name] = sum(marks) / len(marks) if marks else 1.0
    final = sum(category_scores[name] * c.weight for name, c in params.categories.items())
    failed_gate = [c for c in params.gate if failed(c, answers.get(c, params.error))]
    failed_checks = [c for c, a in answers.items() if failed(c, a)]
    passed = final >= params.pass_threshold and not failed_gate
    rounded = round(final, 3)
    result: dict[str, Any] = {
        "passed": passed,
        "score": rounded,
        "category_scores": {name: round(s, 3) for name, s in category_scores.items()},
        "failed_checks": failed_checks,
        "failed_safety": failed_gate,
        "safety_gate_failed": bool(failed_gate),
    }
    unit = Scale(min=0.0, max=1.0)
    verdict = "pass" if passed else "fail"
    why = f"score {rounded:.3f} against {params.pass_threshold:g}"
    if failed_gate:
        why += f"; gate failed: {', '.join(failed_gate)}"
    if failed_checks:
        why += f"; failed: {', '.join(failed_checks)}"
    missing = [c.id for c in rubric.criteria if c.id not in rubric.answers]
    if missing:
        why += f"; not answered (counted as {params.error}): {', '.join(missing)}"
    scores = [
        RubricScore("score", rounded, unit, verdict, why, details=result),
        RubricScore("passed", 1.0 if passed else 0.0, unit, verdict, why),
        RubricScore(
            "gate",
            0.0 if failed_gate else 1.0,
            unit,
            "fail" if failed_gate else "pass",
            f"gate failed: {', '.join(failed_gate)}" if failed_gate else "no gate failure",
            details={"failed": failed_gate},
        ),
    ]
    for name, score in category_scores.items():
        scores.append(RubricScore(f"category:{name}", round(score, 3), unit, None, None))
    for criterion in rubric.criteria:
        answer = rubric.answers.get(criterion.id)
        label = answers.get(criterion.id, params.error)
        reason = answer.reason if answer is not None else None
        if answer is not None and answer.forced:
            reason = answer.forced
        elif criterion.id not in rubric.answers:
            reason = "the judge did not answer this criterion"
        elif answer is None:
            reason = "the judge's answer was not one of the allowed answers"
        scores.append(
            RubricScore(
                criterion.id, criterion_score(criterion.id, label), unit, label, reason=reason
            )
        )
    return scores
