"""The coaching-session improvement check: the seed's 1.0 / 0.5 / 0.0 scale from the numbers."""

from __future__ import annotations

import pytest
from fixtures import RULES_DIR

from stream.ruleset.checks import CheckResult, NotApplicable
from stream.ruleset.packs import load_pack_code

PARAMS = {
    "metrics": {
        "pitch_accuracy": "Pitch Accuracy",
        "scale_conformity": "Scale Conformity",
        "timing_stability": "Timing Stability",
    }
}


def session(timing: list[float], pitch: float = 0.9, scale: float = 0.8) -> list[dict]:
    return [
        {
            "seq": i,
            "metrics": {"pitch_accuracy": pitch, "scale_conformity": scale, "timing_stability": t},
            "feedback": "...",
        }
        for i, t in enumerate(timing)
    ]


def run(turns: object, **params: object) -> CheckResult:
    spec = load_pack_code(RULES_DIR / "fretcoach").checks.get("session_weakest_metric_improvement")
    assert spec is not None
    count = len(turns) if isinstance(turns, list) else 0
    return spec.func(
        {"turns": turns, "turn_count": count}, spec.validate_params({**PARAMS, **params})
    )


CASES = [
    # timing stability per turn (the weakest metric early), value, label, reason fragment
    (
        [0.55, 0.58, 0.60, 0.66, 0.70, 0.72, 0.75, 0.78, 0.80],
        1.0,
        "improved",
        "Timing Stability: 58% in the first 3 turns, 78% in the last 3 (+20 pts)",
    ),
    (
        [0.60, 0.60, 0.60, 0.58, 0.55, 0.50],
        0.0,
        "no_improvement",
        "60% in the first 2 turns, 52% in the last 2 (-7 pts)",
    ),
    ([0.60, 0.61, 0.61, 0.62, 0.63, 0.63], 0.5, "partial", "(+3 pts); 75% of later turns"),
    (
        [0.50, 0.50, 0.45, 0.45, 0.46, 0.46, 0.72, 0.75],
        0.5,
        "partial",
        "(+24 pts); 33% of later turns above the early mean",
    ),
    ([0.55, 0.70, 0.72], 0.5, "too_short", "3 turns with metrics (fewer than 4)"),
    # up and down with no trend: two turns a window at least, so one turn up is no trend
    (
        [0.50, 0.70, 0.50, 0.70],
        0.0,
        "no_improvement",
        "60% in the first 2 turns, 60% in the last 2",
    ),
    ([0.50, 0.70, 0.50, 0.70, 0.50, 0.70], 0.0, "no_improvement", "in the first 2 turns"),
]


@pytest.mark.parametrize("early_share", [1 / 3, 0.3333], ids=["third", "as-the-rule-writes-it"])
@pytest.mark.parametrize(("timing", "value", "label", "reason"), CASES)
def test_improvement_scale(
    timing: list[float], value: float, label: str, reason: str, early_share: float
) -> None:
    result = run(session(timing), early_share=early_share)
    assert (result.raw_value, result.label) == (value, label), result.reason
    assert reason in result.reason


def test_percentages_and_turns_without_metrics() -> None:
    turns = session([55, 58, 60, 66, 70, 72, 75, 78, 80], pitch=90, scale=80)
    turns.insert(2, {"seq": 99, "messages": [{"role": "user", "content": "hi"}]})  # no metrics
    result = run(turns)
    assert result.raw_value == 1.0 and "58% in the first 3 turns" in result.reason


def test_the_weakest_metric_is_the_early_one() -> None:
    # scale conformity is weakest early and improves; timing drops later but was not the target
    turns = [
        {"metrics": {"pitch_accuracy": 0.9, "scale_conformity": s, "timing_stability": t}}
        for s, t in [(0.5, 0.8), (0.52, 0.8), (0.7, 0.6), (0.75, 0.55), (0.78, 0.5), (0.8, 0.5)]
    ]
    result = run(turns)
    assert result.raw_value == 1.0 and "weakest early metric Scale Conformity" in result.reason


def test_turns_that_never_carry_metrics_are_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="no turn carries the metrics"):
        run([{"messages": []}, {"feedback": "x"}])
    spec = load_pack_code(RULES_DIR / "fretcoach").checks.get("session_weakest_metric_improvement")
    assert spec is not None
    transcript = {"turns": [], "turn_count": 5}  # turns with messages only: no metric turns
    with pytest.raises(NotApplicable, match="no turn carries the metrics"):
        spec.func(transcript, spec.validate_params(PARAMS))


def test_a_session_without_any_turn_is_too_short_as_the_seed_says() -> None:
    result = run([])
    assert (result.raw_value, result.label) == (0.5, "too_short")


def test_thresholds_are_rule_parameters() -> None:
    timing = [0.60, 0.61, 0.61, 0.62, 0.63, 0.63]
    assert run(session(timing), clear_gain=0.02).raw_value == 1.0
    assert run(session(timing[:4]), min_turns=5).label == "too_short"
