"""What the judge client asks of an endpoint and what one request comes back as.

The client (``client.py``) owns the policy: attempts, backoff, pacing, health, answers. A
transport (``openai_api.py``) owns the HTTP: it sends one request, never retries, and says
what happened in these provider-neutral terms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..models import TokenUsage


@dataclass
class ChatRequest:
    """One chat completion asked of the judge; a tool loop adds to its ``messages``, and
    ``schema`` is dropped for an endpoint that refuses structured output."""

    model: str
    messages: list[dict[str, Any]]  # chat messages (role, content; tool calls and results)
    temperature: float | None  # None: the model's own (a reasoning model takes no other)
    max_tokens: int | None = None  # None or 0: the endpoint's own limit
    # how the cap on the answer is named: reasoning models take max_completion_tokens
    max_tokens_name: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    schema: dict[str, Any] | None = None  # the JSON schema the answer must fit; None: text
    tools: list[dict[str, Any]] | None = None  # tools offered (function definitions)
    # the most likely tokens asked for at each position of the answer (OpenAI's
    # ``top_logprobs``, 0-20, sent with ``logprobs: true``); None: no log-probabilities
    top_logprobs: int | None = None


@dataclass(frozen=True)
class Answered:
    """The endpoint answered: its text and tool calls (either may be missing), the tokens
    used, the model that answered, and the response's headers (rate limits, for pacing)."""

    content: str | None
    tool_calls: list[dict[str, Any]]  # as chat messages carry them: id, function name, arguments
    usage: TokenUsage | None  # None: the endpoint did not say
    model: str
    headers: Mapping[str, str]
    finish_reason: str | None = None  # "length": cut at the token cap
    refusal: str | None = None  # the model declined to answer (OpenAI's ``message.refusal``)
    # the answer's tokens with their log-probabilities, as OpenAI's ``choices[0].logprobs
    # .content`` (``ChatCompletionTokenLogprob``: token, logprob, top_logprobs); None: not
    # asked for, or the endpoint returned none
    logprobs: list[dict[str, Any]] | None = None


def estimate_tokens(request: ChatRequest | DecisionRequest) -> int:
    """The tokens a provider's rate limiter counts for ``request`` before it is answered, as
    OpenAI documents it: the prompt's characters / 4, plus ``max_tokens`` when it is set (a
    decision request: its input's and questions' characters / 4)."""
    if isinstance(request, DecisionRequest):
        return (len(str(request.input)) + len(str(request.questions))) // 4
    characters = sum(len(str(m.get("content") or "")) for m in request.messages)
    if request.tools:
        characters += sum(len(str(t)) for t in request.tools)
    return characters // 4 + (request.max_tokens or 0)


# rate_limited (429) and the transient ones (connection, timeout, server_error: 5xx, 408,
# 409) are provider-wide trouble; client_error (any other 4xx) is this request's own;
# structured_output is a 400/422 refusing the schema asked for (ask again without it);
# unsupported_parameter a 400 refusing a parameter the model does not take (``param``: ask
# again without it); quota_exhausted a 429 that is billing, not a rate (waiting will not help)
FailureKind = Literal[
    "rate_limited",
    "connection",
    "timeout",
    "server_error",
    "client_error",
    "structured_output",
    "unsupported_parameter",
    "quota_exhausted",
]


@dataclass(frozen=True)
class Failed:
    """The endpoint did not answer the request: why (``kind``), said for a reader (the
    message may quote the endpoint, so the client redacts it), with the HTTP status, the
    Retry-After it asked for and, for a 429, the response's headers (for pacing)."""

    kind: FailureKind
    message: str
    status: int | None = None
    retry_after: float | None = None
    headers: Mapping[str, str] | None = None
    code: str | None = None  # the provider's error code (``rate_limit_exceeded``, ``slow_down``)
    param: str | None = None  # the parameter an ``unsupported_parameter`` refusal names
    limit: Literal["requests", "tokens"] | None = None  # the limit a 429 names, if it names one


@dataclass
class DecisionRequest:
    """One request to a decision model (OpenAI's Decisions API): the input every question is
    asked of (a text, or messages), and the questions (``decision_questions.question_of``)."""

    model: str
    input: str | list[dict[str, Any]]
    questions: list[dict[str, Any]]


@dataclass(frozen=True)
class Decided:
    """The decision model answered: one answer per question in question order (each an
    ``openai.types.decision.Answer`` as a dict; a refusal among them is that question's
    only), the tokens used, the model that answered, and the response's headers."""

    answers: list[dict[str, Any]]
    usage: TokenUsage | None
    model: str
    headers: Mapping[str, str]


class ChatAPI(Protocol):
    """One chat endpoint: a request in, one outcome out; retries are the caller's."""

    async def complete(self, request: ChatRequest) -> Answered | Failed: ...

    async def close(self) -> None: ...


class DecisionsAPI(Protocol):
    """One decisions endpoint: a request in, one outcome out; retries are the caller's."""

    async def decide(self, request: DecisionRequest) -> Decided | Failed: ...

    async def close(self) -> None: ...
