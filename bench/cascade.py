"""A cascade per rule (issue 46, item 3): what a decision model in front of the LLM judge costs
and how far its verdicts agree, on traffic whose true labels are known. Prints each figure
beside its target; exits non-zero only when the machinery misbehaves (a score missing or not
what the script says it must be), never for a target missed.

The seed rule ``mlflow/relevance_to_query`` (a yes/no judge) scores the same traces through
the project's scorer, judge client and price table, against local HTTP doubles speaking the
chat completions and Decisions API contracts and answering per item as scripted
(``bench/cascade_truth.py``: a calibrated decision model, a chat judge right at a chosen rate):

(1) the LLM judge alone (the seed file as shipped; gpt-4.1, the chat tier's list price), the
    decision tier alone (``judge.api: decisions``, gpt-6-luna, $0.10/M input) and the cascade
    at each ``--cuts`` (``judge.cascade``, audit rate 0.05): cost per 1,000 traces from the
    scorer's own cost accounting (``scorer_rule_judge_cost_usd_total``), the share of traces
    the judge decided (escalated, with the audit), kappa with the LLM judge alone.
(2) ``--seeds`` seeds of ``--seed-traces`` traces, each through the cascade at 0.9: the audit
    pairs' kappa of the first tier against the judge, with its 95 % interval, against the
    true kappa of the two scripted answers over the seed's whole population.
(3) no change without a cascade: the judge's requests for the traces a cascade escalated are
    byte-identical to the LLM judge alone's; and every shipped pack, no cascade configured,
    sends the same requests and publishes the same scores as the tree before the cascade
    (``git archive 00ade89^``, run in a subprocess with that tree first on the path:
    ``cascade_truth.unchanged_across_trees``).

    python bench/cascade.py [--traces 4000] [--seeds 20] [--cuts 0.8,0.9,0.95]
        [--seed-traces 4000] [--seed-audit-rate 0.05] [--chat-accuracy 0.95]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from cascade_truth import (
    Item,
    Script,
    ScriptedEndpoint,
    demo_and_items,
    script_items,
    tag_in,
    trace_of,
    unchanged_across_trees,
)
from prometheus_client import CollectorRegistry

from stream.agreement.measures import Estimate, cohen_kappa
from stream.engine.scorer import Scorer
from stream.engine.spend import SpendLedger
from stream.judge.decision_client import judge_client
from stream.metrics import ScorerMetrics
from stream.models import ScoreEvent, Trace
from stream.ruleset.judge_specs import DECISION_MODEL
from stream.ruleset.kinds import RULE_ADAPTER
from stream.ruleset.loader import load_rule_file
from stream.ruleset.packs import load_pack_code
from stream.ruleset.schema import AnyRule, RuleSet
from stream.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
RULE_FILE = ROOT / "rules" / "mlflow" / "relevance_to_query.yaml"
CHAT_MODEL = "gpt-4.1"  # the chat tier: a frontier judge's list price
AUDIT_RATE = 0.05  # the example
SEED_CUT = 0.9  # the example; the audit sample does not depend on the cut
CASCADE_COMMIT = "00ade89"  # the commit that added judge.cascade; its parent is the baseline
CONCURRENCY = 64
MET = {True: "met", False: "NOT MET"}
CASCADE_REASONS = [("first", "accepted"), ("judge", "low_confidence"), ("judge", "audit")]
CASCADE_REASONS += [("judge", "first_failed"), ("judge", "no_confidence")]


class MachineryError(Exception):
    """The scorer did something the script says it cannot: the bench stops, non-zero."""


def seed_rule(judge: dict[str, Any] | None = None) -> AnyRule:
    """The seed rule as shipped, or with ``judge`` keys added as a user adds them to its
    YAML (validated as the loader validates a rule file)."""
    if judge is None:
        return load_rule_file(RULE_FILE)
    data = yaml.safe_load(RULE_FILE.read_text(encoding="utf-8"))
    data["judge"] = {**(data.get("judge") or {}), **judge}
    context = {"pack_code": load_pack_code(RULE_FILE.parent), "rule_dir": RULE_FILE.parent}
    return RULE_ADAPTER.validate_python(data, context=context)


def cascade_judge(cut: float, audit_rate: float) -> dict[str, Any]:
    first = {"api": "decisions", "model": DECISION_MODEL}
    tiers = {"first": first, "accept": {"min_confidence": cut}, "audit_rate": audit_rate}
    return {"cascade": tiers}


@dataclass
class PhaseRun:
    """What one phase published and what the scorer counted, by target."""

    name: str
    cut: float | None = None  # a cascade's min_confidence
    primary: dict[str, ScoreEvent] = field(default_factory=dict)
    shadow: dict[str, ScoreEvent] = field(default_factory=dict)  # the audit's first tier
    cost: dict[str, float] = field(default_factory=dict)  # USD by model, the scorer's count
    cascade_counts: dict[tuple[str, str], float] = field(default_factory=dict)  # the metric
    chat_bodies: dict[str, bytes] = field(default_factory=dict)  # the judge's requests by item

    def label(self, item: Item) -> str:
        return str(self.primary[f"trace-{item.tag}"].label)

    def decided_by(self, item: Item) -> tuple[str, str]:
        """(tier, why) from the score's ``details.cascade``."""
        said = (self.primary[f"trace-{item.tag}"].details or {}).get("cascade") or {}
        return said.get("tier", ""), said.get("escalated", "accepted")

    def per_1000(self, traces: int) -> float:
        return sum(self.cost.values()) / traces * 1000


async def score_phase(
    endpoint: ScriptedEndpoint, name: str, rule: AnyRule, items: list[Item]
) -> PhaseRun:
    """Score ``items``' traces with ``rule`` through a new scorer and judge client."""
    endpoint.use(items)
    cfg = Settings(
        openai_base_url=endpoint.base_url, openai_api_key="sk-bench", judge_model=CHAT_MODEL
    )
    metrics = ScorerMetrics(CollectorRegistry())
    client = judge_client(cfg.judge_config(), metrics)
    ledger = SpendLedger((), cfg.judge_cost)  # no budgets: only the prices, to count costs
    scorer = Scorer(
        RuleSet([rule]), client, default_model=CHAT_MODEL, observer=metrics, ledger=ledger
    )
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(document: dict[str, Any]) -> list[ScoreEvent]:
        async with gate:
            result = await scorer.score_trace(Trace.model_validate(document), document)
            return list(result.scores)

    try:
        scored = await asyncio.gather(*(one(trace_of(item)) for item in items))
    finally:
        await client.close()
    run = PhaseRun(name)
    for score in (s for scores in scored for s in scores):
        if score.status != "ok":
            raise MachineryError(f"{name}: {score.target_id} {score.status} {score.status_reason}")
        (run.shadow if score.variant else run.primary)[score.target_id] = score
    registry = metrics.registry
    for model in (CHAT_MODEL, DECISION_MODEL):
        labels = {"rule": rule.id, "pack": rule.pack, "model": model}
        run.cost[model] = registry.get_sample_value("scorer_rule_judge_cost_usd_total", labels) or 0
    for tier, why in CASCADE_REASONS:
        labels = {"rule": rule.id, "pack": rule.pack, "tier": tier, "reason": why}
        count = registry.get_sample_value("scorer_cascade_verdicts_total", labels)
        run.cascade_counts[(tier, why)] = count or 0.0
    for request in endpoint.requests:
        tag = tag_in(str(request["body"]["messages"][-1]["content"])) or "?"
        run.chat_bodies[tag] = orjson.dumps(request["body"], option=orjson.OPT_SORT_KEYS)
    check(run, items, rule)
    return run


def check(run: PhaseRun, items: list[Item], rule: AnyRule) -> None:
    """Every trace has one score, labelled as the script says of the tier that decided."""
    problems = []
    cascade = getattr(rule.judge, "cascade", None)
    decided: Counter[tuple[str, str]] = Counter()
    for item in items:
        target = f"trace-{item.tag}"
        if target not in run.primary:
            problems.append(f"{target}: no score")
            continue
        tier, why = run.decided_by(item) if cascade else ("", "")
        decided[(tier, why)] += 1
        first = tier == "first" or getattr(rule.judge, "api", "chat") == "decisions"
        if run.label(item) != (item.first if first else item.judge):
            problems.append(f"{target}: {run.label(item)!r} from {tier or 'the judge'}")
        shadow = run.shadow.get(target)
        if (shadow is not None or why == "audit") and (
            shadow is None or (shadow.label, why) != (item.first, "audit")
        ):
            problems.append(f"{target}: shadow {shadow and shadow.label!r} ({why})")
        if first != (item.tag not in run.chat_bodies):
            problems.append(f"{target}: the chat judge asked {item.tag not in run.chat_bodies}")
        confident = item.confidence >= getattr(cascade and cascade.accept, "min_confidence", 0)
        if cascade and why in ("accepted", "low_confidence") and confident != (why == "accepted"):
            problems.append(f"{target}: {why} at confidence {item.confidence}")
    if cascade and any(run.cascade_counts[k] != decided[k] for k in CASCADE_REASONS):
        problems.append(f"scorer_cascade_verdicts_total {run.cascade_counts} != {dict(decided)}")
    if problems:
        raise MachineryError(f"{run.name}: {len(problems)} problems, first: {problems[:5]}")


def shown(estimate: Estimate) -> str:
    if estimate.value is None or estimate.low is None or estimate.high is None:
        return "undefined"
    return f"{estimate.value:.3f} [{estimate.low:.3f}, {estimate.high:.3f}]"


def escalated(run: PhaseRun, items: list[Item]) -> tuple[float, float]:
    """The share of traces the judge decided, and the share sent up for low confidence."""
    reasons = Counter(run.decided_by(item) for item in items)
    judged = sum(n for (tier, _), n in reasons.items() if tier == "judge")
    return judged / len(items), reasons[("judge", "low_confidence")] / len(items)


async def phases(
    endpoint: ScriptedEndpoint, items: list[Item], cuts: list[float]
) -> list[PhaseRun]:
    """(1): the LLM judge alone, the decision tier alone, the cascade at each cut."""
    runs = [
        await score_phase(endpoint, "LLM judge alone", seed_rule(), items),
        await score_phase(endpoint, "decision tier alone", seed_rule({"api": "decisions"}), items),
    ]
    for cut in cuts:
        rule = seed_rule(cascade_judge(cut, AUDIT_RATE))
        runs.append(await score_phase(endpoint, f"cascade, cut {cut:g}", rule, items))
        runs[-1].cut = cut
    return runs


TABLE = "{:<21}{:>10}{:>10}{:>11}{:>7}{:>9}{:>10}{:>11}  {:<29}{:>9}"


def print_phases(runs: list[PhaseRun], items: list[Item]) -> list[tuple[float, float, float]]:
    """The table of (1); returns (cut, kappa, cost ratio) of each cascade."""
    alone, n = runs[0], len(items)
    base = alone.per_1000(n)
    print(f"\n(1) {n} traces, the same in every phase; cascades audit {AUDIT_RATE:g} of targets")
    print(
        TABLE.format(
            "", "cost per", "", "", "", "judge", "of which", "script:", "kappa vs", "kappa"
        )
    )
    print(
        TABLE.format(
            "phase",
            "1k traces",
            CHAT_MODEL,
            DECISION_MODEL,
            "ratio",
            "decided",
            "low conf.",
            "under cut",
            "LLM judge alone [95 %]",
            "vs truth",
        )
    )
    cascades = []
    for run in runs:
        kappa = cohen_kappa([(alone.label(i), run.label(i)) for i in items])
        truth = cohen_kappa([(i.truth, run.label(i)) for i in items]).value or 0.0
        cost = run.per_1000(n)
        tiers = [f"${run.cost[m] / n * 1000:.4f}" for m in (CHAT_MODEL, DECISION_MODEL)]
        judged, low, under = float(run is alone), "", ""
        if run.cut is not None:
            judged, low_share = escalated(run, items)
            low = f"{low_share:.1%}"
            under = f"{sum(i.confidence < run.cut for i in items) / n:.1%}"
            cascades.append((run.cut, kappa.value or 0.0, cost / base))
        agreement = "1 (itself)" if run is alone else shown(kappa)
        print(
            TABLE.format(
                run.name,
                f"${cost:.4f}",
                *tiers,
                f"{cost / base:.3f}",
                f"{judged:.1%}",
                low,
                under,
                agreement,
                f"{truth:.3f}",
            )
        )
    print("costs: scorer_rule_judge_cost_usd_total by model; tiers: details.cascade of each score;")
    print(f"every one of the {n} scores a phase checked against the script (check())")
    return cascades


async def seed_runs(
    endpoint: ScriptedEndpoint, seeds: int, count: int, audit_rate: float, script: Script
) -> int:
    """(2): per seed, the audit's kappa against the population's; returns how many cover it."""
    print(
        f"\n(2) {seeds} seeds of {count} traces, cascade at {SEED_CUT:g}, audit rate {audit_rate:g}"
    )
    print(
        f"{'seed':>4}{'audit pairs':>13}  {'audit kappa [95 %]':<28}{'true kappa':>11}{'inside':>8}"
    )
    inside = 0
    rule = seed_rule(cascade_judge(SEED_CUT, audit_rate))
    for seed in range(1, seeds + 1):
        items = script_items(seed, count, script)
        run = await score_phase(endpoint, f"seed {seed}", rule, items)
        # the judge's published verdict and the first tier's shadow beside it, on the audited
        # targets (check() has matched each to the script)
        pairs = [(str(run.primary[t].label), str(s.label)) for t, s in run.shadow.items()]
        estimate = cohen_kappa(pairs)
        true = cohen_kappa([(i.judge, i.first) for i in items]).value
        low, high = estimate.low, estimate.high
        hit = low is not None and high is not None and true is not None and low <= true <= high
        inside += hit
        print(
            f"{seed:>4}{len(pairs):>13}  {shown(estimate):<28}{true or 0.0:>11.3f}"
            f"{'yes' if hit else 'NO':>8}"
        )
    return inside


def same_judge_requests(runs: list[PhaseRun]) -> tuple[int, int]:
    """(3a): of the judge's requests in the cascades, how many, and how many byte-identical
    to the LLM judge alone's request for the same item."""
    alone = runs[0].chat_bodies
    bodies = [body for run in runs if run.cut is not None for body in run.chat_bodies.items()]
    return len(bodies), sum(alone.get(tag) == body for tag, body in bodies)


async def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    script = Script(chat_accuracy=args.chat_accuracy)
    items = script_items(0, args.traces, script)
    print(f"script: {script.describe()}")
    print(f"chat tier {CHAT_MODEL}, decision tier {DECISION_MODEL}, at the scorer's price table")
    with ScriptedEndpoint() as endpoint:
        runs = await phases(endpoint, items, args.cuts)
        cascades = print_phases(runs, items)
        inside = await seed_runs(
            endpoint, args.seeds, args.seed_traces, args.seed_audit_rate, script
        )
    asked, identical = same_judge_requests(runs)
    print("\n(3) no change without a cascade")
    print(
        f"(3a) the judge's requests in the cascades: {identical} of {asked} byte-identical to "
        "the LLM judge alone's for the same trace"
    )
    before = f"{CASCADE_COMMIT}^"
    across, same = unchanged_across_trees(ROOT, before, demo_and_items(ROOT, items[:200]))
    print(f"(3b) every shipped pack, no cascade, this tree against {before}: {across}")
    print("\ntargets")
    keeping = [c for c in cascades if c[1] >= 0.9]
    if keeping:
        cut, kappa, ratio = min(keeping, key=lambda c: c[2])
        print(
            f"- cost at the cheapest cut keeping kappa >= 0.9 (cut {cut:g}, kappa {kappa:.3f}): "
            f"{ratio:.3f} of the LLM judge alone's, target <= 0.35: {MET[ratio <= 0.35]}"
        )
    else:
        print("- no cut keeps kappa >= 0.9 against the LLM judge alone: NOT MET")
    coverage = MET[inside >= args.seeds * 19 / 20] if args.seeds else "not run (--seeds 0)"
    print(
        f"- the audit's interval holds the true agreement in {inside} of {args.seeds} seeds, "
        f"target >= 19 of 20: {coverage}"
    )
    unchanged = asked == identical and same is True
    print(
        f"- no change without a cascade: {MET[unchanged]}"
        + (" (3b not run)" if same is None else "")
    )
    print(f"\nran in {time.monotonic() - started:.0f} s")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=4000, help="traces of phase (1)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds of phase (2)")
    parser.add_argument(
        "--cuts",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.8, 0.9, 0.95],
        help="the cascade's confidence cuts in (1)",
    )
    parser.add_argument("--seed-traces", type=int, default=4000, help="traces per seed in (2)")
    parser.add_argument(
        "--seed-audit-rate", type=float, default=AUDIT_RATE, help="(2)'s audit rate"
    )
    parser.add_argument(
        "--chat-accuracy",
        type=float,
        default=Script.chat_accuracy,
        help="how often the chat judge gives the true label",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse())))
    except MachineryError as failure:
        print(f"\nmachinery failure: {failure}", file=sys.stderr)
        sys.exit(1)
