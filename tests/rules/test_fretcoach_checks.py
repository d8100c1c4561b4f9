"""Table-driven cases for the FretCoach deterministic checks, through the shipped rule files."""

from __future__ import annotations

import pytest
from fixtures import RULES_DIR

from stream.ruleset.checks import CheckResult, NotApplicable
from stream.ruleset.loader import load_rule_file
from stream.ruleset.schema import CheckRule

METRICS = "Current scale: A minor pentatonic\nPitch Accuracy: 92%\nScale Conformity: 64%\nTiming Stability: 80%"


def run(rule_id: str, **values: object) -> CheckResult:
    rule = load_rule_file(RULES_DIR / "fretcoach" / f"{rule_id}.yaml")
    assert isinstance(rule, CheckRule)
    return rule.check_spec.func(values, rule.validated_params)


LIVE_CASES = [
    # feedback, expected value, label, text the reason must contain
    (
        "Your pitch is clean, but you're drifting outside the scale - move across fretboard positions to stay in key.",
        1.0,
        "pass",
        "all 6 constraints met",
    ),
    (
        "Your pitch is clean, but your scale conformity slips - use a metronome.",
        5 / 6,
        "fail",
        "fix aligned with the weakest metric",
    ),
    (
        "Your timing is steady, but you're drifting outside the scale - shift positions along the fretboard.",
        5 / 6,
        "fail",
        "strongest metric named as the good part (expected Pitch Accuracy)",
    ),
    ("Great pitch. Scale needs work. Try positions. Keep going.", 2 / 6, "fail", "4 sentences"),
    (
        "Your pitch is really clean and precise today, but you keep drifting outside the scale on the higher strings - "
        "move across fretboard positions slowly and deliberately so every note lands inside the scale shape.",
        5 / 6,
        "fail",
        "at most 30 words",
    ),
    (
        "Keep practicing the scale and try other fretboard positions.",
        3 / 6,
        "fail",
        '"[good], but [weak] - [fix]" format',
    ),
]

TIMING_WEAKEST = "Pitch Accuracy: 92%\nScale Conformity: 85%\nTiming Stability: 61%"


@pytest.mark.parametrize(
    "feedback",
    [
        # "e.g." ends no sentence, and a click track is a metronome (the seed's timing fix)
        "Your pitch is clean, but your timing drifts - e.g. play it slowly with a click track.",
        "Your pitch is clean, but your timing rushes - play it slowly with a click track.",
    ],
)
def test_a_timing_fix_in_the_players_words(feedback: str) -> None:
    result = run("studio_live_coach_feedback_format", input=TIMING_WEAKEST, output=feedback)
    assert (result.raw_value, result.label) == (1.0, "pass"), result.reason


@pytest.mark.parametrize(("feedback", "value", "label", "reason"), LIVE_CASES)
def test_live_coach_feedback_format(feedback: str, value: float, label: str, reason: str) -> None:
    result = run("studio_live_coach_feedback_format", input=METRICS, output=feedback)
    assert result.raw_value == pytest.approx(value), result.reason
    assert result.label == label
    assert reason in result.reason


def test_live_coach_reads_json_metrics_and_fractions() -> None:
    metrics = '{"pitch_accuracy": 0.55, "scale_conformity": 0.9, "timing_stability": 0.7}'
    result = run(
        "studio_live_coach_feedback_format",
        input=metrics,
        output="You stay in the scale nicely, but your pitch wavers - press with firmer finger pressure behind the fret.",
    )
    assert result.raw_value == 1.0, result.reason


def test_live_coach_without_metrics_is_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="could not read at least two player metrics"):
        run(
            "studio_live_coach_feedback_format",
            input="Play something!",
            output="Nice, but slow - use a metronome.",
        )


ACTIONABILITY_CASES = [
    (
        {"scale_name": "D", "scale_type": "pentatonic", "strictness": 0.6, "sensitivity": 0.7},
        1.0,
        "pass",
        "all 5",
    ),
    (
        '{"scale_name": "D", "scale_type": "pentatonic", "strictness": 0.6, "sensitivity": 0.7}',
        1.0,
        "pass",
        "all 5",
    ),
    (
        '{"scale_name": "A", "scale_type": "blues", "strictness": 0.6, "sensitivity": 0.7}',
        0.8,
        "fail",
        "unsupported: ['blues']",
    ),
    (
        "Practice C natural major across three positions. Strictness: 0.7, sensitivity: 0.5.",
        1.0,
        "pass",
        "all 5",
    ),
    (  # the seed's "e.g.": one difficulty parameter is enough
        "Let's work on the A pentatonic scale today. Set strictness to high.",
        1.0,
        "pass",
        "all 5",
    ),
    (  # a scale name in lower case is still a scale name
        "practice e natural minor slowly, sensitivity 0.4",
        1.0,
        "pass",
        "all 5",
    ),
    (
        "Today: a minor pentatonic, strictness 0.5.",
        1.0,
        "pass",
        "all 5",
    ),
    (  # "a single, clear practice goal"
        "Play A minor pentatonic, then E natural minor. Strictness 0.5.",
        0.8,
        "fail",
        "a single practice goal (2 scales recommended)",
    ),
    (
        "Let's work on A blues scale today. Set strictness to high.",
        0.8,
        "fail",
        "unsupported: ['blues']",
    ),
    (
        "Practice some scales today, strictness 0.5 and sensitivity 0.5.",
        0.4,
        "fail",
        "no scale name",
    ),
    (
        "Practice the D natural scale.",
        0.8,
        "fail",
        "none of ['strictness', 'sensitivity']",
    ),
    (
        "Sounds good, let me know when you're ready to start!",
        1.0,
        "not_applicable",
        "acknowledgement-only",
    ),
    ("", 0.0, "fail", "empty response"),  # not an acknowledgement: nothing was recommended
    ("   ", 0.0, "fail", "empty response"),
]


@pytest.mark.parametrize(("output", "value", "label", "reason"), ACTIONABILITY_CASES)
def test_immediate_actionability_check(
    output: object, value: float, label: str, reason: str
) -> None:
    result = run("studio_immediate_actionability_check", output=output)
    assert result.raw_value == pytest.approx(value), result.reason
    assert result.label == label
    assert reason in result.reason
