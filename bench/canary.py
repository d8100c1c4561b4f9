"""The judge canary (issue 49, item 2): a scripted judge whose verdicts shift at a chosen
moment (the "date"), detected within one canary period. Real workers on the embedded broker
(Faust's timers, its leader), the scripted judge over HTTP (``tests/scripted_judge.py``), the
gauges read from each worker's /metrics.

Two workers of one group run a rule with a canary of ``--items`` reference items (recorded
verdict 4 of 1..5) and ``every: --period``. Once the leader's first round is on /metrics, the
judge is switched ``--shifts`` times, each at a random moment of the period (seeded): to 2,
then back to 4, and so on. For each switch: the seconds from it to the first scrape whose
``scorer_canary_changed`` says so (all items changed after a switch to 2, none after the switch
back) [target: at most one period, plus the timer's tick and the round's own calls], the
mean shift then [+0.5 after a switch to 2, 0 after one back], and which workers export the
gauges [one: the leader]. Judge calls per round [= the items: the verdict cache bypassed].
Asserts nothing; ``tests/canary/`` asserts the same on one round each.

The leader is then stopped: the seconds until the other worker's first round [a group
rebalance (SCORER_SESSION_TIMEOUT_S 6 here) and one tick].

    python bench/canary.py [--period 5] [--items 20] [--shifts 4] [--seed 7] [--keep]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
import yaml
from throughput import Phase, fetch_metrics, stop

from stream.kafka.broker import EmbeddedBroker
from stream.metrics import sample_value

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from scripted_judge import MockJudge

RULE = {
    "id": "answer_quality",
    "pack": "canarybench",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"question": "input.question"},
    "output": {"type": "numeric", "min": 1, "max": 5, "integer": True},
    "prompt": "Rate the answer to {{question}} from 1 to 5.",
}
LABELS = {"rule": "answer_quality", "pack": "canarybench", "model": "bench-judge"}


def answer(score: int) -> str:
    return orjson.dumps({"score": score, "reason": "bench"}).decode()


def write_rules(tmp: Path, items: int, period: float) -> Path:
    pack = tmp / "rules" / "canarybench"
    pack.mkdir(parents=True)
    lines = [
        {
            "id": f"item-{i}",
            "input": {"id": f"item-{i}", "input": {"question": f"Q-{i}"}},
            "recorded": {"value": 0.75, "raw_value": 4, "model": "bench-judge"},
        }
        for i in range(items)
    ]
    (pack / "canary.jsonl").write_bytes(b"\n".join(orjson.dumps(x) for x in lines))
    rule = {**RULE, "canary": {"items": "canary.jsonl", "every": period}}
    (pack / "answer_quality.yaml").write_text(yaml.safe_dump(rule))
    return tmp / "rules"


def reading(port: int) -> tuple[float, float, float, float] | None:
    """A worker's canary gauges (items, changed, mean shift, last round), None when it
    exports none."""
    try:
        page = fetch_metrics(port)
    except OSError:
        return None
    if "scorer_canary_items{" not in page:
        return None
    names = ("items", "changed", "mean_shift", "last_round_timestamp_seconds")
    values = [sample_value(page, f"scorer_canary_{name}", **LABELS) for name in names]
    return values[0], values[1], values[2], values[3]


def wait(condition: object, timeout: float, step: float = 0.1) -> float | None:
    """Poll ``condition()`` until it holds; when it first did (monotonic), or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return time.monotonic()
        time.sleep(step)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--period", type=float, default=5.0, help="the canary's every (s)")
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--shifts", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="scorer-bench-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    chance = random.Random(args.seed)
    workers = []
    try:
        rules = write_rules(tmp, args.items, args.period)
        phase = Phase(broker.bootstrap, tmp)
        with MockJudge() as judge:
            judge.script("Q-", answer(4))
            env = {"OPENAI_BASE_URL": judge.base_url, "SCORER_JUDGE_MODEL": "bench-judge"}
            ports = []
            for i in range(2):  # one group, each worker its own data dir
                proc, port = phase.worker(rules, SCORER_DATA_DIR=str(tmp / f"data-{i}"), **env)
                workers.append(proc)
                ports.append(port)
            first = wait(lambda: any(reading(p) for p in ports), 120, 0.2)
            if first is None:
                raise RuntimeError("no canary round on either worker's /metrics in 120 s")
            leaders = [p for p in ports if reading(p)]
            print(
                f"first round {first - started:.1f} s after the start; gauges exported by "
                f"{len(leaders)} of 2 workers [target 1]"
            )
            score, delays = 4, []
            for shift in range(args.shifts):
                time.sleep(chance.uniform(0, args.period))
                score = 2 if score == 4 else 4
                calls = len(judge.requests)
                judge.script("Q-", answer(score))
                at = time.monotonic()
                want = args.items if score == 2 else 0

                def shows(want: int = want, since: float = time.time()) -> bool:
                    found = [r for p in ports if (r := reading(p))]
                    return any(r[1] == want and r[3] >= since for r in found)

                seen = wait(shows, 3 * args.period + 30)
                found = [r for p in ports if (r := reading(p))]
                exporting = len(found)
                if seen is None:
                    print(
                        f"  shift {shift + 1} to {score}: not seen in {3 * args.period + 30:.0f} s"
                    )
                    continue
                delays.append(seen - at)
                items, changed, mean_shift, _ = found[0]
                print(
                    f"  shift {shift + 1} to {score}: seen {seen - at:.2f} s later [target <= "
                    f"{args.period:g} s + tick + the round], {changed:.0f} of {items:.0f} "
                    f"changed [target {want}], mean shift {mean_shift:+.3f} [target "
                    f"{0.5 if score == 2 else 0.0:+.3f}], exported by {exporting} worker(s) "
                    f"[target 1], judge calls since the switch {len(judge.requests) - calls}"
                )
            rounds = len(judge.requests) / args.items
            calls = len(judge.requests)
            leader = next((i for i, p in enumerate(ports) if reading(p)), None)
            if leader is not None:  # the leader stops: the other worker takes the rounds
                other, since, stopped = ports[1 - leader], time.time(), time.monotonic()
                stop(workers[leader])
                taken = wait(lambda: (r := reading(other)) is not None and r[3] >= since, 120)
                said = "not seen in 120 s" if taken is None else f"{taken - stopped:.1f} s later"
                print(f"the leader stopped: the other worker's first round {said}")
            print(
                f"judge calls {calls} over {rounds:.1f} rounds of {args.items} "
                f"items [target: a whole number of rounds: every item asked each round, the "
                f"cache bypassed]; worst delay {max(delays, default=float('nan')):.2f} s for a "
                f"period of {args.period:g} s"
            )
    finally:
        for proc in workers:
            stop(proc)
        broker.stop()
        if args.keep:
            print(f"kept {tmp} (the workers' logs, the broker's log)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
