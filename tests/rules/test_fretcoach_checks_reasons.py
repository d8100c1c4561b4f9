"""The FretCoach checks' whole answers (value, label and the full reason) on hand-worked
cases, so a change that keeps the verdict but rewords or reorders a reason fails here."""

from __future__ import annotations

from typing import Any

import pytest
from fixtures import RULES_DIR

from stream.ruleset.checks import CheckResult, NotApplicable
from stream.ruleset.loader import load_rule_file
from stream.ruleset.schema import CheckRule

METRICS = "Current scale: A minor pentatonic\nPitch Accuracy: 92%\nScale Conformity: 64%\nTiming Stability: 80%"
NO_FIX = "expected a fix about"


def run(rule_id: str, **values: Any) -> tuple[float, str | None, str]:
    rule = load_rule_file(RULES_DIR / "fretcoach" / f"{rule_id}.yaml")
    assert isinstance(rule, CheckRule)
    result: CheckResult = rule.check_spec.func(values, rule.validated_params)
    return result.raw_value, result.label, result.reason


LIVE = [
    # metrics, feedback, (raw value, label, reason)
    (
        METRICS,
        "Your pitch is clean and accurate, but you're drifting outside the scale - move across "
        "fretboard positions slowly to keep every note in key.",
        (1.0, "pass", "all 6 constraints met"),
    ),
    (
        METRICS,
        "Great pitch. Scale needs work. Try positions. Keep going.",
        (
            2 / 6,
            "fail",
            "2/6 constraints met; failed: 1-2 sentences (4 sentences); "
            "\"[good], but [weak] - [fix]\" format (no '<good>, but <weak> - <fix>' structure); "
            "strongest metric named as the good part (expected Pitch Accuracy); "
            "weakest metric named as the weak part (expected Scale Conformity)",
        ),
    ),
    (
        METRICS,
        "Your pitch is clean, but your scale conformity slips - use a metronome.",
        (
            5 / 6,
            "fail",
            f"5/6 constraints met; failed: fix aligned with the weakest metric ({NO_FIX} position, positions)",
        ),
    ),
    (
        METRICS,
        "Your pitch is clean, but your scale slips - move across fretboard positions. Then rest. Then play again.",
        (5 / 6, "fail", "5/6 constraints met; failed: 1-2 sentences (3 sentences)"),
    ),
    (
        METRICS,
        "Your pitch is clean, but your scale slips - move across fretboard positions one two three "
        "four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen.",
        (5 / 6, "fail", "5/6 constraints met; failed: at most 30 words (31 words)"),
    ),
    (  # two weakest metrics: either one's words name it, either one's fix would do
        "Pitch Accuracy: 90%\nScale Conformity: 70%\nTiming Stability: 70%",
        "Your pitch is clean, but your rhythm wanders - keep going.",
        (
            5 / 6,
            "fail",
            "5/6 constraints met; failed: fix aligned with the weakest metric "
            f"({NO_FIX} position, positions or metronome, click)",
        ),
    ),
    (  # two strongest metrics
        "Pitch Accuracy: 80%\nScale Conformity: 80%\nTiming Stability: 50%",
        "Your timing is fine, but your timing drifts - use a metronome.",
        (
            5 / 6,
            "fail",
            "5/6 constraints met; failed: strongest metric named as the good part "
            "(expected Pitch Accuracy or Scale Conformity)",
        ),
    ),
    (  # JSON keyed by a label, a key and an upper-case key with underscores; percentages
        '{"Pitch Accuracy": 55, "scale_conformity": 90, "TIMING_STABILITY": 70}',
        "You stay in key, but your pitch wavers - press harder on each fret.",
        (1.0, "pass", "all 6 constraints met"),
    ),
]


@pytest.mark.parametrize(("metrics", "feedback", "expected"), LIVE)
def test_live_coach_feedback_format_answers(
    metrics: str, feedback: str, expected: tuple[float, str, str]
) -> None:
    assert run("studio_live_coach_feedback_format", input=metrics, output=feedback) == expected


def test_live_coach_names_every_metric_it_could_not_read() -> None:
    with pytest.raises(NotApplicable) as raised:
        run("studio_live_coach_feedback_format", input="Pitch Accuracy: 80%", output="Nice.")
    assert str(raised.value) == (
        "could not read at least two player metrics "
        "(Pitch Accuracy, Scale Conformity, Timing Stability) from the input"
    )


NONE_SET = "a difficulty parameter set (none of ['strictness', 'sensitivity'])"
ACK = "no practice action in the response (acknowledgement-only): scored 1.0 as the rule specifies"

ACTIONABILITY = [
    (
        {"scale_name": "A", "scale_type": ["natural", "blues"], "strictness": 0.5},
        (
            0.6,
            "fail",
            "3/5 constraints met; failed: a single practice goal (2 scales recommended); "
            "only supported scale types (unsupported: ['blues'])",
        ),
    ),
    (
        '{"Scale": "D", "TYPE": "pentatonic"}',
        (0.8, "fail", f"4/5 constraints met; failed: {NONE_SET}"),
    ),
    (  # an empty scale name gives way to the root; a parameter set to 0 is set
        {"scale_name": "", "root": "E", "scale_type": "natural", "sensitivity": 0},
        (1.0, "pass", "all 5 constraints met"),
    ),
    (
        {"strictness": None, "scale_type": "natural", "key": "G"},
        (0.8, "fail", f"4/5 constraints met; failed: {NONE_SET}"),
    ),
    (
        'Here is your plan: {"scale": "A", "type": "pentatonic", "strictness": 0.7} - enjoy',
        (1.0, "pass", "all 5 constraints met"),
    ),
    (
        "Practice some scales today.",
        (
            0.2,
            "fail",
            "1/5 constraints met; failed: scale name given (no scale name); "
            "scale type given (no scale type); only supported scale types (no scale type); "
            f"{NONE_SET}",
        ),
    ),
    (
        "Practice E dorian, strictness 0.5.",
        (
            0.8,
            "fail",
            "4/5 constraints met; failed: only supported scale types (unsupported: ['dorian'])",
        ),
    ),
    ("[1, 2]", (1.0, "not_applicable", ACK)),
    (None, (1.0, "not_applicable", ACK)),
    (5, (1.0, "not_applicable", ACK)),
    ("  \n", (0.0, "fail", "empty response: no recommendation")),
]


@pytest.mark.parametrize(("output", "expected"), ACTIONABILITY)
def test_immediate_actionability_answers(output: Any, expected: tuple[float, str, str]) -> None:
    assert run("studio_immediate_actionability_check", output=output) == expected
