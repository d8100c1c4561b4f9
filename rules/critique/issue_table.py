"""The response-critique rubric's overall rating (seed 001, "Overall Quality Assessment"):
each criterion is rated on an ordinal scale whose levels are "no / minor / major issue"; the
overall label is the first row of the table whose count ranges hold."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stream.pack import AggregateParams, RubricInput, RubricScore, Scale, aggregate


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

    def primary_labels(self) -> list[str]:
        """The rows' labels, highest value first (the seed's order: Excellent .. Unacceptable)."""
        ordered = sorted(self.rows, key=lambda row: -row.value)
        return list(dict.fromkeys(row.label for row in ordered))

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
