"""What ``scorer agreement`` says of the judge canary (design record 47): per rule and model,
its last round's items, how many verdicts changed (with the Wilson 95 % interval on the
changed share), the mean shift (above 0: worse) and when, from the canary topic's rounds.
Pure: the command reads the topic and feeds it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..canary.compare import CanaryRound
from .measures import Estimate, wilson


def newest_rounds(rounds: Iterable[CanaryRound]) -> list[tuple[CanaryRound, int]]:
    """The newest round of each rule and model, with how many rounds it had, by rule."""
    newest: dict[tuple[str, str, str], CanaryRound] = {}
    seen: dict[tuple[str, str, str], int] = {}
    for found in rounds:
        key = (found.pack, found.rule, found.model)
        seen[key] = seen.get(key, 0) + 1
        if key not in newest or found.at >= newest[key].at:
            newest[key] = found
    return [(newest[key], seen[key]) for key in sorted(newest)]


def changed_share(found: CanaryRound) -> Estimate:
    """The share of the round's items whose verdict changed, with its 95 % interval."""
    return wilson(found.changed, found.items)


def canary_summary(rounds: Iterable[CanaryRound]) -> list[dict[str, Any]]:
    """The canary's part of ``scorer agreement --json``."""
    out = []
    for found, count in newest_rounds(rounds):
        share = changed_share(found)
        out.append(
            {
                "rule": found.rule,
                "pack": found.pack,
                "model": found.model,
                "items": found.items,
                "changed": found.changed,
                "changed_share": {
                    "value": share.value,
                    "low": share.low,
                    "high": share.high,
                    "count": share.count,
                },
                "mean_shift": found.mean_shift,
                "failed": found.failed,
                "at": found.at.isoformat(),
                "rounds": count,
                "changed_items": [c.id for c in found.changes],
            }
        )
    return out


def canary_lines(rounds: Iterable[CanaryRound]) -> list[str]:
    """The canary's part of ``scorer agreement``, for people."""
    newest = newest_rounds(rounds)
    if not newest:
        return ["judge canary: no round yet (nothing on the canary topic)"]
    out = ["judge canary (the last round of each rule and model; mean shift above 0: worse)"]
    for found, count in newest:
        share = changed_share(found)
        said = (
            f"share {share.value:.3f} [{share.low:.3f}, {share.high:.3f}]"
            if share.value is not None and share.low is not None and share.high is not None
            else "share undefined"
        )
        shift = "n/a" if found.mean_shift is None else f"{found.mean_shift:+.3f}"
        failed = f", {found.failed} not judged" if found.failed else ""
        out.append(
            f"  {found.pack}/{found.rule} ({found.model}): {found.changed} of {found.items} "
            f"verdicts changed, {said}; mean shift {shift}{failed}; at "
            f"{found.at.strftime('%Y-%m-%d %H:%M:%S')} UTC, {count} rounds read"
        )
    return out
