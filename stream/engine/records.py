"""What a scored target publishes, as records keyed for their topics: its score events
(scores topic) and its decision records (decisions topic). The agents send them; what they
say is decided here."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..models import Decision, ScoreEvent, ThreadDecisions, Trace, TraceDecisions
from ..threads.state import ThreadClose
from .outcomes import TraceResult


@dataclass
class Records:
    """Score events and decision records, each with its Kafka key, in publishing order
    (every score before the decisions that name it)."""

    scores: list[tuple[bytes, ScoreEvent]] = field(default_factory=list)
    decisions: list[tuple[bytes, TraceDecisions | ThreadDecisions]] = field(default_factory=list)


def scored(key: str, scores: list[ScoreEvent], record: TraceDecisions | ThreadDecisions) -> Records:
    """One scored target's records, all keyed by the target id (so they share a partition)."""
    raw_key = key.encode()
    return Records([(raw_key, score) for score in scores], [(raw_key, record)])


def trace_records(result: TraceResult, trace: Trace) -> Records:
    """A trace's score events and its decision record."""
    record = TraceDecisions(
        trace_id=trace.id, project_name=trace.project_name, decisions=result.decisions
    )
    return scored(trace.id, result.scores, record)


def close_records(result: TraceResult, close: ThreadClose) -> Records:
    """A close's score events and its decision record (a pair's: one per trace of it)."""
    if close.kind == "pair":
        return pair_records(result, close)
    record = ThreadDecisions(
        thread_id=close.thread_id,
        kind=close.kind,
        close_seq=close.pending.close_seq,
        project_name=close.project_name,
        decisions=result.decisions,
    )
    return scored(close.thread_id, result.scores, record)


def pair_records(result: TraceResult, close: ThreadClose) -> Records:
    """A pair's score events (each keyed by its target: the comparison key, or a trace) and
    a decision record for each trace of the pair, keyed by trace id: the comparison rules'
    decisions about the pair, and for a trace ignored while the pair waited, that it was."""
    return pair_records_of(
        result.scores,
        result.decisions,
        close.thread_id,
        close.project_name,
        pair_facts(close.pending.document),
    )


def pair_facts(document: dict[str, Any]) -> dict[str, Any]:
    """What a pair's decision records name of its document: the variants compared, each
    side's trace and project, and the traces ignored while the pair waited."""
    sides = {
        side: {"id": doc.get("id"), "project_name": doc.get("project_name")}
        for side in ("a", "b")
        if isinstance(doc := document.get(side), dict)
    }
    return {
        "variants": dict(document.get("variants", {})),
        **sides,
        "ignored": list(document.get("ignored", [])),
    }


def pair_records_of(
    scores: list[ScoreEvent],
    decisions: list[Decision],
    pair_id: str,
    project_name: str,
    facts: dict[str, Any],
) -> Records:
    """``pair_records`` from the pair's ``facts`` (``pair_facts``): a deferred comparison's
    records are published from them once its batch completes."""
    records = Records([(score.target_id.encode(), score) for score in scores])
    compared = {trace_id: variant for variant, trace_id in facts.get("variants", {}).items()}
    # each trace's own project (a canary may report to its own); an ignored one: the pair's
    projects = {
        side.get("id"): side.get("project_name") or project_name
        for side in (facts.get("a"), facts.get("b"))
        if isinstance(side, dict)
    }
    for trace_id in [*compared, *facts.get("ignored", [])]:
        if trace_id in compared:
            about = f"pair {pair_id!r} as variant {compared[trace_id]}"
            said = [
                replace(d, target_id=trace_id, detail=f"{about}: {d.detail}" if d.detail else about)
                for d in decisions
            ]
        else:
            why = (
                f"ignored: pair {pair_id!r} has this trace's variant from a trace that "
                "started first; one trace of each variant is judged"
            )
            said = [
                replace(d, target_id=trace_id, outcome="filtered", detail=why, score_id=None)
                for d in decisions
            ]
        project = projects.get(trace_id, project_name)
        said = [replace(d, project_name=project) for d in said]
        record = TraceDecisions(trace_id=trace_id, project_name=project, decisions=said)
        records.decisions.append((trace_id.encode(), record))
    return records
