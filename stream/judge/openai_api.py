"""The judge's HTTP: any OpenAI-compatible chat endpoint through the ``openai`` SDK.

One request, one outcome (``transport.Answered`` or ``transport.Failed``); no retries here:
they are the client's, which honours Retry-After and paces calls to what the provider lets
through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from ..models import TokenUsage
from .limiter import retry_after_seconds
from .transport import Answered, ChatRequest, Failed


def rejects_structured_output(exc: openai.APIStatusError) -> bool:
    """A 400/422 that names the response format: the endpoint does not do structured output."""
    text = f"{exc.message} {exc.body}".lower()
    return exc.status_code in (400, 422) and ("response_format" in text or "json_schema" in text)


class OpenAIChatAPI:
    """Chat completions of one OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, gateways)."""

    def __init__(self, *, base_url: str | None, api_key: str | None, timeout_s: float) -> None:
        self._client = AsyncOpenAI(
            base_url=base_url,
            # local servers (Ollama, vLLM) need no key, but the SDK insists on one
            api_key=api_key or "not-needed",
            timeout=timeout_s,
            max_retries=0,  # retries are the client's: they honour Retry-After and feed pacing
        )

    async def close(self) -> None:
        await self._client.close()

    async def complete(self, request: ChatRequest) -> Answered | Failed:
        """Send ``request`` once; what came back, or why nothing usable did."""
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                **_arguments(request)
            )
            completion = raw.parse()
        except openai.RateLimitError as exc:
            headers = exc.response.headers
            message = f"rate limited (429): {exc.message}"
            return Failed("rate_limited", message, 429, retry_after_seconds(headers), headers)
        except openai.APITimeoutError:
            return Failed("timeout", "judge call timed out")
        except openai.APIConnectionError as exc:
            return Failed("connection", f"cannot reach the judge: {exc}")
        except openai.APIStatusError as exc:
            return _refused(request, exc)
        return _answered(request, completion, raw.headers)


def _arguments(request: ChatRequest) -> dict[str, Any]:
    """The SDK's arguments for ``request``."""
    arguments: dict[str, Any] = {
        "model": request.model,
        "messages": request.messages,
        "temperature": request.temperature,
    }
    if request.max_tokens:
        arguments["max_tokens"] = request.max_tokens
    if request.schema is not None:
        arguments["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": request.schema, "strict": True},
        }
    if request.tools is not None:
        arguments["tools"] = request.tools
    return arguments


def _refused(request: ChatRequest, exc: openai.APIStatusError) -> Failed:
    """An HTTP error status: structured output refused, this request's own fault (4xx), or
    the provider's trouble (5xx, 408, 409)."""
    status = exc.status_code
    if request.schema is not None and rejects_structured_output(exc):
        return Failed("structured_output", f"structured output rejected ({status})", status)
    if status < 500 and status not in (408, 409):
        message = f"judge refused the request ({status}): {exc.message}"
        return Failed("client_error", message, status)
    message = f"judge server error ({status}): {exc.message}"
    return Failed("server_error", message, status, retry_after_seconds(exc.response.headers))


def _answered(
    request: ChatRequest, completion: ChatCompletion, headers: Mapping[str, str]
) -> Answered:
    """The first choice's text and tool calls, the tokens used and who answered."""
    usage = TokenUsage(
        prompt_tokens=getattr(completion.usage, "prompt_tokens", 0) or 0,
        completion_tokens=getattr(completion.usage, "completion_tokens", 0) or 0,
        total_tokens=getattr(completion.usage, "total_tokens", 0) or 0,
    )
    reply = completion.choices[0].message if completion.choices else None
    calls = reply.tool_calls if reply is not None else None
    return Answered(
        content=reply.content if reply is not None else None,
        tool_calls=[call.model_dump() for call in calls or ()],
        usage=usage,
        model=completion.model or request.model,
        headers=headers,
    )
