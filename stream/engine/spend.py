"""Spend budgets: what the judge may cost per rule or per model, per hour or per day.

A budget counts US dollars (from the price table) or, for a model without a price, tokens,
over a window aligned to the UTC hour or day. While one that covers a rule is spent, that
rule's judged scores are ``skipped`` with a reason starting ``budget exhausted`` (its
decision records say the same) until the window resets. Each worker keeps its own ledger: a
budget is per worker, as the judge's concurrency is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..models import TokenUsage
from ..settings import WINDOW_S, Budget


@dataclass
class _Account:
    budget: Budget
    window_start: float = 0.0
    spent: float = 0.0


@dataclass
class SpendLedger:
    """Spend per budget in its current window."""

    budgets: Iterable[Budget] = ()
    cost: Callable[[str, TokenUsage], float | None] = lambda model, usage: None
    clock: Callable[[], float] = time.time
    _accounts: list[_Account] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._accounts = [_Account(b) for b in self.budgets]

    def _roll(self, account: _Account, now: float) -> None:
        size = WINDOW_S[account.budget.window]
        start = now - now % size
        if start != account.window_start:
            account.window_start, account.spent = start, 0.0

    def _covers(self, account: _Account, rule: str, model: str) -> bool:
        budget = account.budget
        return budget.rule == rule or budget.model == model

    def exhausted(self, rule: str, model: str) -> str | None:
        """Why ``rule`` on ``model`` may not be judged now, or None."""
        now = self.clock()
        for account in self._accounts:
            self._roll(account, now)
            budget = account.budget
            if self._covers(account, rule, model) and account.spent >= _amount(budget):
                resets = datetime.fromtimestamp(
                    account.window_start + WINDOW_S[budget.window], UTC
                ).strftime("%Y-%m-%d %H:%M UTC")
                return f"budget exhausted: {budget.describe()} is spent; it resets at {resets}"
        return None

    def record(self, rule: str, model: str, usage: TokenUsage) -> None:
        """A judge call for ``rule`` on ``model`` used ``usage``."""
        now = self.clock()
        usd = self.cost(model, usage)
        for account in self._accounts:
            if not self._covers(account, rule, model):
                continue
            self._roll(account, now)
            if account.budget.usd is not None:
                account.spent += usd or 0.0
            else:
                account.spent += usage.prompt_tokens + usage.completion_tokens

    def share(self, index: int) -> float:
        """The share of the ``index``-th budget spent in its current window."""
        account = self._accounts[index]
        self._roll(account, self.clock())
        return account.spent / _amount(account.budget)

    def used(self) -> list[tuple[Budget, float]]:
        """Each budget with the share of it spent in its current window."""
        return [(account.budget, self.share(i)) for i, account in enumerate(self._accounts)]


def _amount(budget: Budget) -> float:
    """What the budget allows: dollars, or tokens (the model checks one of them is set)."""
    amount = budget.usd if budget.usd is not None else budget.tokens
    assert amount is not None
    return float(amount)
