"""The continuity guard: a record goes to the agents only if it is its partition's next offset;
a gap is fetched again, and delivered past only once it has proved real."""

from __future__ import annotations

from collections import defaultdict

from faust import types as faust_types
from hypothesis import given
from hypothesis import strategies as st
from intervaltree import IntervalTree

from stream.kafka.mends.consumer import MendedConsumer
from stream.kafka.mends.continuity import Action, ContinuityGuard, GapEvent

TP = ("traces", 0)


def test_records_in_order_are_delivered() -> None:
    guard = ContinuityGuard()
    guard.sought(TP, 5)
    guard.new_batch()
    assert [guard.admit(TP, o, 0.0).action for o in (5, 6, 7)] == [Action.DELIVER] * 3
    assert guard.expected[TP] == 8


def test_a_partition_never_sought_starts_where_its_first_record_is() -> None:
    guard = ContinuityGuard()
    guard.new_batch()
    assert guard.admit(TP, 40, 0.0).action is Action.DELIVER
    assert guard.admit(TP, 42, 0.0).action is Action.REFETCH  # then no gap passes


def test_records_below_the_next_offset_are_skipped() -> None:
    guard = ContinuityGuard()
    guard.sought(TP, 10)
    guard.new_batch()
    assert guard.admit(TP, 9, 0.0).action is Action.SKIP
    assert guard.admit(TP, 10, 0.0).action is Action.DELIVER
    assert guard.admit(TP, 10, 0.0).action is Action.SKIP  # fetched twice: delivered once


def test_a_gap_is_fetched_again_once_per_fetch_and_counted_once() -> None:
    guard = ContinuityGuard(patience_s=5.0)
    guard.sought(TP, 0)
    guard.new_batch()
    assert guard.admit(TP, 0, 0.0).action is Action.DELIVER
    first = guard.admit(TP, 3, 0.0)
    assert (first.action, first.offset, first.event) == (Action.REFETCH, 1, GapEvent.DETECTED)
    assert first.gap is not None and (first.gap.expected, first.gap.found) == (1, 3)
    assert guard.admit(TP, 4, 0.0).action is Action.SKIP  # the same fetch: one seek back
    guard.new_batch()
    again = guard.admit(TP, 3, 1.0)
    assert (again.action, again.offset, again.event) == (Action.REFETCH, 1, None)


def test_a_gap_filled_by_a_fetch_again_is_delivered_in_order() -> None:
    guard = ContinuityGuard(patience_s=5.0)
    guard.sought(TP, 0)
    guard.new_batch()
    guard.admit(TP, 2, 0.0)  # 0 and 1 not written yet
    guard.new_batch()
    filled = guard.admit(TP, 0, 0.5)
    assert (filled.action, filled.event) == (Action.DELIVER, GapEvent.FILLED)
    assert [guard.admit(TP, o, 0.5).action for o in (1, 2)] == [Action.DELIVER] * 2
    assert TP not in guard.gaps


def test_a_gap_is_accepted_only_after_a_refetch_and_the_patience() -> None:
    guard = ContinuityGuard(patience_s=5.0)
    guard.sought(TP, 0)
    guard.new_batch()
    assert guard.admit(TP, 7, 0.0).action is Action.REFETCH
    guard.new_batch()
    assert guard.admit(TP, 7, 4.9).action is Action.REFETCH  # refetched, but too soon
    guard.new_batch()
    accepted = guard.admit(TP, 7, 5.0)
    assert (accepted.action, accepted.event) == (Action.DELIVER, GapEvent.PERSISTENT)
    assert accepted.gap is not None and (accepted.gap.expected, accepted.gap.found) == (0, 7)
    assert guard.admit(TP, 8, 5.0).action is Action.DELIVER


def test_with_no_patience_one_refetch_confirms_a_gap() -> None:
    """A real Kafka cluster serves no record past an unwritten one: a gap that a second fetch
    shows again is a compacted or deleted range, or transaction markers."""
    guard = ContinuityGuard()
    guard.sought(TP, 0)
    guard.new_batch()
    assert guard.admit(TP, 3, 0.0).action is Action.REFETCH
    guard.new_batch()
    assert guard.admit(TP, 3, 0.0).event is GapEvent.PERSISTENT


def test_the_rest_of_a_fetch_is_no_answer_to_its_refetch() -> None:
    """With no patience (the ``kafka://`` transport), the records after a gap in the same fetch
    were taken as the refetch's answer: the gap was accepted with no refetch at all (records
    the embedded broker had not written yet were lost, ``test_at_least_once.py``)."""
    guard = ContinuityGuard()
    guard.sought(TP, 0)
    guard.new_batch()
    assert guard.admit(TP, 3, 0.0).action is Action.REFETCH
    assert guard.admit(TP, 4, 0.0).action is Action.SKIP
    guard.new_batch()
    filled = guard.admit(TP, 0, 0.0)  # the refetch: written by now
    assert (filled.action, filled.event) == (Action.DELIVER, GapEvent.FILLED)


def test_a_changelog_gap_is_delivered_past_at_once() -> None:
    guard = ContinuityGuard(patience_s=5.0)
    guard.sought(TP, 0)
    guard.new_batch()
    assert guard.admit(TP, 5, 0.0, strict=False) == guard.admit(TP, 6, 0.0, strict=False)
    assert guard.expected[TP] == 7 and not guard.gaps


def test_a_held_partition_delivers_nothing_and_is_sought_back_when_released() -> None:
    """The end of a rebalance (faust-streaming #596): what is fetched while the agent queues
    are about to be cleared is skipped, then the partition goes back to its next offset."""
    guard = ContinuityGuard(patience_s=5.0)
    other = ("traces", 1)
    guard.sought(TP, 10)
    guard.sought(other, 0)
    guard.hold([TP])
    guard.new_batch()
    assert [guard.admit(TP, o, 0.0).action for o in (10, 11)] == [Action.SKIP] * 2
    assert guard.admit(other, 0, 0.0).action is Action.DELIVER
    assert guard.release() == {TP: 10}
    guard.new_batch()
    # the fetcher moved past while held: one seek back per fetch, and no gap counted
    resync = guard.admit(TP, 12, 0.0)
    assert (resync.action, resync.offset, resync.event) == (Action.REFETCH, 10, None)
    assert guard.admit(TP, 13, 0.0).action is Action.SKIP
    guard.new_batch()
    assert guard.admit(TP, 10, 0.0) == guard.admit(TP, 11, 0.0)  # both DELIVER
    assert guard.admit(TP, 11, 0.0).action is Action.SKIP and not guard.resync


def test_a_seek_replaces_the_next_offset_and_drops_the_gap() -> None:
    guard = ContinuityGuard(patience_s=5.0)
    guard.sought(TP, 0)
    guard.new_batch()
    guard.admit(TP, 4, 0.0)
    guard.sought(TP, 20)
    assert TP not in guard.gaps
    assert guard.admit(TP, 20, 0.0).action is Action.DELIVER


def test_a_revoked_partition_is_forgotten() -> None:
    guard = ContinuityGuard()
    guard.sought(TP, 3)
    guard.hold([TP])
    guard.forget([TP])
    assert (guard.expected, guard.held, guard.gaps) == ({}, set(), {})


@st.composite
def fetch_histories(draw: st.DrawFn, latest: int = 3) -> tuple[int, list[list[int]], set[int]]:
    """A partition of ``end`` offsets, some of them (``lost``) never written; each fetch reads
    from a start position and returns a run of the offsets written so far, possibly with
    records still being written missing (served out of order, as the embedded broker does),
    each written by the ``latest``-th fetch."""
    end = draw(st.integers(1, 40))
    lost = draw(st.sets(st.integers(0, end - 1), max_size=3))
    delays = draw(st.lists(st.integers(0, latest), min_size=end, max_size=end))
    return end, [[o for o in range(end) if delays[o] <= t] for t in range(latest + 1)], lost


@given(fetch_histories(), st.integers(1, 8))
def test_every_offset_is_delivered_once_in_order_whatever_the_fetches_return(
    history: tuple[int, list[list[int]], set[int]], batch_size: int
) -> None:
    """Play a consumer against the guard: seek where it says, fetch ``batch_size`` records
    from the position; records appear over time. Whatever order they appear in, the offsets
    delivered are each written offset once, ascending, and a lost offset is only passed as a
    persistent gap."""
    # a patience longer than any record takes to appear (the embedded broker's transport)
    play_consumer(ContinuityGuard(patience_s=5.0), history, batch_size)


@given(fetch_histories(latest=1), st.integers(1, 8))
def test_with_no_patience_a_record_written_by_the_refetch_is_delivered(
    history: tuple[int, list[list[int]], set[int]], batch_size: int
) -> None:
    """The ``kafka://`` transport (no patience, one refetch): every record that is written by
    the time the refetch reads it is delivered, once and in order."""
    play_consumer(ContinuityGuard(), history, batch_size)


def play_consumer(
    guard: ContinuityGuard, history: tuple[int, list[list[int]], set[int]], batch_size: int
) -> None:
    end, appearing, lost = history
    guard.sought(TP, 0)
    position, delivered, accepted = 0, [], []
    for now in range(200):
        written = [o for o in appearing[min(now, len(appearing) - 1)] if o not in lost]
        batch = [o for o in written if o >= position][:batch_size]
        guard.new_batch()
        seek: int | None = None
        for offset in batch:
            admit = guard.admit(TP, offset, float(now))
            if admit.action is Action.DELIVER:
                delivered.append(offset)
                if admit.event is GapEvent.PERSISTENT:
                    assert admit.gap is not None
                    accepted.extend(range(admit.gap.expected, admit.gap.found))
            elif admit.action is Action.REFETCH and seek is None:
                seek = admit.offset
        position = seek if seek is not None else (batch[-1] + 1 if batch else position)
    assert delivered == [o for o in range(end) if o not in lost]
    assert set(accepted) <= lost


def bare_consumer() -> MendedConsumer:
    """The consumer's commit bookkeeping alone (Faust's ``_new_offset`` and the mends to it)."""
    consumer = object.__new__(MendedConsumer)
    consumer._acked = defaultdict(list)
    consumer._acked_index = defaultdict(set)
    consumer._gap = defaultdict(IntervalTree)
    consumer._committed_offset = defaultdict(lambda: None)
    consumer._heads, consumer._taken = {}, {}
    return consumer


def ack(consumer: MendedConsumer, tp: faust_types.TP, offsets: range) -> None:
    consumer._acked[tp].extend(offsets)
    consumer._acked_index[tp].update(offsets)


def test_a_commit_put_off_gives_its_offsets_back() -> None:
    """Faust takes the offsets it commits off its acked list when it picks them. A commit put
    off (the producer not drained in time, consumer.py mend 5) dropped them: the head was no
    longer acked, so no later commit could pass it and the partition was never committed
    again (found by test_table_recovery.py's kill -9 case)."""
    consumer, tp = bare_consumer(), faust_types.TP("traces", 0)
    consumer._heads[tp] = 0
    ack(consumer, tp, range(0, 5))
    assert consumer._filter_committable_offsets({tp}) == {tp: 5}
    consumer._give_back({tp: 5})
    ack(consumer, tp, range(5, 8))
    assert consumer._filter_committable_offsets({tp}) == {tp: 8}
    assert consumer._filter_committable_offsets({tp}) == {}  # nothing acked since


def test_a_commit_put_off_gives_back_the_gaps_it_passed() -> None:
    """Offsets recorded as a persistent gap are committed past as if acked; given back too."""
    consumer, tp = bare_consumer(), faust_types.TP("traces", 0)
    consumer._committed_offset[tp] = 10
    consumer._gap[tp].addi(10, 12)
    ack(consumer, tp, range(12, 15))
    assert consumer._filter_committable_offsets({tp}) == {tp: 15}
    consumer._give_back({tp: 15})
    assert consumer._filter_committable_offsets({tp}) == {tp: 15}


def test_a_revoked_partition_is_not_committed_past_work_in_flight() -> None:
    """At a revocation Faust forgets the partition's committed offset and acks
    (``Consumer.on_partitions_revoked``), then commits while it waits for the agents
    (``wait_empty``). A record its stream skipped and acked there (the flow suspended, or an
    old generation: faust/streams.py) was committed past an earlier one a background task
    still processed; the worker killed then, the earlier record was lost."""
    consumer, tp = bare_consumer(), faust_types.TP("traces", 0)
    consumer._heads[tp] = 40
    ack(consumer, tp, range(40, 41))
    assert consumer._filter_committable_offsets({tp}) == {tp: 41}
    # revoked: offset 41 in flight in a background task, 42 skipped and acked by Faust
    consumer._committed_offset.pop(tp, None)
    consumer._heads.pop(tp, None)
    consumer._acked.pop(tp, None)
    consumer._acked_index.pop(tp, None)
    ack(consumer, tp, range(42, 43))
    assert consumer._filter_committable_offsets({tp}) == {}
