"""The support pack's own check: found when the pack loads, referenced by name from YAML."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from stream.pack import CheckParams, CheckResult, NotApplicable, check, render_value, words


class BudgetParams(CheckParams):
    max_words: int = Field(gt=0, description="Words a reply may use")


@check("reply_within_budget", variables=("reply",), params=BudgetParams)
def reply_within_budget(values: Mapping[str, Any], params: Any) -> CheckResult:
    """1.0 within the budget, falling linearly to 0.0 at twice the budget."""
    assert isinstance(params, BudgetParams)
    count = len(words(render_value(values["reply"])))
    if count == 0:
        raise NotApplicable("the reply is empty")
    over = max(0, count - params.max_words)
    value = max(0.0, 1.0 - over / params.max_words)
    label = "pass" if over == 0 else "fail"
    return CheckResult(value, f"{count} words (budget {params.max_words})", label)
