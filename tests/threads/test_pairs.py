"""Pairs (comparison rules): two traces with one comparison key become one pair in the thread
table; the pair closes when both variants came, or when its window passes without the
partner; a third trace of a variant the pair has is ignored."""

from __future__ import annotations

import functools
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import orjson
from fixtures import RULES_DIR, as_trace

from stream.observer import Observer
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import RuleSet
from stream.threads.events import ThreadEvent, published
from stream.threads.processor import ThreadProcessor
from stream.threads.router import ThreadRouter
from stream.threads.state import ThreadLimits
from stream.threads.turns import TURN_CUT_MARKER, capped_document

WINDOW = 600.0
WALL = 1_800_000_000.0


@functools.cache
def critique() -> RuleSet:
    return load_rules(RULES_DIR, ["critique"])


def processor(
    table: dict[bytes, bytes] | None = None, observer: Observer | None = None
) -> ThreadProcessor:
    return ThreadProcessor(
        {} if table is None else table,
        gaps={"conversation": 900.0, "session": 900.0, "pair": WINDOW},
        limits=ThreadLimits(),
        retention_s=3600.0,
        sessions_topic="coaching-sessions",
        clock=lambda: WALL,
        observer=observer,
    )


def trace(trace_id: str, variant: Any, key: Any = "cmp-1", **extra: Any) -> dict[str, Any]:
    return {
        "id": trace_id,
        "project_name": "code-assistant",
        "name": "chat",
        "start_time": datetime.fromtimestamp(WALL, UTC).isoformat(),
        "input": {"messages": [{"role": "user", "content": "Reverse a string in Python."}]},
        "output": {"messages": [{"role": "assistant", "content": f"answer of {trace_id}"}]},
        "metadata": {"comparison_id": key, "variant": variant},
        **extra,
    }


def member(
    trace_id: str, variant: Any, arrival: float = WALL, key: str = "cmp-1", **extra: Any
) -> ThreadEvent:
    document = trace(trace_id, variant, key, **extra)
    event = ThreadRouter(critique()).pair_from_trace(
        as_trace(document), document, "llm-traces", arrival, "llm-traces:0"
    )
    assert event is not None
    return event


def tick(now: float) -> ThreadEvent:
    return ThreadEvent(type="tick", arrival=now)


def test_a_trace_with_a_comparison_key_is_one_side_of_a_pair() -> None:
    event = member("t-a", "A")
    assert (event.kind, event.thread_id, event.key) == ("pair", "cmp-1", b"pair/cmp-1")
    assert event.rules == ["response_comparison"]
    assert event.turn is not None and event.turn.member is not None
    assert (event.turn.key, event.turn.member.slot, event.turn.member.variant) == ("t-a", "a", "A")
    assert event.turn.member.document["output"]["messages"][0]["content"] == "answer of t-a"
    assert member("t-b", "B").turn.member.slot == "b"  # type: ignore[union-attr]


def test_traces_without_a_key_or_with_an_unknown_variant_are_not_paired() -> None:
    router = ThreadRouter(critique())
    for document in (
        trace("t", "A", key=None),
        trace("t", "A", key=""),
        trace("t", None),
        trace("t", "C"),
        {"id": "t", "project_name": "p"},
    ):
        assert router.pair_from_trace(as_trace(document), document, None, WALL) is None
    # a rule set without comparison rules routes no trace into a pair
    fretcoach = ThreadRouter(load_rules(RULES_DIR, ["fretcoach"]))
    document = trace("t", "A")
    assert fretcoach.pair_from_trace(as_trace(document), document, None, WALL) is None
    # a trace both of a conversation and of a pair makes both events
    both = ThreadRouter(load_rules(RULES_DIR, ["fretcoach", "critique"]))
    document = trace("t", "A", thread_id="conv-1", name="hub-coach-chat")
    kinds = [e.kind for e in both.events_for_trace(as_trace(document), document, None, WALL)]
    assert kinds == ["conversation", "pair"]


def test_both_variants_make_the_pair_and_close_it_at_once() -> None:
    p = processor()
    assert p.apply(0, member("t-b", "B")) == []
    assert p.open_threads() == 1
    (close,) = p.apply(0, member("t-a", "A", arrival=WALL + 5))
    assert (close.kind, close.thread_id, close.pending.reason) == ("pair", "cmp-1", "end")
    document = close.pending.document
    assert document["variants"] == {"B": "t-b", "A": "t-a"}
    assert document["a"]["id"] == "t-a" and document["b"]["id"] == "t-b"
    assert close.pending.rules == ["response_comparison"]
    assert close.info is None  # a pair's scores carry the pair in their details instead
    assert p.apply(0, tick(WALL + 10 * WINDOW)) == []  # closed once


def test_a_pair_without_its_partner_closes_when_its_window_passes() -> None:
    p = processor()
    p.apply(0, member("t-a", "A"))
    assert p.apply(0, tick(WALL + WINDOW - 1)) == []
    (close,) = p.apply(0, tick(WALL + WINDOW))
    assert close.pending.reason == "inactivity"
    assert "b" not in close.pending.document and close.pending.document["a"]["id"] == "t-a"


def test_the_partner_arriving_after_the_window_finds_the_pair_decided() -> None:
    p = processor()
    p.apply(0, member("t-a", "A"))
    # no tick came in between: the late partner's own Kafka time closes the pair first
    (close,) = p.apply(0, member("t-b", "B", arrival=WALL + WINDOW + 1))
    assert close.pending.reason == "inactivity" and "b" not in close.pending.document
    assert p.open_threads() == 0


def test_a_third_trace_of_a_variant_the_pair_has_is_ignored_and_listed() -> None:
    p = processor()
    p.apply(0, member("t-a1", "A"))
    assert p.apply(0, member("t-a2", "A", arrival=WALL + 1)) == []  # ignored, not activity
    assert p.apply(0, member("t-a1", "A", arrival=WALL + 2)) == []  # the same trace again
    (close,) = p.apply(0, member("t-b", "B", arrival=WALL + 3))
    document = close.pending.document
    assert document["a"]["id"] == "t-a1" and document["ignored"] == ["t-a2"]
    # after the pair was decided, a trace of it is ignored and not kept
    assert p.apply(0, member("t-b2", "B", arrival=WALL + 4)) == []
    assert p.apply(0, tick(WALL + 10 * WINDOW)) == []
    state = orjson.loads(p.table[b"pair/cmp-1"])
    assert state["ignored"] == ["t-a2"] and len(state["turns"]) == 2


class Counted(Observer):
    def __init__(self) -> None:
        self.pair_traces: Counter[str] = Counter()

    def on_pair_trace(self, outcome: str) -> None:
        self.pair_traces[outcome] += 1


def test_the_first_trace_of_each_variant_to_reach_the_pair_is_judged_and_counted_once() -> None:
    counted = Counted()
    p = processor(observer=counted)
    earlier = datetime.fromtimestamp(WALL - 30, UTC).isoformat()
    p.apply(0, member("t-first", "A"))
    # started earlier, came later: the pair has its A (no waiting for earlier starters)
    assert p.apply(0, member("t-earlier", "A", arrival=WALL + 1, start_time=earlier)) == []
    assert p.apply(0, member("t-earlier", "A", arrival=WALL + 2, start_time=earlier)) == []
    assert p.apply(0, member("t-first", "A", arrival=WALL + 3)) == []  # redelivered
    (close,) = p.apply(0, member("t-b", "B", arrival=WALL + 4))
    assert close.pending.document["variants"] == {"A": "t-first", "B": "t-b"}
    assert close.pending.document["ignored"] == ["t-earlier"]  # once, though it came twice
    assert counted.pair_traces == {"paired": 2, "ignored": 1}


def test_a_waiting_pair_waits_for_every_trace_partition_to_be_read_past_its_window() -> None:
    """Its partner may sit unread in another partition's backlog (traces are keyed by trace
    id): past its window, the pair closes only once every trace partition is read past it."""
    p = processor()
    p.apply(0, member("t-a", "A"))  # through llm-traces:0
    reading = {"llm-traces:0": (WALL, WALL + WINDOW + 5), "llm-traces:1": (WALL - 60, WALL - 60)}
    sessions = {"coaching-sessions:0": (WALL - 3600, WALL - 3600)}  # holds no trace
    progress = ThreadEvent(type="progress", arrival=WALL + WINDOW + 5, positions=reading | sessions)
    assert p.apply(0, progress) == []
    assert p.apply(0, tick(WALL + WINDOW + 5)) == []  # llm-traces:1 may hold its partner
    # the partner was there: read from llm-traces:1, it makes the pair
    late_read = member("t-b", "B", arrival=WALL + 20)
    late_read = late_read.model_copy(update={"source": "llm-traces:1"})
    (close,) = p.apply(0, late_read)
    assert close.pending.reason == "end"
    # a lone trace closes once the other partition is read past its window
    p.apply(0, member("t-lone", "A", key="cmp-2"))
    caught_up = {source: (WALL + WINDOW + 9, WALL + WINDOW + 9) for source in reading}
    (alone,) = p.apply(
        0, ThreadEvent(type="progress", arrival=WALL + WINDOW + 9, positions=caught_up)
    )
    assert alone.thread_id == "cmp-2" and alone.pending.reason.startswith("inactivity")


def test_a_partner_at_the_window_misses_it_and_one_just_inside_makes_the_pair() -> None:
    p = processor()
    p.apply(0, member("t-a", "A"))
    (inside,) = p.apply(0, member("t-b", "B", arrival=WALL + WINDOW - 1))
    assert inside.pending.reason == "end"
    p.apply(0, member("t-a2", "A", key="cmp-2"))
    (alone,) = p.apply(0, member("t-b2", "B", key="cmp-2", arrival=WALL + WINDOW))
    assert alone.pending.reason == "inactivity" and "b" not in alone.pending.document


def test_two_members_over_half_the_thread_byte_cap_are_both_kept() -> None:
    p = ThreadProcessor(
        {},
        gaps={"pair": WINDOW},
        limits=ThreadLimits(max_bytes=1024),  # conversations keep their newest 1 kB
        retention_s=3600.0,
    )
    long = {"output": {"messages": [{"role": "assistant", "content": "x" * 2000}]}}
    p.apply(0, member("t-a", "A", **long))
    (close,) = p.apply(0, member("t-b", "B", **long))
    assert set(close.pending.document["variants"]) == {"A", "B"}


def test_the_ignored_trace_does_not_hold_the_window_open() -> None:
    p = processor()
    p.apply(0, member("t-a1", "A"))
    p.apply(0, member("t-a2", "A", arrival=WALL + WINDOW - 10))
    (close,) = p.apply(0, tick(WALL + WINDOW))
    assert close.pending.reason == "inactivity"


def test_a_waiting_pair_survives_a_restart_and_a_pending_one_is_scored_again() -> None:
    table: dict[bytes, bytes] = {}
    processor(table).apply(0, member("t-a", "A"))
    restarted = processor(table)
    assert restarted.rebuild([0]) == 1
    (close,) = restarted.apply(0, member("t-b", "B", arrival=WALL + 5))
    # the worker dies before the pair's scores are published: the next owner scores it again
    again = processor(table)
    again.rebuild([0])
    (resumed,) = again.apply(0, tick(WALL + 6))
    assert resumed.pending == close.pending and resumed.target == close.target
    again.apply(0, published("pair", "cmp-1", close.pending.close_seq))
    assert again.pending_closes() == 0


def test_a_member_over_the_turn_cap_loses_its_spans_then_its_longest_texts() -> None:
    spans = [{"span_id": str(i), "attributes": {"x": "y" * 500}} for i in range(200)]
    document = trace("t-a", "A", spans=spans)
    document["output"]["messages"][0]["content"] = "long answer " * 8000
    kept, cut = capped_document(document, 16_000)
    assert "spans" not in kept and "spans" in document  # the trace itself is untouched
    assert len(orjson.dumps(kept)) <= 16_000
    # the bytes cut: the spans, and the text cut from the answer (a marker stands in for it)
    shrunk = len(orjson.dumps(document)) - len(orjson.dumps(kept))
    assert 0 <= cut - shrunk <= len(TURN_CUT_MARKER) + 10
    assert "bytes cut by the scorer" in kept["output"]["messages"][0]["content"]
    assert kept["input"] == document["input"]
    small = trace("t-a", "A")
    assert capped_document(small, 16_000) == (small, 0)


def test_after_a_recovery_a_pair_waits_for_every_partition_of_the_traces_topic() -> None:
    """Its partner may come through any partition of the traces topic. After a recovery the
    consumer's metadata says llm-traces has 2 partitions: a report on llm-traces:0 alone does
    not close the pair while llm-traces:1 (no owner yet, in a rebalance) is unheard."""
    table: dict[bytes, bytes] = {}
    before = processor(table)
    before.apply(0, member("t-a", "A", arrival=WALL - WINDOW))
    after = processor(table)
    after.expect({"llm-traces": 2, "coaching-sessions": 2})
    after.rebuild([0])
    assert after.apply(0, tick(WALL + 1)) == []
    progress = ThreadEvent(
        type="progress", arrival=WALL + 2, positions={"llm-traces:0": (0.0, WALL + 2)}
    )
    assert after.apply(0, progress) == []
    both = {"llm-traces:0": (0.0, WALL + 3), "llm-traces:1": (0.0, WALL + 3)}
    (close,) = after.apply(0, ThreadEvent(type="progress", arrival=WALL + 3, positions=both))
    assert (close.thread_id, close.pending.reason) == ("cmp-1", "inactivity")
