"""What a scored target publishes, as records keyed for their topics: its score events
(scores topic) and its decision records (decisions topic). The agents send them; what they
say is decided here."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..models import ScoreEvent, ThreadDecisions, Trace, TraceDecisions
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
    document = close.pending.document
    records = Records([(score.target_id.encode(), score) for score in result.scores])
    compared = {trace_id: variant for variant, trace_id in document.get("variants", {}).items()}
    # each trace's own project (a canary may report to its own); an ignored one: the pair's
    projects = {
        side.get("id"): side.get("project_name") or close.project_name
        for side in (document.get("a"), document.get("b"))
        if isinstance(side, dict)
    }
    for trace_id in [*compared, *document.get("ignored", [])]:
        if trace_id in compared:
            about = f"pair {close.thread_id!r} as variant {compared[trace_id]}"
            decisions = [
                replace(d, target_id=trace_id, detail=f"{about}: {d.detail}" if d.detail else about)
                for d in result.decisions
            ]
        else:
            why = (
                f"ignored: pair {close.thread_id!r} has this trace's variant from a trace that "
                "started first; one trace of each variant is judged"
            )
            decisions = [
                replace(d, target_id=trace_id, outcome="filtered", detail=why, score_id=None)
                for d in result.decisions
            ]
        project = projects.get(trace_id, close.project_name)
        decisions = [replace(d, project_name=project) for d in decisions]
        record = TraceDecisions(trace_id=trace_id, project_name=project, decisions=decisions)
        records.decisions.append((trace_id.encode(), record))
    return records
