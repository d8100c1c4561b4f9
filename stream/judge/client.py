"""The judge client: the policy around one chat endpoint, one implementation of the engine's
``Judge`` protocol.

The HTTP is the transport's (``openai_api.py``: any OpenAI-compatible endpoint). Here:
attempts and backoff (honouring Retry-After), pacing (``AdaptiveLimiter``), the judge's
availability (``JudgeHealth``), reading answers and asking again, the tool loop's bounds,
metrics through the observer, and the API key kept out of every message.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..engine.spend import cache_saving
from ..engine.verdicts import ParsedAnswer, ToolBox, Verdict
from ..errors import JudgeError
from ..models import TokenUsage
from ..observer import Observer
from ..ruleset.schema import PromptedRule
from .adaptations import ModelAdaptations
from .answers import InvalidAnswer, Quoted
from .calls import Tally, ToolRequest, answer_tools
from .config import JudgeConfig
from .contract import AnswerParser, answer_contract
from .fleet import Fleet
from .health import PROVIDER_WIDE, JudgeHealth
from .label_probs import probed, with_probabilities
from .limiter import AdaptiveLimiter
from .openai_api import OpenAIChatAPI
from .transport import Answered, ChatAPI, ChatRequest, Failed, estimate_tokens

log = logging.getLogger(__name__)

HELD_UNAVAILABLE_S = 60.0  # every call refused this long: the judge counts as unavailable
# answers that asking again will not change: the request's own fault (4xx), a quota to be
# paid, an answer cut at its token cap or declined by the model (same prompt, same answer)
FAIL_AT_ONCE = frozenset(
    {"client_error", "unsupported_parameter", "quota_exhausted", "answer_cut", "refused"}
)


class JudgeClient:
    """Asks a chat endpoint (OpenAI-compatible unless ``api`` says otherwise) for verdicts and
    returns validated ones."""

    def __init__(
        self,
        config: JudgeConfig,
        observer: Observer | None = None,
        api: ChatAPI | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        jitter: random.Random | None = None,
        watched: bool = True,
        decisions: JudgeClient | None = None,
    ) -> None:
        # ``clock``: the monotonic clock pacing and health read (a test's virtual one);
        # ``jitter``: the backoff's dice (a test's seeded ones)
        self.clock = clock
        self.jitter = jitter if jitter is not None else random.Random()
        self.observer = observer or Observer()
        self.default_model = config.model
        self.max_attempts = config.max_attempts
        self.backoff_base = config.backoff_base_s
        self.backoff_max = config.backoff_max_s
        self.adaptations = ModelAdaptations(config.structured_output)
        self.max_concurrency = config.max_concurrency
        # one pacer per model: two rules on two models do not slow each other; the workers
        # judging with the same account share its limits through ``fleet`` (None: alone)
        self.limiters: dict[str, AdaptiveLimiter] = {}
        self.fleet: Fleet | None = None
        self.health = JudgeHealth(
            outage_max_s=config.outage_max_s,
            probe_base_s=max(config.backoff_base_s, 0.01),
            probe_max_s=config.backoff_max_s,
            clock=clock,
        )
        if watched:  # the judge's gauges (a decision model's client is read through these)
            self.observer.watch_judge(
                lambda: 1.0 if self.available() else 0.0, self.health.unavailable_seconds
            )
        # the client of ``judge.api: decisions`` rules (``decision_client.judge_client``)
        self.decisions = decisions
        self.cost = config.cost
        self._secret = config.api_key.get_secret_value() if config.api_key else None
        self.api = (
            api
            if api is not None
            else OpenAIChatAPI(
                base_url=config.base_url, api_key=self._secret, timeout_s=config.timeout_s
            )
        )

    def available(self) -> bool:
        """The judge answers: not down (``JudgeHealth``), and no model's calls all refused
        (429s) for ``HELD_UNAVAILABLE_S`` or more: to an operator that is an outage too."""
        held = max((limiter.held_for() for limiter in self.limiters.values()), default=0.0)
        decisions = self.decisions is None or self.decisions.available()
        return self.health.available and held < HELD_UNAVAILABLE_S and decisions

    async def close(self) -> None:
        await self.api.close()
        if self.decisions is not None:
            await self.decisions.close()

    def limiter_for(self, model: str) -> AdaptiveLimiter:
        """The pacer of ``model`` on this endpoint (made at its first call)."""
        if (limiter := self.limiters.get(model)) is None:
            limiter = self.limiters[model] = AdaptiveLimiter(self.max_concurrency, clock=self.clock)
            self.observer.watch_judge_pacing(model, limiter.pace, limiter.token_limit_per_minute)
            if self.fleet is not None:  # paced at its share of the account's limits
                self.fleet.join(model, limiter, self.observer.watch_judge_fleet)
        return limiter

    @property
    def limiter(self) -> AdaptiveLimiter:  # the default model's pacer
        return self.limiter_for(self.default_model)

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """How long a call waits before asking again: the Retry-After the provider gave it
        (its own: other calls go on), else exponential backoff with jitter."""
        if retry_after is not None:
            return min(retry_after, self.health.outage_max_s)
        return min(
            self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1)
        ) * self.jitter.uniform(0.5, 1.0)

    def _observe_call(
        self, model: str, outcome: str, elapsed: float | None, usage: TokenUsage | None = None
    ) -> None:
        """One attempt: count and latency; tokens and estimated cost when answered."""
        cost = self.cost(model, usage) if usage is not None else None
        self.observer.on_judge_call(model, outcome, elapsed, usage, cost)
        if usage is not None and usage.cached_tokens:
            saved = cache_saving(self.cost, model, usage)
            self.observer.on_judge_prompt_cache(model, usage.cached_tokens, saved)

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        """``rule``'s verdict on ``prompt``, or ``JudgeError``. Provider-wide trouble (5xx,
        429, timeouts) is retried with backoff; a call that spends its budget on it while
        nothing is answered takes the judge down and waits (``JudgeHealth``). An unusable
        answer is asked again up to the attempt budget; any other 4xx fails at once. With
        ``tools``, a tool call gets its result and is asked again, up to the rule's bounds."""
        if rule.judge.api == "decisions":
            if self.decisions is None:
                raise JudgeError("this judge has no decision model client", kind="client_error")
            return await self.decisions.judge(rule, prompt, system, quoted)
        return await self.judged(rule, prompt, system, quoted, tools)

    async def judged(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        """``judge``'s attempts, on this client's endpoint."""
        schema, parse = answer_contract(rule)
        request = self._request(rule, prompt, system, schema, tools)
        shown_texts = list(quoted)
        shown = Quoted(shown_texts)  # folded once, whatever the attempts
        tally = Tally()
        while True:
            probe = await self.health.admit()
            tally.attempts += 1
            outcome, retry_after, usage = await self._attempt(request, parse, shown.fresh())
            tally.spend(usage)
            if isinstance(outcome, Verdict):
                self.health.answered(probe)
                return replace(outcome, attempts=tally.attempts, usage=tally.spent or outcome.usage)
            if isinstance(outcome, ToolRequest):
                self.health.answered(probe)
                assert tools is not None, "tool calls are only read when tools are offered"
                shown_texts += answer_tools(rule, request, outcome, tools, tally)
                shown = Quoted(shown_texts)  # what the tools showed is the trace's text too
                continue
            if outcome.kind in PROVIDER_WIDE:
                step = self._after_trouble(outcome, probe, tally)
            else:
                step = self._after_refusal(rule, request, outcome, probe, tally)
            if step is None:
                continue
            self.observer.on_judge_retry(request.model, outcome.kind)
            await asyncio.sleep(self._backoff(step, retry_after))

    def _after_trouble(self, error: JudgeError, probe: bool, tally: Tally) -> int | None:
        """Provider-wide trouble (connection, timeout, 5xx, 429): the backoff step before the
        next attempt, or None to hold at the gate until the judge answers again. Raises when,
        with other calls answered meanwhile, the trouble is this request's own."""
        if tally.trouble == 0:
            tally.streak_started = self.health.clock()  # the clock answered_since reads
        tally.trouble += 1
        waited = self.health.clock() - tally.streak_started
        if error.kind == "rate_limited":
            # the provider is there and rations; the request is fine: it waits its turn (paced,
            # or held by the limiter while every call is refused) for an outage's length at most
            self.health.answered(probe)
            if waited >= self.health.outage_max_s:
                message = f"{error} (after {tally.attempts} attempts in {waited:.0f} s)"
                raise tally.error(message, error.kind)
            return tally.trouble
        if probe:
            # the probe of a down judge failed: the outage's trouble, whatever this call's own
            # run says (raising here left the probe marked in flight, and every waiting call
            # waiting for the outage limit). It backs off, so that another waiting call is the
            # next probe: a request that fails on its own cannot keep the judge down
            self.health.trouble(error.kind, str(error), probe=True)
            return tally.trouble
        if tally.trouble >= self.max_attempts and self.health.answered_since(tally.streak_started):
            # the provider answers other calls: the trouble is this request's own
            message = f"{error} (after {tally.attempts} attempts in {waited:.0f} s)"
            raise tally.error(message, error.kind)
        else:
            exhausted = tally.trouble >= self.max_attempts
            self.health.trouble(error.kind, str(error), probe, exhausted=exhausted)
            if exhausted:
                tally.trouble = 0
            if not self.health.available:
                return None
        return tally.trouble

    def _after_refusal(
        self, rule: PromptedRule, request: ChatRequest, error: JudgeError, probe: bool, tally: Tally
    ) -> int | None:
        """The provider answered, but with no verdict: the backoff step before asking again,
        or None to ask again at once (without structured output, or without a parameter the
        model does not take). Raises for a refused request (4xx), an exhausted quota, an
        answer cut at its token cap or declined, and unusable answers past the budget."""
        self.health.answered(probe)
        if error.kind == "structured_output":
            self.adaptations.drop_structured_output(request, rule.id)
            return None
        if error.kind == "unsupported_parameter" and self.adaptations.drop_parameter(
            request, error.param
        ):
            return None
        if error.kind in FAIL_AT_ONCE:
            raise tally.error(str(error), error.kind)
        tally.unusable += 1
        if tally.unusable >= self.max_attempts:
            raise tally.error(f"{error} (after {tally.attempts} attempts)", error.kind)
        return tally.unusable

    def request_for(self, rule: PromptedRule, prompt: str, system: str | None) -> ChatRequest:
        """The request a call for ``rule`` on ``prompt`` sends (no tools): what a batch's
        input line carries, so a batched question is the question a live call asks."""
        return self._request(rule, prompt, system, answer_contract(rule)[0], None)

    def read_batched(
        self, rule: PromptedRule, request: ChatRequest, answer: Answered, quoted: Sequence[str]
    ) -> Verdict | JudgeError:
        """A batch's answer to ``request`` read as a live call's is (counted as a call, its
        tokens priced at the batch rate, no latency: it waited for its batch)."""
        if answer.usage is not None:
            answer = replace(answer, usage=answer.usage.model_copy(update={"batch": True}))
        parse = answer_contract(rule)[1]
        read = self._read(request, answer, parse, Quoted(list(quoted)), None)
        if isinstance(read, ToolRequest):  # no tools are offered in a batch
            return JudgeError("the judge asked for tools in a batch", kind="invalid_answer")
        return read

    def _request(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None,
        schema: dict[str, Any] | None,
        tools: ToolBox | None,
    ) -> ChatRequest:
        messages: list[dict[str, Any]] = []
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        request = ChatRequest(
            model=rule.judge.model or self.default_model,
            messages=messages,
            temperature=rule.judge.temperature,
            max_tokens=rule.judge.max_tokens,
            schema=schema,
            tools=tools.definitions if tools is not None else None,
        )
        if rule.judge.logprobs:
            request = probed(request, rule.output)
        return self.adaptations.fit(request, rule.id)

    async def _attempt(
        self, request: ChatRequest, parse: AnswerParser, quoted: Quoted
    ) -> tuple[Verdict | ToolRequest | JudgeError, float | None, TokenUsage | None]:
        """One call, counted once with its outcome: the verdict, the tools asked for, or the
        error (classified by kind); the Retry-After the provider asked for; the tokens it
        used, if answered."""
        result, elapsed = await self._call(request)
        if isinstance(result, Failed):
            return self._failed(request, result, elapsed), result.retry_after, None
        return self._read(request, result, parse, quoted, elapsed), None, result.usage

    async def _call(self, request: ChatRequest) -> tuple[Answered | Failed, float]:
        """One request in its turn (the limiter paces it and learns from what came back), and
        how long it took."""
        limiter = self.limiter_for(request.model)
        estimated = estimate_tokens(request)
        slot = await limiter.acquire(estimated)
        started = time.perf_counter()
        try:
            result = await self._send(request)
            elapsed = time.perf_counter() - started
            if isinstance(result, Failed) and result.kind == "rate_limited":
                limiter.on_rate_limited(
                    result.retry_after,
                    result.headers,
                    slot,
                    result.code,
                    limit=result.limit,
                    estimated=estimated,
                )
        finally:
            await limiter.release()
        if not isinstance(result, Failed):
            used = result.usage.total_tokens if result.usage is not None else 0
            limiter.on_success(result.headers, slot, estimated=estimated, used=used)
        elif result.kind != "rate_limited":
            limiter.on_failure(slot)
        return result, elapsed

    async def _send(self, request: ChatRequest) -> Answered | Failed:
        return await self.api.complete(request)

    def _read(
        self,
        request: ChatRequest,
        answer: Answered,
        parse: AnswerParser,
        quoted: Quoted,
        elapsed: float | None,
    ) -> Verdict | ToolRequest | JudgeError:
        """What an answer is: tool calls (when tools were offered), a verdict, or unusable."""
        model, usage = request.model, answer.usage
        if usage is None:
            self.adaptations.say_once(
                "no usage",
                model,
                f"judge endpoint reports no token usage for {model}: its scores carry no "
                "usage, and cost and token budgets cannot count its calls",
            )
        if answer.refusal:
            self._observe_call(model, "refused", elapsed, usage)
            message = f"the judge declined to answer: {answer.refusal[:300]!r}"
            return JudgeError(self._redact(message), kind="refused")
        if answer.finish_reason == "length":  # not the whole verdict; asked again, cut again
            self._observe_call(model, "answer_cut", elapsed, usage)
            message = (
                f"the judge's answer was cut at its token cap (finish_reason: length; "
                f"judge.max_tokens: {request.max_tokens}); it ended {(answer.content or '')[-300:]!r}"
            )
            return JudgeError(self._redact(message), kind="answer_cut")
        if request.tools is not None and answer.tool_calls:
            self._observe_call(model, "ok", elapsed, usage)
            calls = answer.tool_calls
            asked = {"role": "assistant", "content": answer.content, "tool_calls": calls}
            return ToolRequest(asked, calls)
        content = answer.content or ""
        try:
            parsed = parse(content, quoted)
        except InvalidAnswer as exc:
            self._observe_call(model, "invalid_answer", elapsed, usage)
            message = f"unusable answer: {exc}; the answer was {content[:300]!r}"
            return JudgeError(self._redact(message), kind="invalid_answer")
        self._observe_call(model, "ok", elapsed, usage)
        if isinstance(parsed, ParsedAnswer):
            parsed = with_probabilities(request, answer, parsed, self.adaptations.say_once)
        return Verdict(parsed, answer.model, (elapsed or 0.0) * 1000.0, usage, 1)

    def _failed(self, request: ChatRequest, failure: Failed, elapsed: float) -> JudgeError:
        """A call that got no answer: counted and timed, its message without the API key."""
        if failure.kind == "structured_output":
            self._observe_call(request.model, "client_error", elapsed)  # a refusal, counted so
            return JudgeError(failure.message, kind=failure.kind)
        message = self._redact(failure.message)
        if failure.kind == "quota_exhausted":
            said = f"judge quota exhausted for {request.model}: {message}"
            self.adaptations.say_once("quota", request.model, said)
        self._observe_call(request.model, failure.kind, elapsed)
        return JudgeError(message, kind=failure.kind, param=failure.param)
