"""A decision model's HTTP: OpenAI's Decisions API (``POST /v1/decisions``, public beta since
2026-10-06) through the ``openai`` SDK's ``client.decisions.create``.

One request, one outcome (``transport.Decided`` or ``transport.Failed``), no retries, as the
chat transport (``openai_api.py``), whose failure mapping it shares: a 429 (a rate, or the
quota), a timeout, a connection error, a 4xx of this request's own, a 5xx. The request and
answer shapes are the installed SDK's types: ``openai/types/decision_create_params.py``
(``input``, ``model``, ``questions``) and ``openai/types/decision.py`` (``answers`` in question
order, each a predicate, choice, score or refusal; ``usage`` with ``input_tokens`` and
``input_tokens_details.cached_tokens``).
"""

from __future__ import annotations

from typing import Any

import openai
from openai.types.decision import Decision

from ..models import TokenUsage
from .openai_api import SDKEndpoint, rate_limited, status_failure
from .transport import Decided, DecisionRequest, Failed


class OpenAIDecisionsAPI(SDKEndpoint):
    """The Decisions API of one endpoint."""

    async def decide(self, request: DecisionRequest) -> Decided | Failed:
        """Send ``request`` once; the answers, or why none came."""
        try:
            raw = await self._client.decisions.with_raw_response.create(
                model=request.model,
                input=request.input,  # type: ignore[arg-type]
                questions=request.questions,  # type: ignore[arg-type]
            )
            decision = raw.parse()
        except openai.RateLimitError as exc:
            return rate_limited(exc)
        except openai.APITimeoutError:
            return Failed("timeout", "decision call timed out")
        except openai.APIConnectionError as exc:
            return Failed("connection", f"cannot reach the decision model: {exc}")
        except openai.APIStatusError as exc:
            return status_failure(exc)
        return decided(request, decision, raw.headers)


def decided(request: DecisionRequest, decision: Decision, headers: Any) -> Decided:
    """The answers as dicts, and the usage as ours: every input token is prompt (priced as
    input; the cached ones apart), no completion is charged."""
    usage = decision.usage
    cached = usage.input_tokens_details.cached_tokens
    tokens = TokenUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cached_tokens=max(0, min(cached, usage.input_tokens)),
    )
    return Decided(
        answers=[answer.model_dump() for answer in decision.answers],
        usage=tokens,
        model=decision.model or request.model,
        headers=headers,
    )
