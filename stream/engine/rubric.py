"""A rubric's judge answer as scores: forced NA answers applied, the pack's aggregator run,
each of its results shaped as a score (the primary one carries the judge call's usage)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..ruleset.aggregators import CriterionAnswer, CriterionInfo, RubricInput, RubricScore
from ..ruleset.schema import CriteriaRule
from .outcomes import Measured, ScoreShape
from .verdicts import RubricAnswers, Verdict

log = logging.getLogger(__name__)


def aggregated(
    rule: CriteriaRule, responses: RubricInput, target_id: str
) -> list[RubricScore] | str:
    """The pack's aggregator over ``responses``, or why it failed: a bug in an aggregator
    must not stop the stream (logged, and the rule's score says it)."""
    try:
        return rule.aggregator.func(responses, rule.validated_aggregate)
    except Exception as exc:
        log.exception("aggregate %s failed on %s", rule.aggregate.name, target_id)
        return f"aggregate {rule.aggregate.name} raised {type(exc).__name__}: {exc}"


def rubric_input(rule: CriteriaRule, verdict: Verdict, forced: dict[str, str]) -> RubricInput:
    """The aggregator's input for a rubric's verdict (see ``criteria_input``)."""
    assert isinstance(verdict.answer, dict), "a rubric is answered per criterion"
    return criteria_input(rule, verdict.answer, forced)


def criteria_input(
    rule: CriteriaRule,
    judged: Mapping[str, CriterionAnswer | None],
    forced: dict[str, str] | None = None,
) -> RubricInput:
    """The aggregator's input: the judge's answers in criterion order, with the criteria
    whose ``na_when`` held forced to NA (saying what the judge had answered)."""
    answers: dict[str, CriterionAnswer | None] = dict(judged)
    if forced:
        assert rule.output.choices is not None  # na_when needs an NA choice (load time)
        for cid, why in forced.items():
            said_so = answers.get(cid)
            said = f"; the judge said {said_so.label}" if said_so is not None else ""
            answers[cid] = CriterionAnswer(rule.output.choices["NA"], "NA", None, why + said)
    return RubricInput(
        criteria=[CriterionInfo(c.id, c.name) for c in rule.criteria],
        answers={c.id: answers[c.id] for c in rule.criteria if c.id in answers},
        scale=rule.output.scale,
    )


def stated_details(rule: CriteriaRule, answers: RubricAnswers) -> dict[str, str]:
    """The aggregate's label as the judge stated it (``judge_<stated_aggregate>``), for the
    details of the aggregate the engine computed; empty when not asked or not given."""
    if rule.stated_aggregate is None or answers.stated is None:
        return {}
    return {f"judge_{rule.stated_aggregate}": answers.stated}


def measured_scores(
    rule: CriteriaRule,
    verdict: Verdict,
    results: list[RubricScore],
    prompt_details: dict[str, Any] | None = None,
    *,
    primary: str | None = None,
) -> list[tuple[ScoreShape, Measured]]:
    """Each aggregator result as the shape and content of one score event. The ``primary``
    one (default: the aggregator's) carries the judge call's usage, the rubric's notes (such
    as key strengths and weaknesses) and ``prompt_details`` (what the prompt lost to fit its
    cap, or rendered empty); ``primary=""``: none of them does (a comparison's preference
    score carries them)."""
    primary = rule.aggregator.primary if primary is None else primary
    answer = verdict.answer
    notes = getattr(answer, "notes", None) or {}
    stated = stated_details(rule, answer) if isinstance(answer, RubricAnswers) else {}
    prompt_details = {**notes, **stated, **(prompt_details or {})} or None
    shaped = []
    for result in results:
        ok = result.error is None and result.raw_value is not None
        measured = Measured(
            status="ok" if ok else "error",
            status_reason=result.error,
            raw_value=result.raw_value,
            label=result.label,
            reason=result.reason,
            judge_model=verdict.model,
            latency_ms=verdict.latency_ms,
            # one judge call: its usage is counted once, on the primary score
            usage=verdict.usage if result.name == primary else None,
            details=(
                {**(result.details or {}), **prompt_details}
                if prompt_details and result.name == primary
                else result.details
            ),
        )
        shaped.append((ScoreShape(result.name, result.scale, result.higher_is_better), measured))
    return shaped
