"""A judge that misbehaves as real providers do. Prints each figure beside its target;
asserts nothing (``tests/judge/test_pacing.py`` asserts the same rows on the virtual clock).

Issue 25's table, one phase a row, through the judge client (the openai SDK over HTTP) against
the provider simulator (``tests/provider_sim.py``) in a process of its own, each case from a
new client with a user's default settings (``tests/pacing_cases.py``):

(p1) 1 call in 7 refused, random or every 7th, with and without ``Retry-After: 1``: time
     against the clean run [<= 1.5x].
(p2) a silent request limit (``--rpm``), token bucket and sliding minute, Retry-After exact
     and understated ("1"), ``--calls`` calls at once: 429s [< 2 %], limit used [>= 0.95];
     and the first rate's sliding minute as providers run it (``silent_window_cases``): its
     refusals counted against it or not, Retry-After exact, "1" or none, answers in 0.1 and
     1 s, and a steady stream at twice the limit.
(p3) an announced request limit: 429s [0 %], limit used [>= 0.95].
(p4) an announced token limit, prompts of 1 k to 30 k tokens: 429s [< 2 %], used [>= 0.9].
(p5) a silent token limit (429s that say tokens): 429s [< 5 %], used [>= 0.8].
(p6) 529 / 503 overload for 10 s every minute in a steady stream: error scores [0], the
     judge dark from each burst's start to its first answer, against the bursts [<= 1.5x].
(p7) two models on one endpoint, one under a silent limit: the free one's time against alone
     [<= 1.1x].

``--virtual`` runs them on the virtual clock instead (seconds for the lot, the same figures
on any machine), ``--seeds N`` each N times with other latency and refusal dice (min, median,
max).

On the embedded broker, with a worker:

(r) the issue's first case: 600 live-coach traces scored by one worker against a judge that
    refuses one call in seven with ``Retry-After: 1``, against a clean one [<= 1.5x].
(o) an outage in a steady stream: traces at ``--rate`` a second for ``--seconds``, the judge
    answering 503 to every call for ``--outage`` seconds from ``--outage-at``; prints error
    scores (target 0), traces scored, the consumer-lag peak and when the last score came.

    python bench/judge_trouble.py [--phases p1,...,p7,r,o] [--virtual] [--seeds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
from throughput import Phase, fetch_metrics, judged_phase, rules_subset, stop, traces

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, reader
from stream.metrics import sample_value

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import pacing_cases as cases
from pacing_cases import Case, Figures
from provider_sim import Refusals, RemoteSim, RetryAfter
from scripted_judge import MockJudge

Runner = Callable[[Case], Figures]


def seeded(case: Case, seed: int) -> Case:
    """``case`` with other dice: the simulator's latency, and its refusals if any."""
    sim = dict(case.sim, seed=seed)
    if isinstance(refusals := sim.get("refusals"), Refusals):
        sim["refusals"] = dataclasses.replace(refusals, seed=refusals.seed + seed)
    return dataclasses.replace(case, sim=sim)


def runs(run: Runner, case: Case, seeds: int) -> list[Figures]:
    return [run(seeded(case, k) if k else case) for k in range(seeds)]


def spread(values: list[float], fmt: str) -> str:
    """One figure, or min / median / max of several."""
    if len(values) == 1:
        return format(values[0], fmt)
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{format(low, fmt)} / {format(mid, fmt)} / {format(high, fmt)}"


def p1(run: Runner, seeds: int) -> None:
    all_cases = list(cases.noise_cases())
    clean = runs(run, all_cases[0], seeds)
    for case in all_cases[1:]:
        got = runs(run, case, seeds)
        ratios = [g.seconds / c.seconds for g, c in zip(got, clean, strict=True)]
        print(
            f"(p1) 600 calls, 1 in 7 refused ({case.name}): {spread(ratios, '.2f')}x the clean "
            f"run [target <= 1.5]; {sum(g.errors for g in got)} errors; "
            f"{spread([g.share_429 * 100 for g in got], '.1f')} % 429"
        )


def limit_phase(
    name: str, chosen: Iterator[Case], run: Runner, seeds: int, targets: str, unit: str
) -> None:
    for case in chosen:
        got = runs(run, case, seeds)
        used = [g.requests_used if unit == "requests" else g.tokens_used for g in got]
        print(
            f"({name}) {case.calls} calls at once, {case.row}, {case.name}: 429 "
            f"{spread([g.share_429 * 100 for g in got], '.2f')} %, limit used "
            f"{spread(used, '.2f')} {targets}; {sum(g.errors for g in got)} errors"
        )


def p6(run: Runner, seeds: int) -> None:
    all_cases = list(cases.overload_cases())
    clean = runs(run, all_cases[0], seeds)
    for case in all_cases[1:]:
        got = runs(run, case, seeds)
        late = [g.seconds - c.seconds for g, c in zip(got, clean, strict=True)]
        print(
            f"(p6) {case.calls} calls at {case.rate:g}/s, {case.name}: "
            f"{sum(g.errors for g in got)} errors [target 0]; dark "
            f"{spread([g.dark for g in got], '.2f')}x the bursts [target <= 1.5]; last verdict "
            f"{spread(late, '.1f')} s after the clean run's"
        )


def p7(run: Runner, seeds: int) -> None:
    both, alone = cases.two_model_cases()
    got, solo = runs(run, both, seeds), runs(run, alone, seeds)
    ratios = [g.free_seconds / s.seconds for g, s in zip(got, solo, strict=True)]
    print(
        f"(p7) two models on one endpoint, one under a silent 600 rpm limit: the free one's "
        f"{alone.calls} calls take {spread(ratios, '.2f')}x their time alone [target <= 1.1]"
    )


def table(phases: set[str], run: Runner, args: argparse.Namespace) -> None:
    rpms = tuple(float(r) for r in args.rpm.split(","))
    if "p1" in phases:
        p1(run, args.seeds)
    if "p2" in phases:
        chosen = cases.silent_request_cases(rpms, args.calls)
        limit_phase("p2", chosen, run, args.seeds, "[targets < 2 %, >= 0.95]", "requests")
        windows = cases.silent_window_cases(rpms[0], args.calls)
        limit_phase("p2", windows, run, args.seeds, "[targets < 2 %, >= 0.95]", "requests")
    if "p3" in phases:
        chosen = cases.announced_request_cases(rpms[0], args.calls)
        limit_phase("p3", chosen, run, args.seeds, "[targets 0 %, >= 0.95]", "requests")
    if "p4" in phases:
        chosen = cases.token_cases(announced=True)
        limit_phase("p4", chosen, run, args.seeds, "[targets < 2 %, >= 0.9]", "tokens")
    if "p5" in phases:
        chosen = cases.token_cases(announced=False)
        limit_phase("p5", chosen, run, args.seeds, "[targets < 5 %, >= 0.8]", "tokens")
    if "p6" in phases:
        p6(run, args.seeds)
    if "p7" in phases:
        p7(run, args.seeds)


def refusing_worker(bootstrap: str, tmp: Path, n: int, concurrency: int) -> None:
    """(r): the issue's own case, on the broker, with a worker."""
    answer = cases.sim_options(next(cases.noise_cases()))
    with RemoteSim(**answer) as clean:
        n_clean, secs_clean, _ = judged_phase(bootstrap, tmp, n, clean.base_url, concurrency)
    refusals = Refusals(share=1 / 7, retry_after=RetryAfter("fixed", 1.0))
    with RemoteSim(**answer, refusals=refusals) as refusing:
        n_refused, secs_refused, _ = judged_phase(bootstrap, tmp, n, refusing.base_url, concurrency)
    assert refusing.sim is not None
    share = refusing.sim.share_429()
    print(
        f"(r)  {n} traces, one worker: clean judge {secs_clean:.1f} s ({n_clean} scores); one call "
        f"in seven answered 429 with Retry-After: 1 ({share * 100:.1f} % of calls): "
        f"{secs_refused:.1f} s ({n_refused} scores); ratio "
        f"{secs_refused / max(secs_clean, 1e-9):.2f} [target <= 1.5]"
    )


async def paced(
    bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]], rate: float
) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        started = time.monotonic()
        for i, (key, value) in enumerate(messages):
            await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            await producer.send(topic, key=key, value=value)
        await producer.flush()
    finally:
        await producer.stop()


async def scores_until(bootstrap: str, topic: str, expected: int, timeout: float) -> list[dict]:
    found: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    async with reader(bootstrap, topic) as consumer:
        while len(found) < expected and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    event = orjson.loads(r.value)
                    found[event["score_id"]] = event
    return list(found.values())


def outage(bootstrap: str, tmp: Path, args: argparse.Namespace) -> None:
    p = Phase(bootstrap, tmp)
    asyncio.run(ensure_topics(bootstrap, [p.src, p.dst], 4))
    n = int(args.rate * args.seconds)
    live = [(k, v) for k, v in traces(n * 2) if b"studio-live-coach" in v][:n]
    rules = rules_subset(tmp, ["studio_live_coach_feedback_quality"])
    with MockJudge(latency_s=0.2) as judge:
        judge.script("", '{"score": 3, "reason": "bench"}')
        proc, port = p.worker(rules, OPENAI_BASE_URL=judge.base_url, SCORER_LAG_INTERVAL_S="1")
        time.sleep(8)  # the worker joins its group
        started = time.monotonic()

        async def run() -> tuple[list[dict], float]:
            lag_peak = 0.0

            async def watch() -> None:
                nonlocal lag_peak
                down = False
                while True:
                    elapsed = time.monotonic() - started
                    if not down and elapsed >= args.outage_at:
                        judge.go_down(args.outage)
                        down = True
                    try:
                        page = fetch_metrics(port)
                    except OSError:
                        page = ""
                    lag_peak = max(lag_peak, sample_value(page, "scorer_consumer_lag", topic=p.src))
                    await asyncio.sleep(1.0)

            watcher = asyncio.create_task(watch())
            producing = asyncio.create_task(paced(bootstrap, p.src, live, args.rate))
            scores = await scores_until(bootstrap, p.dst, n, args.seconds + args.outage + 300)
            await producing
            watcher.cancel()
            return scores, lag_peak

        scores, lag_peak = asyncio.run(run())
        done = time.monotonic() - started
        stop(proc)
    errors = sum(1 for s in scores if s["status"] == "error")
    print(
        f"(o)  {n} traces at {args.rate:g}/s, judge down {args.outage:g} s from t={args.outage_at:g} s: "
        f"{len(scores)} scored, {errors} error scores [target 0]; consumer lag peak "
        f"{lag_peak:.0f}; last score at t={done:.0f} s (stream ended at t={args.seconds:g} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--phases", default="p1,p2,p3,p4,p5,p6,p7,r,o")
    parser.add_argument("--virtual", action="store_true", help="the table on the virtual clock")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--rpm", default="600,3000")
    parser.add_argument("--traces", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--outage", type=float, default=60.0)
    parser.add_argument("--outage-at", type=float, default=15.0)
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    run: Runner = cases.run_case if args.virtual else cases.run_case_real
    clock = "virtual clock" if args.virtual else "real clock, the simulator in its own process"
    print(f"judge trouble: {clock}; {args.seeds} seed(s) a case")
    started = time.monotonic()
    table(phases, run, args)
    if phases & {"r", "o"}:
        tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-"))
        broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
        try:
            if "r" in phases:
                refusing_worker(broker.bootstrap, tmp, args.traces, args.concurrency)
            if "o" in phases:
                outage(broker.bootstrap, tmp, args)
        finally:
            broker.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
