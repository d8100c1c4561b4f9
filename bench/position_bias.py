"""A judge that prefers a position (issue 51, "Measure"; design record 52): the published B win
rate's 95 % interval under each ``comparison.order``, for a scripted judge whose first-slot
preference and true preferences are known, and the flip rate the audit measures.

Each pair (comparison key) has a true better variant: B in a share ``--p`` of the pairs, A
in the others (a hash of the key). The judge, in a share ``--s`` of the pairs (a hash of the
key, so it holds in both orders of the pair), prefers whatever it reads first (Response A,
+2) whatever the two responses hold; in the others it prefers the truly better variant
wherever it reads it (+2 or -2, the better response rated 3 of 3, the other 2). The two
hashes are independent of each other and of the rule's own order and audit hashes.

The pairs go through the real engine as ``tests/engine/test_pair_order.py`` sends them: two
traces of a comparison key through ``ThreadRouter.pair_from_trace`` and
``ThreadProcessor.apply`` to a pair close, ``Scorer.score_thread`` with the shipped critique
pack's ``response_comparison`` (seed 001's prompt) copied with ``comparison: {order: ...,
audit: ...}`` (``tests/fixtures.py critique_rules``). The judge (``--judge``):

- ``http`` (the default): ``tests/scripted_judge.py``'s ``MockJudge`` (a real aiohttp server speaking
  OpenAI's chat completions), its reply chosen per prompt (one script per pair and variant
  read as Response A), behind the project's ``JudgeClient``;
- ``in-process``: an object implementing the engine's ``Judge`` protocol
  (``stream/engine/verdicts.py``) that writes the same reply text and reads it back with the
  client's own parser (``stream/judge/contract.py answer_contract``: ``parse_comparison``).

For ``--runs`` runs of ``--pairs`` fresh pairs (keys new in each run, the same keys in each
order), each order (``fixed``, ``alternate``, ``both``; audit share ``--audit``) publishes its
preferences; B's win rate is computed as ``scorer agreement`` computes it
(``stream/agreement/preferences.py pair_preference``, ``stream/agreement/report.py build``,
``WinRate.estimate``: a tie half a win, an inconsistent pair left out) with its Wilson 95 %
interval. Printed per order: the mean rate and n, and the share of runs whose interval covers
the true rate p, the position-balanced rate s/2 + (1 - s) p, and (1 - s) p; then the
order-balanced rate ``scorer agreement`` adds (``WinRate.balanced``,
``stream/agreement/balanced.py``; with ``both`` the published rate), its mean interval width
and the share of runs it covers p. The flip rate is
read from ``scorer_pair_order_audits_total`` (a ``ScorerMetrics`` on its own registry as the
engine's observer) and checked against each score's ``details``: per run with its Wilson
interval against s, and pooled over the runs; the first slot's share of the audited calls
(``scorer_pair_slot_verdicts_total``) against (1 + s) / 2. Asserts nothing.

    python bench/position_bias.py [--runs 200] [--pairs 100] [--p 0.7] [--s 0.3]
        [--audit 0.1] [--judge http|in-process] [--seed bench]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from stream.agreement.measures import Estimate, wilson
from stream.agreement.preferences import pair_preference
from stream.agreement.report import build
from stream.engine.scorer import Scorer
from stream.engine.verdicts import ToolBox, Verdict
from stream.judge.answers import Quoted
from stream.judge.client import JudgeClient
from stream.judge.contract import answer_contract
from stream.metrics import ScorerMetrics
from stream.models import ScoreEvent, TokenUsage
from stream.ruleset.schema import ComparisonRule, PromptedRule, RuleSet

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fixtures import (
    comparison_answer,
    comparison_rule,
    critique_rules,
    pair_closes,
    settings,
)
from scripted_judge import MockJudge

ORDERS = ("fixed", "alternate", "both")
MODEL = "bench-judge"
SLOT_A = re.compile(r"## Response A\s+answer of (\S+)-([AB])\b")


def fraction(*parts: str) -> float:
    """A stable number in [0, 1) for ``parts``."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Truth:
    """The scripted judge: the true better variant of each pair, and the pairs where the judge
    takes the first slot whatever it holds."""

    p: float  # the share of pairs where B is truly better
    s: float  # the share of pairs where the judge prefers Response A, whatever it holds
    seed: str

    def better(self, key: str) -> str:
        return "B" if fraction(self.seed, "truth", key) < self.p else "A"

    def habit(self, key: str) -> bool:
        return fraction(self.seed, "position", key) < self.s

    def reply(self, rule: ComparisonRule, key: str, first: str) -> str:
        """The judge's answer (about slots) when variant ``first`` of pair ``key`` is read as
        Response A."""
        if self.habit(key):
            preference, rated = 2, (3, 3)
        else:
            preference = 2 if self.better(key) == first else -2
            rated = (3, 2) if preference > 0 else (2, 3)
        return comparison_answer(rule, preference, *rated)

    def reply_to(self, rule: ComparisonRule, prompt: str) -> str:
        found = SLOT_A.search(prompt)
        assert found is not None, "a comparison prompt names the response read first"
        return self.reply(rule, found.group(1), found.group(2))


class InProcessJudge:
    """The engine's ``Judge`` protocol answered in process: the scripted reply text, read back
    by the parser the HTTP client uses (``answer_contract``)."""

    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.calls = 0

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        assert isinstance(rule, ComparisonRule)
        self.calls += 1
        content = self.truth.reply_to(rule, prompt)
        _, parse = answer_contract(rule)
        parsed = parse(content, Quoted(list(quoted)))
        usage = TokenUsage(
            prompt_tokens=len(prompt) // 4,
            completion_tokens=len(content) // 4,
            total_tokens=(len(prompt) + len(content)) // 4,
        )
        return Verdict(parsed, MODEL, 0.0, usage, 1)


@dataclass
class Tally:
    """One order's figures over the runs."""

    rates: list[Estimate] = field(default_factory=list)
    balanced: list[Estimate] = field(default_factory=list)  # the order-balanced rate
    flips: list[Estimate] = field(default_factory=list)  # per run, over its audited pairs
    flipped: int = 0
    audited: int = 0
    first_slot: int = 0
    slot_calls: int = 0  # calls whose preference favoured a slot (not "neither")
    calls: int = 0
    mismatches: int = 0  # the metric's flips against the scores' details
    errors: int = 0  # preferences not ok
    seconds: float = 0.0


def counter(registry: CollectorRegistry, name: str, label: str) -> dict[str, float]:
    """A counter's samples summed by one label."""
    out: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name:
                value = sample.labels.get(label, "")
                out[value] = out.get(value, 0.0) + sample.value
    return out


async def run_order(
    worker: Scorer, rules: RuleSet, metrics: ScorerMetrics, keys: list[str], tally: Tally
) -> None:
    before = counter(metrics.registry, "scorer_pair_order_audits_total", "outcome")
    slots_before = counter(metrics.registry, "scorer_pair_slot_verdicts_total", "slot")
    closes = pair_closes(  # each pair's answers name it: the scripted judge replies by pair
        rules, keys, question="Reverse a string.", answer=lambda key, v: f"answer of {key}-{v}"
    )
    results = await asyncio.gather(*(worker.score_thread(c) for c in closes))
    scores: list[ScoreEvent] = [s for r in results for s in r.scores if s.criterion == "preference"]
    tally.errors += sum(1 for s in scores if s.status != "ok")
    preferences = [p for p in map(pair_preference, scores) if p is not None]
    rates = build([], preferences).win_rates
    tally.rates.append(rates[0].estimate if rates else wilson(0, 0))
    # every pair judged in both orders (``both``): the published rate is already balanced
    balanced = rates[0].balanced if rates else None
    tally.balanced.append(balanced or tally.rates[-1])
    after = counter(metrics.registry, "scorer_pair_order_audits_total", "outcome")
    slots = counter(metrics.registry, "scorer_pair_slot_verdicts_total", "slot")
    flipped = int(after.get("flipped", 0) - before.get("flipped", 0))
    audited = flipped + int(after.get("consistent", 0) - before.get("consistent", 0))
    said = 0  # the same from the scores: details.position_inconsistent or details.audit's
    for score in scores:
        details = score.details or {}
        held = details.get("audit", details)
        said += held.get("position_inconsistent") is True
    tally.mismatches += said != flipped
    tally.flips.append(wilson(flipped, audited))
    tally.flipped += flipped
    tally.audited += audited
    first = slots.get("first", 0) - slots_before.get("first", 0)
    second = slots.get("second", 0) - slots_before.get("second", 0)
    tally.first_slot += int(first)
    tally.slot_calls += int(first + second)


def covers(estimate: Estimate, value: float) -> bool:
    return (
        estimate.value is not None
        and estimate.low is not None
        and estimate.high is not None
        and estimate.low <= value <= estimate.high
    )


def share(hits: int, of: int) -> str:
    return f"{hits / of:.3f} ({hits}/{of})" if of else "-"


def interval(estimate: Estimate) -> str:
    if estimate.value is None:
        return "-"
    return f"{estimate.value:.3f} [{estimate.low:.3f}, {estimate.high:.3f}]"


def report(args: argparse.Namespace, tallies: dict[str, Tally]) -> None:
    p, s = args.p, args.s
    balanced, habit_a = s / 2 + (1 - s) * p, (1 - s) * p
    expected = {"fixed": habit_a, "alternate": balanced, "both": p}
    print(
        f"\np = {p} (B truly better), s = {s} (first slot whatever it holds), N = {args.pairs} "
        f"pairs a run, R = {args.runs} runs, audit {args.audit}, judge {args.judge}"
    )
    print(f"true rate p = {p:.3f}; s/2 + (1 - s) p = {balanced:.3f}; (1 - s) p = {habit_a:.3f}\n")
    print(
        "| order | judge calls a run | mean n | mean B win rate (expected) "
        "| interval covers p | covers s/2 + (1 - s) p | covers (1 - s) p | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for order, t in tallies.items():
        runs = [r for r in t.rates if r.value is not None]
        mean = sum(r.value for r in runs) / len(runs) if runs else float("nan")  # type: ignore[misc]
        n = sum(r.count for r in t.rates) / len(t.rates)
        print(
            f"| {order} | {t.calls / len(t.rates):.1f} | {n:.1f} | {mean:.3f} ({expected[order]:.3f}) "
            f"| {share(sum(covers(r, p) for r in t.rates), len(t.rates))} "
            f"| {share(sum(covers(r, balanced) for r in t.rates), len(t.rates))} "
            f"| {share(sum(covers(r, habit_a) for r in t.rates), len(t.rates))} "
            f"| {t.seconds:.0f} |"
        )
    print(
        "\nThe order-balanced win rate (``scorer agreement``; ``both``: the published rate), "
        f"expected p = {p:.3f} in every order:\n"
    )
    print("| order | mean rate | mean interval width | interval covers p |")
    print("|---|---|---|---|")
    for order, t in tallies.items():
        said = [r for r in t.balanced if r.value is not None]
        mean = sum(r.value for r in said) / len(said) if said else float("nan")  # type: ignore[misc]
        # a rate without an interval (one audited pair, or past 0 or 1) covers nothing
        wide = [r.high - r.low for r in said if r.low is not None and r.high is not None]
        width = sum(wide) / len(wide) if wide else float("nan")
        print(
            f"| {order} | {mean:.3f} | {width:.3f} "
            f"| {share(sum(covers(r, p) for r in t.balanced), len(t.balanced))} |"
        )
    print(
        "\n| order | audited pairs a run | runs' flip rate covering s | pooled flip rate [95 %] "
        "| covers s | first slot's share of the audited calls [95 %] | covers (1 + s) / 2 |"
    )
    print("|---|---|---|---|---|---|---|")
    for order, t in tallies.items():
        measured = [f for f in t.flips if f.count]
        pooled = wilson(t.flipped, t.audited)
        first = wilson(t.first_slot, t.slot_calls)
        print(
            f"| {order} | {t.audited / len(t.flips):.1f} "
            f"| {share(sum(covers(f, s) for f in measured), len(measured))} "
            f"| {interval(pooled)} | {'yes' if covers(pooled, s) else 'no'} "
            f"| {interval(first)} | {'yes' if covers(first, (1 + s) / 2) else 'no'} |"
        )
    checks = {o: (t.mismatches, t.errors) for o, t in tallies.items()}
    print(f"\nruns whose metric's flips differ from the scores' details, errors: {checks}")


async def measure(args: argparse.Namespace) -> dict[str, Tally]:
    truth = Truth(args.p, args.s, args.seed)
    tallies = {order: Tally() for order in ORDERS}
    rules = {order: critique_rules(order, args.audit) for order in ORDERS}
    metrics = ScorerMetrics(CollectorRegistry())
    server: MockJudge | None = None
    if args.judge == "http":
        server = MockJudge()
        server.__enter__()
        cfg = settings(
            openai_base_url=server.base_url, openai_api_key="sk-bench", judge_model=MODEL
        )
        client: Any = JudgeClient(cfg.judge_config(), metrics)
    else:
        client = InProcessJudge(truth)
    workers = {
        order: Scorer(rules[order], client, default_model=MODEL, observer=metrics)
        for order in ORDERS
    }
    rule = comparison_rule(rules["fixed"])
    try:
        for run in range(args.runs):
            keys = [f"{args.seed}-r{run:04d}-p{i:04d}" for i in range(args.pairs)]
            if server is not None:  # a reply per pair and variant read first
                server.scripts.clear()
                for key in keys:
                    for first in ("A", "B"):
                        server.script(
                            f"## Response A\n\nanswer of {key}-{first}",
                            truth.reply(rule, key, first),
                        )
            for order in ORDERS:
                calls = len(server.requests) if server is not None else client.calls
                started = time.monotonic()
                await run_order(workers[order], rules[order], metrics, keys, tallies[order])
                tallies[order].seconds += time.monotonic() - started
                now = len(server.requests) if server is not None else client.calls
                tallies[order].calls += now - calls
            if server is not None:
                server.requests.clear()
                server.statuses.clear()
            if (run + 1) % max(1, args.runs // 10) == 0:
                print(f"run {run + 1}/{args.runs}", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            await client.close()
            server.__exit__(None, None, None)
    return tallies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--p", type=float, default=0.7, help="share of pairs B truly wins")
    parser.add_argument("--s", type=float, default=0.3, help="share of pairs judged by slot")
    parser.add_argument("--audit", type=float, default=0.1, help="comparison.audit")
    parser.add_argument("--judge", choices=("http", "in-process"), default="http")
    parser.add_argument("--seed", default="bench")
    args = parser.parse_args()
    started = time.monotonic()
    tallies = asyncio.run(measure(args))
    report(args, tallies)
    print(f"\n{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
