"""Labels and scores joined per (target, rule, criterion) in whichever order they arrive:
each pair under one id, duplicates re-emitting theirs, a changed label re-emitted under its id, late items
after the retention joining nothing, and the state kept in the store (a dict here): the labels
and the scores waiting for a partner, never the other scores, which a label reads back from
the log they came in on (a list here; the internal topic in the worker)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from fixtures import score_event
from hypothesis import given
from hypothesis import strategies as st

from stream.agreement.events import slim
from stream.agreement.join import PARTNER_WAIT_S, AgreementJoin, Joined, agreement_id, state_key
from stream.agreement.labels import HumanLabel, Reference
from stream.models import Scale, ScoreEvent, ThreadInfo

WHEN = datetime(2026, 11, 1, 12, tzinfo=UTC)
DAY = 86_400.0


def clock() -> datetime:
    return WHEN


class Logged:
    """The join as the worker runs it: every score it is given is also on the log (the
    partition of the internal topic), and a label, or a shadow's score, is given what came
    before it on the log (the worker reads it back: ``tests/agents/test_agreement_join.py``)."""

    def __init__(
        self,
        store: dict[bytes, bytes] | None = None,
        retention_s: float = DAY,
        log: list[tuple[float, ScoreEvent]] | None = None,
        **options: Any,
    ) -> None:
        self.join = AgreementJoin({} if store is None else store, retention_s, clock, **options)
        self.store = self.join.store
        self.log = [] if log is None else log

    def add_score(self, score: ScoreEvent, now: float) -> list[Joined]:
        earlier = list(self.log) if score.variant is not None else []
        self.log.append((now, score))
        return self.join.add_score(score, now, earlier)

    def add_label(self, label: HumanLabel, reference: Reference, now: float) -> list[Joined]:
        return self.join.add_label(label, reference, now, list(self.log))

    def expire(self, now: float) -> int:
        return self.join.expire(now)


def join(store: dict[bytes, bytes] | None = None, retention_s: float = DAY) -> Logged:
    return Logged(store, retention_s)


def score(**fields: Any) -> ScoreEvent:
    base: dict[str, Any] = {"target_id": "t-1", "rule_id": "answer_quality", "raw_value": 4.0}
    base.update(fields)
    if base.get("variant"):
        base.setdefault("score_id", f"{base['target_id']}/{base['variant']}")
    return score_event(**base)


def choice_score(label: str, **fields: Any) -> ScoreEvent:
    raw = {"yes": 1.0, "no": 0.0}[label]
    return score(rule_id="safety", raw_value=raw, label=label, scale=Scale(min=0, max=1), **fields)


def human(
    value: float | str, annotator: str = "ana", kind: str = "numeric", **fields: Any
) -> tuple[HumanLabel, Reference]:
    base: dict[str, Any] = {
        "trace_id": "t-1",
        "rule_id": "answer_quality",
        "value": value,
        "annotator": annotator,
        "labelled_at": "2026-11-01T11:00:00Z",
    }
    base.update(fields)
    ref = (
        Reference("choice", label=str(value))
        if kind == "choice"
        else Reference("numeric", raw_value=float(value))
    )
    return HumanLabel.model_validate(base), ref


def test_a_label_after_its_score() -> None:
    j = join()
    primary = score()
    assert j.add_score(primary, 0.0) == []
    label, ref = human(5)
    [pair] = j.add_label(label, ref, 10.0)
    assert pair == Joined(
        agreement_id=agreement_id(label.id, primary.score_id),
        target_id="t-1",
        rule_id="answer_quality",
        pack="demo",
        criterion=None,
        project_name="shop",
        reference="human",
        variant=None,
        model="gpt-4o-mini",
        kind="numeric",
        reference_value=5.0,
        judged_value=4.0,
        annotator="ana",
        label_id=label.id,
        score_id=primary.score_id,
        labelled_at=datetime(2026, 11, 1, 11, tzinfo=UTC),
        scored_at=primary.created_at,
        joined_at=WHEN,
    )
    # the record the topic carries
    assert orjson.loads(pair.to_bytes())["reference_value"] == 5.0


def test_a_label_before_its_score_makes_the_same_pair() -> None:
    primary = score()
    label, ref = human(5)
    after = join()
    after.add_score(primary, 0.0)
    before = join()
    assert before.add_label(label, ref, 0.0) == []
    assert before.add_score(primary, 10.0) == after.add_label(label, ref, 10.0)


def test_choice_labels_compare_with_the_scores_label() -> None:
    j = join()
    j.add_score(choice_score("no"), 0.0)
    label, ref = human("yes", kind="choice", rule_id="safety")
    [pair] = j.add_label(label, ref, 1.0)
    assert (pair.kind, pair.reference_value, pair.judged_value) == ("choice", "yes", "no")


def test_a_choice_label_does_not_pair_with_a_score_without_a_label() -> None:
    j = join()
    j.add_score(score(rule_id="safety", raw_value=1.0, label=None), 0.0)
    assert j.add_label(*human("yes", kind="choice", rule_id="safety"), 1.0) == []


def test_only_ok_scores_with_a_raw_value_join() -> None:
    j = join()
    j.add_score(score(status="error", raw_value=None, value=None, status_reason="x"), 0.0)
    j.add_score(score(status="skipped", raw_value=None, value=None, target_id="t-1"), 0.0)
    assert j.add_label(*human(5), 1.0) == []
    assert state_key("t-1", "answer_quality", None) in j.store  # the label is kept
    assert orjson.loads(j.store[state_key("t-1", "answer_quality", None)])["scores"] == {}


def test_other_targets_rules_and_criteria_do_not_join() -> None:
    j = join()
    j.add_score(score(target_id="t-2"), 0.0)
    j.add_score(score(rule_id="other"), 0.0)
    j.add_score(score(criterion="clarity"), 0.0)
    assert j.add_label(*human(5), 1.0) == []
    [pair] = j.add_label(*human(5, criterion="clarity"), 1.0)
    assert pair.criterion == "clarity"


def test_duplicates_emit_their_pairs_again_under_the_same_ids() -> None:
    """A redelivered item (the worker died after the table's write, before the pairs were
    published) must not lose its pairs: they come again, the same ids and values."""
    j = join()
    primary = score()
    label, ref = human(5)
    j.add_score(primary, 0.0)
    [first] = j.add_label(label, ref, 1.0)
    same = first.model_dump(exclude={"joined_at"})
    [again] = j.add_label(label, ref, 2.0)  # the same label again
    assert again.model_dump(exclude={"joined_at"}) == same
    [redelivered] = j.add_score(primary, 3.0)  # the same score redelivered
    assert redelivered.model_dump(exclude={"joined_at"}) == same
    resent, _ = human(5, labelled_at="2026-11-02T09:00:00Z")  # re-sent, same value
    [pair] = j.add_label(resent, ref, 4.0)
    assert pair.agreement_id == first.agreement_id


def test_a_changed_label_is_emitted_again_under_the_same_id() -> None:
    j = join()
    j.add_score(score(), 0.0)
    [first] = j.add_label(*human(5), 1.0)
    [second] = j.add_label(*human(2), 2.0)  # same annotator, target, rule: same label id
    assert second.agreement_id == first.agreement_id
    assert (first.reference_value, second.reference_value) == (5.0, 2.0)
    [third] = j.add_label(*human(2, annotator="bo"), 3.0)  # another annotator: another pair
    assert third.agreement_id != first.agreement_id
    assert third.annotator == "bo"


def test_a_label_joins_every_score_of_its_key_and_every_label_a_new_score() -> None:
    j = join()
    j.add_label(*human(5), 0.0)
    j.add_label(*human(3, annotator="bo"), 0.0)
    pairs = j.add_score(score(), 1.0)
    assert sorted((p.annotator, p.reference_value) for p in pairs) == [("ana", 5.0), ("bo", 3.0)]
    shadow = score(variant="mini", judge_model="gpt-4.1-nano", raw_value=2.0)
    shadow_pairs = j.add_score(shadow, 2.0)
    assert {(p.reference, p.variant, p.model) for p in shadow_pairs} == {
        ("human", "mini", "gpt-4.1-nano"),
        ("primary", "mini", "gpt-4.1-nano"),
    }
    assert len(shadow_pairs) == 3  # ana and bo against the shadow, primary against it


def test_a_shadow_joins_the_primary_in_either_order() -> None:
    primary, shadow = score(), score(variant="mini", judge_model="small", raw_value=3.0)
    a, b = join(), join()
    assert a.add_score(primary, 0.0) == []
    [pair] = a.add_score(shadow, 1.0)
    assert b.add_score(shadow, 0.0) == []
    assert b.add_score(primary, 1.0) == [pair]
    assert pair.agreement_id == agreement_id(primary.score_id, shadow.score_id)
    assert (pair.reference, pair.variant, pair.model) == ("primary", "mini", "small")
    assert (pair.reference_value, pair.judged_value) == (4.0, 3.0)
    assert (pair.reference_score_id, pair.score_id) == (primary.score_id, shadow.score_id)
    assert (pair.annotator, pair.label_id, pair.labelled_at) == (None, None, None)


def decided(confidence: object) -> dict[str, Any]:
    """A decision model's details (``details.decision``) with this confidence."""
    return {"decision": {"confidence": confidence, "probabilities": {}, "expected": 0.5}}


def test_a_cascade_pair_carries_the_first_tiers_confidence_in_either_order() -> None:
    """The shadow's (the judged side's) confidence rides on the pair, whichever came first,
    and through a shadow held for its primary; the primary's own is not the judged side's."""
    primary = choice_score("yes", details=decided(0.2))
    shadow = choice_score("no", variant="cascade", judge_model="luna", details=decided(0.83))
    a, b = join(), join()
    a.add_score(primary, 0.0)
    [pair] = a.add_score(shadow, 1.0)
    assert b.add_score(shadow, 0.0) == []  # held, awaiting its primary
    assert b.add_score(primary, 1.0) == [pair]
    assert (pair.variant, pair.judged_value, pair.judged_confidence) == ("cascade", "no", 0.83)
    assert orjson.loads(pair.to_bytes())["judged_confidence"] == 0.83
    label, ref = human("yes", kind="choice", rule_id="safety")
    labelled = b.add_label(label, ref, 2.0)  # against each score read back: its own
    assert {(p.score_id, p.judged_confidence) for p in labelled} == {
        (primary.score_id, 0.2),
        (shadow.score_id, 0.83),
    }


def test_the_confidence_survives_the_internal_topics_slim_record() -> None:
    """The join reads scores from the agreement-events topic, slimmed (``events.slim``): the
    confidence is what of the details it keeps, so the curve over cuts has its pairs."""
    primary = choice_score("yes", details=decided(0.2))
    shadow = choice_score("no", variant="cascade", judge_model="luna", details=decided(0.83))
    read = [ScoreEvent.model_validate_json(slim(s)) for s in (primary, shadow)]
    assert read[1].details == {"decision": {"confidence": 0.83}} and read[1].reason is None
    j = join()
    j.add_score(read[0], 0.0)
    [pair] = j.add_score(read[1], 1.0)
    assert pair.judged_confidence == 0.83
    assert ScoreEvent.model_validate_json(slim(score())).details is None


def test_a_pair_without_a_decision_or_a_readable_confidence_carries_none() -> None:
    for details in (None, {"decision": None}, decided("high"), decided(True), decided(1.5)):
        j = join()
        j.add_score(score(), 0.0)
        [pair] = j.add_score(score(variant="v", details=details), 1.0)
        assert pair.judged_confidence is None, details
    j = join()
    j.add_score(score(), 0.0)
    [pair] = j.add_score(score(variant="v", details=decided(1)), 1.0)
    assert pair.judged_confidence == 1.0


def test_shadows_held_and_records_written_before_the_confidence_still_read() -> None:
    """A shadow held by a worker before the confidence was carried pairs with None; a record
    of the agreement topic without the field reads as None."""
    store: dict[bytes, bytes] = {}
    j = join(store)
    j.add_score(score(variant="v", details=decided(0.9)), 0.0)
    key = state_key("t-1", "answer_quality", None)
    held = orjson.loads(store[key])
    for item in held["scores"].values():
        assert item.pop("confidence") == 0.9
    store[key] = orjson.dumps(held)
    [pair] = j.add_score(score(), 1.0)
    assert pair.judged_confidence is None
    record = orjson.loads(pair.to_bytes())
    del record["judged_confidence"]
    assert Joined.model_validate(record) == pair


def test_two_shadows_pair_with_the_primary_not_with_each_other() -> None:
    j = join()
    j.add_score(score(variant="a"), 0.0)
    j.add_score(score(variant="b"), 0.0)
    pairs = j.add_score(score(), 1.0)
    assert sorted(p.variant or "" for p in pairs) == ["a", "b"]


def test_a_shadow_pairs_with_the_primary_of_the_same_thread_close() -> None:
    def close(seq: int) -> ThreadInfo:
        return ThreadInfo(
            kind="conversation", close_seq=seq, close_reason="end", turn_count=2, dropped_turns=0
        )

    j = join()
    j.add_score(score(score_id="p1", scope="thread", thread=close(1)), 0.0)
    j.add_score(score(score_id="p2", scope="thread", thread=close(2)), 0.0)
    [pair] = j.add_score(score(score_id="s2", variant="v", scope="thread", thread=close(2)), 1.0)
    assert pair.reference_score_id == "p2"


def test_a_choice_primary_compares_labels_with_its_shadow() -> None:
    j = join()
    j.add_score(choice_score("yes"), 0.0)
    [pair] = j.add_score(choice_score("no", variant="v"), 1.0)
    assert (pair.kind, pair.reference_value, pair.judged_value) == ("choice", "yes", "no")


def test_kind_of_decides_how_a_score_is_compared() -> None:
    j = Logged(kind_of=lambda s: "numeric")
    j.add_score(choice_score("yes"), 0.0)
    [pair] = j.add_score(choice_score("no", variant="v"), 1.0)
    assert (pair.kind, pair.reference_value, pair.judged_value) == ("numeric", 1.0, 0.0)
    skipping = Logged(kind_of=lambda s: None)
    assert skipping.add_score(score(), 0.0) == []
    assert skipping.store == {}


def test_rubric_criteria_join_by_criterion() -> None:
    j = join()
    cq1 = score(rule_id="coaching_transcript", criterion="CQ1", label="NA", raw_value=1.0)
    cq2 = score(rule_id="coaching_transcript", criterion="CQ2", label="YES", raw_value=1.0)
    j.add_score(cq1, 0.0)
    j.add_score(cq2, 0.0)
    label, ref = human("NO", kind="choice", rule_id="coaching_transcript", criterion="CQ2")
    [pair] = j.add_label(label, ref, 1.0)
    assert (pair.criterion, pair.score_id, pair.judged_value) == ("CQ2", cq2.score_id, "YES")


def test_late_items_after_the_retention_join_nothing() -> None:
    j = join(retention_s=100.0)
    j.add_score(score(), 0.0)
    assert j.add_label(*human(5), 101.0) == []  # the key was stale, whether expired or not
    fresh = join(retention_s=100.0)
    fresh.add_score(score(), 0.0)
    assert len(fresh.add_label(*human(5), 100.0)) == 1  # at the retention: still joins


def test_only_labels_and_waiting_shadows_are_held() -> None:
    """What the store holds grows with what can still pair: no score is kept but a shadow's
    whose primary has not come; a label is."""
    store: dict[bytes, bytes] = {}
    j = Logged(store)
    for n in range(50):
        j.add_score(score(target_id=f"t-{n}"), float(n))
    assert store == {}
    [pair] = j.add_label(*human(5, trace_id="t-7"), 60.0)  # read back from the log
    assert pair.score_id == score(target_id="t-7").score_id
    assert list(store) == [state_key("t-7", "answer_quality", None)]
    assert len(j.add_score(score(target_id="t-9", variant="a"), 61.0)) == 1  # its primary read
    assert list(store) == [state_key("t-7", "answer_quality", None)]
    assert j.add_score(score(target_id="new", variant="a"), 62.0) == []  # its primary to come
    held = orjson.loads(j.store[state_key("new", "answer_quality", None)])
    assert [s["awaiting"] for s in held["scores"].values()] == ["primary"]
    assert len(j.add_score(score(target_id="new"), 63.0)) == 1
    assert state_key("new", "answer_quality", None) not in j.store  # paired, it went


def test_expire_drops_labels_after_the_retention_and_shadows_after_their_wait() -> None:
    store: dict[bytes, bytes] = {}
    j = Logged(store, retention_s=100.0)
    j.add_label(*human(5, trace_id="old"), 0.0)
    j.add_label(*human(5, trace_id="kept"), 60.0)
    assert j.expire(150.0) == 1
    assert [orjson.loads(k)[0] for k in store] == ["kept"]
    assert j.add_score(score(target_id="old"), 151.0) == []  # its label is gone
    assert j.expire(161.0) == 1
    assert store == {}
    # a shadow waits for its primary at most two days (published with it, or in a batch)
    long = Logged(retention_s=7 * DAY)
    long.add_score(score(variant="late"), 0.0)  # its primary never comes
    long.add_label(*human(5), 0.0)
    assert long.expire(PARTNER_WAIT_S) == 0
    assert long.expire(PARTNER_WAIT_S + 1.0) == 0  # the label stays for the retention
    held = orjson.loads(long.store[state_key("t-1", "answer_quality", None)])
    assert held["scores"] == {} and len(held["labels"]) == 1
    assert long.expire(7 * DAY + 1.0) == 1 and long.store == {}


def test_the_state_survives_in_the_store() -> None:
    store: dict[bytes, bytes] = {}
    first = join(store)
    first.add_score(score(), 0.0)
    restarted = Logged(store, log=first.log)  # a new worker: the table and the topic remain
    [pair] = restarted.add_label(*human(5), 1.0)
    assert pair.judged_value == 4.0
    # the label is held: redelivered, the score emits the same pair again
    assert [p.agreement_id for p in restarted.add_score(score(), 2.0)] == [pair.agreement_id]


# any arrival order of the same labels and scores yields the same agreement ids
TARGETS = ["t-1", "t-2"]
ITEMS: list[tuple[str, Any]] = [
    *(("score", score(target_id=t)) for t in TARGETS),
    *(("score", score(target_id=t, variant="mini", raw_value=3.0)) for t in TARGETS),
    *(("score", score(target_id=t, variant="big", raw_value=5.0)) for t in TARGETS),
    *(
        ("label", human(v, annotator=a, trace_id=t))
        for t in TARGETS
        for a, v in [("ana", 5), ("bo", 2)]
    ),
]


@given(
    st.lists(
        st.sampled_from(range(len(ITEMS))), min_size=len(ITEMS), max_size=2 * len(ITEMS)
    ).filter(lambda order: set(order) == set(range(len(ITEMS))))
    | st.permutations(range(len(ITEMS)))
)
def test_any_arrival_order_yields_the_same_agreement_ids(order: list[int]) -> None:
    j = join()
    emitted: dict[str, set[tuple[Any, ...]]] = {}
    for now, index in enumerate(order):
        kind, item = ITEMS[index]
        pairs = j.add_score(item, float(now)) if kind == "score" else j.add_label(*item, now)
        for p in pairs:  # a redelivered item emits its pairs again: the same ids, same pairs
            said = p.model_dump(exclude={"joined_at"})
            emitted.setdefault(p.agreement_id, set()).add(tuple(sorted(said.items())))
    assert all(len(versions) == 1 for versions in emitted.values()), "an id with two pairs"
    # per target: 2 labels x 3 scores, and the primary with 2 shadows
    assert len(emitted) == len(TARGETS) * (2 * 3 + 2)
    assert set(emitted) == EXPECTED_IDS


def _expected_ids() -> set[str]:
    """Worked out from the items, not by the join: every label with every score of its
    target, and each target's primary score with each of its shadows."""
    scores = [item for kind, item in ITEMS if kind == "score"]
    labels = [item[0] for kind, item in ITEMS if kind == "label"]
    ids = {
        agreement_id(label.id, s.score_id)
        for label in labels
        for s in scores
        if s.target_id == label.target_id
    }
    for primary in (s for s in scores if s.variant is None):
        ids |= {
            agreement_id(primary.score_id, s.score_id)
            for s in scores
            if s.variant is not None and s.target_id == primary.target_id
        }
    return ids


EXPECTED_IDS = _expected_ids()


def test_a_tool_calls_score_joins_the_label_naming_its_trace_and_call() -> None:
    """A call id is unique within its trace only (``call_0`` in every trace): the join holds a
    tool call's score under ``<trace id>/<call id>`` (as the internal topic's slim record
    carries it), and a label names the call so; another trace's ``call_0`` joins nothing."""

    def call_score(trace: str) -> ScoreEvent:
        read_back = slim(
            score(
                scope="tool_call", target_id="call_0", score_id=f"s-{trace}",
                details={"trace_id": trace, "tool": "search"},
            )
        )  # fmt: skip
        return ScoreEvent.model_validate_json(read_back)

    j = join()
    assert call_score("t-1").target_id == "t-1/call_0"
    j.add_score(call_score("t-1"), 0.0)
    j.add_score(call_score("t-2"), 0.0)
    label = HumanLabel.model_validate(
        {"target_id": "t-2/call_0", "rule_id": "answer_quality", "value": 5, "annotator": "ana",
         "labelled_at": "2026-11-01T11:00:00Z"}
    )  # fmt: skip
    ref = Reference("numeric", raw_value=5.0)
    [pair] = j.add_label(label, ref, 10.0)
    assert (pair.target_id, pair.score_id) == ("t-2/call_0", "s-t-2")
