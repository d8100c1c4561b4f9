"""The judge client: any OpenAI-compatible endpoint, with retries and adaptive pacing.

One implementation of the engine's ``Judge`` protocol.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import openai
from openai import AsyncOpenAI

from ..engine.judge import Verdict
from ..errors import JudgeError
from ..models import TokenUsage
from ..observer import Observer
from ..ruleset.schema import PromptedRule
from ..settings import Settings
from .answers import InvalidAnswer, answer_contract
from .limiter import AdaptiveLimiter, retry_after_seconds

log = logging.getLogger(__name__)

INVALID_ANSWER_ATTEMPTS = 2  # an unusable answer is asked again once


def rejects_structured_output(exc: openai.APIStatusError) -> bool:
    """A 400/422 that names the response format: the endpoint does not do structured output."""
    text = f"{exc.message} {exc.body}".lower()
    return exc.status_code in (400, 422) and ("response_format" in text or "json_schema" in text)


class JudgeClient:
    """Calls an OpenAI-compatible chat endpoint and returns validated verdicts."""

    def __init__(self, settings: Settings, observer: Observer | None = None) -> None:
        self.observer = observer or Observer()
        self.default_model = settings.judge_model
        self.max_attempts = settings.judge_max_attempts
        self.backoff_base = settings.judge_backoff_base_s
        self.backoff_max = settings.judge_backoff_max_s
        self.structured = settings.judge_structured_output
        self.limiter = AdaptiveLimiter(settings.judge_max_concurrency)
        self.prices = settings.judge_prices
        self._secret = (
            settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        )
        self._client = AsyncOpenAI(
            base_url=settings.openai_base_url,
            # local servers (Ollama, vLLM) need no key, but the SDK insists on one
            api_key=self._secret or "not-needed",
            timeout=settings.judge_timeout_s,
            max_retries=0,  # retries are ours: they honour Retry-After and feed the limiter
        )

    async def close(self) -> None:
        await self._client.close()

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max)
        return min(self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1)) * random.uniform(
            0.5, 1.0
        )

    def _observe_call(
        self, model: str, outcome: str, elapsed: float, usage: TokenUsage | None = None
    ) -> None:
        """One attempt: count and latency; tokens and estimated cost when answered."""
        price = self.prices.get(model) if usage is not None else None
        cost = price.cost(usage.prompt_tokens, usage.completion_tokens) if price and usage else None
        self.observer.on_judge_call(model, outcome, elapsed, usage, cost)

    async def judge(self, rule: PromptedRule, prompt: str, system: str | None = None) -> Verdict:
        """Ask the judge; retry timeouts, 429s, 5xx and invalid answers; raise ``JudgeError``."""
        model = rule.judge.model or self.default_model
        schema, parse = answer_contract(rule)
        messages = [{"role": "system", "content": system}] if system is not None else []
        messages.append({"role": "user", "content": prompt})
        request: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": rule.judge.temperature,
        }
        if rule.judge.max_tokens:
            request["max_tokens"] = rule.judge.max_tokens
        if self.structured and schema is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": schema, "strict": True},
            }
        last_error: JudgeError | None = None
        invalid_answers = 0
        attempt = 0
        for attempt in range(1, self.max_attempts + 1):
            retry_after: float | None = None
            await self.limiter.acquire()
            started = time.perf_counter()
            try:
                raw = await self._client.chat.completions.with_raw_response.create(**request)
                completion = raw.parse()
                elapsed = time.perf_counter() - started
                self.limiter.on_success(raw.headers)
            except openai.RateLimitError as exc:
                retry_after = retry_after_seconds(exc.response.headers)
                self.limiter.on_rate_limited(retry_after, exc.response.headers)
                last_error = JudgeError(
                    self._redact(f"rate limited (429): {exc.message}"), kind="rate_limited"
                )
            except openai.APITimeoutError:
                last_error = JudgeError("judge call timed out", kind="timeout")
            except openai.APIConnectionError as exc:
                last_error = JudgeError(
                    self._redact(f"cannot reach the judge: {exc}"), kind="connection"
                )
            except openai.APIStatusError as exc:
                if "response_format" in request and rejects_structured_output(exc):
                    # Older vLLM / Ollama builds and some gateways refuse response_format: ask
                    # again without it, once, and from now on rely on parsing the text answer.
                    log.warning(
                        "judge endpoint rejects structured output (%s); parsing text answers from now on",
                        exc.status_code,
                    )
                    self.structured = False
                    del request["response_format"]
                    last_error = JudgeError("structured output rejected", kind="client_error")
                    continue
                if exc.status_code < 500 and exc.status_code not in (408, 409):
                    self.observer.on_judge_call(model, "client_error", None)  # counted, not timed
                    raise JudgeError(
                        self._redact(
                            f"judge refused the request ({exc.status_code}): {exc.message}"
                        ),
                        kind="client_error",
                        attempts=attempt,
                    ) from None
                retry_after = retry_after_seconds(exc.response.headers)
                last_error = JudgeError(
                    self._redact(f"judge server error ({exc.status_code}): {exc.message}"),
                    kind="server_error",
                )
            else:
                usage = TokenUsage(
                    prompt_tokens=getattr(completion.usage, "prompt_tokens", 0) or 0,
                    completion_tokens=getattr(completion.usage, "completion_tokens", 0) or 0,
                    total_tokens=getattr(completion.usage, "total_tokens", 0) or 0,
                )
                content = completion.choices[0].message.content if completion.choices else None
                try:
                    answer = parse(content or "")
                except InvalidAnswer as exc:
                    invalid_answers += 1
                    self._observe_call(model, "invalid_answer", elapsed, usage)
                    snippet = (content or "")[:200]
                    last_error = JudgeError(
                        self._redact(f"unusable answer: {exc}; answer was {snippet!r}"),
                        kind="invalid_answer",
                    )
                else:
                    self._observe_call(model, "ok", elapsed, usage)
                    return Verdict(
                        answer, completion.model or model, elapsed * 1000.0, usage, attempt
                    )
            finally:
                await self.limiter.release()
            if last_error.kind != "invalid_answer":
                self._observe_call(model, last_error.kind, time.perf_counter() - started)
            elif invalid_answers >= INVALID_ANSWER_ATTEMPTS:
                break  # a temperature-0 judge rarely changes its mind; don't burn the budget
            if attempt < self.max_attempts:
                self.observer.on_judge_retry(model, last_error.kind)
                await asyncio.sleep(self._backoff(attempt, retry_after))
        assert last_error is not None
        raise JudgeError(
            f"{last_error} (after {attempt} attempts)", kind=last_error.kind, attempts=attempt
        )
