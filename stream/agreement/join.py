"""Human labels and judges' scores joined, in whichever order they arrive: pure state over a
key-value store (the worker's changelog-backed table; a dict in tests), no Kafka here.

What the store holds grows with what can still arrive, not with the scores (design record 36):

- the labels, per (target, rule, criterion), each for ``retention_s`` after it arrived: a
  score that comes later pairs with them (``add_score``);
- a shadow's score whose primary has not come (a primary that failed, or one in a batch of
  its own model's still running), for at most ``PARTNER_WAIT_S``; paired, it goes.

Every other score passes through: it pairs with the labels held and is not kept. What came
before is given by the caller (``earlier``): to a label, the scores of its key the worker
reads back from the internal topic they came in on (``score_index``); to a shadow, its
primary (from the worker's recent primaries, or read back). So a label and a score meet when
the second arrives within ``retention_s`` of the first, in either order.

Each new pair is emitted as a ``Joined`` record (the ``score-agreement`` topic's): a label with
each score of its key (``reference="human"``), and the primary score with each shadow score
(``reference="primary"``). A pair's ``agreement_id`` is a digest of its two sides, so a re-join
(a redelivered score or label, a restarted worker) is the same record downstream, and a label
sent again with a new value is re-emitted under the same id (the newest wins). The worker
publishes a pair before it writes the state that forgets its sides, so a redelivery after a
crash finds them again.

How a pair is compared comes from its reference side: a label's ``Reference`` (checked
against the rule when it was parsed); for primary against shadow, the kind ``kind_of`` gives
the primary score (``labels.score_kinds``: by its rule, choice rules by label, numeric ones
by raw value). A pair whose judged side lacks the value its kind compares (a choice without
a label) is not emitted. The judged side's confidence, where its judge gave one
(``details.decision.confidence``: a decision model's, or a chat judge's read from its
log-probabilities, as a cascade's first tier gives), rides on the pair
(``judged_confidence``), so the report can draw the cascade's curve over confidence cuts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, MutableMapping
from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from ..models import ScoreEvent, utcnow
from .labels import HumanLabel, Kind, Reference

AGREEMENT_ID_NAMESPACE = uuid.UUID("5d0e2b7a-91c4-4e6f-b2a8-3f7c1d9e4a65")


def agreement_id(reference_id: str, score_id: str) -> str:
    """The id of the pair of a label (its id) or primary score (its score id) and a judged
    score: the same pair always has the same id."""
    return str(uuid.uuid5(AGREEMENT_ID_NAMESPACE, f"{reference_id}\x1f{score_id}"))


class Joined(BaseModel):
    """One pair of a reference (a human label, or the rule's own judge) and a judged score,
    on the rule's raw scale; the ``score-agreement`` topic's record (key = target id)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agreement_id: str
    target_id: str
    rule_id: str
    pack: str
    criterion: str | None
    project_name: str
    reference: Literal["human", "primary"]
    variant: str | None  # None: the rule's own judge is judged; else the shadow's name
    model: str | None  # the judged side's judge model
    kind: Kind
    reference_value: str | float
    judged_value: str | float
    annotator: str | None = None
    label_id: str | None = None
    judged_confidence: float | None = None  # details.decision.confidence (older records: None)
    score_id: str
    reference_score_id: str | None = None
    labelled_at: datetime | None = None
    scored_at: datetime
    joined_at: datetime

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))


def state_key(target_id: str, rule_id: str, criterion: str | None) -> bytes:
    return orjson.dumps([target_id, rule_id, criterion])


def default_kind(score: ScoreEvent) -> Kind | None:
    """Without a rule set: a score with a label compares by label. Numeric rules with labels
    (1..5 with names) read so as choices; the worker passes ``labels.score_kinds``."""
    return "choice" if score.label is not None else "numeric"


PARTNER_WAIT_S = 2 * 86_400.0  # a shadow and its primary are published together, or each
# in a batch of its model's within the provider's 24-hour window: one not come by then won't
Arrived = tuple[float, ScoreEvent]  # a score and when it arrived


class AgreementJoin:
    """Labels held per (target, rule, criterion) for ``retention_s``; scores paired as they
    pass; ``clock`` stamps ``joined_at``."""

    def __init__(
        self,
        store: MutableMapping[bytes, bytes],
        retention_s: float,
        clock: Callable[[], datetime] = utcnow,
        kind_of: Callable[[ScoreEvent], Kind | None] = default_kind,
    ) -> None:
        self.store = store
        self.retention_s = retention_s
        self.clock = clock
        self.kind_of = kind_of

    def _state(self, key: bytes, now: float) -> tuple[dict[str, Any], bool]:
        """The key's state without what has expired by ``now`` (whether or not ``expire``
        ran since), so a late item joins nothing from before; and whether it was stored."""
        raw = self.store.get(key)
        if raw is None:
            return {"scores": {}, "labels": {}}, False
        return live(orjson.loads(raw), now, self.retention_s), True

    def _keep(self, key: bytes, state: dict[str, Any], stored: bool) -> None:
        if state["scores"] or state["labels"]:
            self.store[key] = orjson.dumps(state)
        elif stored:
            del self.store[key]

    def _earlier(
        self, key: tuple[str, str, str | None], now: float, earlier: Iterable[Arrived]
    ) -> dict[str, dict[str, Any]]:
        """The ok scores of ``key`` among ``earlier`` that arrived within the retention, as
        held (by score id: a redelivered score is there twice)."""
        found: dict[str, dict[str, Any]] = {}
        for arrived, score in earlier:
            if (
                (score.target_id, score.rule_id, score.criterion) != key
                or score.status != "ok"
                or score.raw_value is None
                or now - arrived > self.retention_s
                or (kind := self.kind_of(score)) is None
            ):
                continue
            found[score.score_id] = _held_score(score, kind, arrived)
        return found

    def add_score(
        self, score: ScoreEvent, now: float, earlier: Iterable[Arrived] = ()
    ) -> list[Joined]:
        """The pairs an ok score with a raw value makes with the labels held for its key and,
        primary with shadow, with its partner: a primary with the shadows held for it; a
        shadow with its primary, held (from before record 36) or among ``earlier`` (each
        with when it arrived: the caller's recent primaries, or its read-back). A score is
        not kept, but a shadow whose primary has not come waits for it (``PARTNER_WAIT_S``).
        A score redelivered (the worker may have died before its pairs were published)
        emits its pairs again, with the same ids."""
        if score.status != "ok" or score.raw_value is None:
            return []
        kind = self.kind_of(score)
        if kind is None:
            return []
        of = (score.target_id, score.rule_id, score.criterion)
        key = state_key(*of)
        state, stored = self._state(key, now)
        held = _held_score(score, kind, now)
        joined_at = self.clock()
        pairs = [
            joined
            for label in state["labels"].values()
            if (joined := _human(label, held, joined_at)) is not None
        ]
        scores: dict[str, dict[str, Any]] = state["scores"]
        if held["variant"] is None:
            for other in list(scores.values()):
                if other["variant"] is None or other["close"] != held["close"]:
                    continue
                if (joined := _primary(held, other, joined_at)) is not None:
                    pairs.append(joined)
                if "awaiting" in other:  # a shadow held for its primary: paired, it goes
                    del scores[other["score_id"]]
        else:
            known = self._earlier(of, now, earlier) | scores
            primaries = [
                other
                for other in known.values()
                if other["variant"] is None and other["close"] == held["close"]
            ]
            for primary in primaries:
                if (joined := _primary(primary, held, joined_at)) is not None:
                    pairs.append(joined)
            if not primaries:  # its primary is still to come
                scores[held["score_id"]] = held | {"awaiting": PRIMARY}
        self._keep(key, state, stored)
        return pairs

    def add_label(
        self,
        label: HumanLabel,
        reference: Reference,
        now: float,
        earlier: Iterable[Arrived] = (),
    ) -> list[Joined]:
        """Hold a label (replacing one of the same id) for the scores still to come; its pairs
        with the scores of its key that came before it: those held, and ``earlier`` (each
        with when it arrived: the caller's read-back of the scores it was sent; any score,
        filtered here by key, status and the retention). The same label again (a
        redelivery, or re-sent) emits its pairs again with the same ids, as a new value for
        its id does (downstream keeps the newest of each id)."""
        of = (label.target_id, label.rule_id, label.criterion)
        key = state_key(*of)
        state, stored = self._state(key, now)
        held = {
            "label_id": label.id,
            "kind": reference.kind,
            "value": reference.value,
            "annotator": label.annotator,
            "labelled_at": label.labelled_at.isoformat(),
            "arrived": now,
        }
        state["labels"][label.id] = held
        scores = self._earlier(of, now, earlier) | state["scores"]
        joined_at = self.clock()
        pairs = [
            joined
            for score in scores.values()
            if (joined := _human(held, score, joined_at)) is not None
        ]
        self._keep(key, state, stored)
        return pairs

    def expire(self, now: float) -> int:
        """Drop what has expired by ``now`` from the keys given (labels past the retention,
        partners past their wait); how many keys were dropped whole."""
        dropped = 0
        for key, raw in list(self.store.items()):
            state = orjson.loads(raw)
            kept = live(state, now, self.retention_s)
            if kept == state:
                continue
            if kept["scores"] or kept["labels"]:
                self.store[key] = orjson.dumps(kept)
            else:
                del self.store[key]
                dropped += 1
        return dropped


PRIMARY = "primary"  # what a shadow held waits for


def _wait(item: dict[str, Any], retention_s: float) -> float:
    """How long an item is kept after it arrived: a label, and a score held the way the
    join held every score before record 36, the retention; a waiting shadow, its wait."""
    return min(PARTNER_WAIT_S, retention_s) if "awaiting" in item else retention_s


def live(state: dict[str, Any], now: float, retention_s: float) -> dict[str, Any]:
    """``state`` without the items expired by ``now``."""
    return {
        part: {
            name: item
            for name, item in state.get(part, {}).items()
            if now - item["arrived"] <= _wait(item, retention_s)
        }
        for part in ("scores", "labels")
    }


def deadline(state: dict[str, Any], retention_s: float) -> float:
    """When the first of the key's items expires (``expire`` should look at it then)."""
    items = [*state.get("scores", {}).values(), *state.get("labels", {}).values()]
    return min(
        (item["arrived"] + _wait(item, retention_s) for item in items), default=float("-inf")
    )


def _held_score(score: ScoreEvent, kind: Kind, now: float) -> dict[str, Any]:
    return {
        "score_id": score.score_id,
        "target_id": score.target_id,
        "rule_id": score.rule_id,
        "pack": score.pack,
        "criterion": score.criterion,
        "project_name": score.project_name,
        "variant": score.variant,
        "model": score.judge_model,
        "kind": kind,
        "label": score.label,
        "raw_value": score.raw_value,
        "close": score.thread.close_seq if score.thread is not None else None,
        "confidence": decision_confidence(score),
        "scored_at": score.created_at.isoformat(),
        "arrived": now,
    }


def decision_confidence(score: ScoreEvent) -> float | None:
    """The judge's confidence in the score's verdict (``details.decision.confidence``: a
    decision model's, or read from a chat judge's log-probabilities), if it reads as a share."""
    decision = (score.details or {}).get("decision")
    found = decision.get("confidence") if isinstance(decision, dict) else None
    if isinstance(found, bool) or not isinstance(found, int | float):
        return None
    return float(found) if 0.0 <= found <= 1.0 else None


def _compared(score: dict[str, Any], kind: str) -> str | float | None:
    value = score["label"] if kind == "choice" else score["raw_value"]
    return value if isinstance(value, str | float | int) else None


def _pair(score: dict[str, Any], joined_at: datetime, **fields: Any) -> Joined:
    return Joined(
        target_id=score["target_id"],
        rule_id=score["rule_id"],
        pack=score["pack"],
        criterion=score["criterion"],
        project_name=score["project_name"],
        variant=score["variant"],
        model=score["model"],
        score_id=score["score_id"],
        judged_confidence=score.get("confidence"),  # held before it was carried: None
        scored_at=datetime.fromisoformat(score["scored_at"]),
        joined_at=joined_at,
        **fields,
    )


def _human(label: dict[str, Any], score: dict[str, Any], joined_at: datetime) -> Joined | None:
    """A label with a judged score, compared as the label's reference says."""
    judged = _compared(score, label["kind"])
    if judged is None:
        return None
    return _pair(
        score,
        joined_at,
        agreement_id=agreement_id(label["label_id"], score["score_id"]),
        reference="human",
        kind=label["kind"],
        reference_value=label["value"],
        judged_value=judged,
        annotator=label["annotator"],
        label_id=label["label_id"],
        labelled_at=datetime.fromisoformat(label["labelled_at"]),
    )


def _primary(primary: dict[str, Any], shadow: dict[str, Any], joined_at: datetime) -> Joined | None:
    """The rule's own score with a shadow's, of the same thread close (a thread reopened
    closes again: each close is judged by both), compared as the primary's kind."""
    if primary["close"] != shadow["close"]:
        return None
    kind = primary["kind"]
    reference, judged = _compared(primary, kind), _compared(shadow, kind)
    if reference is None or judged is None:
        return None
    return _pair(
        shadow,
        joined_at,
        agreement_id=agreement_id(primary["score_id"], shadow["score_id"]),
        reference="primary",
        kind=kind,
        reference_value=reference,
        judged_value=judged,
        reference_score_id=primary["score_id"],
    )
