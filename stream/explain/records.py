"""What ``scorer explain`` shows, and the pieces its trace and thread parts share: each rule's
decision as explained (``Explained``), the records a file gives (a trace, a close, a message
the worker would dead-letter, a note), the deployment's settings it needs, and the scorer that
plans judge calls without making them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..engine.kinds.fan_out import left_out
from ..engine.plan import JudgeJob, Plan
from ..engine.prompt import DEFAULT_MAX_PROMPT_TOKENS, describe_cut
from ..engine.scorer import Scorer
from ..engine.verdicts import ToolBox, Verdict
from ..redact.policy import SHIPPED, RedactionPolicy
from ..ruleset.schema import AnyRule, LLMJudgeRule, PromptedRule, RuleSet
from ..threads.router import DEFAULT_TURN_MAX_BYTES
from ..threads.state import ThreadLimits

WOULD_JUDGE = "judge"  # the outcome shown for a rule that would call the judge
PAIRS = "pair"  # the outcome shown for a comparison rule the trace would be one side of
DISABLED = "disabled"  # the outcome shown for a rule switched off: the worker does not run it
AT_END_OF_FILE = "end_of_file"  # how a thread still open when the file ends closes
FILE_PARTITION = 0  # a file is read as one partition of each topic, in its order


@dataclass
class Explained:
    """One rule's decision on one trace, thread close or pair."""

    rule_id: str
    pack: str
    outcome: str  # a decision outcome, "judge": it would call the judge, or "disabled"
    detail: str | None = None
    value: float | None = None
    prompt: str | None = None
    system: str | None = None
    variant: str | None = None  # a shadow judge of the rule: its variant's name
    job: JudgeJob | None = None  # the judge call(s) it would make (``scorer estimate`` counts them)
    # a tool-call rule's: the call it decided for (its id, tool name and position)
    call: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "job"}


@dataclass
class ExplainedTrace:
    """Every trace rule's decision on one trace of the file."""

    trace_id: str
    rules: list[Explained]

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": "trace",
            "trace_id": self.trace_id,
            "rules": [e.as_dict() for e in self.rules],
        }


@dataclass
class ExplainedClose:
    """One close of a thread or a pair the file's events form, and every rule's decision on
    it. ``closes``: ``end`` (its end marker; a pair: both variants came), ``inactivity`` (the
    file goes on past its gap, or a pair's window, without a new event of it) or
    ``end_of_file`` (still open when the file ends); ``how`` says it in words."""

    scope: Literal["thread", "pair"]
    kind: str
    thread_id: str
    project_name: str
    close_seq: int
    closes: str
    how: str
    turn_count: int
    rules: list[Explained]
    traces: list[str] = field(default_factory=list)  # a conversation's traces, in order
    matched: list[str] = field(default_factory=list)  # conversation rules its traces matched
    variants: dict[str, str] = field(default_factory=dict)  # a pair: variant -> trace id
    waiting_for: str | None = None  # a pair: the variant that did not come
    ignored: list[str] = field(default_factory=list)  # a pair: traces of a variant it had

    def as_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"scope": self.scope, "kind": self.kind}
        if self.scope == "pair":
            record["comparison_id"] = self.thread_id
        else:
            record["thread_id"] = self.thread_id
        record.update(
            project_name=self.project_name,
            close_seq=self.close_seq,
            closes=self.closes,
            how=self.how,
            turn_count=self.turn_count,
        )
        if self.scope == "pair":
            record.update(variants=self.variants, ignored=self.ignored)
            if self.waiting_for is not None:
                record["waiting_for"] = self.waiting_for
        elif self.kind == "conversation":
            record.update(traces=self.traces, matched=self.matched)
        record["rules"] = [e.as_dict() for e in self.rules]
        return record

    def involves(self, trace_id: str) -> bool:
        """Whether ``trace_id`` is one of its traces."""
        return trace_id in self.traces or trace_id in self.variants.values()


@dataclass
class Invalid:
    """A message the worker would dead-letter, and why."""

    what: str  # "trace" or "session event"
    error: str

    def as_dict(self) -> dict[str, Any]:
        return {"scope": "invalid", "what": self.what, "error": self.error}


@dataclass
class Note:
    """Something the file's events meet that no rule says."""

    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"scope": "note", "note": self.text}


Record = ExplainedTrace | ExplainedClose | Invalid | Note


@dataclass(frozen=True)
class FileOptions:
    """What the worker's deployment settings say that explaining a file needs."""

    default_model: str
    traces_topic: str = "llm-traces"
    sessions_topic: str = "coaching-sessions"
    max_prompt_tokens: int | None = None  # None: the engine's default cap
    inactivity_gap_s: float = 900.0
    limits: ThreadLimits = field(default_factory=ThreadLimits)
    turn_max_bytes: int = DEFAULT_TURN_MAX_BYTES
    redaction: RedactionPolicy = SHIPPED  # what the judge's copy masks (the deployment's)


def planning_scorer(
    ruleset: RuleSet,
    default_model: str,
    max_prompt_tokens: int | None,
    redaction: RedactionPolicy = SHIPPED,
) -> Scorer:
    # a judge that is never called: the scorer plans judge calls as the worker's does
    cap = DEFAULT_MAX_PROMPT_TOKENS if max_prompt_tokens is None else max_prompt_tokens
    scorer = Scorer(ruleset, _NoCall(), default_model=default_model, max_prompt_tokens=cap)
    scorer.context.redaction = redaction
    return scorer


def planned(plan: Plan) -> list[Explained]:
    """What a plan says of each rule: its decision, or the judge call it would make; then
    the same for each of the trace's tool calls, call by call."""
    explained = _planned(plan)
    for position, part in enumerate(plan.parts):
        call = {"id": part.target.id, "tool": part.target.tool, "position": position}
        for each in _planned(part):
            each.call = call
            explained.append(each)
    return explained


def _planned(plan: Plan) -> list[Explained]:
    explained = []
    for outcome in plan.outcomes:
        decision, score = outcome.decision, outcome.score
        detail = (score.reason or score.status_reason) if score is not None else decision.detail
        if outcome.variant is not None:  # a shadow's prompt that cannot fit
            detail = f"shadow {outcome.variant}: {detail}"
        explained.append(
            Explained(
                decision.rule_id,
                decision.pack,
                decision.outcome,
                detail,
                score.value if score is not None else None,
                variant=outcome.variant,
            )
        )
    for job in plan.judge_jobs:
        why = "would be judged"
        if (variant := job.rule.variant) is not None:
            why = f"{shadow_says(job.rule, variant)}: {why}"
        if job.batch is not None:  # the worker defers it; its score follows the batch
            why = f"would be judged in a batch ({job.batch}; the decision says deferred)"
        if job.prompt_cut:  # what the score's details.prompt_cut and the decision will say
            why += f"; {describe_cut(job.prompt_cut)}"
        elif job.cut:
            why += f"; cut to fit: {job.cut}"
        if job.emptied:
            why += f"; missing, rendered empty: {job.emptied}"
        if job.items and isinstance(job.rule, LLMJudgeRule) and job.rule.fan_out is not None:
            noun = job.rule.fan_out.noun
            why += f"; {len(job.items)} calls, one per item of {job.total_items} {noun}"
            if (bound := left_out(job.rule, job)) is not None:
                why += f" ({bound})"
            why += ", the first one's prompt shown"
        explained.append(
            Explained(
                job.rule.id,
                job.rule.pack,
                WOULD_JUDGE,
                why,
                None,
                job.prompt,
                job.system,
                job.rule.variant,
                job,
            )
        )
    return explained


def shadow_says(rule: PromptedRule, variant: str) -> str:
    """How ``scorer explain`` names a shadow judge the target would get."""
    model = rule.judge.model or "the default model"
    return (
        f"shadow {variant} (judged by {model}; its score carries variant {variant}, kept out of "
        "the quality metrics and alerts; the rule's decision is its own judge's)"
    )


def switched_off(ruleset: RuleSet, shown: Callable[[AnyRule], bool]) -> list[Explained]:
    return [
        Explained(off.rule.id, off.rule.pack, DISABLED, f"switched off by {off.by}")
        for off in ruleset.disabled
        if shown(off.rule)
    ]


def in_rule_order(ruleset: RuleSet, explained: list[Explained]) -> list[Explained]:
    """The trace's rules in the rule set's order, then each tool call's, call by call."""
    order = {rule.id: i for i, rule in enumerate(ruleset.rules)}
    return sorted(
        explained,
        key=lambda e: (
            -1 if e.call is None else e.call["position"],
            order.get(e.rule_id, len(order)),
        ),
    )


class _NoCall:
    """Stands in for a judge so that the scorer plans judge calls; never called."""

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:  # pragma: no cover - plans only
        raise AssertionError("scorer explain never calls the judge")
