"""What the judge client needs of the deployment: where the endpoint is, how hard to try,
and what its models cost (``Settings.judge_config`` builds one from the environment).

Pure: no SDK, so the settings can build one without importing the client.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import SecretStr

from ..engine.spend import ModelPrice, judge_cost
from ..models import TokenUsage


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    """The judge's endpoint and the bounds of the client's retries, pacing and health."""

    base_url: str | None  # any OpenAI-compatible endpoint; None: the SDK's default (OpenAI)
    api_key: SecretStr | None = field(repr=False)  # None: an endpoint that needs no key
    model: str  # for rules that name none
    timeout_s: float
    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float
    max_concurrency: int
    outage_max_s: float  # a judge unavailable this long fails the calls waiting for it
    structured_output: bool  # ask for a JSON schema (dropped if the endpoint refuses it)
    prices: dict[str, ModelPrice]  # USD per million tokens, for the estimated-cost metric

    def cost(self, model: str, usage: TokenUsage) -> float | None:
        """Estimated US dollars of ``usage`` on ``model``, or None when it has no price."""
        return judge_cost(self.prices, model, usage)
