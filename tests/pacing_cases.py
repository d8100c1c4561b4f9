"""Issue 25's table: how the judge client keeps pace with each provider behaviour, one case a
row variant, each run through the real client (the openai SDK included) against the provider
simulator and measured as the issue states its target.

Shared by the tests (``tests/judge/test_pacing.py``: every case on a virtual clock, so minutes
of provider time take seconds and the figures are the same on any machine) and the bench
(``bench/judge_trouble.py``: the same cases on the real clock, over HTTP, the simulator in a
process of its own).

Every case starts from a new client (no warm-up excluded) with the settings a user gets by
default: 32 judge calls in flight at most, 5 attempts, backoff from 0.5 s.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from fixtures import fretcoach_rules
from provider_sim import Answer, Overload, ProviderSim, RateLimit, Refusals, RemoteSim, RetryAfter
from virtual_time import run_virtual

from stream.errors import JudgeError
from stream.judge.client import JudgeClient
from stream.judge.openai_api import OpenAIChatAPI
from stream.ruleset.schema import LLMJudgeRule
from stream.settings import Settings

LATENCY_S = 0.5  # a small judge model's answer (the clean run: 600 calls in 9.4 s)
JITTER_S = 0.25
IN_FLIGHT = 512  # a worker's SCORER_MAX_IN_FLIGHT default: traces waiting on the judge
ANSWER = '{"score": 3, "reason": "paced"}'


@dataclass(frozen=True)
class Figures:
    """What one run measured. ``seconds``: from the first call to the last verdict;
    ``share_429``: calls answered 429 among all calls; ``requests_used``/``tokens_used``: the
    limit's share used (calls or tokens answered 200 a second, over the span of the calls,
    against the limit's rate); NaN where no such limit was set."""

    seconds: float
    errors: int
    calls: int
    share_429: float
    requests_used: float
    tokens_used: float
    dark: float = float("nan")  # overload: see dark_ratio
    free_seconds: float = float("nan")  # two models: until the last model's last verdict


@dataclass(frozen=True)
class Case:
    """One row variant: the simulator's options, the prompts (one judge call each, ``tokens``
    long), how many wait on the judge at once (``in_flight``) and, for a stream, how fast
    they arrive (``rate``: a second; 0: all at once)."""

    row: str
    name: str
    sim: dict[str, Any]
    calls: int
    in_flight: int = IN_FLIGHT
    tokens: Callable[[int], int] = lambda i: 300
    rate: float = 0.0
    models: tuple[str, ...] = ("gpt-4o-mini",)
    latency_s: float = LATENCY_S
    extra: dict[str, Any] = field(default_factory=dict)

    def prompts(self) -> list[tuple[str, str]]:
        """(model, prompt) of every call, the models taking turns."""
        return [
            (self.models[i % len(self.models)], f"judge call {i} " + "x" * (4 * self.tokens(i)))
            for i in range(self.calls)
        ]


def judge_rule() -> LLMJudgeRule:
    found = next(r for r in fretcoach_rules().rules if r.id == "studio_live_coach_feedback_quality")
    assert isinstance(found, LLMJudgeRule)
    return found


def client_settings(**overrides: Any) -> Settings:
    """A user's defaults (an hour's outage limit, 32 calls in flight, 5 attempts) for a judge
    at ``base_url``."""
    options: dict[str, Any] = {"openai_base_url": "http://sim/v1", "openai_api_key": "sk-test"}
    return Settings(**(options | overrides))


async def judge_all(
    client: JudgeClient, case: Case, clock: Callable[[], float]
) -> tuple[float, int, float]:
    """Every call of ``case`` judged through ``client``: (seconds, error count, seconds until
    the last model's last verdict)."""
    base = judge_rule()
    rules = {
        m: base.model_copy(update={"judge": base.judge.model_copy(update={"model": m})})
        for m in case.models
    }
    gate = asyncio.Semaphore(case.in_flight)
    errors = 0
    last_model_done = float("nan")

    async def one(i: int, model: str, prompt: str) -> None:
        nonlocal errors, last_model_done
        if case.rate:
            await asyncio.sleep(i / case.rate)
        async with gate:
            try:
                await client.judge(rules[model], prompt)
            except JudgeError:
                errors += 1
        if model == case.models[-1]:
            last_model_done = clock() - started

    started = clock()
    await asyncio.gather(*(one(i, m, p) for i, (m, p) in enumerate(case.prompts())))
    return clock() - started, errors, last_model_done


def figures(sim: ProviderSim, seconds: float, errors: int, last_model: float) -> Figures:
    model = sim.limited_models[0] if sim.limited_models else None
    requests = sim.requests_used(model=model) if "requests" in sim.limits else float("nan")
    tokens = sim.tokens_used(model=model) if "tokens" in sim.limits else float("nan")
    dark = dark_ratio(sim, sim.overload) if sim.overload is not None else float("nan")
    share = sim.share_429()
    return Figures(seconds, errors, len(sim.calls), share, requests, tokens, dark, last_model)


def run_case(case: Case) -> Figures:
    """``case`` on a virtual clock: the client and the simulator share one event loop, the
    SDK's requests going to the simulator through an in-process transport."""

    async def main() -> Figures:
        loop = asyncio.get_running_loop()
        sim = make_sim(sim_options(case), clock=loop.time)
        config = client_settings().judge_config()
        api = OpenAIChatAPI(
            base_url=config.base_url,
            api_key="sk-test",
            timeout_s=config.timeout_s,
            http_client=httpx.AsyncClient(transport=sim.transport()),
        )
        # seeded backoff jitter: the same run every time
        client = JudgeClient(config, api=api, clock=loop.time, jitter=random.Random(0))
        try:
            seconds, errors, last_model = await judge_all(client, case, loop.time)
        finally:
            await client.close()
        return figures(sim, seconds, errors, last_model)

    return run_virtual(main)


def run_case_real(case: Case) -> Figures:
    """``case`` on the real clock: the client over HTTP (the openai SDK's own) to the
    simulator in a process of its own."""
    options = sim_options(case)
    with RemoteSim(**options) as remote:

        async def main() -> tuple[float, int, float]:
            config = client_settings(openai_base_url=remote.base_url).judge_config()
            client = JudgeClient(config)
            try:
                return await judge_all(client, case, time.monotonic)
            finally:
                await client.close()

        seconds, errors, last_model = asyncio.run(main())
    assert remote.sim is not None
    return figures(remote.sim, seconds, errors, last_model)


def sim_options(case: Case) -> dict[str, Any]:
    """The simulator's options for ``case``: its own, over the shared latency and answer."""
    options = {"latency_s": case.latency_s, "jitter_s": JITTER_S, "answer": None} | case.sim
    if options.get("answer") is None:
        options["answer"] = Answer(ANSWER)
    return options


def make_sim(options: dict[str, Any], **more: Any) -> ProviderSim:
    return ProviderSim(**options, **more)


# --- the table ----------------------------------------------------------------------------


def seeded_sizes(low: int, high: int, seed: int = 3) -> Callable[[int], int]:
    """Prompt sizes drawn once (the same for every run of a case)."""
    dice = random.Random(seed)
    sizes = [dice.randint(low, high) for _ in range(10_000)]
    return lambda i: sizes[i % len(sizes)]


def noise_cases(calls: int = 600) -> Iterator[Case]:
    """Row 1: one call in seven refused whatever the rate, random or every 7th, with and
    without ``Retry-After: 1``; the clean run first."""
    yield Case("noise", "clean", {}, calls)
    for how, refusals in (("random", Refusals(share=1 / 7)), ("every 7th", Refusals(every=7))):
        for said in ("none", "1"):
            header = RetryAfter("fixed", 1.0) if said == "1" else RetryAfter("none")
            sim = {"refusals": replace(refusals, retry_after=header)}
            yield Case("noise", f"{how}, Retry-After {said}", sim, calls)


def silent_request_cases(
    rpms: tuple[float, ...] = (600, 3000), calls: int = 1500
) -> Iterator[Case]:
    """Row 2: a silent request limit, token bucket (a second's burst) and sliding 60 s
    window, its 429s' Retry-After exact or understated ("1"), every call at once. The 600 rpm
    window has rows of its own (``silent_window_cases``)."""
    for rpm in rpms:
        for shape in ("bucket", "window"):
            if shape == "window" and rpm == 600:
                continue
            for said in ("exact", "understated"):
                yield _silent(rpm, shape, said, calls)


def silent_window_cases(rpm: float = 600, calls: int = 1500) -> Iterator[Case]:
    """Row 2's windows as providers run them (issue 48): a sliding 60 s window that counts
    its refused calls against itself or not (OpenAI's help centre: "unsuccessful requests
    contribute to your per-minute limit"), its 429s saying the real wait, "1" or nothing;
    every call at once (a backlog), a slower and a slower still judge; and a steady stream at
    twice the limit."""
    for counted in (False, True):
        for said in ("exact", "understated", "none"):
            yield _silent(rpm, "window", said, calls, counted=counted)
    for latency in (0.1, 1.0):
        yield _silent(rpm, "window", "understated", calls, counted=True, latency_s=latency)
    for counted in (False, True):
        yield _silent(rpm, "window", "understated", calls, counted=counted, rate=2 * rpm / 60)


def _silent(
    rpm: float,
    shape: str,
    said: str,
    calls: int,
    *,
    counted: bool = False,
    latency_s: float = LATENCY_S,
    rate: float = 0.0,
) -> Case:
    limit = RateLimit(rpm, shape=shape, announced=False, count_refused=counted)  # type: ignore[arg-type]
    sim = {"requests": limit, "retry_after": RetryAfter(said)}  # type: ignore[arg-type]
    name = f"{rpm:g} rpm, {shape}, Retry-After {said}"
    if shape == "window":
        name += ", refusals counted" if counted else ", refusals not counted"
    if latency_s != LATENCY_S:
        name += f", answers in {latency_s:g} s"
    if rate:
        name += f", {rate:g} calls/s arriving"
    return Case(
        "silent requests", name, sim, calls, in_flight=calls, rate=rate, latency_s=latency_s
    )


def announced_request_cases(rpm: float = 600, calls: int = 1500) -> Iterator[Case]:
    """Row 3: an announced request limit (``x-ratelimit-*-requests``), every call at once."""
    yield Case(
        "announced requests", f"{rpm:g} rpm", {"requests": RateLimit(rpm)}, calls, in_flight=calls
    )


def token_cases(announced: bool, tpm: float = 1_000_000, calls: int = 200) -> Iterator[Case]:
    """Rows 4 and 5: a token limit (announced in ``x-ratelimit-*-tokens``, or silent with 429s
    that say tokens), a minute's tokens as a bucket or a sliding window, prompts of 1 k to
    30 k tokens, every call at once."""
    row = "announced tokens" if announced else "silent tokens"
    for shape in ("bucket", "window"):
        limit = RateLimit(tpm, shape=shape, burst=tpm, announced=announced)  # type: ignore[arg-type]
        yield Case(
            row,
            f"{tpm / 1000:g} k tokens/min, {shape}",
            {"tokens": limit},
            calls,
            in_flight=calls,
            tokens=seeded_sizes(1000, 30_000),
        )


def overload_cases(seconds: float = 150.0, rate: float = 5.0) -> Iterator[Case]:
    """Row 6: a steady stream while the provider answers 529 (Anthropic) or 503 (OpenAI)
    overloaded for 10 s every minute; the clean stream first."""
    calls = int(seconds * rate)
    yield Case("overload", "clean", {}, calls, rate=rate)
    for status in (529, 503):
        burst = Overload(period_s=60.0, burst_s=10.0, status=status, offset_s=20.0)  # type: ignore[arg-type]
        yield Case("overload", f"{status} for 10 s a minute", {"overload": burst}, calls, rate=rate)


def dark_ratio(sim: ProviderSim, burst: Overload) -> float:
    """The time the judge answered nothing from the start of each overload burst (until the
    first call answered 200 after it) over the bursts' own length: 1.0 is back at once when
    a burst ends; more is time lost to backing off past it."""
    answered = sorted(c.at - sim.started_at for c in sim.calls if c.status == 200)
    dark = own = 0.0
    start = burst.offset_s
    while answered and start < answered[-1]:
        first = next((at for at in answered if at >= start), None)
        if first is not None:
            dark += first - start
            own += burst.burst_s
        start += burst.period_s
    return dark / own if own else 0.0


def two_model_cases(calls: int = 600) -> tuple[Case, Case]:
    """One limiter per endpoint and model: a model under a silent 600 rpm limit and another
    free of it, their calls taking turns; and the free model's calls alone."""
    limited = "judge-large"
    sim = {"requests": RateLimit(600, announced=False), "limited_models": (limited,)}
    both = Case("two models", "one limited, one free", sim, calls, models=(limited, "gpt-4o-mini"))
    alone = Case("two models", "the free one alone", sim, calls // 2, models=("gpt-4o-mini",))
    return both, alone
