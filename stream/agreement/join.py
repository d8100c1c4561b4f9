"""Human labels and judges' scores joined, in whichever order they arrive: pure state over a
key-value store (the worker's changelog-backed table; a dict in tests), no Kafka here.

State is kept per (target, rule, criterion): the key's ok scores (the rule's own judge's,
``variant`` None, and each shadow's) and its labels, each with when it arrived. Each new
pair is emitted once as a ``Joined`` record (the ``score-agreement`` topic's): a label with
each score of its key (``reference="human"``), and the primary score with each shadow score
(``reference="primary"``). A pair's ``agreement_id`` is a digest of its two sides, so a
re-join (a redelivered score, a restarted worker) is the same record downstream, and a label
sent again with a new value is re-emitted under the same id (the newest wins).

How a pair is compared comes from its reference side: a label's ``Reference`` (checked
against the rule when it was parsed); for primary against shadow, the kind ``kind_of`` gives
the primary score (``labels.score_kinds``: by its rule, choice rules by label, numeric ones
by raw value). A pair whose judged side lacks the value its kind compares (a choice without
a label) is not emitted.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, MutableMapping
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


class AgreementJoin:
    """Labels and scores joined per (target, rule, criterion) within ``retention_s`` of the
    key's newest item; ``clock`` stamps ``joined_at``."""

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

    def _state(self, key: bytes, now: float) -> dict[str, Any]:
        """The key's state; a key older than the retention is gone (whether or not
        ``expire`` ran since), so a late item joins nothing from before."""
        raw = self.store.get(key)
        state: dict[str, Any] = (
            orjson.loads(raw) if raw is not None else {"scores": {}, "labels": {}}
        )
        if raw is not None and now - newest(state) > self.retention_s:
            return {"scores": {}, "labels": {}}
        return state

    def add_score(self, score: ScoreEvent, now: float) -> list[Joined]:
        """Keep an ok score with a raw value; the pairs it makes with the key's labels and,
        primary with shadow, its other scores. A score already held (a redelivery: the
        worker may have died after the table's write and before the pairs were published)
        emits its pairs again, with the same ids."""
        if score.status != "ok" or score.raw_value is None:
            return []
        kind = self.kind_of(score)
        if kind is None:
            return []
        key = state_key(score.target_id, score.rule_id, score.criterion)
        state = self._state(key, now)
        held = state["scores"].get(score.score_id) or _held_score(score, kind, now)
        held["arrived"] = now  # it arrived (again): the key lives on
        state["scores"][score.score_id] = held
        joined_at = self.clock()
        pairs = [
            joined
            for label in state["labels"].values()
            if (joined := _human(label, held, joined_at)) is not None
        ]
        for other in state["scores"].values():
            if other is held or (other["variant"] is None) == (held["variant"] is None):
                continue
            primary, shadow = (held, other) if held["variant"] is None else (other, held)
            if (joined := _primary(primary, shadow, joined_at)) is not None:
                pairs.append(joined)
        self.store[key] = orjson.dumps(state)
        return pairs

    def add_label(self, label: HumanLabel, reference: Reference, now: float) -> list[Joined]:
        """Keep a label (replacing one of the same id); its pairs with the key's scores. The
        same label again (a redelivery, or re-sent) emits its pairs again with the same ids,
        as a new value for its id does (downstream keeps the newest of each id)."""
        key = state_key(label.target_id, label.rule_id, label.criterion)
        state = self._state(key, now)
        held = {
            "label_id": label.id,
            "kind": reference.kind,
            "value": reference.value,
            "annotator": label.annotator,
            "labelled_at": label.labelled_at.isoformat(),
            "arrived": now,
        }
        state["labels"][label.id] = held
        joined_at = self.clock()
        pairs = [
            joined
            for score in state["scores"].values()
            if (joined := _human(held, score, joined_at)) is not None
        ]
        self.store[key] = orjson.dumps(state)
        return pairs

    def expire(self, now: float) -> int:
        """Drop the keys whose newest item arrived more than ``retention_s`` before ``now``;
        how many were dropped."""
        stale = [
            key
            for key, raw in list(self.store.items())
            if now - newest(orjson.loads(raw)) > self.retention_s
        ]
        for key in stale:
            del self.store[key]
        return len(stale)


def newest(state: dict[str, Any]) -> float:
    """When the key's newest item arrived."""
    items = [*state["scores"].values(), *state["labels"].values()]
    return max((item["arrived"] for item in items), default=float("-inf"))


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
        "scored_at": score.created_at.isoformat(),
        "arrived": now,
    }


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
