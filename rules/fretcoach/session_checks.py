"""Coaching-session checks, measured from the numbers (no judge).

``session_weakest_metric_improvement`` is the deterministic companion of FretCoach's
``studio_live_feedback_effectiveness`` (seed 000, rule 11): did the metric that was weakest
in the early turns improve in the later turns, clearly and consistently? Same scale as the
seed: 1.0 clear and consistent improvement, 0.5 partial / inconsistent / too short to tell,
0.0 no improvement or regression.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import fmean
from typing import Any

from pydantic import Field

from stream.pack import CheckParams, CheckResult, NotApplicable, check


class ImprovementParams(CheckParams):
    metrics: dict[str, str] = Field(description="metric key in a turn's metrics -> label")
    min_turns: int = Field(default=4, ge=2, description="fewer turns with metrics: too short")
    early_share: float = Field(
        default=1 / 3, gt=0, le=0.5, description="share of turns that is early"
    )
    clear_gain: float = Field(
        default=0.05, gt=0, description="late minus early mean, on 0..1, that is clear"
    )
    noise: float = Field(default=0.01, ge=0, description="a change within this is no change")
    consistency: float = Field(
        default=0.6,
        gt=0,
        le=1,
        description="share of later turns above the early mean for 'consistent'",
    )


def _metric_rows(turns: Any, keys: list[str]) -> list[dict[str, float]]:
    """The numeric metrics of each turn that has all of them, in the turns' order."""
    rows = []
    for turn in turns if isinstance(turns, list) else []:
        metrics = turn.get("metrics") if isinstance(turn, dict) else None
        if not isinstance(metrics, dict):
            continue
        values = {k: metrics.get(k) for k in keys}
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()):
            rows.append({k: float(v) for k, v in values.items()})  # type: ignore[arg-type]
    if rows and max(v for row in rows for v in row.values()) > 1.0:  # percentages
        rows = [{k: v / 100.0 for k, v in row.items()} for row in rows]
    return rows


@check(
    "session_weakest_metric_improvement",
    variables=("turns", "turn_count"),
    params=ImprovementParams,
)
def session_weakest_metric_improvement(values: Mapping[str, Any], params: Any) -> CheckResult:
    assert isinstance(params, ImprovementParams)
    keys = list(params.metrics)
    rows = _metric_rows(values["turns"], keys)
    if not rows and values["turn_count"]:  # a transcript-only session, or other metrics
        raise NotApplicable(f"no turn carries the metrics {keys}")
    if len(rows) < params.min_turns:
        return CheckResult(
            raw_value=0.5,
            label="too_short",
            reason=f"{len(rows)} turns with metrics (fewer than {params.min_turns}): too short to assess, 0.5 as the rule specifies",
        )
    # the early and the late windows: a third each (0.3333 of 6 is 2, not 1), two turns at
    # least, so that one turn up and one down is not a trend; never overlapping
    window = min(max(2, math.floor(len(rows) * params.early_share + 0.01)), len(rows) // 2)
    early, later = rows[:window], rows[window:]
    early_means = {k: fmean(r[k] for r in early) for k in keys}
    weakest = min(keys, key=lambda k: early_means[k])  # ties: the first listed
    before = early_means[weakest]
    late_tail = later[-window:]
    after = fmean(r[weakest] for r in late_tail)
    gain = after - before
    above = sum(r[weakest] > before + params.noise for r in later) / len(later)
    label_name = params.metrics[weakest]
    detail = (
        f"weakest early metric {label_name}: {before:.0%} in the first {window} turns, "
        f"{after:.0%} in the last {len(late_tail)} ({gain * 100:+.0f} pts); "
        f"{above:.0%} of later turns above the early mean"
    )
    if gain >= params.clear_gain and above >= params.consistency:
        return CheckResult(
            raw_value=1.0, label="improved", reason=f"clear, consistent improvement: {detail}"
        )
    if gain > params.noise or above >= params.consistency:
        return CheckResult(
            raw_value=0.5, label="partial", reason=f"partial or inconsistent improvement: {detail}"
        )
    return CheckResult(raw_value=0.0, label="no_improvement", reason=f"no improvement: {detail}")
