"""The references a worker holds (``ReferenceStore``) and when its reader has caught up with
the topic (``ReferenceCatchUp``): the latest value per key, tombstones, records that are no
reference, the bound on bytes (the least recently written dropped), and ``loaded`` only once
every partition is read to the end it had, the embedded broker's short end offsets corrected
by a fetch."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream.references import ReferenceCatchUp, ReferenceStore
from stream.references.store import ENTRY_OVERHEAD


def value(**fields: object) -> bytes:
    return orjson.dumps(fields)


def size(key: str, raw: bytes) -> int:
    return len(key.encode()) + len(raw) + ENTRY_OVERHEAD


def test_the_latest_value_of_a_key_is_held_and_a_tombstone_deletes_it() -> None:
    store = ReferenceStore(1 << 20)
    assert store.apply(b"r1", value(answer="Paris")) is None
    assert store.apply(b"r1", value(answer="Lyon")) is None
    assert store.apply(b"r2", value(answer="Nice")) is None
    assert store.get("r1") == {"answer": "Lyon"} and len(store) == 2
    assert store.apply(b"r1", None) is None  # a tombstone
    assert store.get("r1") is None and "r1" not in store and len(store) == 1
    assert store.apply(b"never-held", None) is None  # a tombstone of a key not held
    assert store.bytes == size("r2", value(answer="Nice"))
    assert (store.found, store.missing) == (1, 1)


def test_each_trace_gets_a_document_of_its_own() -> None:
    store = ReferenceStore(1 << 20)
    store.apply(b"r1", value(tool_calls=["search"]))
    first = store.get("r1")
    assert first is not None
    first["tool_calls"].append("changed by a rule")
    assert store.get("r1") == {"tool_calls": ["search"]}


@pytest.mark.parametrize(
    ("key", "raw", "says"),
    [
        (None, value(a=1), "a record without a key names no reference"),
        (b"\xff\xfe", value(a=1), "its key is not UTF-8"),
        (b"r1", b'{"card": "4111-SECRET', "its value is not JSON"),
        (b"r1", b'["4111-SECRET"]', "its value is an array, not a JSON object"),
        (b"r1", b'"4111-SECRET"', "its value is a str, not a JSON object"),
    ],
)
def test_a_record_that_is_no_reference_is_counted_and_deletes_its_key(
    key: bytes | None, raw: bytes, says: str
) -> None:
    store = ReferenceStore(1 << 20)
    store.apply(b"r1", value(answer="Paris"))
    problem = store.apply(key, raw)
    assert problem is not None and says in problem
    assert "SECRET" not in problem  # a value is never repeated
    assert store.invalid == 1
    # the key's latest value is no reference: the older one is stale, not kept
    assert ("r1" in store) == (key != b"r1")
    assert store.bytes == sum(size(k, value(answer="Paris")) for k in ["r1"] if k in store)


def test_past_the_bound_the_least_recently_written_references_are_dropped() -> None:
    one = size("r0", value(n=0))
    store = ReferenceStore(3 * one)
    for n in range(3):
        store.apply(f"r{n}".encode(), value(n=n))
    assert len(store) == 3 and store.dropped == 0
    store.apply(b"r0", value(n=0))  # written again: now the most recent
    store.apply(b"r3", value(n=3))
    assert [k for k in ("r0", "r1", "r2", "r3") if k in store] == ["r0", "r2", "r3"]
    assert store.dropped == 1 and store.bytes <= store.max_bytes
    too_big = value(text="x" * (3 * one))
    problem = store.apply(b"r2", too_big)
    assert problem is not None and "more than the bound holds" in problem
    assert "r2" not in store  # its older value is stale: gone too
    assert store.dropped == 2 and store.invalid == 0


records = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"b", b"c", b"d", None]),
        st.one_of(
            st.none(),
            st.builds(lambda n: value(n="x" * n), st.integers(0, 300)),
            st.just(b"[1]"),
        ),
    ),
    max_size=40,
)


@given(records, st.integers(4096, 4600))
def test_the_store_holds_what_a_plain_model_of_the_topic_says(
    applied: list[tuple[bytes | None, bytes | None]], bound: int
) -> None:
    """Against a model: an ordered dict of the latest valid value per key, the oldest written
    dropped while the sizes add up past the bound."""
    store = ReferenceStore(bound)
    model: OrderedDict[str, bytes] = OrderedDict()
    for key, raw in applied:
        store.apply(key, raw)
        if key is None:
            continue
        model.pop(key.decode(), None)
        if raw is None or raw == b"[1]" or size(key.decode(), raw) > bound:
            continue
        model[key.decode()] = raw
        while sum(size(k, v) for k, v in model.items()) > bound:
            model.popitem(last=False)
    assert {k: store.get(k) for k in model} == {k: orjson.loads(v) for k, v in model.items()}
    assert len(store) == len(model)
    assert store.bytes == sum(size(k, v) for k, v in model.items()) <= bound


async def test_loaded_only_once_marked_and_waiting_returns_then() -> None:
    store = ReferenceStore(1 << 20)
    waiter = asyncio.create_task(store.wait_loaded())
    await asyncio.sleep(0.01)
    assert not store.loaded and not waiter.done()
    store.mark_loaded()
    await asyncio.wait_for(waiter, 1)
    assert store.loaded
    await asyncio.wait_for(store.wait_loaded(), 1)  # at once, from then on


def test_a_bound_below_one_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="max_bytes must be positive"):
        ReferenceStore(0)


def test_caught_up_when_every_partition_is_read_to_its_end() -> None:
    catch_up = ReferenceCatchUp({0: 0, 1: 5, 2: 0}, {0: 10, 1: 5, 2: 3})
    assert catch_up.waiting() == [0, 2]  # partition 1 holds nothing (retention emptied it)
    catch_up.fetched(0, 10)
    catch_up.read(0, 10)
    assert not catch_up.done and catch_up.waiting() == [2]
    catch_up.fetched(2, 3)
    catch_up.read(2, 3)
    assert catch_up.done


def test_an_end_offset_reported_short_is_raised_by_the_first_fetch() -> None:
    """The embedded broker reports the last batch's base offset + 1 (design record 03): 3
    where 8 records are, in batches of 0-2 and 3-7. Its fetch's high watermark says 8."""
    catch_up = ReferenceCatchUp({0: 0}, {0: 3})
    catch_up.read(0, 3)
    assert not catch_up.done  # no fetch answered yet: the reported end is not trusted
    catch_up.fetched(0, 8)
    catch_up.read(0, 3)
    assert not catch_up.done and catch_up.ends == {0: 8}
    catch_up.fetched(0, 12)  # written since: read while following, not waited for
    catch_up.read(0, 8)
    assert catch_up.done and catch_up.ends == {0: 8}


def test_an_unknown_high_watermark_changes_nothing() -> None:
    catch_up = ReferenceCatchUp({0: 0}, {0: 4})
    catch_up.fetched(0, None)
    catch_up.fetched(7, 99)  # a partition not read
    catch_up.read(0, 4)
    assert not catch_up.done
    catch_up.fetched(0, 4)
    catch_up.read(0, 4)
    assert catch_up.done


def test_a_log_that_shrank_under_the_reader_lowers_its_end() -> None:
    """The end was 100; the log was truncated (an unclean leader election) or the topic made
    again smaller: a later fetch's high watermark of 90 is the end now, or the reader would
    wait for offsets that are gone, and every trace with it."""
    catch_up = ReferenceCatchUp({0: 0}, {0: 100})
    catch_up.fetched(0, 100)
    catch_up.read(0, 60)
    catch_up.fetched(0, 90)
    catch_up.read(0, 90)
    assert catch_up.done and catch_up.ends == {0: 90}
