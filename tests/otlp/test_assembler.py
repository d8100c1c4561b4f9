"""A trace's spans gathered over several export records until the trace is whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stream.otlp.assembler import TraceAssembler
from stream.otlp.spans import Span, trace_document

T0 = datetime(2026, 11, 22, 18, 0, tzinfo=UTC)
NOW = 1_800_000_000.0
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def span(span_id: str, parent: str | None = None, trace: str = TRACE, ended: bool = True) -> Span:
    return Span(
        trace_id=trace,
        span_id=span_id,
        parent_span_id=parent,
        name=f"span-{span_id}",
        start=T0,
        end=T0 + timedelta(seconds=1) if ended else None,
        attributes={"gen_ai.input.messages": '[{"role": "user", "parts": []}]'}
        if parent
        else {"gen_ai.conversation.id": "conv-1"},
        resource={"service.name": "coach"},
    )


def test_a_trace_is_whole_a_grace_period_after_its_root_and_takes_late_children() -> None:
    table: dict[bytes, bytes] = {}
    assembler = TraceAssembler(table, grace_s=5.0)
    assembler.add([span("c1", "r")], arrival=NOW)  # children end first
    assert assembler.tick(NOW + 60) == []  # no root yet: not whole
    assembler.add([span("r")], arrival=NOW + 61)
    assembler.add([span("c2", "r")], arrival=NOW + 63)  # a late child, within the grace
    assert assembler.tick(NOW + 67) == []  # 4 s after the last span
    (whole,) = assembler.tick(NOW + 68)
    assert sorted(s.span_id for s in whole.spans) == ["c1", "c2", "r"]
    assert not whole.root_missing and whole.dropped_spans == 0
    document = trace_document(whole.spans)
    assert (document["id"], document["project_name"], document["thread_id"]) == (
        TRACE,
        "coach",
        "conv-1",
    )
    assert table == {} and assembler.tick(NOW + 1000) == []  # handed out once


def test_a_redelivered_batch_is_not_activity_and_adds_nothing() -> None:
    assembler = TraceAssembler({}, grace_s=5.0)
    assembler.add([span("r"), span("c1", "r")], arrival=NOW)
    assembler.add([span("r"), span("c1", "r")], arrival=NOW + 4)  # the same record again
    (whole,) = assembler.tick(NOW + 5)
    assert len(whole.spans) == 2


def test_a_trace_whose_root_never_comes_is_assembled_after_the_longest_wait() -> None:
    assembler = TraceAssembler({}, grace_s=5.0, max_wait_s=600.0)
    assembler.add([span("c1", "lost")], arrival=NOW)
    assert assembler.tick(NOW + 599) == []
    (whole,) = assembler.tick(NOW + 600)
    assert whole.root_missing and [s.span_id for s in whole.spans] == ["c1"]


def test_spans_are_bounded_per_trace_and_the_rest_counted() -> None:
    assembler = TraceAssembler({}, grace_s=1.0, max_spans=3)
    assembler.add([span("r")] + [span(f"c{n}", "r") for n in range(5)], arrival=NOW)
    (whole,) = assembler.tick(NOW + 1)
    assert (len(whole.spans), whole.dropped_spans) == (3, 3)


def test_traces_in_one_batch_are_gathered_apart_and_survive_a_restart() -> None:
    table: dict[bytes, bytes] = {}
    before = TraceAssembler(table, grace_s=5.0)
    other = "0af7651916cd43dd8448eb211c80319c"
    before.add([span("r"), span("x", trace=other, ended=False)], arrival=NOW)
    after = TraceAssembler(table, grace_s=5.0)  # a new worker on the recovered table
    assert after.rebuild() == 2
    (whole,) = after.tick(NOW + 5)
    assert whole.trace_id == TRACE
    assert after.gathering() == 1  # the other trace's root has not ended
