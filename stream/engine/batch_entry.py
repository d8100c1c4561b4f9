"""A judge job deferred to a batch, as it is kept (``Deferred``), and where it is kept
(``Deferrer``, the protocol the worker's batch queue implements: ``agents/batch_jobs.py``).

An entry is everything a judged rule's outcome needs once its answers come back from the
provider's Batch API, minutes or hours later, in another process perhaps: the rule's
identity (and the model it is judged by), the prompts as rendered (one per judge call, each
named by a ``custom_id``), the plan's target and timestamp, and what the target's decision
record names (a trace, or a close of a thread or pair). It is kept as JSON in the worker's
``batch-jobs`` table; it turns back into the ``JudgeJob`` and ``Plan`` the rule's kind
concludes (``deferred.finish_deferred``), so a batched score is the score a live call would
have published (same id, same shape). Design record 25.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol

import orjson

from ..models import ScoreEvent, ThreadDecisions, ThreadInfo, TraceDecisions
from .outcomes import RuleOutcome, Target
from .plan import JudgedRule, JudgeJob, Plan
from .prompt import FittedPrompt
from .records import Records, pair_records_of, scored
from .spend import Admission

FORMAT = 1  # the entry's layout; an entry of another is reported, not read

State = Literal["waiting", "submitting", "submitted"]


@dataclass
class Deferred:
    """A judged rule's job waiting for its batch, and where it stands.

    ``state``: ``waiting`` (gathered, not submitted), ``submitting`` (written before the batch
    is created: a worker that dies before recording its id finds it by ``batch_key``) or
    ``submitted`` (``batch_id`` is polled)."""

    key: str
    rule_id: str
    pack: str
    version: int
    model: str  # the model it is judged by (a fallback budget's, if one sent it there)
    why: str  # why it was deferred, as its first decision says
    target: dict[str, Any]
    created_at: str
    job: dict[str, Any]
    calls: list[str]  # one custom_id per judge call, in the job's order
    close: dict[str, Any] | None = None  # a close's record facts (None: a trace)
    partition: int = -1  # the table partition it is kept in
    since: float = 0.0  # when it was deferred (seconds since the epoch)
    state: State = "waiting"
    batch_key: str | None = None
    batch_id: str | None = None
    format: int = FORMAT
    extra: dict[str, Any] = field(default_factory=dict)  # room for later fields
    variant: str | None = None  # a shadow judge's job: the rule's shadow it judges as

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, value: bytes) -> Deferred:
        """An entry ``encode`` wrote (``ValueError`` otherwise)."""
        try:
            data = orjson.loads(value)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, this worker reads {FORMAT}")
            return cls(**data)
        except (orjson.JSONDecodeError, TypeError, AttributeError) as exc:
            raise ValueError(f"an unreadable deferred job: {exc}") from exc

    def prompts(self) -> list[tuple[str, str | None, list[str]]]:
        """Each judge call's prompt, system prompt and quoted text, in ``calls`` order."""
        items = self.job["items"]
        if items:
            return [(item["prompt"], item["system"], item["quoted"]) for item in items]
        return [(self.job["prompt"], self.job["system"], self.job["quoted"])]

    def plan(self) -> Plan:
        """The plan it was deferred from (its target and timestamp; nothing else to do)."""
        target = self.target
        thread = ThreadInfo.model_validate(target["thread"]) if target["thread"] else None
        found = Target(
            target["id"],
            target["project_name"],
            target["score_key"],
            thread,
            span_id=target.get("span_id"),
            trace=target.get("trace"),
            tool=target.get("tool"),
        )
        return Plan(found, created_at=datetime.fromisoformat(self.created_at))

    def judge_job(self, rule: JudgedRule) -> JudgeJob:
        """The judge job it was deferred as, for ``rule`` (the rule it was planned with)."""
        job = self.job
        admission = job["admission"]
        judged = JudgeJob(
            rule,
            job["prompt"],
            job["system"],
            dict(job["forced"]),
            list(job["quoted"]),
            dict(job["cut"]),
            list(job["emptied"]),
            [FittedPrompt(**item) for item in job["items"]],
            job["total_items"],
            None,
            {slot: (m[0], m[1]) for slot, m in job["members"].items()},
            job["prompt_cut"],
            Admission(**admission) if admission is not None else None,
        )
        judged.redacted = dict(job.get("redacted") or {})  # a job kept before: none said
        judged.order = job.get("order")  # a job kept before order was a setting: None (fixed)
        return judged

    def records(self, outcome: RuleOutcome) -> Records:
        """What the rule's outcome publishes: its scores, and a decision record holding its
        decision for the target (a trace, a close, or each trace of a pair)."""
        scores = [s for s in [outcome.score, *outcome.extra] if s is not None]
        if self.variant is not None:  # a shadow's scores; the rule's decision is its own judge's
            return replace(self.records_of(outcome, scores), decisions=[])
        return self.records_of(outcome, scores)

    def records_of(self, outcome: RuleOutcome, scores: list[ScoreEvent]) -> Records:
        target, close = self.target, self.close
        if close is None:  # a trace, or one of its tool calls (keyed by the trace)
            trace = target.get("trace") or target["id"]
            record: TraceDecisions | ThreadDecisions = TraceDecisions(
                trace_id=trace,
                project_name=target["project_name"],
                decisions=[outcome.decision],
            )
            return scored(trace, scores, record)
        if close["kind"] == "pair":
            return pair_records_of(
                scores, [outcome.decision], target["id"], target["project_name"], close["pair"]
            )
        record = ThreadDecisions(
            thread_id=target["id"],
            kind=close["kind"],
            close_seq=close["close_seq"],
            project_name=target["project_name"],
            decisions=[outcome.decision],
        )
        return scored(target["id"], scores, record)


class Deferrer(Protocol):
    """Where judge jobs wait for a batch (``agents.batch_jobs.BatchJobs``)."""

    def holds(self, job: JudgeJob) -> bool:
        """Whether every call of ``job`` has a verdict kept already (then it is judged now:
        a kept verdict costs nothing and waits for nothing)."""
        ...

    def defer(self, deferred: Deferred) -> str | None:
        """Keep ``deferred`` durably pending for a batch; None once kept (or already kept),
        else why it cannot be."""
        ...
