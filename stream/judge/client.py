"""The judge client: any OpenAI-compatible endpoint, with retries and adaptive pacing.

One implementation of the engine's ``Judge`` protocol.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import openai
from openai import AsyncOpenAI

from ..engine.judge import ToolBox, Verdict
from ..errors import JudgeError
from ..models import TokenUsage
from ..observer import Observer
from ..ruleset.schema import PromptedRule
from ..settings import Settings
from .answers import AnswerParser, InvalidAnswer, Quoted, answer_contract
from .health import PROVIDER_WIDE, JudgeHealth
from .limiter import AdaptiveLimiter, retry_after_seconds

log = logging.getLogger(__name__)


def rejects_structured_output(exc: openai.APIStatusError) -> bool:
    """A 400/422 that names the response format: the endpoint does not do structured output."""
    text = f"{exc.message} {exc.body}".lower()
    return exc.status_code in (400, 422) and ("response_format" in text or "json_schema" in text)


@dataclass
class ToolRequest:
    """An answer that calls tools instead of giving the verdict: the assistant message (to
    send back) and its calls."""

    message: dict[str, Any]
    calls: list[dict[str, Any]]


def tool_bound(rule: PromptedRule, tool_calls: int, spent: TokenUsage | None) -> str | None:
    """Which of the rule's tool-loop bounds ``tool_calls`` calls and ``spent`` tokens passed."""
    if tool_calls > rule.judge.max_tool_calls:
        return f"more than judge.max_tool_calls ({rule.judge.max_tool_calls}) calls"
    if spent is not None and spent.total_tokens > rule.judge.max_tool_tokens:
        return f"{spent.total_tokens} tokens, over judge.max_tool_tokens ({rule.judge.max_tool_tokens})"
    return None


def answer_tools(request: dict[str, Any], asked: ToolRequest, tools: ToolBox) -> list[str]:
    """Add the judge's tool calls and their results to the conversation; returns the results."""
    request["messages"].append(asked.message)
    results = []
    for call in asked.calls:
        result = tools.call(call["function"]["name"], call["function"].get("arguments"))
        request["messages"].append({"role": "tool", "tool_call_id": call["id"], "content": result})
        results.append(result)
    return results


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
        self.health = JudgeHealth(
            outage_max_s=settings.judge_outage_max_s,
            probe_base_s=max(settings.judge_backoff_base_s, 0.01),
            probe_max_s=settings.judge_backoff_max_s,
        )
        observer = self.observer
        observer.watch_judge(
            lambda: 1.0 if self.health.available else 0.0, self.health.unavailable_seconds
        )
        self.cost = settings.judge_cost
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
        cost = self.cost(model, usage) if usage is not None else None
        self.observer.on_judge_call(model, outcome, elapsed, usage, cost)

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        """Ask the judge for ``rule``'s verdict on ``prompt``; raise ``JudgeError`` when none
        can be had.

        Provider-wide trouble (connection errors, timeouts, 5xx, 429) is retried with backoff;
        a call whose whole budget goes on it while nothing else is answered takes the judge
        down, and then waits (see ``JudgeHealth``) instead of failing. An unusable answer is
        asked again, up to the attempt budget, then fails quoting the last answer; any other
        refusal (4xx) fails at once.

        With ``tools``, an answer that calls tools gets their results and is asked again, up
        to the rule's ``judge.max_tool_calls`` calls and ``max_tool_tokens`` tokens, past
        which the evaluation fails saying which bound it met.
        """
        model = rule.judge.model or self.default_model
        schema, parse = answer_contract(rule)
        request = self._request(rule, model, prompt, system, schema)
        if tools is not None:
            request["tools"] = tools.definitions
        tool_calls = 0
        shown_texts = list(quoted)
        shown = Quoted(shown_texts)  # folded once, whatever the attempts
        trouble = unusable = attempts = 0
        streak_started = 0.0  # when this call's run of provider-wide failures began
        spent: TokenUsage | None = None  # every answered attempt's tokens, unusable ones too
        while True:
            probe = await self.health.admit()
            attempts += 1
            outcome, retry_after, usage = await self._attempt(model, request, parse, shown.fresh())
            if usage is not None:
                spent = usage if spent is None else spent + usage
            if isinstance(outcome, Verdict):
                self.health.answered(probe)
                return replace(outcome, attempts=attempts, usage=spent or outcome.usage)
            if isinstance(outcome, ToolRequest):
                self.health.answered(probe)
                assert tools is not None, "tool calls are only parsed when tools are offered"
                tool_calls += len(outcome.calls)
                if bound := tool_bound(rule, tool_calls, spent):
                    raise JudgeError(
                        f"the judge's tool loop stopped: {bound}",
                        kind="tool_budget",
                        attempts=attempts,
                        usage=spent,
                    )
                shown_texts += answer_tools(request, outcome, tools)
                shown = Quoted(shown_texts)  # what the tools showed is the trace's text too
                continue
            error = outcome
            if error.kind in PROVIDER_WIDE:
                if trouble == 0:
                    streak_started = self.health.clock()  # the clock answered_since reads
                trouble += 1
                if trouble >= self.max_attempts and self.health.answered_since(streak_started):
                    # the provider answers other calls: the trouble is this request's own,
                    # unless it is a 429: the provider rations, the request is fine, and it
                    # waits its turn (paced by the limiter) for an outage's length at most
                    waited = self.health.clock() - streak_started
                    if error.kind != "rate_limited" or waited >= self.health.outage_max_s:
                        raise JudgeError(
                            f"{error} (after {attempts} attempts in {waited:.0f} s)",
                            kind=error.kind,
                            attempts=attempts,
                            usage=spent,
                        )
                else:
                    exhausted = trouble >= self.max_attempts
                    self.health.trouble(error.kind, str(error), probe, exhausted=exhausted)
                    if exhausted:
                        trouble = 0
                    if not self.health.available:
                        continue  # hold at the gate until the judge answers again
                step = trouble
            else:
                self.health.answered(probe)
                if error.kind == "structured_output":
                    continue  # asked again at once, without response_format
                if error.kind == "client_error":
                    raise JudgeError(str(error), kind=error.kind, attempts=attempts, usage=spent)
                unusable += 1
                if unusable >= self.max_attempts:
                    raise JudgeError(
                        f"{error} (after {attempts} attempts)",
                        kind=error.kind,
                        attempts=attempts,
                        usage=spent,
                    )
                step = unusable
            self.observer.on_judge_retry(model, error.kind)
            await asyncio.sleep(self._backoff(step, retry_after))

    def _request(
        self,
        rule: PromptedRule,
        model: str,
        prompt: str,
        system: str | None,
        schema: dict[str, Any] | None,
    ) -> dict[str, Any]:
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
        return request

    async def _attempt(
        self, model: str, request: dict[str, Any], parse: AnswerParser, quoted: Quoted
    ) -> tuple[Verdict | ToolRequest | JudgeError, float | None, TokenUsage | None]:
        """One call, counted once with its outcome: the verdict, or the error (classified by
        kind); the Retry-After the provider asked for; the tokens it used, if answered."""
        slot = await self.limiter.acquire()
        started = time.perf_counter()
        try:
            raw = await self._client.chat.completions.with_raw_response.create(**request)
            completion = raw.parse()
        except openai.RateLimitError as exc:
            retry_after = retry_after_seconds(exc.response.headers)
            self.limiter.on_rate_limited(retry_after, exc.response.headers, slot)
            message = f"rate limited (429): {exc.message}"
            return self._failed(model, "rate_limited", message, started), retry_after, None
        except openai.APITimeoutError:
            return self._failed(model, "timeout", "judge call timed out", started), None, None
        except openai.APIConnectionError as exc:
            message = f"cannot reach the judge: {exc}"
            return self._failed(model, "connection", message, started), None, None
        except openai.APIStatusError as exc:
            if "response_format" in request and rejects_structured_output(exc):
                self._drop_structured_output(request, exc.status_code)
                message = f"structured output rejected ({exc.status_code})"
                self._failed(model, "client_error", message, started)
                return JudgeError(message, kind="structured_output"), None, None
            if exc.status_code < 500 and exc.status_code not in (408, 409):
                message = f"judge refused the request ({exc.status_code}): {exc.message}"
                return self._failed(model, "client_error", message, started), None, None
            message = f"judge server error ({exc.status_code}): {exc.message}"
            failed = self._failed(model, "server_error", message, started)
            return failed, retry_after_seconds(exc.response.headers), None
        finally:
            await self.limiter.release()
        elapsed = time.perf_counter() - started
        self.limiter.on_success(raw.headers, slot)
        usage = TokenUsage(
            prompt_tokens=getattr(completion.usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(completion.usage, "completion_tokens", 0) or 0,
            total_tokens=getattr(completion.usage, "total_tokens", 0) or 0,
        )
        reply = completion.choices[0].message if completion.choices else None
        if "tools" in request and reply is not None and reply.tool_calls:
            self._observe_call(model, "ok", elapsed, usage)
            calls = [call.model_dump() for call in reply.tool_calls]
            asked = {"role": "assistant", "content": reply.content, "tool_calls": calls}
            return ToolRequest(asked, calls), None, usage
        content = (reply.content if reply is not None else None) or ""
        try:
            answer = parse(content, quoted)
        except InvalidAnswer as exc:
            self._observe_call(model, "invalid_answer", elapsed, usage)
            message = f"unusable answer: {exc}; the answer was {content[:300]!r}"
            return JudgeError(self._redact(message), kind="invalid_answer"), None, usage
        self._observe_call(model, "ok", elapsed, usage)
        verdict = Verdict(answer, completion.model or model, elapsed * 1000.0, usage, 1)
        return verdict, None, usage

    def _failed(self, model: str, kind: str, message: str, started: float) -> JudgeError:
        """A call that got no answer: counted and timed, its message without the API key."""
        self._observe_call(model, kind, time.perf_counter() - started)
        return JudgeError(self._redact(message), kind=kind)

    def _drop_structured_output(self, request: dict[str, Any], status: int) -> None:
        """Older vLLM / Ollama builds and some gateways refuse response_format: ask again
        without it, and from now on rely on parsing the text answer (said once)."""
        del request["response_format"]
        if self.structured:
            self.structured = False
            log.warning(
                "judge endpoint rejects structured output (%s); parsing text answers from now on",
                status,
            )
