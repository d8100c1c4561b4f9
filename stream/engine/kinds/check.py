"""Check rules: a deterministic function of the rule's variables, run while planning."""

from __future__ import annotations

import logging
import time
from typing import Any

from ...ruleset.checks import NotApplicable
from ...ruleset.schema import AnyRule, CheckRule
from ..context import ScoringContext
from ..outcomes import Measured
from ..plan import Plan
from .base import Found, RuleKind

log = logging.getLogger(__name__)


class CheckKind(RuleKind):
    """A check decides at once: its result, ``skipped`` when it says it does not apply, or
    ``error`` when it raises (a bug in a check must not stop the stream)."""

    def handles(self, rule: AnyRule) -> bool:
        return isinstance(rule, CheckRule)

    def plan(self, ctx: ScoringContext, plan: Plan, rule: AnyRule, found: Found) -> None:
        assert isinstance(rule, CheckRule)
        plan.outcomes.append(ctx.finish(rule, plan, self.measure(rule, plan, found.values)))

    def measure(self, rule: CheckRule, plan: Plan, values: dict[str, Any]) -> Measured:
        started = time.perf_counter()
        try:
            result = rule.check_spec.func(values, rule.validated_params)
        except NotApplicable as exc:
            return Measured("skipped", f"check not applicable: {exc}")
        except Exception as exc:  # a bug in a check must not stop the stream
            log.exception("check %s failed on %s", rule.check, plan.target.id)
            return Measured("error", f"check {rule.check} raised {type(exc).__name__}: {exc}")
        return Measured(
            "ok",
            raw_value=result.raw_value,
            label=result.label,
            reason=result.reason,
            latency_ms=(time.perf_counter() - started) * 1000,
        )
