"""The judge client: any OpenAI-compatible endpoint, with retries and adaptive concurrency."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import openai
from openai import AsyncOpenAI

from . import metrics
from .answers import InvalidAnswer, answer_contract
from .errors import JudgeError
from .models import TokenUsage
from .rules import PromptedRule
from .settings import Settings

log = logging.getLogger(__name__)

NO_JUDGE_REASON = (
    "no judge configured: set OPENAI_BASE_URL (and OPENAI_API_KEY if the endpoint needs one) "
    "to any OpenAI-compatible endpoint, e.g. Ollama http://localhost:11434/v1, "
    "vLLM http://localhost:8000/v1 or OpenAI https://api.openai.com/v1"
)


INVALID_ANSWER_ATTEMPTS = 2  # an unusable answer is asked again once


@dataclass(frozen=True)
class Verdict:
    answer: Any  # ParsedAnswer for a one-verdict rule, per-criterion answers for a rubric
    model: str
    latency_ms: float
    usage: TokenUsage
    attempts: int


RATE_WINDOW_S = 5.0  # successes counted to estimate what the provider lets through
RATE_CUT = 0.95  # after a 429, pace at this share of the measured rate...
RATE_GROWTH_PER_S = 0.03  # ...then probe upward by this share per second


class AdaptiveLimiter:
    """Bounds judge calls in flight and adapts to the provider instead of hammering it.

    - Concurrency: additive increase on success, halve on a 429 (AIMD), within [1, max].
    - Pacing, announced: when the provider states its request rate (OpenAI's
      ``x-ratelimit-limit-requests``), calls are spaced to stay just under it.
    - Pacing, measured: otherwise a 429 paces calls at 95 % of the success rate measured over
      the last seconds, and the pace then rises 3 % a second until the next 429 (AIMD on the
      request rate), so a silent limit costs a few 429s a cycle, not a steady stream of them.
    - Cool-down: a 429 with Retry-After holds every new call until that time.
    """

    def __init__(self, max_concurrency: int, *, rate_headroom: float = 0.985) -> None:
        self.max = max_concurrency
        self.limit = float(max_concurrency)
        self.in_flight = 0
        self.rate_headroom = rate_headroom
        self.interval = 0.0  # seconds between call starts; 0: no pacing
        self.announced = False  # the interval comes from the provider's own figure
        self._next_start = 0.0
        self._cooldown_until = 0.0
        self._successes: deque[float] = deque()
        self._last_success = 0.0
        self._last_cut = 0.0
        self._cond = asyncio.Condition()

    async def acquire(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.in_flight < max(1, int(self.limit)))
            self.in_flight += 1
            now = time.monotonic()
            start = max(now, self._next_start, self._cooldown_until)
            self._next_start = start + self.interval
        if start > now:
            await asyncio.sleep(start - now)

    async def release(self) -> None:
        async with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def on_success(self, headers: Mapping[str, str] | None) -> None:
        now = time.monotonic()
        self.limit = min(self.max, self.limit + 1.0 / max(self.limit, 1.0))
        self._successes.append(now)
        while self._successes[0] < now - RATE_WINDOW_S:
            self._successes.popleft()
        if headers is not None:
            self._learn_rate(headers)
        if self.interval and not self.announced and self._last_success:
            self.interval /= 1.0 + RATE_GROWTH_PER_S * (now - self._last_success)
        self._last_success = now

    def on_rate_limited(self, retry_after: float | None, headers: Mapping[str, str] | None) -> None:
        now = time.monotonic()
        self.limit = max(1.0, self.limit / 2)
        if headers is not None:
            self._learn_rate(headers)
        if not self.announced and now - self._last_cut > 1.0:
            self._cut_rate(now)
        if retry_after:
            self._cooldown_until = max(self._cooldown_until, now + retry_after)

    def _cut_rate(self, now: float) -> None:
        """Pace at a share of what the provider has let through lately (one cut per burst)."""
        while self._successes and self._successes[0] < now - RATE_WINDOW_S:
            self._successes.popleft()
        if len(self._successes) < 2:
            return  # nothing measured yet: Retry-After and backoff do the work
        # over at least a second: right after start-up a burst would look like a huge rate
        span = max(now - self._successes[0], 1.0)
        measured = len(self._successes) / span
        current = 1.0 / self.interval if self.interval else measured
        self.interval = 1.0 / (min(measured, current) * RATE_CUT)
        self._last_cut = now

    def _learn_rate(self, headers: Mapping[str, str]) -> None:
        value = headers.get("x-ratelimit-limit-requests")
        if not value:
            return
        try:
            per_minute = float(value)
        except ValueError:
            return
        if per_minute > 0:
            self.interval = 60.0 / (per_minute * self.rate_headroom)
            self.announced = True


def rejects_structured_output(exc: openai.APIStatusError) -> bool:
    """A 400/422 that names the response format: the endpoint does not do structured output."""
    text = f"{exc.message} {exc.body}".lower()
    return exc.status_code in (400, 422) and ("response_format" in text or "json_schema" in text)


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date)."""
    if headers is None:
        return None
    if ms := headers.get("retry-after-ms"):
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    if value := headers.get("retry-after"):
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
            except (TypeError, ValueError):
                return None
    return None


class JudgeClient:
    """Calls an OpenAI-compatible chat endpoint and returns validated verdicts."""

    def __init__(self, settings: Settings) -> None:
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
        return min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)) * random.uniform(
            0.5, 1.0
        )

    def _observe_call(
        self, model: str, outcome: str, elapsed: float, usage: TokenUsage | None = None
    ) -> None:
        """Metrics of one attempt: count and latency; tokens and estimated cost when answered."""
        metrics.JUDGE_CALLS.labels(model=model, outcome=outcome).inc()
        metrics.JUDGE_LATENCY.labels(model=model, outcome=outcome).observe(elapsed)
        if usage is None:
            return
        metrics.JUDGE_TOKENS.labels(model=model, kind="prompt", outcome=outcome).inc(
            usage.prompt_tokens
        )
        metrics.JUDGE_TOKENS.labels(model=model, kind="completion", outcome=outcome).inc(
            usage.completion_tokens
        )
        price = self.prices.get(model)
        if price is not None:
            metrics.JUDGE_COST.labels(model=model, outcome=outcome).inc(
                price.cost(usage.prompt_tokens, usage.completion_tokens)
            )

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
                    metrics.JUDGE_CALLS.labels(model=model, outcome="client_error").inc()
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
                metrics.JUDGE_RETRIES.labels(model=model, reason=last_error.kind).inc()
                await asyncio.sleep(self._backoff(attempt, retry_after))
        assert last_error is not None
        raise JudgeError(
            f"{last_error} (after {attempt} attempts)", kind=last_error.kind, attempts=attempt
        )
