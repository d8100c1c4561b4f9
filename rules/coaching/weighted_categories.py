"""The coaching-transcript rubric's compute_score (seed 004): criteria answered YES / NO /
NA, category means, a weighted sum, a pass threshold, and gate criteria that reject
regardless of the score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stream.pack import (
    AggregateParams,
    CriterionAnswer,
    RubricInput,
    RubricScore,
    Scale,
    aggregate,
    unknown_criteria,
)


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
        if unknown := unknown_criteria(named + self.gate + self.na_invalid, ids):
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
