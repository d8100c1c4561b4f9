"""One provider account's limits shared by a fleet of workers (issue 48). Prints each figure
beside its target; asserts nothing (``tests/judge/test_fleet.py`` asserts on a virtual clock).

Real ``scorer worker`` processes in one group on the embedded broker, one account of the
provider simulator (``tests/provider_sim.py``) in its own process, real clock; each run afresh
(topics, app id, group, judge-pace topic, simulator), the group settled, the traces produced at
once and timed from then; one judge call a trace (``bench/judge_trouble.py``'s live-coach
traces and rule), the verdict cache off; figures from the simulator's record of the calls.

(a1), (a3) 1 and 3 workers, a silent 600 rpm sliding window whose 429s say ``Retry-After: 1``
     (understated), refusals counted against it and not: 429s [< 2 %], limit used [>= 0.95].
(b1), (b3) an announced token limit (``--tpm``): 429s [< 2 %], tokens used [>= 0.9].
(c)  3 workers, announced 600 rpm, one killed (SIGKILL), one added (``--events``): per event,
     until back at the limit for good (calls answered a 1 s bin by arrival, every 5 s to 30 s
     after averaging >= 0.95 of it) [<= 10 s], 429s in the 30 s after [< 2 %].
(cw) the same against (a)'s window, refusals not counted (``--window-events``).
(d)  1 worker, 1 call in 7 refused (no Retry-After; ``Retry-After: 1``): vs a clean run [<= 1.5x].
And calls/429s a 5 s, ``scorer_judge_pace_rps`` mid-run, the workers heard on the judge-pace
topic, their "judge pace" log lines; calls and paces all in ``--record``.

    python bench/judge_fleet.py [--phases a1,a3,b1,b3,c,cw,d] [--traces 1500] [--tpm 240000]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import math
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from scale import produce_round_robin, wait_settled
from throughput import Phase, fetch_metrics, rules_subset, stop, traces

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, reader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import pacing_cases as cases
from provider_sim import Call, ProviderSim, RateLimit, Refusals, RemoteSim, RetryAfter

RULE = "studio_live_coach_feedback_quality"
RPM = 600.0
SAMPLE_S = 2.0  # each worker's /metrics read this often
BIN_S = 5.0  # the printed timeline's bins
AFTER_S = 30.0  # refusals counted this long after an event
BACK_AT = 0.95  # "back at the limit": this share of it, over 5 s from a 1 s bin
IDLE_S = 20.0  # no new score for this long: the scores are read again from the start
TIMEOUT_S = 900.0  # a run's scores all in, at most

Events = tuple[tuple[float, str], ...]
PACE_LINE = re.compile(r".*judge pace.*")
MET = {True: "met", False: "NOT met"}
FLEET = re.compile(r"^scorer_judge_fleet_(workers|share|shared)\{.*\} (\S+)$", re.M)
PACE = re.compile(r'^scorer_judge_pace_rps\{.*reason="([^"]*)".*\} (\S+)$', re.M)


class ScoreReader(threading.Thread):
    """The scores topic read until ``expected`` distinct scores (first Kafka timestamp, status);
    again from the start after ``IDLE_S`` without one (the embedded broker's readers miss some)."""

    def __init__(self, bootstrap: str, topic: str, expected: int, timeout: float) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.expected = bootstrap, topic, expected
        self.deadline = time.monotonic() + timeout
        self.first_ms: dict[str, tuple[int, str]] = {}
        self.offsets: set[tuple[int, int]] = set()  # every record read, duplicates included

    def run(self) -> None:
        while len(self.first_ms) < self.expected and time.monotonic() < self.deadline:
            asyncio.run(self._read())

    async def _read(self) -> None:
        quiet_since = time.monotonic()
        async with reader(self.bootstrap, self.topic) as consumer:
            while len(self.first_ms) < self.expected and time.monotonic() < self.deadline:
                if time.monotonic() - quiet_since > IDLE_S:
                    return
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for r in records:
                        event = orjson.loads(r.value)
                        self.offsets.add((r.partition, r.offset))
                        if event["score_id"] not in self.first_ms:
                            quiet_since = time.monotonic()
                        seen = self.first_ms.get(event["score_id"], (r.timestamp, ""))[0]
                        self.first_ms[event["score_id"]] = (min(seen, r.timestamp), event["status"])


class Fleet:
    """The workers of one app (a group, a judge-pace topic) judging at ``judge_url``."""

    def __init__(self, bootstrap: str, tmp: Path, partitions: int, judge_url: str) -> None:
        self.phase = Phase(bootstrap, tmp)
        self.app_id = f"bench-{self.phase.suffix}"  # Phase.worker's SCORER_APP_ID: the group
        self.env = {"OPENAI_BASE_URL": judge_url, "SCORER_TOPIC_PARTITIONS": str(partitions)}
        self.env["SCORER_JUDGE_CACHE_TTL_S"] = "0"  # the traces differ only in their ids
        self.rules = rules_subset(tmp, [RULE])
        self.workers: list[tuple[subprocess.Popen[bytes], int, Path]] = []
        asyncio.run(ensure_topics(bootstrap, [self.phase.src, self.phase.dst], partitions))

    def add(self) -> None:
        """One more worker (its own ``Phase`` copy: the same topics and app, its own files)."""
        own = copy.copy(self.phase)
        own.tmp = self.phase.tmp / f"{self.phase.suffix}-w{len(self.workers)}"
        own.tmp.mkdir(parents=True)
        proc, port = own.worker(self.rules, **self.env)
        self.workers.append((proc, port, own.tmp / f"worker-{own.suffix}.log"))

    def kill(self) -> None:
        """SIGKILL the first worker still running."""
        next(proc for proc, _, _ in self.workers if proc.poll() is None).kill()

    def paces(self) -> list[tuple[float, str]]:
        """Each running worker's ``scorer_judge_pace_rps`` (summed over models), its reason and
        the ``scorer_judge_fleet_*`` workers, share and shared."""
        out = []
        for _, port, _ in (w for w in self.workers if w[0].poll() is None):
            try:
                text = fetch_metrics(port)
            except OSError:
                text = 'scorer_judge_pace_rps{reason="down"} nan'
            pace = PACE.findall(text)
            fleet = [f"{k}={float(v):.2f}" for k, v in FLEET.findall(text)]
            out.append((sum(float(v) for _, v in pace), " ".join([r for r, _ in pace] + fleet)))
        return out

    async def heard(self) -> int:
        """Workers heard on the judge-pace topic over 3 s (they publish every second)."""
        workers: set[str] = set()
        async with reader(self.phase.bootstrap, f"{self.app_id}-judge-pace") as consumer:
            until = time.monotonic() + 3.0
            while time.monotonic() < until:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    workers |= {orjson.loads(r.value)["worker"] for r in records if r.value}
        return len(workers)

    def pace_lines(self) -> list[str]:
        logs = {f"w{i}": w[2].read_text(errors="replace") for i, w in enumerate(self.workers)}
        return [f"{w}: {x[:200]}" for w, text in logs.items() for x in PACE_LINE.findall(text)]

    def stop(self) -> None:
        for proc in (w[0] for w in self.workers if w[0].poll() is None):
            stop(proc)


@dataclass
class Run:
    """What one run saw, on seconds from the traces produced (``t0``, monotonic as the
    simulator's clock): its calls, paces (a running worker's, each ``SAMPLE_S``), events."""

    sim: ProviderSim = field(default_factory=ProviderSim)
    t0: float = 0.0
    seconds: float = math.nan
    scores: int = 0
    records: int = 0
    errors: int = 0
    heard: int = 0
    pace_lines: list[str] = field(default_factory=list)
    paces: list[tuple[float, list[tuple[float, str]]]] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)

    def calls(self) -> list[Call]:
        return list(self.sim.calls)

    def bins(self, width: float, status: int | None = None) -> list[int]:
        """Calls (with ``status``, or all) a bin of ``width`` s, by arrival."""
        out: list[int] = []
        for c in self.calls():
            i = max(0, int((c.at - self.t0) // width))
            out += [0] * (i + 1 - len(out))
            out[i] += status is None or c.status == status
        return out

    def timeline(self) -> str:
        total, refused = self.bins(BIN_S), self.bins(BIN_S, 429)
        refused += [0] * (len(total) - len(refused))
        return " ".join(f"{n}/{r}" for n, r in zip(total, refused, strict=True))

    def mid_paces(self) -> str:
        if not self.paces:
            return "none read"
        t, paces = min(self.paces, key=lambda s: abs(s[0] - self.seconds / 2))
        each = ", ".join(f"{v:.2f} {why}" for v, why in paces)
        return f"t={t:.0f} s: {each} (sum {sum(v for v, _ in paces):.2f}/s)"


class Bench:
    """The phases' shared ground: the broker, the options, the record of every run."""

    def __init__(self, bootstrap: str, tmp: Path, args: argparse.Namespace) -> None:
        self.bootstrap, self.tmp, self.args = bootstrap, tmp, args
        self.record: dict[str, Any] = {}

    def run(self, name: str, sim: dict[str, Any], workers: int, n: int, events: Events = ()) -> Run:
        """``workers`` settled in their group, ``n`` traces produced at once, ``events``
        ("kill" or "add" at seconds from then) done on time, until every score is read."""
        got = Run()
        options = cases.sim_options(cases.Case("fleet", name, sim, n))
        live = [(k, v) for k, v in traces(n * 2) if b"studio-live-coach" in v][:n]
        with RemoteSim(**options) as remote:
            fleet = Fleet(self.bootstrap, self.tmp, self.args.partitions, remote.base_url)
            try:
                for _ in range(workers):
                    fleet.add()
                procs, ports, logs = (list(x) for x in zip(*fleet.workers, strict=True))
                wait_settled(self.bootstrap, fleet.app_id, fleet.phase.src, ports, procs, logs[0])
                scores = ScoreReader(self.bootstrap, fleet.phase.dst, n, TIMEOUT_S)
                scores.start()
                wall0, got.t0 = time.time(), time.monotonic()
                src, partitions = fleet.phase.src, self.args.partitions
                asyncio.run(produce_round_robin(self.bootstrap, src, live, partitions))
                self._watch(fleet, scores, got, list(events))
                got.heard, got.pace_lines = asyncio.run(fleet.heard()), fleet.pace_lines()
            finally:
                fleet.stop()
        assert remote.sim is not None
        got.sim, first = remote.sim, scores.first_ms.values()
        got.seconds = max((ms for ms, _ in first), default=math.nan) / 1000 - wall0
        got.scores, got.errors = len(first), sum(status == "error" for _, status in first)
        got.records = len(scores.offsets)
        calls = [(round(c.at - got.t0, 3), c.status, c.tokens) for c in got.calls()]
        self.record[name] = {"calls": calls, "paces": got.paces, "events": got.events}
        Path(self.args.record).write_bytes(orjson.dumps(self.record))
        return got

    def _watch(self, fleet: Fleet, scores: ScoreReader, run: Run, pending: list[Any]) -> None:
        """Until every score is read: the events on time, the paces every ``SAMPLE_S``."""
        next_sample = run.t0
        while scores.is_alive():
            now = time.monotonic()
            while pending and now - run.t0 >= pending[0][0]:
                what = pending.pop(0)[1]
                getattr(fleet, what)()
                run.events.append((round(now - run.t0, 2), what))
            if now >= next_sample:
                run.paces.append((round(now - run.t0, 1), fleet.paces()))
                next_sample += SAMPLE_S
            scores.join(0.2)

    def details(self, run: Run) -> None:
        print(f"     calls/429s a 5 s from the traces produced: {run.timeline()}")
        lines = "; ".join(run.pace_lines[:3]) or "none"
        print(
            f"     scorer_judge_pace_rps mid-run {run.mid_paces()}; workers heard on the "
            f"judge-pace topic {run.heard}; 'judge pace' log lines: {len(run.pace_lines)} ({lines})"
        )
        sys.stdout.flush()


def window(counted: bool) -> dict[str, Any]:
    """(a)'s provider: a silent sliding minute, its 429s saying ``Retry-After: 1``."""
    limit = RateLimit(RPM, shape="window", announced=False, count_refused=counted)
    return {"requests": limit, "retry_after": RetryAfter("understated")}


def refused(run: Run) -> str:
    share, calls = run.sim.share_429(), len(run.calls())
    return f"429 {share * 100:.2f} % of {calls} calls [target < 2 %: {MET[share < 0.02]}]"


def scored(run: Run) -> str:
    answered = sum(c.status == 200 for c in run.calls())
    return (
        f"{run.scores} scores ({run.records} records), the last at {run.seconds:.1f} s, "
        f"{run.errors} error scores; {answered} calls answered"
    )


def phase_a(bench: Bench, k: int) -> None:
    n = bench.args.traces
    for how in ("not counted", "counted"):
        run = bench.run(f"a{k}, refusals {how}", window(how == "counted"), k, n)
        used = run.sim.requests_used()
        print(
            f"(a{k}) {k} worker{'s' * (k > 1)}, {n} traces at once, silent {RPM:g} rpm sliding "
            f"window, Retry-After: 1 (understated), refusals {how}: {refused(run)}, limit used "
            f"{used:.3f} [target >= 0.95: {MET[used >= 0.95]}]; {scored(run)} "
            f"({n / RPM * 60:.0f} s possible)"
        )
        bench.details(run)


def phase_b(bench: Bench, k: int) -> None:
    n, tpm = bench.args.traces, bench.args.tpm
    run = bench.run(f"b{k}", {"tokens": RateLimit(tpm, announced=True)}, k, n)
    used, tokens = run.sim.tokens_used(), sum(c.tokens for c in run.calls() if c.status == 200)
    print(
        f"(b{k}) {k} worker{'s' * (k > 1)}, {n} traces at once, announced {tpm / 1000:g} k "
        f"tokens/min ({tokens / max(run.scores, 1):.0f} a call): {refused(run)}, tokens used "
        f"{used:.3f} [target >= 0.9: {MET[used >= 0.9]}]; {scored(run)} "
        f"({tokens / tpm * 60:.0f} s possible)"
    )
    bench.details(run)


def back_at_limit(run: Run, at: float, per_s: float) -> tuple[float | None, float, float]:
    """After an event at ``at``: until a 1 s bin from which every 5 s to ``AFTER_S`` average
    >= ``BACK_AT`` of ``per_s`` (None: not by then); the 10 s before's, the lowest 5 s after."""
    answered = run.bins(1.0, 200) + [0] * (int(at + AFTER_S) + 6)  # past the run: none

    def mean(b: int) -> float:
        return sum(answered[b : b + 5]) / 5 / per_s

    start = int(at)
    before = sum(answered[max(0, start - 10) : start]) / 10 / per_s
    windows = range(start, start + int(AFTER_S) - 4)
    short = [b for b in windows if mean(b) < BACK_AT]
    back = 0.0 if not short else None if short[-1] == windows[-1] else max(0, short[-1] + 1 - at)
    return back, before, min(mean(b) for b in windows)


def phase_c(bench: Bench, name: str) -> None:
    times = bench.args.events if name == "c" else bench.args.window_events
    sim, said = {"c": ({"requests": RateLimit(RPM)}, "announced 600 rpm")}.get(name) or (
        window(False),
        "(a)'s window, refusals not counted",
    )
    kill_at, add_at = (float(t) for t in times.split(","))
    n = bench.args.traces
    run = bench.run(name, sim, 3, n, events=((kill_at, "kill"), (add_at, "add")))
    print(
        f"({name}) 3 workers, {n} traces at once, {said}: one killed at t={kill_at:g} s, one "
        f"added at t={add_at:g} s (done: {run.events}); {refused(run)}, limit used "
        f"{run.sim.requests_used():.3f}; {scored(run)}"
    )
    for at, what in run.events:
        back, before, lowest = back_at_limit(run, at, RPM / 60)
        after = [c for c in run.calls() if at <= c.at - run.t0 < at + AFTER_S]
        n429 = sum(c.status == 429 for c in after)
        share = n429 / max(len(after), 1)
        took = f"not in {AFTER_S:g} s" if back is None else f"{back:.1f} s"
        print(
            f"     {what} at t={at:.1f} s: the 10 s before at {before:.2f} of the limit, lowest "
            f"5 s after {lowest:.2f}; back at >= {BACK_AT} for good after {took} [target <= 10 s: "
            f"{MET[back is not None and back <= 10]}]; 429s in the {AFTER_S:g} s after: "
            f"{n429} of {len(after)} calls ({share * 100:.1f} %) [target no burst, < 2 %: "
            f"{MET[share < 0.02]}]"
        )
    bench.details(run)


def phase_d(bench: Bench) -> None:
    n = bench.args.d_traces
    clean = bench.run("d clean", {}, 1, n)
    print(f"(d)  1 worker, {n} traces at once, a clean judge: {scored(clean)}")
    for said, header in (("none", RetryAfter("none")), ("1", RetryAfter("fixed", 1.0))):
        refusing = {"refusals": Refusals(share=1 / 7, retry_after=header)}
        run = bench.run(f"d {said}", refusing, 1, n)
        ratio = run.seconds / clean.seconds
        print(
            f"(d)  1 worker, {n} traces at once, 1 call in 7 refused, Retry-After {said}: "
            f"{ratio:.2f}x the clean run [target <= 1.5x: {MET[ratio <= 1.5]}]; {scored(run)}; "
            f"429 {run.sim.share_429() * 100:.1f} % of {len(run.calls())} calls"
        )
        bench.details(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--phases", default="a1,a3,b1,b3,c,cw,d")
    parser.add_argument("--traces", type=int, default=1500)
    parser.add_argument("--d-traces", type=int, default=600)
    parser.add_argument("--tpm", type=float, default=240_000, help="(b): tokens a minute")
    parser.add_argument("--events", default="30,70", help="(c): kill and add, s from the start")
    parser.add_argument("--window-events", default="70,100", help="(cw): kill and add")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--record", default=str(Path(tempfile.gettempdir()) / "judge_fleet.json"))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="scorer-fleet-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    print(
        f"judge fleet: embedded broker, {args.partitions} partitions, the simulator's answers in "
        f"{cases.LATENCY_S} +- {cases.JITTER_S} s, the verdict cache off; record {args.record}"
    )
    started = time.monotonic()
    bench = Bench(broker.bootstrap, tmp, args)
    try:
        for phase in args.phases.split(","):
            if phase[0] in "ab":
                (phase_a if phase[0] == "a" else phase_b)(bench, int(phase[1:]))
            else:
                phase_c(bench, phase) if phase[0] == "c" else phase_d(bench)
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
