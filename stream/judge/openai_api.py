"""The judge's HTTP: any OpenAI-compatible chat endpoint through the ``openai`` SDK.

One request, one outcome (``transport.Answered`` or ``transport.Failed``); no retries here:
they are the client's, which honours Retry-After and paces calls to what the provider lets
through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import openai
from openai import AsyncOpenAI
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion

from ..models import TokenUsage
from .headers import retry_after_seconds
from .transport import Answered, ChatRequest, Failed


def sdk_client(
    base_url: str | None, api_key: str | None, timeout_s: float, http_client: Any = None
) -> AsyncOpenAI:
    """The ``openai`` SDK's client for one endpoint, as every call of ours wants it: no key is
    a placeholder (local servers need none, the SDK insists on one), and no retries of the
    SDK's own (the caller's policy decides what to repeat). ``http_client``: the SDK's own when
    None (a test gives one whose transport is local; openai 3 takes an httpx2 or a legacy httpx
    AsyncClient, older SDKs an httpx one)."""
    return AsyncOpenAI(
        http_client=http_client,
        base_url=base_url,
        api_key=api_key or "not-needed",
        timeout=timeout_s,
        max_retries=0,
    )


def rejects_structured_output(exc: openai.APIStatusError) -> bool:
    """A 400/422 that names the response format: the endpoint does not do structured output."""
    text = f"{exc.message} {exc.body}".lower()
    return exc.status_code in (400, 422) and ("response_format" in text or "json_schema" in text)


class SDKEndpoint:
    """One endpoint through the ``openai`` SDK (``sdk_client``), closed with it."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float,
        http_client: Any = None,
    ) -> None:
        # retries are the client's: they honour Retry-After and feed pacing
        self._client = sdk_client(base_url, api_key, timeout_s, http_client)

    async def close(self) -> None:
        await self._client.close()


class OpenAIChatAPI(SDKEndpoint):
    """Chat completions of one OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, gateways)."""

    async def complete(self, request: ChatRequest) -> Answered | Failed:
        """Send ``request`` once; what came back, or why nothing usable did."""
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                **chat_arguments(request)
            )
            completion = raw.parse()
        except openai.RateLimitError as exc:
            return rate_limited(exc)
        except openai.APITimeoutError:
            return Failed("timeout", "judge call timed out")
        except openai.APIConnectionError as exc:
            return Failed("connection", f"cannot reach the judge: {exc}")
        except openai.APIStatusError as exc:
            return _refused(request, exc)
        return _answered(request, completion, raw.headers)


def rate_limited(exc: openai.RateLimitError) -> Failed:
    """A 429: the quota exhausted (billing: waiting will not help), or a rate limit, with its
    Retry-After and the limit it names."""
    headers = exc.response.headers
    code = _error_field(exc, "code") or _error_field(exc, "type")
    if code == "insufficient_quota":
        message = f"the judge's quota is exhausted (429 insufficient_quota): {exc.message}"
        return Failed("quota_exhausted", message, 429, None, headers, code)
    message = f"rate limited (429): {exc.message}"
    retry_after = retry_after_seconds(headers)
    limit = named_limit(_error_field(exc, "type"), exc.message)
    return Failed("rate_limited", message, 429, retry_after, headers, code, limit=limit)


def named_limit(kind: str | None, message: str) -> Literal["requests", "tokens"] | None:
    """The limit a 429 names: OpenAI's error ``type`` is "tokens" or "requests" and its message
    says "tokens per min (TPM)" or "requests per min (RPM)"; Azure's says "token rate limit";
    Anthropic's names "input tokens per minute" or "output tokens per minute"."""
    if kind in ("tokens", "requests"):
        return kind  # type: ignore[return-value]
    text = message.lower()
    if "token" in text:
        return "tokens"
    if "request" in text:
        return "requests"
    return None


def _error_field(exc: openai.APIStatusError, name: str) -> str | None:
    """A field of the error object in the body (OpenAI: ``{"error": {"code": ...}}``; the SDK
    gives the inner object as ``body``)."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    value = body.get(name) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def chat_arguments(request: ChatRequest) -> dict[str, Any]:
    """The SDK's arguments for ``request``: the chat-completions body (a batch sends the same)."""
    arguments: dict[str, Any] = {"model": request.model, "messages": request.messages}
    if request.temperature is not None:
        arguments["temperature"] = request.temperature
    if request.max_tokens:
        arguments[request.max_tokens_name] = request.max_tokens
    if request.schema is not None:
        arguments["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": request.schema, "strict": True},
        }
    if request.tools is not None:
        arguments["tools"] = request.tools
    if request.top_logprobs is not None:
        arguments["logprobs"] = True
        arguments["top_logprobs"] = request.top_logprobs
    return arguments


def _refused(request: ChatRequest, exc: openai.APIStatusError) -> Failed:
    """An HTTP error status: structured output refused, this request's own fault (4xx), or
    the provider's trouble (5xx, 408, 409)."""
    status = exc.status_code
    if request.schema is not None and rejects_structured_output(exc):
        return Failed("structured_output", f"structured output rejected ({status})", status)
    code, param = _error_field(exc, "code"), _error_field(exc, "param")
    if status == 400 and code in ("unsupported_parameter", "unsupported_value") and param:
        message = f"the model does not take {param!r} ({status} {code}): {exc.message}"
        return Failed("unsupported_parameter", message, status, code=code, param=param)
    if (
        request.top_logprobs is not None
        and status in (400, 422)
        and "logprob" in exc.message.lower()
    ):
        # a gateway or local server refusing log-probabilities in its own words
        message = f"the model does not take 'logprobs' ({status}): {exc.message}"
        return Failed("unsupported_parameter", message, status, param="logprobs")
    return status_failure(exc)


def status_failure(exc: openai.APIStatusError) -> Failed:
    """Any other HTTP error status: this request's own fault (4xx), or the provider's
    trouble (5xx, 408, 409: with the Retry-After it asked for)."""
    status = exc.status_code
    if status < 500 and status not in (408, 409):
        message = f"judge refused the request ({status}): {exc.message}"
        return Failed("client_error", message, status)
    message = f"judge server error ({status}): {exc.message}"
    return Failed("server_error", message, status, retry_after_seconds(exc.response.headers))


def token_usage(usage: CompletionUsage) -> TokenUsage:
    """The tokens a completion used, with those its provider served from the prompt cache
    (``prompt_tokens_details.cached_tokens``: OpenAI and Azure report it; an endpoint that
    does not, or says null, has 0 cached, so every prompt token is priced as input)."""
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    prompt = usage.prompt_tokens or 0
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=usage.completion_tokens or 0,
        total_tokens=usage.total_tokens or 0,
        # never more cached than sent: a provider's miscount cannot price tokens below zero
        cached_tokens=max(0, min(cached, prompt)),
    )


def _answered(
    request: ChatRequest, completion: ChatCompletion, headers: Mapping[str, str]
) -> Answered:
    """The first choice's text and tool calls, the tokens used and who answered."""
    usage = token_usage(completion.usage) if completion.usage is not None else None
    choice = completion.choices[0] if completion.choices else None
    reply = choice.message if choice is not None else None
    calls = reply.tool_calls if reply is not None else None
    logprobs = choice.logprobs if choice is not None else None
    tokens = logprobs.content if logprobs is not None else None
    return Answered(
        content=reply.content if reply is not None else None,
        tool_calls=[call.model_dump() for call in calls or ()],
        usage=usage,
        model=completion.model or request.model,
        headers=headers,
        finish_reason=choice.finish_reason if choice is not None else None,
        refusal=getattr(reply, "refusal", None),
        logprobs=[token.model_dump() for token in tokens] if tokens is not None else None,
    )
