"""``scorer explain``: what every rule would decide for a file of traces and session events,
and why, offline.

The same engine the worker runs, with no broker and no judge call: the scorer's plan for
each trace (filters, sampling, variable lookups, checks, prompt rendering), then the file's
traces and coaching-session events routed and folded into threads and pairs by the worker's
own router and thread processor, every thread closed at the end of the file, and each close
planned as the thread agent plans it. A rule that would be judged shows the prompt it would
send instead of a score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from .engine.kinds.fan_out import left_out
from .engine.plan import Plan
from .engine.prompt import DEFAULT_MAX_PROMPT_TOKENS, describe_cut
from .engine.scorer import Scorer
from .engine.verdicts import ToolBox, Verdict
from .models import Trace, parse_trace
from .ruleset.schema import AnyRule, LLMJudgeRule, PromptedRule, RuleSet
from .threads.events import SessionEvent, ThreadEvent, parse_session, table_key
from .threads.gaps import inactivity_gaps
from .threads.processor import ThreadProcessor
from .threads.router import DEFAULT_TURN_MAX_BYTES, NotPaired, ThreadRouter
from .threads.sources import source_name
from .threads.state import ThreadClose, ThreadLimits, ThreadState

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

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


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


def explain_trace(
    ruleset: RuleSet,
    raw: bytes,
    topic: str | None,
    default_model: str,
    max_prompt_tokens: int | None = None,
) -> tuple[str, list[Explained]]:
    """The trace's id and every trace rule's decision (raises ``ValueError`` for a message
    the worker would dead-letter, with the same message)."""
    trace, document = parse_trace(raw)
    return trace.id, _trace_rules(
        _scorer(ruleset, default_model, max_prompt_tokens), trace, document, topic
    )


def _scorer(ruleset: RuleSet, default_model: str, max_prompt_tokens: int | None) -> Scorer:
    # a judge that is never called: the scorer plans judge calls as the worker's does
    cap = DEFAULT_MAX_PROMPT_TOKENS if max_prompt_tokens is None else max_prompt_tokens
    return Scorer(ruleset, _NoCall(), default_model=default_model, max_prompt_tokens=cap)


def _trace_rules(scorer: Scorer, trace: Trace, document: Any, topic: str | None) -> list[Explained]:
    ruleset = scorer.ruleset
    explained = _planned(scorer.plan(trace, document, topic))
    explained.extend(_pairs(ruleset, trace, document, topic))
    explained.extend(
        _disabled(ruleset, lambda rule: rule.scope != "thread")  # thread rules: at closes
    )
    return _in_rule_order(ruleset, explained)


def _planned(plan: Plan) -> list[Explained]:
    """What a plan says of each rule: its decision, or the judge call it would make."""
    explained = []
    for outcome in plan.outcomes:
        decision, score = outcome.decision, outcome.score
        explained.append(
            Explained(
                decision.rule_id,
                decision.pack,
                decision.outcome,
                (score.reason or score.status_reason) if score is not None else decision.detail,
                score.value if score is not None else None,
            )
        )
    for job in plan.judge_jobs:
        why = "would be judged"
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
            Explained(job.rule.id, job.rule.pack, WOULD_JUDGE, why, None, job.prompt, job.system)
        )
    return explained


def _disabled(ruleset: RuleSet, shown: Callable[[AnyRule], bool]) -> list[Explained]:
    return [
        Explained(off.rule.id, off.rule.pack, DISABLED, f"switched off by {off.by}")
        for off in ruleset.disabled
        if shown(off.rule)
    ]


def _in_rule_order(ruleset: RuleSet, explained: list[Explained]) -> list[Explained]:
    order = {rule.id: i for i, rule in enumerate(ruleset.rules)}
    return sorted(explained, key=lambda e: order.get(e.rule_id, len(order)))


def _pairs(ruleset: RuleSet, trace: Trace, document: Any, topic: str | None) -> list[Explained]:
    """What each comparison rule would do with the trace: which side of which pair it is,
    or why it is no side of one."""
    spec = ruleset.pair_spec()
    if spec is None:
        return []
    pairing = ThreadRouter(ruleset).pairing(trace, document, topic)
    if isinstance(pairing, NotPaired):
        why = f"not paired: {pairing.why}"
        return [Explained(rule.id, rule.pack, "filtered", why) for rule in ruleset.pair_rules()]
    key, variant, rules = pairing
    partner = spec.variants[1] if variant == spec.variants[0] else spec.variants[0]
    why = (
        f"pairs as variant {variant} of comparison {key!r}: judged once variant {partner} "
        f"comes, within {spec.window_s:g} s"
    )
    return [
        Explained(rule.id, rule.pack, PAIRS, why)
        if rule.id in rules
        else Explained(rule.id, rule.pack, "filtered", "not paired: its filter does not match")
        for rule in ruleset.pair_rules()
    ]


@dataclass
class FileClose:
    """A close of the file's threads, with its traces (a conversation's) and whether it came
    at the end of the file."""

    close: ThreadClose
    traces: list[str]
    at_end: bool


class FileThreads:
    """A file's traces and session events folded into threads and pairs as the worker folds
    them: routed by its ``ThreadRouter``, folded and closed by its ``ThreadProcessor``. The
    file is read as one partition of each topic, in its order, keyed as ``scorer replay``
    keys it (by thread or session id), each message reaching Kafka when it happened (its
    event time, never earlier than the message before it) with the worker's clock ticking up
    to it. A thread closes where the worker would close it live: on its end marker, or once
    the file's events go on past its inactivity gap (a pair's window); every thread still
    open at the end of the file closes then."""

    def __init__(self, ruleset: RuleSet, options: FileOptions, start: float) -> None:
        self.router = ThreadRouter(ruleset, options.turn_max_bytes)
        self.gaps = inactivity_gaps(ruleset, options.inactivity_gap_s)
        self.options = options
        self.now = start
        self.processor = ThreadProcessor(
            {},
            gaps=self.gaps,
            limits=options.limits,
            retention_s=math.inf,  # nothing is forgotten before the file ends
            sessions_topic=options.sessions_topic,
            clock=lambda: self.now,
        )
        self.closes: list[FileClose] = []

    @property
    def reads_sessions(self) -> bool:
        """Whether the worker would read session events (it does only for session rules)."""
        return bool(self.router.session_rules)

    def add_trace(self, trace: Trace, document: Any, topic: str) -> None:
        arrival = self._arrive(trace.start_time or trace.end_time)
        key = (trace.thread_id or trace.id).encode()
        source = source_name(topic, FILE_PARTITION)
        for event in self.router.events_for_trace(trace, document, topic, arrival, source, key):
            self._apply(event)

    def add_session(self, event: SessionEvent) -> None:
        arrival = self._arrive(event.timestamp)
        source = source_name(self.options.sessions_topic, FILE_PARTITION)
        self._apply(self.router.from_session(event, arrival, source, event.session_id.encode()))

    def finish(self) -> list[FileClose]:
        """Close every thread still open (a tick past every gap); every close, in order."""
        end = ThreadEvent(type="tick", arrival=self.now + max(self.gaps.values()))
        self._closed(self.processor.apply(FILE_PARTITION, end), at_end=True)
        return self.closes

    def _arrive(self, moment: datetime | None) -> float:
        """The next message's Kafka time; the worker's clock ticks up to it first, closing
        the threads that went quiet for their gap before it."""
        if moment is not None and _aware(moment).timestamp() > self.now:
            self.now = _aware(moment).timestamp()
            tick = ThreadEvent(type="tick", arrival=self.now)
            self._closed(self.processor.apply(FILE_PARTITION, tick), at_end=False)
        return self.now

    def _apply(self, event: ThreadEvent) -> None:
        # through the thread-events wire format, as the thread agent reads it
        closes = self.processor.apply(FILE_PARTITION, ThreadEvent.from_bytes(event.to_bytes()))
        self._closed(closes, at_end=False)

    def _closed(self, closes: list[ThreadClose], *, at_end: bool) -> None:
        for close in closes:
            state = ThreadState.from_bytes(
                self.processor.table[table_key(close.kind, close.thread_id)]
            )
            # the close's turns are its thread's first ones (an event after a gap closes
            # the thread before it is folded in, at the end of the thread)
            turns = state.turns[: close.pending.document["turn_count"]]
            traces = [t.key for t in turns] if close.kind == "conversation" else []
            self.closes.append(FileClose(close, traces, at_end))


def explain_file(
    ruleset: RuleSet, messages: Iterable[bytes], options: FileOptions, topic: str | None = None
) -> list[Record]:
    """What the worker would do with a file of messages: one record per trace (every trace
    rule's decision), then one per close of the threads and pairs they form (every thread or
    comparison rule's decision), and what it would dead-letter.

    ``topic``: the topic the messages are read as coming from (default: the traces topic; the
    sessions topic: every message is a session event). Read from the traces topic, a message
    is a session event when it has a ``session_id`` and no ``id`` (a trace's), as the
    sessions topic's events have.
    """
    topic = topic or options.traces_topic
    parsed: list[tuple[Trace, Any] | SessionEvent | Invalid] = []
    for raw in messages:
        if _is_session_event(raw, topic, options.sessions_topic):
            try:
                parsed.append(parse_session(raw))
            except (ValueError, ValidationError) as exc:
                parsed.append(Invalid("session event", str(exc)))
            continue
        try:
            parsed.append(parse_trace(raw))
        except ValueError as exc:
            parsed.append(Invalid("trace", str(exc)))
    scorer = _scorer(ruleset, options.default_model, options.max_prompt_tokens)
    threads = FileThreads(ruleset, options, start=_first_moment(parsed))
    records: list[Record] = []
    unread = 0
    for item in parsed:
        if isinstance(item, Invalid):
            records.append(item)
        elif isinstance(item, SessionEvent):
            if threads.reads_sessions:
                threads.add_session(item)
            else:
                unread += 1
        else:
            trace, document = item
            records.append(ExplainedTrace(trace.id, _trace_rules(scorer, trace, document, topic)))
            threads.add_trace(trace, document, topic)
    if unread:
        records.append(
            Note(
                f"{unread} session events not read: no session rule is loaded, so the worker "
                f"does not read {options.sessions_topic}"
            )
        )
    records.extend(explain_close(scorer, close, threads.gaps) for close in threads.finish())
    return records


def explain_close(scorer: Scorer, close: FileClose, gaps: dict[str, float]) -> ExplainedClose:
    """Every rule's decision on a close, planned as the thread agent plans it."""
    ruleset = scorer.ruleset
    thread = close.close
    document = thread.pending.document
    rules = _planned(scorer.plan_thread(thread))
    kind = thread.kind
    rules.extend(_disabled(ruleset, lambda rule: _judges(rule, kind)))
    explained = ExplainedClose(
        scope="pair" if kind == "pair" else "thread",
        kind=kind,
        thread_id=thread.thread_id,
        project_name=thread.project_name,
        close_seq=thread.pending.close_seq,
        closes="",
        how="",
        turn_count=document["turn_count"],
        rules=_in_rule_order(ruleset, rules),
        traces=close.traces,
        matched=list(thread.pending.rules) if kind == "conversation" else [],
    )
    gap = gaps[kind]
    if kind == "pair":
        explained.variants = dict(document.get("variants", {}))
        explained.ignored = list(document.get("ignored", []))
        spec = ruleset.pair_spec()
        labels = spec.variants if spec is not None else []
        explained.waiting_for = next((v for v in labels if v not in explained.variants), None)
    explained.closes, explained.how = _how(thread, close.at_end, gap, explained.waiting_for)
    return explained


def _judges(rule: AnyRule, kind: str) -> bool:
    """Whether ``rule`` is one of the rules a close of ``kind`` meets."""
    if kind == "pair":
        return rule.scope == "pair"
    return rule.thread is not None and rule.thread.kind == kind


def _how(close: ThreadClose, at_end: bool, gap: float, waiting_for: str | None) -> tuple[str, str]:
    """How a close comes, as a word and in words."""
    reason = close.pending.reason
    if close.kind == "pair":
        if waiting_for is None:
            return "end", "both variants came: the pair is judged at once"
        if at_end:
            return AT_END_OF_FILE, (
                f"the file ends without variant {waiting_for}: the worker waits {gap:g} s "
                "for it, then skips the pair"
            )
        return "inactivity", f"variant {waiting_for} did not come within {gap:g} s: skipped"
    if reason == "end":
        marker = "its end event" if close.kind == "session" else "a trace marking it finished"
        return "end", f"closes on its end marker ({marker})"
    if at_end:
        return AT_END_OF_FILE, (
            f"open at the end of the file: the worker would close it after {gap:g} s "
            "without a new turn, or on its end marker"
        )
    return "inactivity", f"closes after {gap:g} s without a new turn (the file goes on past that)"


def _is_session_event(raw: bytes, topic: str, sessions_topic: str) -> bool:
    if topic == sessions_topic:
        return True
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(document, dict) and "session_id" in document and "id" not in document


def _first_moment(parsed: Sequence[tuple[Trace, Any] | SessionEvent | Invalid]) -> float:
    """The earliest event time in the file (epoch s), where the file's clock starts."""
    moments = []
    for item in parsed:
        if isinstance(item, SessionEvent):
            moment = item.timestamp
        elif isinstance(item, tuple):
            moment = item[0].start_time or item[0].end_time
        else:
            continue
        if moment is not None:
            moments.append(_aware(moment).timestamp())
    return min(moments, default=0.0)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


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
