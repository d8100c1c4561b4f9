"""A file of messages explained: each trace's plan (every trace rule's decision, the
comparison pairs it would be a side of), then the closes of the threads and pairs the file
forms (``threads``), and the messages the worker would dead-letter."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from pydantic import ValidationError

from ..engine.scorer import Scorer
from ..models import Trace, parse_trace
from ..ruleset.schema import RuleSet
from ..threads.events import SessionEvent, parse_session
from ..threads.router import NotPaired, ThreadRouter
from .records import (
    PAIRS,
    Explained,
    ExplainedTrace,
    FileOptions,
    Invalid,
    Note,
    Record,
    in_rule_order,
    planned,
    planning_scorer,
    switched_off,
)
from .threads import FileThreads, explain_close, first_moment


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
        planning_scorer(ruleset, default_model, max_prompt_tokens), trace, document, topic
    )


def _trace_rules(scorer: Scorer, trace: Trace, document: Any, topic: str | None) -> list[Explained]:
    ruleset = scorer.ruleset
    explained = planned(scorer.plan(trace, document, topic))
    explained.extend(_pairs(ruleset, trace, document, topic))
    explained.extend(
        switched_off(ruleset, lambda rule: rule.scope != "thread")  # thread rules: at closes
    )
    return in_rule_order(ruleset, explained)


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


def is_session_event(raw: bytes, topic: str, sessions_topic: str) -> bool:
    """Whether a message read from ``topic`` is a coaching-session event: every message of
    the sessions topic is; elsewhere, a JSON object with a ``session_id`` and no ``id`` (a
    trace's)."""
    if topic == sessions_topic:
        return True
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(document, dict) and "session_id" in document and "id" not in document


def parse_message(
    raw: bytes, topic: str, sessions_topic: str
) -> tuple[Trace, Any] | SessionEvent | Invalid:
    """One message read from ``topic`` as the worker reads it: a session event
    (``is_session_event``), else a trace with its document; what it would dead-letter, and
    why, where it is neither."""
    if is_session_event(raw, topic, sessions_topic):
        try:
            return parse_session(raw)
        except (ValueError, ValidationError) as exc:
            return Invalid("session event", str(exc))
    try:
        return parse_trace(raw)
    except ValueError as exc:
        return Invalid("trace", str(exc))


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
    parsed = [parse_message(raw, topic, options.sessions_topic) for raw in messages]
    scorer = planning_scorer(
        ruleset, options.default_model, options.max_prompt_tokens, options.redaction
    )
    threads = FileThreads(ruleset, options, start=first_moment(parsed))
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
