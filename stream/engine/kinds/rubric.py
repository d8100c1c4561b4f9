"""Rubric rules: one judge call answered per criterion, the pack's aggregator over the
answers, a score per result (the primary one stands for the rule's decision)."""

from __future__ import annotations

from ...models import Outcome, utcnow
from ...ruleset.paths import truthy
from ...ruleset.schema import AnyRule, RubricRule
from ..context import ScoringContext
from ..outcomes import Measured, RuleOutcome, ScoreShape, make_score
from ..plan import JudgeJob, Plan
from ..prompt import FittedPrompt
from ..rubric import aggregated, criteria_input, measured_scores, rubric_input
from ..verdicts import Verdict
from .base import Found, JudgedKind, job_details


class RubricKind(JudgedKind):
    """A ``rubric`` rule. A criterion whose ``na_when`` holds on the trace is forced to NA
    whatever the judge answers."""

    def handles(self, rule: AnyRule) -> bool:
        return isinstance(rule, RubricRule)

    def shape(self, rule: AnyRule) -> ScoreShape:
        assert isinstance(rule, RubricRule)
        return ScoreShape(
            rule.aggregator.primary, rule.primary_scale(), rule.output.higher_is_better
        )

    def criteria(self, rule: AnyRule) -> list[str | None]:
        """The scores the aggregator publishes when no criterion is answered (an API
        failure, as seed 004's compute_score reads one: every answer ERROR)."""
        assert isinstance(rule, RubricRule)
        results = aggregated(rule, criteria_input(rule, {}), "(the rule's criteria)")
        if isinstance(results, str):
            return [rule.aggregator.primary]
        return [result.name for result in results]

    def prepare(self, job: JudgeJob, plan: Plan, found: Found, fitted: list[FittedPrompt]) -> None:
        assert isinstance(job.rule, RubricRule)
        job.forced = {
            c.id: f"NA: the criterion does not apply ({c.na_when})"
            for c in job.rule.criteria
            if c.na_when is not None and truthy(found.document, c.na_when)
        }

    def conclude(
        self, ctx: ScoringContext, job: JudgeJob, plan: Plan, verdict: Verdict
    ) -> RuleOutcome:
        """Every score the rubric publishes from one judge answer; one decision, whose score
        id is the rubric's primary score."""
        rule = job.rule
        assert isinstance(rule, RubricRule)
        now = utcnow()
        spec = rule.aggregator
        results = aggregated(rule, rubric_input(rule, verdict, job.forced), plan.target.id)
        if isinstance(results, str):
            return ctx.finish(
                rule, plan, Measured("error", results, judge_model=verdict.model), now
            )
        scores = [
            make_score(rule, plan.target, shape, measured, now)
            for shape, measured in measured_scores(rule, verdict, results, job_details(job))
        ]
        primary = next((s for s in scores if s.criterion == spec.primary), scores[0])
        outcome: Outcome = "scored" if primary.status == "ok" else "error"
        decided = ctx.decide(rule, plan, outcome, primary.status_reason, primary.score_id, now)
        decided.score = primary
        decided.extra = [s for s in scores if s is not primary]
        return decided
