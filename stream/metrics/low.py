"""What the score metrics count as a low score: the bad side of the middle of its scale
(``scorer_low_scores_total``, ``scorer_tool_call_low_scores_total``)."""

from __future__ import annotations


def is_low(value: float, higher_is_better: bool) -> bool:
    """A normalised score on the bad side of the middle of its scale (the middle is neither)."""
    return value < 0.5 if higher_is_better else value > 0.5
