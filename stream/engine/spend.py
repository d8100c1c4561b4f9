"""Spend budgets: what the judge may cost per rule or per model, per hour or per day.

A budget counts US dollars (from the price table) or, for a model without a price, tokens,
over a window aligned to the UTC hour or day. Its ``mode`` says what happens as it runs down:
``skip`` (while it is spent, the rules it covers publish ``skipped`` scores whose reason starts
``budget exhausted``, until the window resets), ``sample`` (the rule's sampling rate is lowered
so that the rest of the budget lasts the rest of the window: ``sample_rate``; spent, it skips),
``fallback`` (while it is spent, its rules are judged by a cheaper model) or ``defer`` (while it
is spent, its rules' judge calls go to the batch queue, judged through the provider's Batch API
and charged at the batch rate when they complete: ``Admission.deferred``). Each worker keeps its
own ledger: a budget is per worker, as the judge's concurrency is. Design record 23 has the
arithmetic.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..models import TokenUsage


class ModelPrice(BaseModel):
    """What a judge model costs, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    # prompt tokens the provider served from its prompt cache; None: priced as input (a
    # missing price never counts a cost lower than it may be)
    cached_input: float | None = Field(default=None, ge=0)
    # a call answered through the provider's Batch API; None: half the online price (OpenAI's
    # and Azure OpenAI's Batch API: 50% off input and output)
    batch_input: float | None = Field(default=None, ge=0)
    batch_output: float | None = Field(default=None, ge=0)

    def cost(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int = 0,
        batch: bool = False,
    ) -> float:
        """US dollars of a call: ``cached_tokens`` (of ``prompt_tokens``) at the cached rate;
        with ``batch``, at the batch rates (cached tokens in a batch: the cached rate halved)."""
        cached = min(cached_tokens, prompt_tokens)
        input_rate, output_rate = self.input, self.output
        cached_rate = self.input if self.cached_input is None else self.cached_input
        if batch:
            input_rate = self.input / 2 if self.batch_input is None else self.batch_input
            output_rate = self.output / 2 if self.batch_output is None else self.batch_output
            cached_rate = (
                input_rate if self.cached_input is None else min(input_rate, cached_rate / 2)
            )
        return (
            (prompt_tokens - cached) * input_rate
            + cached * cached_rate
            + completion_tokens * output_rate
        ) / 1_000_000


# List prices (USD per million tokens) of common judge models, for the estimated-cost metric
# and the budgets; cached_input: the price of prompt tokens served from the provider's prompt
# cache (OpenAI's API pricing page, https://platform.openai.com/docs/pricing, as listed in
# 2025: half the input price for gpt-4o and gpt-4o-mini, a quarter for the gpt-4.1 family).
# A call through the Batch API costs half of each (the batch rates left unset: half).
# SCORER_JUDGE_PRICES (JSON) replaces this table; a local model costs what its GPU costs,
# so it has no entry and no cost is estimated for it.
DEFAULT_JUDGE_PRICES = {
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.60, cached_input=0.075),
    "gpt-4o": ModelPrice(input=2.50, output=10.00, cached_input=1.25),
    "gpt-4.1-nano": ModelPrice(input=0.10, output=0.40, cached_input=0.025),
    "gpt-4.1-mini": ModelPrice(input=0.40, output=1.60, cached_input=0.10),
    "gpt-4.1": ModelPrice(input=2.00, output=8.00, cached_input=0.50),
    # OpenAI's decision model (the Decisions API, beta since 2026-10-06): input only, no
    # output charge
    "gpt-6-luna": ModelPrice(input=0.10, output=0.0),
}


WINDOW_S = {"hour": 3600, "day": 86_400}
JUDGED_IN_A_BATCH = ": judged in a batch"  # how a spent defer budget's why ends


class Budget(BaseModel):
    """One budget: for a rule or for a model, in USD or tokens, per hour or day."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str | None = None
    model: str | None = None
    usd: float | None = Field(default=None, gt=0)
    tokens: int | None = Field(default=None, gt=0)
    window: Literal["hour", "day"] = "day"
    # what happens as it runs down (the module's docstring); a ``fallback`` alone means
    # mode fallback
    mode: Literal["skip", "sample", "fallback", "defer"] = "skip"
    fallback: str | None = Field(default=None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _fallback_alone(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("fallback") is not None and "mode" not in data:
            return {**data, "mode": "fallback"}
        return data

    @model_validator(mode="after")
    def _one_of_each(self) -> Budget:
        if (self.rule is None) == (self.model is None):
            raise ValueError("a budget is for a rule or for a model: give exactly one")
        if (self.usd is None) == (self.tokens is None):
            raise ValueError("a budget counts usd or tokens: give exactly one")
        if (self.mode == "fallback") != (self.fallback is not None):
            raise ValueError(
                "mode fallback names the cheaper model (fallback: <model>); other modes name none"
            )
        if self.fallback is not None and self.fallback == self.model:
            raise ValueError(f"a budget for model {self.model} cannot fall back to that model")
        return self

    def describe(self) -> str:
        whose = f"rule {self.rule}" if self.rule else f"model {self.model}"
        amount = f"${self.usd:g}" if self.usd is not None else f"{self.tokens} tokens"
        return f"{whose}: {amount} per {self.window}"


_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")


def judge_cost(prices: Mapping[str, ModelPrice], model: str, usage: TokenUsage) -> float | None:
    """Estimated US dollars of ``usage`` on ``model``, or None when it has no price. A dated
    snapshot of a priced model (OpenAI answers a call to ``gpt-4.1-nano`` as
    ``gpt-4.1-nano-2025-04-14``; Anthropic names ``...-20241022``) is priced as the model."""
    price = prices.get(model)
    if price is None:
        price = prices.get(_SNAPSHOT.sub("", model))
    if price is None:
        return None
    return price.cost(
        usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, batch=usage.batch
    )


def cache_saving(
    cost: Callable[[str, TokenUsage], float | None], model: str, usage: TokenUsage
) -> float | None:
    """US dollars the provider's prompt cache saved on ``usage``: its cost with every prompt
    token at the input price less its cost with the cached ones at the cached price."""
    if not usage.cached_tokens:
        return 0.0
    paid = cost(model, usage)
    full = cost(model, usage.model_copy(update={"cached_tokens": 0}))
    return None if paid is None or full is None else full - paid


@dataclass(frozen=True, slots=True)
class Admission:
    """What the budgets let a rule's judge call be now: skipped (``skipped``: why, starting
    ``budget exhausted``), judged by ``model`` (a fallback's when ``fell_back`` says why), at
    ``rate`` (the rule's sampling rate, or lower: ``lowered`` says why; ``sampled_at``: the
    rate, on the scores of a rule a sample budget covers), or judged later in a batch
    (``deferred``: why, a spent ``defer`` budget)."""

    model: str
    rate: float
    skipped: str | None = None
    fell_back: str | None = None
    lowered: str | None = None
    sampled_at: float | None = None
    budget: dict[str, Any] | None = None  # details.budget of the scores it judges
    deferred: str | None = None


def sample_factor(
    left: float, offered: int, calls: int, spent: float, elapsed_s: float, left_s: float
) -> float:
    """How much of its own rate a rule keeps under a sample budget with ``left`` of it left
    (dollars or tokens) and ``left_s`` of the window: what the rest of the budget pays for
    (``left`` over the mean cost of this window's calls so far, ``spent / calls``) over the
    targets expected in the rest of the window (this window's arrival rate, ``offered`` in
    ``elapsed_s``, times ``left_s``), at most 1. Under a steady demand it spreads the budget
    evenly over the window; with no call yet there is no cost to go by: the whole rate."""
    if left <= 0.0:
        return 0.0
    if calls == 0 or spent <= 0.0 or offered == 0 or left_s <= 0.0:
        return 1.0
    affordable = left / (spent / calls)  # calls the rest of the budget pays for
    expected = offered / max(elapsed_s, 1.0) * left_s  # targets still to come this window
    return min(1.0, affordable / expected)


@dataclass
class _Account:
    budget: Budget
    window_start: float = 0.0
    spent: float = 0.0
    calls: int = 0  # judge calls charged in this window
    offered: int = 0  # targets a sample budget was asked to admit in this window


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
            account.calls = account.offered = 0

    def _covers(self, account: _Account, rule: str, model: str) -> bool:
        budget = account.budget
        return budget.rule == rule or budget.model == model

    def _spent(self, rule: str, model: str, now: float) -> list[_Account]:
        """The budgets covering ``rule`` on ``model`` that are spent in their window."""
        spent = []
        for account in self._accounts:
            self._roll(account, now)
            if self._covers(account, rule, model) and account.spent >= _amount(account.budget):
                spent.append(account)
        return spent

    def exhausted(self, rule: str, model: str) -> str | None:
        """Why ``rule`` on ``model`` may not be judged now (a budget covering it is spent,
        whatever its mode), or None."""
        spent = self._spent(rule, model, self.clock())
        return f"budget exhausted: {_spent_says(spent[0])}" if spent else None

    def admit(self, rule: str, model: str, rate: float = 1.0) -> Admission:
        """What the budgets let ``rule`` (judged by ``model``, sampled at ``rate``) do now:
        skip, fall back to a cheaper model, defer to a batch, or sample at a lower rate (never
        above ``rate``)."""
        now = self.clock()
        spent = self._spent(rule, model, now)
        fell_back: str | None = None
        degraded: dict[str, Any] | None = None
        if spent:
            first = spent[0]
            if first.budget.mode == "defer":
                return Admission(
                    model,
                    rate,
                    deferred=f"{_spent_says(first)}{JUDGED_IN_A_BATCH}",
                    budget={"mode": "defer", "budget": first.budget.describe()},
                )
            target = first.budget.fallback
            if first.budget.mode != "fallback" or target is None or target == model:
                return Admission(model, rate, skipped=f"budget exhausted: {_spent_says(first)}")
            # the budgets of the cheaper model (a fallback budget spent for this rule already
            # sent it there: it does not stop it again)
            still = [a for a in self._spent(rule, target, now) if a.budget.fallback != target]
            if still:
                said = f"{_spent_says(first)}, and so is {_spent_says(still[0])}"
                return Admission(model, rate, skipped=f"budget exhausted: {said}")
            fell_back = f"{_spent_says(first)}: judged by {target} instead of {model}"
            degraded = {"mode": "fallback", "budget": first.budget.describe(), "model": target}
            degraded["instead_of"] = model
            model = target
        used, lowered, sampled_at = rate, None, None
        for account in self._accounts:
            budget = account.budget
            if budget.mode != "sample" or not self._covers(account, rule, model):
                continue
            size, amount = WINDOW_S[budget.window], _amount(budget)
            account.offered += 1
            elapsed_s = now - account.window_start
            left = max(0.0, amount - account.spent)
            factor = sample_factor(
                left, account.offered, account.calls, account.spent, elapsed_s, size - elapsed_s
            )
            budget_left, window_left = left / amount, (size - elapsed_s) / size
            sampled_at = rate * factor if sampled_at is None else min(sampled_at, rate * factor)
            if rate * factor < used:
                used = rate * factor
                lowered = (
                    f"sampling rate {rate:g} lowered to {used:.3g} by budget {budget.describe()} "
                    f"({budget_left:.0%} of it left for {window_left:.0%} of the window)"
                )
                degraded = {**(degraded or {}), "mode": "sample", "budget": budget.describe()}
                degraded["rule_rate"] = rate
        if degraded is not None and sampled_at is not None:
            degraded["sampled_at"] = sampled_at
        return Admission(model, used, None, fell_back, lowered, sampled_at, degraded)

    def record(self, rule: str, model: str, usage: TokenUsage) -> None:
        """A judge call for ``rule`` on ``model`` used ``usage``."""
        now = self.clock()
        usd = self.cost(model, usage)
        for account in self._accounts:
            if not self._covers(account, rule, model):
                continue
            self._roll(account, now)
            account.calls += 1
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


def _spent_says(account: _Account) -> str:
    """A spent budget and when it resets, as a skipped score's reason says it."""
    budget = account.budget
    resets = datetime.fromtimestamp(account.window_start + WINDOW_S[budget.window], UTC)
    return f"{budget.describe()} is spent; it resets at {resets:%Y-%m-%d %H:%M UTC}"


def _amount(budget: Budget) -> float:
    """What the budget allows: dollars, or tokens (the model checks one of them is set)."""
    amount = budget.usd if budget.usd is not None else budget.tokens
    assert amount is not None
    return float(amount)
