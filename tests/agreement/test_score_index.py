"""The score index: which runs of a partition a label reads back to find its target's earlier
scores; buckets closed and stored, a run another worker read filled before its bucket
closes, old buckets dropped, and the index rebuilt from the table as a new owner finds it."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from stream.agreement.score_index import (
    BUCKET_RECORDS,
    BUCKET_SPAN_S,
    BUCKET_TARGETS,
    Bucket,
    ScoreIndex,
    bucket_key,
    fingerprint,
    is_index_key,
    mark_key,
)

WEEK = 7 * 86_400.0


def fed(index: ScoreIndex, store: dict[bytes, bytes], targets: list[str], start: int = 0) -> None:
    """One score a record, target ``targets[i]`` at offset ``start + i``, arriving at i s."""
    for i, target in enumerate(targets):
        index.add(store, 0, start + i, target.encode(), float(i), float(i))


def test_a_label_reads_only_the_runs_that_may_hold_its_target() -> None:
    store: dict[bytes, bytes] = {}
    index = ScoreIndex(WEEK)
    fed(index, store, [f"t-{i}" for i in range(10)])
    first = index.close(store, 0)
    assert first is not None and (first.first, first.last) == (0, 9)
    fed(index, store, [f"u-{i}" for i in range(10)], start=10)
    second = index.close(store, 0)
    assert second is not None and (second.first, second.last) == (10, 19)
    fed(index, store, ["t-3", "v"], start=20)  # the open bucket
    assert index.candidates(0, b"t-3", 30, 30.0) == [(0, 9), (20, 21)]
    assert index.candidates(0, b"u-4", 30, 30.0) == [(10, 19)]
    assert index.candidates(0, b"u-4", 15, 30.0) == [(10, 14)]  # only what came before
    assert index.candidates(0, b"nobody", 30, 30.0) == []
    assert index.candidates(1, b"t-3", 30, 30.0) == []  # a partition not owned


def test_closed_buckets_are_stored_with_a_mark_and_rebuilt_by_a_new_owner() -> None:
    store: dict[bytes, bytes] = {}
    index = ScoreIndex(WEEK)
    fed(index, store, ["a", "b", "a"], start=5)
    bucket = index.close(store, 0)
    assert bucket is not None
    assert store[mark_key(0)] == struct.pack(">q", 7)
    stored = Bucket.from_stored(bucket_key(0, 5), store[bucket_key(0, 5)])
    assert (stored.first, stored.last, stored.since, stored.until) == (5, 7, 0.0, 2.0)
    assert len(stored.prints) == 8  # two targets, 4 bytes each
    assert stored.may_hold(fingerprint(b"a")) and not stored.may_hold(fingerprint(b"c"))
    assert all(is_index_key(k) for k in store)
    owner = ScoreIndex(WEEK)
    assert owner.rebuild(store.items(), {0, 1}) == 1
    assert owner.candidates(0, b"b", 100, 10.0) == [(5, 7)]
    assert owner.rebuild(store.items(), {1}) == 0  # not owned: not held


def test_a_run_another_worker_read_is_read_back_whole_and_filled_before_it_closes() -> None:
    store: dict[bytes, bytes] = {}
    first = ScoreIndex(WEEK)
    fed(first, store, ["a", "b"])
    first.close(store, 0)  # through offset 1
    fed(first, store, ["c", "d"], start=2)  # read, never closed: the worker died
    owner = ScoreIndex(WEEK)
    owner.rebuild(store.items(), {0})
    owner.add(store, 0, 4, b"e", 4.0, 4.0)  # the first record it reads
    assert owner.unseen(0) == (2, 3)
    # a label for c: the unseen run must be read, whatever the target
    assert owner.candidates(0, b"c", 5, 5.0) == [(2, 3)]
    assert owner.candidates(0, b"e", 5, 5.0) == [(2, 4)]
    assert not owner.due(0, 4.0 + BUCKET_SPAN_S - 1)
    owner.fill(0, [(2, b"c", 2.0), (3, b"d", 3.0)])
    assert owner.unseen(0) is None
    closed = owner.close(store, 0)
    assert closed is not None and (closed.first, closed.last) == (2, 4)
    assert closed.may_hold(fingerprint(b"c")) and closed.may_hold(fingerprint(b"e"))


def test_a_partition_without_a_mark_is_indexed_from_its_first_record_read() -> None:
    """A topic written before the index existed: what came before is not read back."""
    store: dict[bytes, bytes] = {}
    index = ScoreIndex(WEEK)
    index.seen(store, 0, 100, 0.0)  # a label, say
    assert store[mark_key(0)] == struct.pack(">q", 99)
    assert index.unseen(0) is None
    index.add(store, 0, 101, b"a", 1.0, 1.0)
    assert index.candidates(0, b"a", 102, 2.0) == [(100, 101)]
    index.add(store, 0, 50, b"z", 1.0, 1.0)  # a redelivered record the mark covers: no change
    assert index.candidates(0, b"z", 102, 2.0) == []


def test_buckets_close_when_full_or_old_and_expire_after_the_retention() -> None:
    store: dict[bytes, bytes] = {}
    index = ScoreIndex(1000.0)
    targets = [f"t-{i}" for i in range(BUCKET_TARGETS + 1)]
    fed(index, store, targets)
    partition = index.partitions[0]
    assert [len(b.prints) // 4 for b in partition.closed] == [BUCKET_TARGETS]
    assert partition.open is not None and partition.open.records == 1
    same = ScoreIndex(1000.0)
    fed(same, {}, ["one"] * (BUCKET_RECORDS + 1))
    assert [(b.first, b.last) for b in same.partitions[0].closed] == [(0, BUCKET_RECORDS - 1)]
    # at a tick: old enough (opened when its first record was read)
    assert not index.due(0, float(BUCKET_TARGETS) + 1.0)
    assert index.due(0, BUCKET_TARGETS + BUCKET_SPAN_S)
    index.close(store, 0)
    assert index.expire(store, 0, 1000.0 + BUCKET_TARGETS - 2) == 0
    assert index.expire(store, 0, 1000.0 + BUCKET_TARGETS) == 1  # the first's last score
    assert [k for k in store if k.startswith(bucket_key(0, 0)[:-8])] == [
        bucket_key(0, BUCKET_TARGETS)
    ]
    assert index.sizes() == (1, 4)


@given(st.lists(st.integers(0, 40), min_size=1, max_size=300), st.data())
def test_every_earlier_score_of_a_target_is_in_a_run_it_reads(
    targets: list[int], data: st.DataObject
) -> None:
    """However the buckets were cut (closes at random) and whoever read the partition
    before (a new owner at a random offset), a label's runs hold every earlier score of
    its target."""
    store: dict[bytes, bytes] = {}
    index = ScoreIndex(WEEK)
    handover = data.draw(st.integers(0, len(targets)))
    for offset, target in enumerate(targets):
        if offset == handover:  # a new owner, from what the table holds
            index = ScoreIndex(WEEK)
            index.rebuild(store.items(), {0})
        index.add(store, 0, offset, str(target).encode(), float(offset), float(offset))
        if data.draw(st.booleans()) and index.unseen(0) is None:
            index.close(store, 0)
    label_at = len(targets)
    target = data.draw(st.sampled_from(targets))
    runs = index.candidates(0, str(target).encode(), label_at, float(label_at))
    wanted = {offset for offset, t in enumerate(targets) if t == target}
    assert all(any(first <= o <= last for first, last in runs) for o in wanted)


def test_a_bucket_of_labels_and_ticks_only_closes_and_moves_the_mark() -> None:
    """Else a new owner would read back everything since the last score's bucket."""
    store: dict[bytes, bytes] = {}
    index = ScoreIndex(WEEK)
    fed(index, store, ["a"])
    index.close(store, 0)
    for offset in range(1, 50):
        index.seen(store, 0, offset, float(offset))
    assert index.due(0, 1.0 + BUCKET_SPAN_S)
    assert index.close(store, 0) is None  # no bucket stored: only the mark moves
    assert store[mark_key(0)] == struct.pack(">q", 49)
    owner = ScoreIndex(WEEK)
    owner.rebuild(store.items(), {0})
    owner.seen(store, 0, 50, 60.0)
    assert owner.unseen(0) is None


def test_a_bucket_stored_twice_under_one_key_is_held_once() -> None:
    """A predecessor stored a bucket and died before moving the mark: the new owner closes
    the same run again, and dropping the old one later must not drop the new one's key."""
    store: dict[bytes, bytes] = {}
    dead = ScoreIndex(WEEK)
    fed(dead, store, ["a", "b"])
    bucket = dead.close(store, 0)
    assert bucket is not None
    store[mark_key(0)] = struct.pack(">q", -1)  # the mark's write was lost
    owner = ScoreIndex(WEEK)
    owner.rebuild(store.items(), {0})
    fed(owner, store, ["a", "b"])
    owner.close(store, 0)
    assert [(b.first, b.last) for b in owner.partitions[0].closed] == [(0, 1)]
    assert bucket_key(0, 0) in store
