"""How long a thread of each kind may go quiet before it closes."""

from __future__ import annotations

from ..ruleset.schema import RuleSet

KINDS = ("conversation", "session", "pair")


def inactivity_gap(ruleset: RuleSet, kind: str, default_s: float) -> float:
    """The rule set's gap for threads of ``kind``, else the deployment's (``default_s``); a
    pair's: how long its first trace waits for its partner."""
    if kind == "pair":
        pair = ruleset.pair_spec()
        return pair.window_s if pair else default_s
    spec = ruleset.thread_spec(kind)
    return (spec.inactivity_gap_s if spec else None) or default_s


def inactivity_gaps(ruleset: RuleSet, default_s: float) -> dict[str, float]:
    """The gap of every kind of thread."""
    return {kind: inactivity_gap(ruleset, kind, default_s) for kind in KINDS}
