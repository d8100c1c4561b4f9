"""``scorer explain``'s threads: a file's traces and coaching-session events routed and folded
into conversations, sessions and pairs by the worker's own router and thread processor, on a
clock that follows the file's event times, every thread still open closed at the end of the
file, and each close planned as the thread agent plans it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..engine.scorer import Scorer
from ..models import Trace
from ..ruleset.schema import AnyRule, RuleSet
from ..sources.log import source_name
from ..threads.events import SessionEvent, ThreadEvent, table_key
from ..threads.gaps import inactivity_gaps
from ..threads.processor import ThreadProcessor
from ..threads.router import ThreadRouter
from ..threads.state import ThreadClose, ThreadState
from .records import (
    AT_END_OF_FILE,
    FILE_PARTITION,
    ExplainedClose,
    FileOptions,
    Invalid,
    in_rule_order,
    planned,
    switched_off,
)


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


def explain_close(scorer: Scorer, close: FileClose, gaps: dict[str, float]) -> ExplainedClose:
    """Every rule's decision on a close, planned as the thread agent plans it."""
    ruleset = scorer.ruleset
    thread = close.close
    document = thread.pending.document
    rules = planned(scorer.plan_thread(thread))
    kind = thread.kind
    rules.extend(switched_off(ruleset, lambda rule: _judges(rule, kind)))
    explained = ExplainedClose(
        scope="pair" if kind == "pair" else "thread",
        kind=kind,
        thread_id=thread.thread_id,
        project_name=thread.project_name,
        close_seq=thread.pending.close_seq,
        closes="",
        how="",
        turn_count=document["turn_count"],
        rules=in_rule_order(ruleset, rules),
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


def first_moment(parsed: Sequence[tuple[Trace, Any] | SessionEvent | Invalid]) -> float:
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
