"""A trace's spans gathered over several export records until the trace is whole."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta

from stream.otlp.assembler import TraceAssembler, Whole
from stream.otlp.document import trace_document
from stream.otlp.spans import Span

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


def add(
    assembler: TraceAssembler, arrival: float, *spans: Span, partition: int = 0
) -> Counter[str]:
    """Fold ``spans`` as the assembly agent does: per trace, as stored."""
    outcomes: Counter[str] = Counter()
    for trace in dict.fromkeys(s.trace_id for s in spans):
        of_trace = [s.stored() for s in spans if s.trace_id == trace]
        outcomes += assembler.add(partition, trace, of_trace, arrival)
    return outcomes


def ready(assembler: TraceAssembler, now: float, partition: int = 0) -> list[Whole]:
    """The traces whole at ``now``, published as the agent does."""
    wholes = assembler.due(partition, now)
    for whole in wholes:
        assembler.done(whole.trace_id)
    return wholes


def test_a_trace_is_whole_a_grace_period_after_its_root_and_takes_late_children() -> None:
    table: dict[bytes, bytes] = {}
    assembler = TraceAssembler(table, grace_s=5.0, retention_s=0)
    add(assembler, NOW, span("c1", "r"))  # children end first
    assert ready(assembler, NOW + 60) == []  # no root yet: not whole
    add(assembler, NOW + 61, span("r"))
    add(assembler, NOW + 63, span("c2", "r"))  # a late child, within the grace
    assert ready(assembler, NOW + 67) == []  # 4 s after the last span
    (whole,) = ready(assembler, NOW + 68)
    assert sorted(s.span_id for s in whole.spans) == ["c1", "c2", "r"]
    assert whole.summary() == {
        "span_count": 3,
        "root_missing": False,
        "dropped_spans": 0,
        "cut_spans": 0,
    }
    document = trace_document(whole.spans)
    assert (document["id"], document["project_name"], document["thread_id"]) == (
        TRACE,
        "coach",
        "conv-1",
    )
    assert table == {} and ready(assembler, NOW + 1000) == []  # handed out once


def test_a_whole_trace_stays_in_the_table_until_it_is_published() -> None:
    table: dict[bytes, bytes] = {}
    assembler = TraceAssembler(table, grace_s=5.0)
    add(assembler, NOW, span("r"))
    (whole,) = assembler.due(0, NOW + 5)
    assert TRACE.encode() in table  # not published yet: a new owner would assemble it again
    after = TraceAssembler(table, grace_s=5.0)
    after.rebuild([0])
    (again,) = after.due(0, NOW + 5)
    assert again.spans == whole.spans


def test_a_span_of_a_published_trace_is_late_and_dropped_until_the_retention_ends() -> None:
    table: dict[bytes, bytes] = {}
    assembler = TraceAssembler(table, grace_s=5.0, retention_s=600.0)
    add(assembler, NOW, span("r"), span("c1", "r"))
    assert len(ready(assembler, NOW + 5)) == 1
    redelivered = add(assembler, NOW + 30, span("c1", "r"), span("c2", "r"))
    assert redelivered == Counter(late=2)
    assert ready(assembler, NOW + 100) == [] and assembler.gathering() == 1  # the marker
    ready(assembler, NOW + 605)  # retention over: forgotten
    assert table == {}


def test_a_redelivered_batch_is_not_activity_and_adds_nothing() -> None:
    assembler = TraceAssembler({}, grace_s=5.0)
    add(assembler, NOW, span("r"), span("c1", "r"))
    again = add(assembler, NOW + 4, span("r"), span("c1", "r"))  # the same record again
    assert again == Counter(duplicate=2)
    (whole,) = ready(assembler, NOW + 5)
    assert len(whole.spans) == 2


def test_a_trace_whose_root_never_comes_is_assembled_after_the_longest_wait() -> None:
    assembler = TraceAssembler({}, grace_s=5.0, max_wait_s=600.0)
    add(assembler, NOW, span("c1", "lost"))
    assert ready(assembler, NOW + 599) == []
    (whole,) = ready(assembler, NOW + 600)
    assert whole.root_missing and [s.span_id for s in whole.spans] == ["c1"]


def test_spans_are_bounded_per_trace_and_the_rest_counted() -> None:
    assembler = TraceAssembler({}, grace_s=1.0, max_spans=3)
    outcomes = add(assembler, NOW, span("r"), *(span(f"c{n}", "r") for n in range(5)))
    assert outcomes == Counter(kept=3, dropped=3)
    (whole,) = ready(assembler, NOW + 1)
    assert (len(whole.spans), whole.dropped_spans) == (3, 3)


def test_a_span_past_the_byte_bound_loses_its_long_values_first() -> None:
    assembler = TraceAssembler({}, grace_s=1.0, max_bytes=4_000)
    big = span("c1", "r")
    big.attributes = {"gen_ai.input.messages": "x" * 5_000, "gen_ai.request.model": "gpt-4o"}
    add(assembler, NOW, span("r"), big)
    (whole,) = ready(assembler, NOW + 1)
    (cut,) = [s for s in whole.spans if s.span_id == "c1"]
    assert cut.attributes == {
        "gen_ai.input.messages": "[cut: 5002 bytes]",
        "gen_ai.request.model": "gpt-4o",
    }
    assert whole.cut_spans == 1 and whole.dropped_spans == 0


def test_traces_in_one_batch_are_gathered_apart_and_survive_a_restart() -> None:
    table: dict[bytes, bytes] = {}
    before = TraceAssembler(table, grace_s=5.0)
    other = "0af7651916cd43dd8448eb211c80319c"
    add(before, NOW, span("r"), span("x", trace=other, ended=False))
    after = TraceAssembler(table, grace_s=5.0)  # a new worker on the recovered table
    assert after.rebuild([0]) == 2
    (whole,) = ready(after, NOW + 5)
    assert whole.trace_id == TRACE
    assert after.gathering() == 2  # the other trace's root has not ended; a marker of this
    assert TraceAssembler(table).rebuild([1]) == 0  # another partition's owner


def test_a_backlog_holds_a_trace_until_every_spans_partition_is_read_past_it() -> None:
    assembler = TraceAssembler({}, grace_s=5.0)
    add(assembler, NOW, span("r"), span("c1", "r"))
    # partition 1 of the spans topic is read only up to NOW + 3 (a backlog after a restart):
    # a late child of the trace may be there
    assembler.progress(0, {"otlp_spans:0": NOW + 100, "otlp_spans:1": NOW + 3}, reported=NOW + 100)
    assert ready(assembler, NOW + 100) == []
    add(assembler, NOW + 4, span("c2", "r"))  # it was
    assembler.progress(0, {"otlp_spans:1": NOW + 8}, reported=NOW + 101)
    assert ready(assembler, NOW + 101) == []  # read up to 8 s: 4 + 5 s of grace not passed
    assembler.progress(0, {"otlp_spans:1": NOW + 102}, reported=NOW + 102)  # caught up
    (whole,) = ready(assembler, NOW + 102)
    assert sorted(s.span_id for s in whole.spans) == ["c1", "c2", "r"]


def test_after_a_recovery_a_trace_waits_for_a_report_on_every_spans_partition() -> None:
    """A worker that has just taken the assembly partition has heard only of otlp_spans:0:
    otlp_spans:1 may have no owner yet (a rebalance), and a child of the trace may wait in its
    backlog (the chaos run's traces published with one span, scored "skipped")."""
    table: dict[bytes, bytes] = {}
    before = TraceAssembler(table, grace_s=5.0)
    add(before, NOW, span("r"))
    after = TraceAssembler(table, grace_s=5.0)
    after.expect(["otlp_spans:0", "otlp_spans:1"])
    assert after.rebuild([0], now=NOW + 10) == 1
    after.progress(0, {"otlp_spans:0": NOW + 20}, reported=NOW + 20)
    assert ready(after, NOW + 20) == [] and after.unheard(NOW + 20) == ["otlp_spans:1"]
    assert after.clock_lag(NOW + 20) == 10.0  # waiting since the recovery
    add(after, NOW + 2, span("c1", "r"))  # out of otlp_spans:1's backlog
    after.progress(0, {"otlp_spans:1": NOW + 21}, reported=NOW + 21)
    (whole,) = ready(after, NOW + 21)
    assert sorted(s.span_id for s in whole.spans) == ["c1", "r"]


def test_a_spans_partition_never_reported_on_counts_as_read_after_the_wait(caplog) -> None:
    table: dict[bytes, bytes] = {}
    TraceAssembler(table, grace_s=5.0).add(0, TRACE, [span("r").stored()], NOW)
    after = TraceAssembler(table, grace_s=5.0, unheard_wait_s=60.0)
    after.expect(["otlp_spans:0", "otlp_spans:1"])
    after.rebuild([0], now=NOW + 10)
    after.progress(0, {"otlp_spans:0": NOW + 20}, reported=NOW + 20)
    assert ready(after, NOW + 69) == []
    (whole,) = ready(after, NOW + 70)
    assert whole.trace_id == TRACE
    assert "no worker reported on otlp_spans:1 within 60 s" in caplog.text


def test_a_source_heard_of_before_a_recovery_is_waited_for_after_it(caplog) -> None:
    """What a report said before the recovery may be stale (its owner since gone): the clock
    waits for a report since; one never sent is forgotten when the wait ends."""
    assembler = TraceAssembler({}, grace_s=5.0, unheard_wait_s=60.0)
    assembler.expect(["otlp_spans:0", "otlp_spans:1"])
    assembler.progress(0, {"otlp_spans:0": NOW, "otlp_spans:1": NOW}, reported=NOW)
    assembler.rebuild([0], now=NOW + 10)
    add(assembler, NOW + 11, span("r"))
    assembler.progress(0, {"otlp_spans:0": NOW + 20}, reported=NOW + 20)
    assert assembler.unheard(NOW + 20) == ["otlp_spans:1"] and ready(assembler, NOW + 20) == []
    assert [w.trace_id for w in ready(assembler, NOW + 70)] == [TRACE]
    assert "no worker reported on otlp_spans:1" in caplog.text
    assert assembler.clock(0, NOW + 70) == NOW + 20  # otlp_spans:0's report; 1's forgotten


def test_a_worker_without_assembly_partitions_waits_for_nothing(caplog) -> None:
    assembler = TraceAssembler({}, unheard_wait_s=60.0)
    assembler.expect(["otlp_spans:0", "otlp_spans:1"])
    assembler.rebuild([], now=NOW)
    assert assembler.unheard(NOW + 1) == [] and assembler.unheard(NOW + 61) == []
    assert "no worker reported" not in caplog.text


def test_the_wait_ends_once_every_source_is_heard_of() -> None:
    assembler = TraceAssembler({}, unheard_wait_s=60.0)
    assembler.expect(["otlp_spans:0"])
    assembler.rebuild([0], now=NOW)
    assembler.progress(0, {"otlp_spans:0": NOW + 1}, reported=NOW + 1)
    assert assembler.unheard(NOW + 1) == []
    assembler.expect(["otlp_spans:0", "otlp_spans:1"])  # the topic grew: no recovery yet
    assert assembler.unheard(NOW + 2) == [] and assembler.clock(0, NOW + 2) == NOW + 1


def test_a_source_not_read_yet_lags_from_when_that_was_reported() -> None:
    """A new owner that has read nothing of a partition reports it read up to 0 (a backlog of
    unknown age): the clock stays put, and the lag counts from the report, not from 1970."""
    assembler = TraceAssembler({})
    assembler.progress(0, {"otlp_spans:0": NOW + 50, "otlp_spans:1": 0.0}, reported=NOW + 50)
    assert assembler.clock(0, NOW + 60) == 0.0
    assert assembler.clock_lag(NOW + 60) == 10.0


def test_without_a_recovery_no_report_is_waited_for() -> None:
    assembler = TraceAssembler({}, grace_s=5.0)
    assembler.expect(["otlp_spans:0", "otlp_spans:1"])
    add(assembler, NOW, span("r"))
    assert [w.trace_id for w in ready(assembler, NOW + 5)] == [TRACE]


def test_a_report_moves_only_the_clock_of_the_partition_it_is_read_from() -> None:
    """Seen in the chaos run: after a recovery, assembly partition 1 was read further ahead
    than partition 0, and a report read from 1 (every spans partition read past the trace)
    ended a trace of partition 0 at a tick read there before the trace's second span record,
    which its forwarder had written to partition 0 before that report."""
    assembler = TraceAssembler({}, grace_s=1.0)
    assembler.expect(["otlp_spans:0", "otlp_spans:1"])
    assembler.rebuild([0, 1], now=NOW)
    add(assembler, NOW, span("r"), partition=0)  # its child is in a later record of 0
    later = {"otlp_spans:0": NOW + 10, "otlp_spans:1": NOW + 10}
    assembler.progress(1, later, reported=NOW + 10)  # read from partition 1
    assert assembler.clock(1, NOW + 10) == NOW + 10
    assert assembler.clock(0, NOW + 5) == -math.inf  # nothing reported in partition 0 yet
    assert ready(assembler, NOW + 5, partition=0) == []  # the tick before the child
    add(assembler, NOW, span("c", "r"), partition=0)
    assembler.progress(0, later, reported=NOW + 10)
    (whole,) = ready(assembler, NOW + 10, partition=0)
    assert sorted(s.span_id for s in whole.spans) == ["c", "r"]


def test_a_recovery_forgets_the_reports_of_the_partitions_it_reads_again() -> None:
    """A partition is read again from its committed offset after a recovery: the reports
    read past that before say nothing of where it is read now."""
    assembler = TraceAssembler({}, grace_s=1.0, unheard_wait_s=60.0)
    assembler.expect(["otlp_spans:0"])
    assembler.progress(0, {"otlp_spans:0": NOW + 50}, reported=NOW + 50)
    assembler.rebuild([0], now=NOW + 51)
    add(assembler, NOW, span("r"), partition=0)
    assert assembler.clock(0, NOW + 52) == -math.inf
    assert ready(assembler, NOW + 52) == []
    assembler.progress(0, {"otlp_spans:0": NOW + 2}, reported=NOW + 52)
    assert assembler.clock(0, NOW + 52) == NOW + 2


def test_an_older_report_does_not_move_a_source_back() -> None:
    assembler = TraceAssembler({})
    assembler.progress(0, {"otlp_spans:0": NOW + 50}, reported=NOW + 50)
    assembler.progress(0, {"otlp_spans:0": NOW + 10}, reported=NOW + 10)  # a stale worker's
    assert assembler.clock(0, NOW + 60) == NOW + 50


def test_traces_are_handed_out_by_the_partition_that_holds_them() -> None:
    assembler = TraceAssembler({}, grace_s=1.0)
    add(assembler, NOW, span("r"), partition=2)
    assert ready(assembler, NOW + 10, partition=0) == []
    assert len(ready(assembler, NOW + 10, partition=2)) == 1


def test_a_trace_queued_by_several_records_is_handed_out_once() -> None:
    assembler = TraceAssembler({}, grace_s=1.0)
    add(assembler, NOW, span("r"))  # the root's record read first (another partition)
    add(assembler, NOW, span("c1", "r"))  # then its child's, of the same Kafka time
    (whole,) = assembler.due(0, NOW + 1)
    assert len(whole.spans) == 2
    assert assembler.due(0, NOW + 2) == []  # handed out, not yet published: not again


def test_a_root_whose_parent_is_remote_ends_the_trace() -> None:
    assembler = TraceAssembler({}, grace_s=1.0)
    local_root = span("r", parent="upstream-span")
    local_root.remote_parent = True  # context propagated from a service not exporting here
    add(assembler, NOW, local_root, span("c1", "r"))
    (whole,) = ready(assembler, NOW + 1)
    assert not whole.root_missing
