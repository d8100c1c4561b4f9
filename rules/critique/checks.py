"""Checks from the response-critique rubric (seed 001): what it measures by counting."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import Field, model_validator

from stream.pack import CheckParams, CheckResult, check, render_value


class PleasantryParams(CheckParams):
    phrases: list[str] = Field(min_length=1, description="Pleasantries to count (any case)")
    minor_at: int = Field(default=1, ge=1, description="This many or more: a minor issue")
    major_at: int = Field(default=3, ge=1, description="This many or more: a major issue")

    @model_validator(mode="after")
    def _ordered(self) -> PleasantryParams:
        if self.major_at <= self.minor_at:
            raise ValueError("major_at must be above minor_at")
        return self


@lru_cache(maxsize=64)
def _pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    # longest first, so "I hope this helps" is one pleasantry, not also "hope this helps"
    ordered = sorted({_fold(p) for p in phrases}, key=len, reverse=True)
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(p) for p in ordered) + r")(?!\w)")


def _fold(text: str) -> str:
    return text.lower().replace("\u2019", "'")


@check("pleasantry_count", variables=("response",), params=PleasantryParams)
def pleasantry_count(values: Mapping[str, Any], params: Any) -> CheckResult:
    """3 (no issue) without pleasantries, 2 (minor) from ``minor_at``, 1 (major) from
    ``major_at``: the seed's "1-2 minor pleasantries = Minor Issue. 3+ = Major Issue"."""
    assert isinstance(params, PleasantryParams)
    text = render_value(values["response"])
    found = _pattern(tuple(params.phrases)).findall(_fold(text))
    count = len(found)
    if count >= params.major_at:
        raw, label = 1.0, "Major Issues"
    elif count >= params.minor_at:
        raw, label = 2.0, "Minor Issues"
    else:
        raw, label = 3.0, "No Issues"
    reason = f"{count} pleasantr{'y' if count == 1 else 'ies'}"
    if found:
        reason += ": " + ", ".join(f'"{p}"' for p in found)
    return CheckResult(raw, reason, label)
