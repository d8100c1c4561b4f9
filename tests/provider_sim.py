"""A provider simulator: a local OpenAI-compatible judge that answers as hosted providers do
under load, each documented behaviour switched on by a constructor option.

A real HTTP server (aiohttp, in its own thread and event loop) speaking
``POST /v1/chat/completions`` as the ``openai`` SDK calls it. Each behaviour imitates one
the providers document; the class or option that switches it on says which page:

- OpenAI, "Rate limits" guide (platform.openai.com/docs/guides/rate-limits) and the help
  centre's "How can I solve 429: 'Too Many Requests' errors?";
- OpenAI, "Error codes" (platform.openai.com/docs/guides/error-codes);
- Azure OpenAI, "quotas and limits" and "Manage Azure OpenAI quota"
  (learn.microsoft.com/azure/ai-services/openai/quotas-limits, .../how-to/quota);
- Anthropic, "Rate limits" (docs.anthropic.com/en/api/rate-limits) and "Errors"
  (docs.anthropic.com/en/api/errors).

A call is judged in this order; the first that refuses it answers: an overload burst (529 or
503), a spent billing quota (429 ``insufficient_quota``), a refused parameter (400), a refusal
that does not follow load (429), a ramp too steep (429 ``slow_down``), the request and token
limits (429); else the answer, after the configured latency. Limits are accounted on one
monotonic clock (``clock``, injectable); every call is recorded (``calls``) for benches.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import multiprocessing
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx
import orjson
from aiohttp import web

Clock = Callable[[], float]
Kind = Literal["requests", "tokens"]
Content = str | Callable[[str, dict[str, Any]], str]

ORGANIZATION = "org-sim"
DEFAULT_CONTENT = '{"score": 1.0, "reason": "sim"}'
LIMITS_PAGE = "Visit https://platform.openai.com/account/rate-limits to learn more."
UNITS: dict[Kind, str] = {"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}
EPSILON = 1e-9  # float slack: a limit that admits "at" a time admits then


def estimate_tokens(characters: int) -> int:
    """Tokens in ``characters`` of text, by OpenAI's rule of thumb of about four characters a
    token (the Rate limits guide estimates a request's tokens from its character count)."""
    return math.ceil(characters / 4)


def openai_duration(seconds: float) -> str:
    """``seconds`` as OpenAI writes ``x-ratelimit-reset-*``: "120ms", "1s", "1m30.5s", "6m0s"."""
    ms = max(0, round(seconds * 1000))
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


# --- what can be switched on ------------------------------------------------------------


@dataclass(frozen=True)
class RateLimit:
    """A per-minute limit on requests or on tokens, as a token bucket or a sliding window.

    - ``"bucket"``: refilled at ``per_minute / 60`` a second, holding at most ``burst``
      (default one second's worth). OpenAI (Rate limits guide, help centre): limits may be
      quantized, "60,000 requests/minute may be enforced as 1,000 requests/second"; Anthropic's Rate
      limits page: a token bucket, replenished continuously up to the maximum rather than
      reset each minute; Azure's quota page: RPM is evaluated over 1 or 10 seconds.
    - ``"window"``: at most ``per_minute * window_s / 60`` in any trailing ``window_s``
      (60 s: the per-minute count itself; a shorter window keeps the rate, for fast tests).

    A call larger than the bucket's burst waits for a full bucket and leaves it in debt, so it
    passes at the limit's pace; one larger than the whole limit (the window's, or the minute's
    for a bucket) never passes: OpenAI answers "Request too large".
    ``count_refused``: refused calls take their share too (OpenAI's help centre, "How can I
    solve 429": "unsuccessful requests contribute to your per-minute limit").
    ``announced``: the limit is stated in the ``x-ratelimit-*`` headers (OpenAI's Rate limits
    guide, Azure's quota page); silent otherwise.
    """

    per_minute: float
    shape: Literal["bucket", "window"] = "bucket"
    burst: float | None = None
    window_s: float = 60.0
    announced: bool = True
    count_refused: bool = False

    @property
    def capacity(self) -> float:
        if self.shape == "window":
            return self.per_minute * self.window_s / 60.0
        return self.burst if self.burst is not None else self.per_minute / 60.0


@dataclass(frozen=True)
class RetryAfter:
    """What a refusal says about when to come back (Anthropic's Errors and Rate limits pages:
    a 429 carries ``retry-after`` in seconds; Azure's quota page: ``retry-after-ms`` too).

    - ``"none"``: nothing;
    - ``"exact"``: the real wait until the limit (or the overload) would admit the call,
      rounded up to whole seconds for ``retry-after``; a wait that never ends says nothing;
    - ``"understated"``: always "1", whatever the real wait;
    - ``"fixed"``: always ``seconds``.

    ``ms``: ``retry-after-ms`` as well, in milliseconds (Azure).
    """

    mode: Literal["none", "exact", "understated", "fixed"] = "exact"
    seconds: float = 1.0
    ms: bool = False

    def headers(self, wait: float) -> dict[str, str]:
        said = {"none": math.nan, "exact": wait, "understated": 1.0, "fixed": self.seconds}
        seconds = said[self.mode]
        if not math.isfinite(seconds):
            return {}
        ms = math.ceil(seconds * 1000 - 1e-6)
        headers = {"retry-after": str(math.ceil(ms / 1000))}
        if self.ms:
            headers["retry-after-ms"] = str(ms)
        return headers


@dataclass(frozen=True)
class Refusals:
    """429s that do not follow load: a ``share`` of calls at random (seeded) or ``every``
    n-th call, whatever the rate. No provider documents these as such: they imitate what
    issue 25 measured on an OpenAI-compatible judge (one call in seven answered 429 with
    ``Retry-After: 1``), as a shared gateway or a provider short of capacity answers."""

    share: float = 0.0
    every: int | None = None
    retry_after: RetryAfter = RetryAfter("none")
    seed: int = 7


@dataclass(frozen=True)
class Overload:
    """Every ``period_s`` (from ``offset_s`` after the start), ``burst_s`` seconds in which
    every call is answered ``status``: 529 with Anthropic's ``overloaded_error`` (Errors page:
    529, the API temporarily overloaded) or 503 as OpenAI's Error codes page lists it ("The
    engine is currently overloaded, please try again later"; its type and code as Microsoft's
    Dev Proxy docs list OpenAI's errors).
    ``retry_after`` "exact" says how long the burst has left."""

    period_s: float = 60.0
    burst_s: float = 10.0
    status: Literal[503, 529] = 529
    offset_s: float = 0.0
    retry_after: RetryAfter = RetryAfter("none")

    def left_s(self, elapsed: float) -> float:
        """Seconds left of the burst ``elapsed`` seconds after the start; 0 outside one."""
        into = (elapsed - self.offset_s) % self.period_s
        return self.burst_s - into if elapsed >= self.offset_s and into < self.burst_s else 0.0


@dataclass(frozen=True)
class SlowDown:
    """OpenAI's ``slow_down`` (Error codes page: "A sudden increase in your request rate is
    impacting service reliability. Please reduce your request rate", even within the limits):
    a call is refused when the calls that arrived in the trailing ``window_s`` outnumber both
    ``floor`` and ``growth`` times those of the window before. Refused calls count: it is the
    rate sent that must not jump. The page listed it as 503 first, as 429 now (``status``)."""

    growth: float = 2.0
    floor: int = 60
    window_s: float = 60.0
    status: Literal[429, 503] = 429


@dataclass(frozen=True)
class ParamRefusal:
    """Parameters a reasoning model refuses with 400 (OpenAI's reasoning models guide and the
    errors they answer): ``max_tokens`` ("Use 'max_completion_tokens' instead"),
    ``temperature`` other than 1, ``response_format``, any other name given. ``models``:
    only calls to these models; empty, every model."""

    params: tuple[str, ...]
    models: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answer:
    """How a model answers: ``content`` (text, or made from the prompt and the request body);
    ``cut_to`` characters with ``finish_reason: "length"``; a ``refusal`` instead (content
    null, as OpenAI's structured outputs refuse); ``usage`` left out when False. A call whose
    ``max_completion_tokens``/``max_tokens`` the content exceeds is cut there, as any model's."""

    content: Content = DEFAULT_CONTENT
    cut_to: int | None = None
    refusal: str | None = None
    usage: bool = True


@dataclass(frozen=True)
class Call:
    """One call as the simulator saw it: arrival (simulator clock), HTTP status, model, token
    cost (as the token limit counts it) and why it was answered so."""

    at: float
    status: int
    model: str
    tokens: int
    # answered, requests, tokens, too_large, insufficient_quota, slow_down, refused_anyway,
    # overloaded, unsupported_parameter
    reason: str


# --- limit accounting ---------------------------------------------------------------------


class _Meter(Protocol):
    def wait(self, cost: float, now: float) -> float: ...
    def take(self, cost: float, now: float) -> None: ...
    def used(self, now: float) -> float: ...
    def remaining(self, now: float) -> float: ...
    def reset_s(self, now: float) -> float: ...


class _Bucket:
    def __init__(self, limit: RateLimit, now: float) -> None:
        self.rate = limit.per_minute / 60.0
        self.capacity = limit.capacity
        self.ceiling = max(limit.per_minute, self.capacity)
        self.level = self.capacity
        self.stamp = now

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self, cost: float, now: float) -> float:
        self._refill(now)
        if cost > self.ceiling:
            return math.inf
        short = min(cost, self.capacity) - self.level  # a call over the burst needs a full one
        return short / self.rate if short > EPSILON else 0.0

    def take(self, cost: float, now: float) -> None:
        self._refill(now)
        self.level -= cost

    def used(self, now: float) -> float:
        self._refill(now)
        return self.capacity - self.level

    def remaining(self, now: float) -> float:
        self._refill(now)
        return max(0.0, self.level)

    def reset_s(self, now: float) -> float:
        return self.used(now) / self.rate


class _Window:
    def __init__(self, limit: RateLimit, now: float) -> None:
        self.span = limit.window_s
        self.capacity = limit.capacity
        self.entries: deque[tuple[float, float]] = deque()  # (when, cost), oldest first
        self.total = 0.0

    def _expire(self, now: float) -> None:
        while self.entries and self.entries[0][0] <= now - self.span:
            self.total -= self.entries.popleft()[1]

    def wait(self, cost: float, now: float) -> float:
        self._expire(now)
        if cost > self.capacity + EPSILON:
            return math.inf
        excess = self.total + cost - self.capacity
        if excess <= EPSILON:
            return 0.0
        for at, spent in self.entries:  # the oldest leave first
            excess -= spent
            if excess <= EPSILON:
                return at + self.span - now
        return math.inf  # not reached: the entries hold the whole total

    def take(self, cost: float, now: float) -> None:
        self._expire(now)
        self.entries.append((now, cost))
        self.total += cost

    def used(self, now: float) -> float:
        self._expire(now)
        return self.total

    def remaining(self, now: float) -> float:
        return max(0.0, self.capacity - self.used(now))

    def reset_s(self, now: float) -> float:
        self._expire(now)
        return self.entries[-1][0] + self.span - now if self.entries else 0.0


def _meter(limit: RateLimit, now: float) -> _Meter:
    return _Bucket(limit, now) if limit.shape == "bucket" else _Window(limit, now)


# --- request and answer shapes ----------------------------------------------------------


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt's tokens as estimated from the characters of all message contents."""
    return estimate_tokens(sum(len(_text(m.get("content"))) for m in body.get("messages", [])))


def token_cost(body: Mapping[str, Any], completion_estimate: int) -> int:
    """A call's tokens as the limiter counts them on arrival: the prompt's estimate plus
    ``max_completion_tokens``/``max_tokens``, or ``completion_estimate`` without one (Azure's
    quota page: the estimate counts the prompt text and ``max_tokens``; OpenAI's Rate limits
    guide: "prompts+max_tokens" count against the limit)."""
    reserved = body.get("max_completion_tokens") or body.get("max_tokens")
    return prompt_tokens(body) + (int(reserved) if reserved else completion_estimate)


def _openai_error(message: str, kind: str, code: str | None, param: str | None = None) -> Any:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def _param_error(name: str, value: Any) -> Any:
    """The 400 an OpenAI reasoning model answers for a parameter it does not take."""
    if name == "temperature":
        message = (
            f"Unsupported value: 'temperature' does not support {_number(value)} with this model."
            " Only the default (1) value is supported."
        )
        return _openai_error(message, "invalid_request_error", "unsupported_value", name)
    if name == "response_format":
        kind = value.get("type", "json_schema") if isinstance(value, dict) else value
        message = f"Invalid parameter: 'response_format' of type '{kind}' is not supported with this model."
        return _openai_error(message, "invalid_request_error", "unsupported_parameter", name)
    message = f"Unsupported parameter: '{name}' is not supported with this model."
    if name == "max_tokens":
        message += " Use 'max_completion_tokens' instead."
    return _openai_error(message, "invalid_request_error", "unsupported_parameter", name)


@dataclass
class _Incoming:
    model: str
    body: dict[str, Any]
    cost: int
    now: float


@dataclass
class _Refusal:
    status: int
    reason: str
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)


INSUFFICIENT_QUOTA = _openai_error(
    "You exceeded your current quota, please check your plan and billing details.",
    "insufficient_quota",
    "insufficient_quota",
)
OVERLOADED = {
    # Anthropic's Errors page; OpenAI's Error codes page (type and code: Microsoft's Dev Proxy
    # docs, "OpenAI rate limit reached")
    529: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    503: _openai_error(
        "The engine is currently overloaded, please try again later.",
        "service_unavailable_error",
        "server_is_overloaded",
    ),
}
# OpenAI's Error codes page (type: Microsoft's Dev Proxy docs, "OpenAI rate limit reached")
SLOW_DOWN = _openai_error(
    "A sudden increase in your request rate is impacting service reliability."
    " Please reduce your request rate to its original level, maintain a consistent rate for"
    " at least 15 minutes, and then gradually increase it.",
    "rate_limit_error",
    "slow_down",
)


class _InProcess(httpx.AsyncBaseTransport):
    """httpx's side of ``ProviderSim.transport``: a request in, the simulator's answer out."""

    def __init__(self, sim: ProviderSim) -> None:
        self.sim = sim

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.rstrip("/") != "/v1/chat/completions":
            return httpx.Response(404, json={"error": {"message": "not found"}})
        status, payload, headers = await self.sim.respond(await request.aread())
        return httpx.Response(status, content=orjson.dumps(payload), headers=headers | JSON)


JSON = {"content-type": "application/json"}


# --- the simulator ------------------------------------------------------------------------


class ProviderSim:
    """Start with ``with ProviderSim(...) as sim:``; point the client at ``sim.base_url``.

    Options (keyword-only; every behaviour off unless given):
    ``requests``, ``tokens``: per-minute limits (``RateLimit``), per model unless
    ``limits_per_model`` is False (OpenAI's Rate limits guide: limits are per model), and
    only for ``limited_models`` when given (a deployment's limit, another's free of it);
    ``completion_estimate``: tokens counted for a call without ``max_tokens``;
    ``retry_after``: what 429s from the limits say (``RetryAfter``);
    ``quota_requests``: calls answered before the billing quota is spent, after which every
    call is a 429 ``insufficient_quota`` that no wait clears (OpenAI's Error codes page:
    "You exceeded your current quota, please check your plan and billing details");
    ``slow_down``, ``refusals``, ``overload``, ``refused_params``: see their classes;
    ``answer``, ``answers`` (by model): what is answered (``Answer``);
    ``latency_s`` (``jitter_s`` either side, seeded by ``seed``): per answered call, the
    calls served concurrently; ``clock``: the monotonic clock limits are accounted on.
    """

    def __init__(
        self,
        *,
        requests: RateLimit | None = None,
        tokens: RateLimit | None = None,
        limits_per_model: bool = True,
        limited_models: Sequence[str] = (),
        completion_estimate: int = 0,
        retry_after: RetryAfter = RetryAfter("exact"),
        quota_requests: int | None = None,
        slow_down: SlowDown | None = None,
        refusals: Refusals | None = None,
        overload: Overload | None = None,
        refused_params: Sequence[ParamRefusal] = (),
        answer: Answer = Answer(),
        answers: Mapping[str, Answer] | None = None,
        latency_s: float = 0.0,
        jitter_s: float = 0.0,
        seed: int = 0,
        clock: Clock = time.monotonic,
        port: int = 0,
    ) -> None:
        self.limits: dict[Kind, RateLimit] = {}
        if requests is not None:
            self.limits["requests"] = requests
        if tokens is not None:
            self.limits["tokens"] = tokens
        self.limits_per_model = limits_per_model
        self.limited_models = tuple(limited_models)
        self.completion_estimate = completion_estimate
        self.retry_after = retry_after
        self.quota_requests = quota_requests
        self.slow_down = slow_down
        self.refusals = refusals
        self.overload = overload
        self.refused_params = tuple(refused_params)
        self.answer = answer
        self.answers = dict(answers or {})
        self.latency_s = latency_s
        self.jitter_s = jitter_s
        self.clock = clock
        self.calls: list[Call] = []  # appended by the server's thread only
        self.started_at = clock()
        self._meters: dict[tuple[str, Kind], _Meter] = {}
        self._arrivals: deque[float] = deque()  # for slow_down
        self._answered = 0
        self._seen = 0  # calls that reached the load-free refusals
        self._refusal_dice = random.Random(refusals.seed if refusals else 0)
        self._latency_dice = random.Random(seed)
        self._ids = itertools.count(1)
        self._checks = (
            self._overloaded,
            self._out_of_quota,
            self._unsupported,
            self._refused_anyway,
            self._too_steep,
            self._over_limit,
        )
        self._port = port
        self.port = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def now(self) -> float:
        """The simulator's clock, to mark a bench's start and end for the helpers below."""
        return self.clock()

    # --- the record, for benches ----------------------------------------------------------
    @property
    def statuses(self) -> list[int]:
        return [c.status for c in list(self.calls)]

    def _between(
        self, since: float | None, until: float | None, model: str | None
    ) -> tuple[list[Call], float]:
        """The calls (to ``model``, or all) that arrived between ``since`` and ``until``
        (default: the first and the last arrival), and that span in seconds."""
        calls = [c for c in list(self.calls) if model is None or c.model == model]
        if not calls:
            return [], 0.0
        start = calls[0].at if since is None else since
        end = max(c.at for c in calls) if until is None else until
        return [c for c in calls if start <= c.at <= end], end - start

    def share_429(
        self, since: float | None = None, until: float | None = None, *, model: str | None = None
    ) -> float:
        """The share of calls answered 429."""
        calls, _ = self._between(since, until, model)
        return sum(c.status == 429 for c in calls) / len(calls) if calls else 0.0

    def accepted_per_s(
        self, since: float | None = None, until: float | None = None, *, model: str | None = None
    ) -> float:
        """Calls answered 200, a second of the simulator's clock."""
        calls, span = self._between(since, until, model)
        return sum(c.status == 200 for c in calls) / span if span > 0 else 0.0

    def tokens_per_s(
        self, since: float | None = None, until: float | None = None, *, model: str | None = None
    ) -> float:
        """Tokens (as the token limit counts them) of the calls answered 200, a second."""
        calls, span = self._between(since, until, model)
        return sum(c.tokens for c in calls if c.status == 200) / span if span > 0 else 0.0

    def requests_used(
        self, since: float | None = None, until: float | None = None, *, model: str | None = None
    ) -> float:
        """The request limit used, as a share: ``accepted_per_s`` ÷ (per_minute / 60)."""
        per_s = self.limits["requests"].per_minute / 60
        return self.accepted_per_s(since, until, model=model) / per_s

    def tokens_used(
        self, since: float | None = None, until: float | None = None, *, model: str | None = None
    ) -> float:
        """The token limit used, as a share: ``tokens_per_s`` ÷ (per_minute / 60)."""
        per_s = self.limits["tokens"].per_minute / 60
        return self.tokens_per_s(since, until, model=model) / per_s

    # --- judging a call ---------------------------------------------------------------------
    def _meter(self, model: str, kind: Kind, now: float) -> _Meter:
        key = (model if self.limits_per_model else "", kind)
        if key not in self._meters:
            self._meters[key] = _meter(self.limits[kind], now)
        return self._meters[key]

    def _costs(self, call: _Incoming) -> dict[Kind, float]:
        return {"requests": 1.0, "tokens": float(call.cost)}

    def _overloaded(self, call: _Incoming) -> _Refusal | None:
        if self.overload is None:
            return None
        left = self.overload.left_s(call.now - self.started_at)
        if left <= 0.0:
            return None
        status = self.overload.status
        return _Refusal(
            status, "overloaded", OVERLOADED[status], self.overload.retry_after.headers(left)
        )

    def _out_of_quota(self, call: _Incoming) -> _Refusal | None:
        if self.quota_requests is None or self._answered < self.quota_requests:
            return None
        return _Refusal(429, "insufficient_quota", INSUFFICIENT_QUOTA)

    def _unsupported(self, call: _Incoming) -> _Refusal | None:
        for refusal in self.refused_params:
            if refusal.models and call.model not in refusal.models:
                continue
            for name in refusal.params:
                value = call.body.get(name)
                if value is None or (name == "temperature" and value == 1):
                    continue
                return _Refusal(400, "unsupported_parameter", _param_error(name, value))
        return None

    def _refused_anyway(self, call: _Incoming) -> _Refusal | None:
        if self.refusals is None:
            return None
        self._seen += 1
        every = self.refusals.every
        by_turn = every is not None and self._seen % every == 0
        by_chance = self._refusal_dice.random() < self.refusals.share
        if not (by_turn or by_chance):
            return None
        payload = self._rate_limit_error(call, "requests", 1.0)
        return _Refusal(429, "refused_anyway", payload, self.refusals.retry_after.headers(1.0))

    def _too_steep(self, call: _Incoming) -> _Refusal | None:
        if self.slow_down is None:
            return None
        window = self.slow_down.window_s
        arrivals = self._arrivals
        arrivals.append(call.now)
        while arrivals[0] <= call.now - 2 * window:
            arrivals.popleft()
        current = sum(1 for at in arrivals if at > call.now - window)
        before = len(arrivals) - current
        if current <= max(self.slow_down.floor, self.slow_down.growth * before):
            return None
        return _Refusal(self.slow_down.status, "slow_down", SLOW_DOWN)

    def _over_limit(self, call: _Incoming) -> _Refusal | None:
        """Both limits admit the call (and it takes from both), or the one that binds longest
        refuses it, saying the real wait until both would admit it."""
        if self.limited_models and call.model not in self.limited_models:
            return None
        costs = self._costs(call)
        meters = {kind: self._meter(call.model, kind, call.now) for kind in self.limits}
        waits = {kind: meter.wait(costs[kind], call.now) for kind, meter in meters.items()}
        if all(wait == 0.0 for wait in waits.values()):
            for kind, meter in meters.items():
                meter.take(costs[kind], call.now)
            return None
        if not math.isinf(max(waits.values())):
            for kind, meter in meters.items():
                if self.limits[kind].count_refused:
                    meter.take(costs[kind], call.now)
                    waits[kind] = meter.wait(costs[kind], call.now)
        kind = max(waits, key=waits.__getitem__)
        wait = waits[kind]
        reason = "too_large" if math.isinf(wait) else kind
        payload = self._rate_limit_error(call, kind, wait)
        return _Refusal(429, reason, payload, self.retry_after.headers(wait))

    def _rate_limit_error(self, call: _Incoming, kind: Kind, wait: float) -> Any:
        """OpenAI's 429 body for a request or token limit (Error codes page, "Rate limit
        reached for requests"; the message as the API words it)."""
        limit = self.limits.get(kind)
        requested = self._costs(call)[kind]
        unit = f"{call.model} in organization {ORGANIZATION} on {UNITS[kind]}"
        if limit is None:
            message = f"Rate limit reached for {unit}. Please try again in 1s. {LIMITS_PAGE}"
        elif math.isinf(wait):
            message = (
                f"Request too large for {unit}: Limit {limit.per_minute:.0f}, Requested"
                f" {requested:.0f}. The input or output tokens must be reduced in order to run"
                f" successfully. {LIMITS_PAGE}"
            )
        else:
            used = self._meter(call.model, kind, call.now).used(call.now)
            message = (
                f"Rate limit reached for {unit}: Limit {limit.per_minute:.0f}, Used"
                f" {math.ceil(used - EPSILON)}, Requested {requested:.0f}. Please try again in"
                f" {openai_duration(wait)}. {LIMITS_PAGE}"
            )
        return _openai_error(message, kind, "rate_limit_exceeded")

    def _limit_headers(self, model: str, now: float) -> dict[str, str]:
        """``x-ratelimit-*`` for each announced limit (OpenAI's Rate limits guide, "Rate
        limits in headers"; Azure's quota page): the limit a minute, what would be admitted
        now, and the time until the limit is back to full, in OpenAI's duration format."""
        headers: dict[str, str] = {}
        for kind, limit in self.limits.items():
            if not limit.announced:
                continue
            meter = self._meter(model, kind, now)
            headers[f"x-ratelimit-limit-{kind}"] = f"{limit.per_minute:.0f}"
            headers[f"x-ratelimit-remaining-{kind}"] = str(math.floor(meter.remaining(now)))
            headers[f"x-ratelimit-reset-{kind}"] = openai_duration(meter.reset_s(now))
        return headers

    def _completion(self, call: _Incoming) -> dict[str, Any]:
        answer = self.answers.get(call.model, self.answer)
        messages = call.body.get("messages") or [{}]
        prompt = _text(messages[-1].get("content"))
        content = answer.content(prompt, call.body) if callable(answer.content) else answer.content
        finish = "stop"
        reserved = call.body.get("max_completion_tokens") or call.body.get("max_tokens")
        if reserved and estimate_tokens(len(content)) > int(reserved):
            content, finish = content[: int(reserved) * 4], "length"
        if answer.cut_to is not None:
            content, finish = content[: answer.cut_to], "length"
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if answer.refusal is not None:
            message.update(content=None, refusal=answer.refusal)
        completion: dict[str, Any] = {
            "id": f"chatcmpl-sim-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": call.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
        }
        if answer.usage:
            used_in = prompt_tokens(call.body)
            used_out = estimate_tokens(len(answer.refusal or content))
            completion["usage"] = {
                "prompt_tokens": used_in,
                "completion_tokens": used_out,
                "total_tokens": used_in + used_out,
            }
        return completion

    async def respond(self, raw: bytes) -> tuple[int, Any, dict[str, str]]:
        """One call's HTTP answer (status, JSON body, headers) to the request body ``raw``,
        after the latency of an answered call; the loop it runs on is the caller's (the
        server's thread, or an in-process transport's, see ``transport``)."""
        body = orjson.loads(raw)
        model = str(body.get("model", "sim"))
        call = _Incoming(model, body, token_cost(body, self.completion_estimate), self.clock())
        refusal = next((r for check in self._checks if (r := check(call)) is not None), None)
        headers = self._limit_headers(model, call.now)
        if refusal is not None:
            self.calls.append(Call(call.now, refusal.status, model, call.cost, refusal.reason))
            return refusal.status, refusal.payload, {**headers, **refusal.headers}
        self._answered += 1
        completion = self._completion(call)
        delay = self.latency_s + self._latency_dice.uniform(-self.jitter_s, self.jitter_s)
        if delay > 0:
            await asyncio.sleep(delay)
        self.calls.append(Call(call.now, 200, model, call.cost, "answered"))
        return 200, completion, headers

    async def _completions(self, request: web.Request) -> web.Response:
        status, payload, headers = await self.respond(await request.read())
        return web.json_response(payload, status=status, headers=headers)

    def transport(self) -> httpx.AsyncBaseTransport:
        """The simulator as an httpx transport in the caller's event loop, no socket between:
        ``AsyncOpenAI(http_client=httpx.AsyncClient(transport=sim.transport()))`` sends each
        request to ``respond`` as the HTTP server would (for runs on a virtual clock)."""
        return _InProcess(self)

    # --- lifecycle: its own thread and event loop -----------------------------------------
    def start(self) -> ProviderSim:
        self.started_at = self.clock()
        self._thread = threading.Thread(target=self._run, name="provider-sim", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._failure is not None:
            raise RuntimeError(f"provider simulator did not start: {self._failure!r}")
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start()
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", self._port, backlog=1024).start()
            self.port = runner.addresses[0][1]
            self._ready.set()
            await self._stopping.wait()
        finally:
            await runner.cleanup()

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> ProviderSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- in a process of its own ----------------------------------------------------------------


def _serve_remote(options: dict[str, Any], conn: Any) -> None:
    """The child's side of ``RemoteSim``: serve until told to stop, then send the record."""
    sim = ProviderSim(**options).start()
    conn.send(sim.port)
    conn.recv()
    sim.stop()
    conn.send((sim.started_at, list(sim.calls)))


class RemoteSim:
    """The simulator in a process of its own (``with RemoteSim(**options) as remote:``), so a
    bench's client has a core to itself; ``remote.sim`` afterwards holds its record (a
    ``ProviderSim`` with the same options, not started, for the same helpers). Both processes
    read the same monotonic clock (Linux's CLOCK_MONOTONIC is the system's)."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.port = 0
        self.sim: ProviderSim | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> RemoteSim:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve_remote, args=(self.options, child), daemon=True
        )
        self._process.start()
        if not self._conn.poll(30):
            raise RuntimeError("the remote provider simulator did not start")
        self.port = self._conn.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        started_at, calls = self._conn.recv()
        self._process.join(10)
        self.sim = ProviderSim(**self.options)
        self.sim.started_at, self.sim.calls = started_at, calls
