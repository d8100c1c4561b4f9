"""``scorer estimate``: what a rule set would cost on a sample of traces, before it runs.

The sample is planned as ``scorer explain`` plans it (``explain.explain_file``: the worker's
own engine and rules, filters, sampling, fan-out bounds, the threads and pairs the sample
forms closed where the worker would close them), and every judge call a plan would make is
counted instead of made:

- a fan-out rule makes one call per item it keeps; a rule whose judge reads the trace through
  tools makes at least one call, and up to ``judge.max_tool_calls`` more rounds (counted at
  its first call, the rest said as a bound: how many the judge takes is its own choice);
- a call whose verdict the sample has already paid for (the same verdict key: rule and
  version, model, prompt, answer schema) is a cache hit, as the verdict cache makes it;
- prompt tokens are counted from the rendered messages (``tokens.TokenCounter``: a tokenizer
  where one works offline, else the characters / 4 the pacer estimates with), and
  completion tokens are an assumption per answer (``COMPLETION_TOKENS``), both said in the
  output;
- the price is the deployment's (``SCORER_JUDGE_PRICES``), online and at the Batch API's
  rate;
- a cascade rule's first tier is counted on every target it is asked of (``rule@first``; a
  decision model's answer has no output tokens) and its judge on every target, as if all
  escalated: the escalation rate is known only once it runs, so the judge's part is a bound.

No broker, no judge call. Design record 40.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .engine.kinds import primary_shape
from .engine.outcomes import call_score_key, score_rule_key
from .engine.plan import JudgeJob, Plan
from .explain import ExplainedClose, ExplainedTrace, FileOptions, explain_file
from .judge.cache import verdict_key
from .judge.contract import answer_contract
from .judge.tokens import TokenCounter
from .models import TokenUsage, score_id
from .ruleset.schema import LLMJudgeRule, RubricRule, RuleSet

# what an answer is assumed to take when no answer has said (a score and a sentence of
# reason; a rubric's per criterion)
COMPLETION_TOKENS = 60
COMPLETION_TOKENS_PER_CRITERION = 40

Price = Callable[[str, TokenUsage], float | None]


@dataclass
class RuleCost:
    """One rule's judge calls and tokens over the sample."""

    rule_id: str
    pack: str
    scope: str
    model: str
    judged: int = 0  # targets (traces, thread closes, pairs) it would judge
    judge_calls: int = 0
    cache_hits: int = 0
    tool_rounds_max: int = 0  # rounds a tool-reading judge may add (not in judge_calls)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float | None = 0.0
    usd_batch: float | None = 0.0

    def add_price(self, usd: float | None, usd_batch: float | None) -> None:
        self.usd = None if usd is None or self.usd is None else self.usd + usd
        self.usd_batch = (
            None if usd_batch is None or self.usd_batch is None else self.usd_batch + usd_batch
        )

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Estimate:
    """A sample's judge calls and tokens, per rule and in total, and what they cost."""

    traces: int
    closes: int
    rules: list[RuleCost]
    tokens_counted_by: str
    completion_assumed: str
    invalid: int = 0
    notes: list[str] = field(default_factory=list)
    # a trace rule's score id -> the characters / 4 of its calls (``calibrated``)
    basis: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> RuleCost:
        total = RuleCost("total", "", "", "")
        for rule in self.rules:
            total.judged += rule.judged
            total.judge_calls += rule.judge_calls
            total.cache_hits += rule.cache_hits
            total.tool_rounds_max += rule.tool_rounds_max
            total.prompt_tokens += rule.prompt_tokens
            total.completion_tokens += rule.completion_tokens
            total.add_price(rule.usd, rule.usd_batch)
        return total

    def per_thousand(self, value: float | None) -> float | None:
        """``value`` over the sample, per 1 000 traces."""
        if value is None or not self.traces:
            return None
        return value * 1000 / self.traces

    def as_dict(self, traces_per_day: float | None = None) -> dict[str, Any]:
        total = self.total.as_dict()
        for key in ("rule_id", "pack", "scope", "model"):
            del total[key]
        document: dict[str, Any] = {
            "sample": {"traces": self.traces, "closes": self.closes, "invalid": self.invalid},
            "tokens_counted_by": self.tokens_counted_by,
            "completion_tokens_assumed": self.completion_assumed,
            "total": total,
            "per_1000_traces": {
                key: self.per_thousand(total[key])
                for key in ("judge_calls", "prompt_tokens", "completion_tokens", "usd", "usd_batch")
            },
            "rules": [rule.as_dict() for rule in self.rules],
            "notes": self.notes,
        }
        if traces_per_day is not None:
            document["per_day"] = {
                "traces": traces_per_day,
                **{
                    key: (
                        None
                        if (v := self.per_thousand(total[key])) is None
                        else v * traces_per_day / 1000
                    )
                    for key in ("judge_calls", "prompt_tokens", "usd", "usd_batch")
                },
            }
        return document


class _Counting:
    """Counts a sample's planned judge jobs into per-rule costs."""

    def __init__(
        self, default_model: str, counter: TokenCounter, price: Price, caching: bool = True
    ) -> None:
        self.default_model = default_model
        self.caching = caching  # the deployment's verdict cache is on
        self.counter = counter
        self.price = price
        self.rules: dict[tuple[str, str | None], RuleCost] = {}
        self.paid: set[str] = set()  # verdict keys the sample has paid for
        # a trace rule's score id -> its job's characters / 4 (all its calls, uncorrected):
        # what reported usage is compared with to calibrate (``calibrated``)
        self.basis: dict[str, int] = {}

    def count(self, job: JudgeJob, scope: str, trace_id: str | None = None) -> None:
        if job.cascade == "first":  # the first tier's call too (the judge's counted as if
            # every target escalated: an upper bound; the audit's is its own job)
            assert isinstance(job.rule, LLMJudgeRule)
            self.count(replace(job, rule=job.rule.cascade_first("first"), cascade=None), scope)
        rule = job.rule
        model = rule.judge.model or self.default_model
        name = rule.id if rule.variant is None else f"{rule.id}@{rule.variant}"
        cost = self.rules.get((rule.id, rule.variant))
        if cost is None:
            cost = self.rules[(rule.id, rule.variant)] = RuleCost(name, rule.pack, scope, model)
        cost.judged += 1
        calls = [(item.prompt, item.system) for item in job.items] or [(job.prompt, job.system)]
        schema = answer_contract(rule)[0]
        cached = self.caching and rule.judge.cache and job.tools is None
        completion = self._completion(rule)
        if trace_id is not None:
            plain = TokenCounter()
            primary = score_rule_key(rule, primary_shape(rule).criterion)  # its decision's
            self.basis[score_id(primary, rule.version, rule.scope, trace_id)] = sum(
                plain.messages(model, system, prompt) for prompt, system in calls
            )
        for prompt, system in calls:
            if cached:
                key = verdict_key(rule, model, prompt, system, schema)
                if key in self.paid:
                    cost.cache_hits += 1
                    continue
                self.paid.add(key)
            cost.judge_calls += 1
            prompt_tokens = self.counter.messages(model, system, prompt)
            cost.prompt_tokens += prompt_tokens
            cost.completion_tokens += completion
            usage = TokenUsage(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion,
                total_tokens=prompt_tokens + completion,
            )
            batched = usage.model_copy(update={"batch": True})
            as_judged = batched if rule.judge.mode == "batch" else usage  # as the worker asks
            cost.add_price(self.price(model, as_judged), self.price(model, batched))
            if job.tools is not None:
                cost.tool_rounds_max += rule.judge.max_tool_calls

    def estimate(self, traces: int, closes: int, invalid: int) -> Estimate:
        return _estimate(self, traces, closes, invalid)

    @staticmethod
    def _completion(rule: Any) -> int:
        if rule.judge.api == "decisions":
            return 0  # probabilities, no text: nothing to pay for
        if isinstance(rule, RubricRule):
            return COMPLETION_TOKENS_PER_CRITERION * max(1, len(rule.criteria))
        return COMPLETION_TOKENS


def estimate_messages(
    ruleset: RuleSet,
    messages: Iterable[bytes],
    options: FileOptions,
    price: Price,
    counter: TokenCounter | None = None,
    topic: str | None = None,
    caching: bool = True,
) -> Estimate:
    """The judge calls, tokens and price of ``messages`` (traces and session events, as
    ``scorer explain`` reads a file) under ``ruleset`` (``caching``: the verdict cache is
    on, so a call the sample already made is a hit)."""
    counter = counter or TokenCounter()
    counting = _Counting(options.default_model, counter, price, caching)
    traces = closes = invalid = 0
    for record in explain_file(ruleset, messages, options, topic):
        trace_id = None
        if isinstance(record, ExplainedTrace):
            traces += 1
            scope, trace_id = "trace", record.trace_id
        elif isinstance(record, ExplainedClose):
            closes += 1
            scope = record.scope
        else:
            invalid += hasattr(record, "error")
            continue
        for explained in record.rules:
            if explained.job is None:
                continue
            if explained.call is not None and trace_id is not None:  # one of its tool calls
                key = call_score_key(trace_id, explained.call["id"])
                counting.count(explained.job, "tool_call", key)
            else:
                counting.count(explained.job, scope, trace_id)
    found = counting.estimate(traces, closes, invalid)
    found.basis = counting.basis
    return found


MIN_CALIBRATION_CALLS = 5  # fewer answers than this say too little of a provider's count


def calibrated(basis: Mapping[str, int], reported: Mapping[str, int]) -> TokenCounter | None:
    """A counter corrected by what answers reported: ``reported`` maps a score id to the
    prompt tokens its usage said (judged, not cached), ``basis`` the same ids to the
    characters / 4 of the calls that score came from; None where fewer than
    ``MIN_CALIBRATION_CALLS`` scores are in both."""
    both = [key for key in basis if key in reported and basis[key] > 0]
    if len(both) < MIN_CALIBRATION_CALLS:
        return None
    ratio = sum(reported[key] for key in both) / sum(basis[key] for key in both)
    return TokenCounter(ratio=ratio, calibrated_from=len(both))


def estimate_plans(
    plans: Iterable[Plan], default_model: str, price: Price, counter: TokenCounter | None = None
) -> Estimate:
    """The judge calls, tokens and price of the jobs ``plans`` would run (``scorer
    backfill``'s plans, once what is already scored is taken out)."""
    counting = _Counting(default_model, counter or TokenCounter(), price)
    traces = closes = 0
    for plan in plans:
        if plan.target.thread is None:
            traces += 1
        else:
            closes += 1
        for each in plan.each():  # a trace's tool calls are counted with the trace
            for job in each.judge_jobs:
                counting.count(job, "trace" if each.target.thread is None else job.rule.scope)
    return counting.estimate(traces, closes, 0)


def _estimate(counting: _Counting, traces: int, closes: int, invalid: int) -> Estimate:
    rules = sorted(counting.rules.values(), key=lambda r: (-r.judge_calls, r.pack, r.rule_id))
    notes = []
    if any(rule.tool_rounds_max for rule in rules):
        notes.append(
            "rules whose judge reads the trace through tools are counted at one call each; "
            "the judge may take up to tool_rounds_max more rounds, each resending the prompt"
        )
    return Estimate(
        traces,
        closes,
        rules,
        counting.counter.method,
        f"{COMPLETION_TOKENS} an answer, {COMPLETION_TOKENS_PER_CRITERION} a rubric criterion",
        invalid,
        notes,
    )


def by_pack(estimate: Estimate) -> dict[str, int]:
    """Judge calls per pack over the sample."""
    calls: defaultdict[str, int] = defaultdict(int)
    for rule in estimate.rules:
        calls[rule.pack] += rule.judge_calls
    return dict(calls)
