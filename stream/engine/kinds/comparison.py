"""Comparison rules: two responses (a pair's variants A and B) judged in one call, each
rated per criterion as its rubric would be, and a preference between them; which variant the
judge reads first is the rule's ``comparison.order`` (``pair_order``), and with ``both`` the
pair is judged in each order (``both_orders``)."""

from __future__ import annotations

from typing import Any

from ...errors import MissingVariable
from ...models import Outcome, ScoreEvent, utcnow
from ...ruleset.aggregators import RubricScore
from ...ruleset.schema import AnyRule, ComparisonRule
from ..context import ScoringContext
from ..outcomes import Measured, RuleOutcome, ScoreShape, Target, make_score
from ..plan import JudgedRule, JudgeJob, Plan
from ..prompt import FittedPrompt, resolve_variables
from ..rubric import aggregated, criteria_input, measured_scores, stated_details
from ..verdicts import ComparisonAnswers, Verdict
from .base import Found, JudgedKind, job_details
from .both_orders import judge_both_orders
from .pair_order import (
    FIRST,
    SECOND,
    in_both_orders,
    order_of,
    shown_first,
    slot_variants,
    swapped,
    variant_preference,
)

PAIR_SLOTS = ("a", "b")  # a pair document's two traces: response A and response B
PREFERENCE = "preference"  # the criterion of a comparison's preference score


class ComparisonKind(JudgedKind):
    """A ``comparison`` rule, planned on a pair's close once both its traces came."""

    def handles(self, rule: AnyRule) -> bool:
        return isinstance(rule, ComparisonRule)

    def shape(self, rule: AnyRule) -> ScoreShape:
        assert isinstance(rule, ComparisonRule)
        spec = rule.preference
        return ScoreShape(PREFERENCE, spec.scale, spec.higher_is_better)

    def calls(self, rule: JudgedRule, found: Found) -> list[dict[str, Any]] | str:
        """The pair's variables as the rule's order shows it: as read (the first variant
        first), read from the pair with its traces swapped, or both."""
        assert isinstance(rule, ComparisonRule)
        document = found.document
        order = order_of(rule, str(document.get("comparison_id", "")))
        if order == FIRST:
            return [found.values]
        try:
            turned = resolve_variables(rule, swapped(document), [])
        except MissingVariable as exc:
            return f"{exc} (the pair shown the other way round)"
        if not in_both_orders(order):
            return [turned]
        # the published order's call first, then the other order's
        return [turned, found.values] if shown_first(order) == SECOND else [found.values, turned]

    def prepare(self, job: JudgeJob, plan: Plan, found: Found, fitted: list[FittedPrompt]) -> None:
        """Each prompt slot's trace, and its project (a canary may report to its own), in the
        order the judge reads them; with both orders, the two prompts (``items``)."""
        rule = job.rule
        assert isinstance(rule, ComparisonRule)
        document = found.document
        job.order = order_of(rule, str(document.get("comparison_id", "")))
        labels = slot_variants(rule, shown_first(job.order))
        traces = document.get("variants", {})
        held = dict(zip(rule.pair.variants, PAIR_SLOTS, strict=True))  # variant -> its slot
        job.members = {
            slot: (
                traces[labels[slot]],
                document[held[labels[slot]]].get("project_name") or plan.target.project_name,
            )
            for slot in PAIR_SLOTS
        }
        if in_both_orders(job.order):
            job.items = fitted

    async def run(self, ctx: ScoringContext, job: JudgeJob, plan: Plan) -> RuleOutcome:
        """One judge call, or with both orders (or an audited pair) two (``both_orders``)."""
        if not in_both_orders(job.order):
            return await super().run(ctx, job, plan)
        return await judge_both_orders(self, ctx, job, plan)

    def conclude(
        self, ctx: ScoringContext, job: JudgeJob, plan: Plan, verdict: Verdict
    ) -> RuleOutcome:
        """Every score a comparison publishes from one judge answer: the preference (the
        pair's, its decision's score) and each response's ratings and aggregate as its rubric
        would publish them (each response's trace is their target)."""
        rule = job.rule
        assert isinstance(rule, ComparisonRule)
        now = utcnow()
        answer = verdict.answer
        assert isinstance(answer, ComparisonAnswers), "a comparison is answered as a pair"
        first = shown_first(job.order)
        variants = slot_variants(rule, first)  # each prompt slot's variant
        trace_of = {variants[slot]: job.members[slot][0] for slot in PAIR_SLOTS}
        pair = {  # the variants in the rule's order, whichever was read first
            "comparison_id": plan.target.id,
            "variants": {name: trace_of[name] for name in rule.pair.variants},
            "shown_first": variants["a"],
            "order": rule.comparison.order,
        }
        own_slot = dict(zip(rule.pair.variants, PAIR_SLOTS, strict=True))
        extra: list[ScoreEvent] = []
        overall: dict[str, RubricScore | None] = {}
        for slot in PAIR_SLOTS:
            answers = answer.responses[slot]
            results = aggregated(rule, criteria_input(rule, answers), plan.target.id)
            if isinstance(results, str):
                failed = Measured("error", results, judge_model=verdict.model, usage=verdict.usage)
                return ctx.finish(rule, plan, failed, now)
            primary = rule.aggregator.primary
            overall[slot] = next((r for r in results if r.name == primary), None)
            trace_id, project = job.members[slot]
            # a variant's ratings keep their ids whichever slot it was read in
            key = f"{plan.target.score_key}/{own_slot[variants[slot]]}"
            target = Target(trace_id, project, key)
            about = {"comparison_id": plan.target.id, "variant": variants[slot]}
            stated = stated_details(rule, answers)
            for shape, measured in measured_scores(rule, verdict, results, primary=""):
                own = stated if shape.criterion == primary else {}
                measured.details = {**(measured.details or {}), **own, **about}
                extra.append(make_score(rule, target, shape, measured, now))
        preferred = answer.preference
        details = {**answer.notes, **pair, **(job_details(job) or {})}
        contradiction = None
        if preferred is None:
            why = answer.preference_error or "the judge gave no preference"
            measured = Measured("error", why)
        else:
            raw = variant_preference(preferred.raw_value, first)  # stated for the variants
            label = preferred.label if first == FIRST else rule.preference.label_for(raw)
            measured = Measured("ok", raw_value=raw, label=label, reason=preferred.reason)
            ranking = ranking_against_ratings(preferred.raw_value, overall, variants)
            if ranking is not None:
                details.update(ranking)
                if ranking["ranking_contradicts_ratings"]:
                    contradiction = _contradiction(preferred.raw_value, overall, variants)
                    ctx.observer.on_comparison_contradiction(rule.id, rule.pack)
        measured.judge_model, measured.latency_ms = verdict.model, verdict.latency_ms
        measured.usage = verdict.usage  # one judge call: counted once, on the preference
        measured.details = details
        score = make_score(rule, plan.target, ctx.shapes[rule.id], measured, now)
        outcome: Outcome = "scored" if score.status == "ok" else "error"
        said = score.status_reason or contradiction
        decided = ctx.decide(rule, plan, outcome, said, score.score_id, now)
        decided.score = score
        decided.extra = extra
        return decided


def _rating(result: RubricScore | None) -> float | None:
    """A response's aggregate as a value where higher is better (None: not rated)."""
    if result is None or result.error is not None or result.raw_value is None:
        return None
    return result.raw_value if result.higher_is_better else -result.raw_value


def ranking_against_ratings(
    preference: float, overall: dict[str, RubricScore | None], variants: dict[str, str]
) -> dict[str, Any] | None:
    """Whether the preference agrees with the two responses' aggregates (seed 001: "Ensure
    ranking aligns with individual ratings"): it contradicts them when it favours the
    response whose aggregate is strictly worse (A preferred, A rated worse; or B preferred, B
    rated worse). A preference of 0, or two responses rated alike, contradicts nothing: the
    seed ranks by the differentiators, which one label cannot weigh. None: a response's
    aggregate is missing, nothing to check against."""
    a, b = _rating(overall["a"]), _rating(overall["b"])
    if a is None or b is None:
        return None
    rated = {variants[s]: r.label or f"{r.raw_value:g}" for s, r in overall.items() if r}
    favours = (preference > 0) - (preference < 0)  # +1: A, -1: B
    better = (a > b) - (a < b)
    return {
        "overall_ratings": rated,
        "ranking_contradicts_ratings": favours != 0 and better != 0 and favours != better,
    }


def _contradiction(
    preference: float, overall: dict[str, RubricScore | None], variants: dict[str, str]
) -> str:
    """What the decision record says of a preference that contradicts the ratings."""
    favoured, other = ("a", "b") if preference > 0 else ("b", "a")
    said = {s: (r.label if r and r.label else "?") for s, r in overall.items()}
    return (
        f"the preference ({preference:+g}) favours {variants[favoured]}, rated "
        f"{said[favoured]}, over {variants[other]}, rated {said[other]}: the ranking "
        "contradicts the ratings"
    )


def missing_partner(rule: ComparisonRule, pair_id: str, document: dict[str, Any]) -> str | None:
    """Why a pair cannot be judged: the variant that did not come within the window."""
    labels = dict(zip(PAIR_SLOTS, rule.pair.variants, strict=True))
    traces = document.get("variants", {})
    missing = [slot for slot in PAIR_SLOTS if labels[slot] not in traces]
    if not missing:
        return None
    (absent,) = missing  # a pair closes with at least one trace
    (there,) = set(PAIR_SLOTS) - {absent}
    return (
        f"partner missing: comparison {pair_id!r} has variant "
        f"{labels[there]} (trace {traces[labels[there]]}) but no variant "
        f"{labels[absent]} within {rule.pair.window_s:g} s"
    )
