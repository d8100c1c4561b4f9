"""The scorer's CPU per trace against the competent Faust worker, in alternating rounds.

``bench/throughput.py --phases "a',b"`` runs each worker once, the scorer (b) last. On a
shared machine one run's spread (±5 %, more when a neighbour is busy) is as wide as the
difference being measured, and a worker that always runs last meets the broker at its
fullest. This bench runs (a'') (``faust_competent.py``) and (b) (the scorer at its defaults,
the two FretCoach checks) in turn on one embedded broker, each on fresh topics and fresh
traces, for ``--rounds`` rounds, the one that goes first alternating, and prints each
round's CPU per trace and their ratio, then the medians. Prints figures; asserts nothing.

    python bench/cpu_rounds.py --rounds 6 --traces 40000
    BENCH_SCORER_GC=1 python bench/cpu_rounds.py      # (a'') with the scorer's GC settings too
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from faust_baselines import BASELINES, run_baseline
from process_io import produce
from throughput import CHECK_RULES, CPU_US, Phase, drain, rules_subset, stop, traces

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics


def competent(bootstrap: str, tmp: Path, count: int) -> float:
    """(a'')'s CPU per trace (us) on ``count`` fresh traces."""
    baseline = next(b for b in BASELINES if b.label == "a''")

    def measure(topic: str, expected: int, pid: int) -> tuple[float, float]:
        got, secs = asyncio.run(drain(bootstrap, topic, expected, 300, pid))
        return got / secs, CPU_US[pid]

    return run_baseline(baseline, bootstrap, tmp, traces(count), measure)[1]


def scorer(bootstrap: str, tmp: Path, count: int, **env: str) -> float:
    """(b)'s CPU per trace (us) on ``count`` fresh traces (``env``: its settings)."""
    phase = Phase(bootstrap, tmp)
    asyncio.run(ensure_topics(bootstrap, [phase.src, phase.dst], 4))
    asyncio.run(produce(bootstrap, phase.src, traces(count)))
    proc, _ = phase.worker(rules_subset(tmp, CHECK_RULES), **env)
    try:
        asyncio.run(drain(bootstrap, phase.dst, count, 300, proc.pid))
    finally:
        stop(proc)
    return CPU_US[proc.pid]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--traces", type=int, default=40_000)
    parser.add_argument(
        "--batch-max", type=int, help="both workers' batch (default: the scorer's default, 64)"
    )
    args = parser.parse_args()
    env = {}
    if args.batch_max:  # the scorer's setting, and the competent worker's take_events
        env["SCORER_TRACE_BATCH_MAX"] = os.environ["BENCH_BATCH_MAX"] = str(args.batch_max)
    tmp = Path(tempfile.mkdtemp(prefix="scorer-rounds-"))
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    runs: list[tuple[float, float]] = []
    try:
        for number in range(args.rounds):
            if number % 2 == 0:
                a = competent(broker.bootstrap, tmp, args.traces)
                b = scorer(broker.bootstrap, tmp, args.traces, **env)
            else:
                b = scorer(broker.bootstrap, tmp, args.traces, **env)
                a = competent(broker.bootstrap, tmp, args.traces)
            runs.append((a, b))
            first = "(a'') first" if number % 2 == 0 else "(b) first"
            print(
                f"round {number + 1} ({first}): (a'') {a:.0f} us, (b) {b:.0f} us, "
                f"(a'')/(b) = {a / b:.2f}",
                flush=True,
            )
    finally:
        broker.stop()
    ratios = [a / b for a, b in runs]
    print(
        f"median of {len(runs)}: (a'') {statistics.median(a for a, _ in runs):.0f} us, "
        f"(b) {statistics.median(b for _, b in runs):.0f} us, (a'')/(b) "
        f"{statistics.median(ratios):.2f} (rounds: {min(ratios):.2f}-{max(ratios):.2f}; "
        f"(b) at or under (a'') in {sum(r >= 1.0 for r in ratios)} of {len(runs)})  "
        "[target: scorer CPU per trace <= competent's]"
    )


if __name__ == "__main__":
    main()
