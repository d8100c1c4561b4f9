"""Spend budgets: what the judge may cost per rule or per model, per hour or per day.

A budget counts US dollars (from the price table) or, for a model without a price, tokens,
over a window aligned to the UTC hour or day. While one that covers a rule is spent, that
rule's judged scores are ``skipped`` with a reason starting ``budget exhausted`` (its
decision records say the same) until the window resets. Each worker keeps its own ledger: a
budget is per worker, as the judge's concurrency is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..models import TokenUsage


class ModelPrice(BaseModel):
    """What a judge model costs, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


# List prices (USD per million tokens) of common judge models, for the estimated-cost metric.
# SCORER_JUDGE_PRICES (JSON) replaces this table; a local model costs what its GPU costs,
# so it has no entry and no cost is estimated for it.
DEFAULT_JUDGE_PRICES = {
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.60),
    "gpt-4o": ModelPrice(input=2.50, output=10.00),
    "gpt-4.1-nano": ModelPrice(input=0.10, output=0.40),
    "gpt-4.1-mini": ModelPrice(input=0.40, output=1.60),
    "gpt-4.1": ModelPrice(input=2.00, output=8.00),
}


WINDOW_S = {"hour": 3600, "day": 86_400}


class Budget(BaseModel):
    """One budget: for a rule or for a model, in USD or tokens, per hour or day."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str | None = None
    model: str | None = None
    usd: float | None = Field(default=None, gt=0)
    tokens: int | None = Field(default=None, gt=0)
    window: Literal["hour", "day"] = "day"

    @model_validator(mode="after")
    def _one_of_each(self) -> Budget:
        if (self.rule is None) == (self.model is None):
            raise ValueError("a budget is for a rule or for a model: give exactly one")
        if (self.usd is None) == (self.tokens is None):
            raise ValueError("a budget counts usd or tokens: give exactly one")
        return self

    def describe(self) -> str:
        whose = f"rule {self.rule}" if self.rule else f"model {self.model}"
        amount = f"${self.usd:g}" if self.usd is not None else f"{self.tokens} tokens"
        return f"{whose}: {amount} per {self.window}"


def judge_cost(prices: Mapping[str, ModelPrice], model: str, usage: TokenUsage) -> float | None:
    """Estimated US dollars of ``usage`` on ``model``, or None when it has no price."""
    price = prices.get(model)
    return price.cost(usage.prompt_tokens, usage.completion_tokens) if price else None


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
