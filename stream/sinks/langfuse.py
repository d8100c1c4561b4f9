"""Scores as Langfuse scores: the request bodies and how to read Langfuse's answers. Pure.

Reference followed: Langfuse's own API definition, ``fern/apis/server/definition/ingestion.yml``
and ``scores.yml`` of langfuse/langfuse (commit 62751446, 2026), and the server's validation
(``packages/shared/src/server/ingestion/types.ts``: ``BaseScoreBody``, ``ScoreBody``;
``packages/shared/src/utils/scores.ts``: exactly one of traceId, sessionId, datasetRunId;
``web/src/pages/api/public/ingestion.ts``):

- ``POST /api/public/ingestion`` with ``{"batch": [event, ...]}``, basic auth (public key as
  user, secret key as password). Each event is ``{"id", "timestamp", "type": "score-create",
  "body"}``: ``id`` identifies the event (unique per request: Langfuse deduplicates on it), the
  body's ``id`` is the score's, and a ``score-create`` "upserts on id for updates if score with
  id exists". The answer is ``207`` with ``{"successes": [{"id", "status"}], "errors": [{"id",
  "status", "message", "error"}]}`` keyed by event id: input errors do not fail the request.
  A batch is at most 3.5 MB. ``401``/``403`` for keys that do not open a project (or
  suspended ingestion), ``429`` with ``Retry-After`` (seconds) when rate limited, ``400`` for a
  body that is not a batch.
- Score body: ``id``, ``traceId`` or ``sessionId`` (exactly one), ``name`` (not empty),
  ``value`` (a number for NUMERIC and BOOLEAN, 0 or 1 for BOOLEAN, a string for CATEGORICAL),
  ``dataType`` (``NUMERIC`` / ``BOOLEAN`` / ``CATEGORICAL``), ``comment``, ``metadata``. Ids are
  at most 800 characters, without a carriage return.

The endpoint is marked deprecated for traces and observations (Langfuse v4 takes them over
OpenTelemetry); its v4 ``events_only`` mode still accepts ``score-create`` events, and on
Langfuse Cloud the route itself is announced to go on November 16, 2026 (design record 17).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from ..models import ScoreEvent
from .platform import Item, ItemOutcome, Rejected, Request
from .scores import Unsent, ValueMode, posted_value, scale_text, score_name, unsent_status

INGESTION_PATH = "/api/public/ingestion"
MAX_BATCH_BYTES = 3_000_000  # Langfuse takes 3.5 MB a batch; the rest is headroom
MAX_ID_CHARS = 800
# labels read as a yes/no answer: a BOOLEAN score, 1 for the first kind
BOOLEAN_LABELS = {"yes": 1, "true": 1, "pass": 1, "no": 0, "false": 0, "fail": 0}


def auth_headers(public_key: str, secret_key: str) -> dict[str, str]:
    """Basic auth: the public key as the user, the secret key as the password."""
    token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def score_body(score: ScoreEvent, value_mode: ValueMode, labels: str) -> dict[str, Any] | Unsent:
    """The ``score-create`` body of ``score``, or why it is not posted.

    A trace score attaches to ``traceId``, a thread score to ``sessionId`` (a Langfuse session
    is a conversation: traces sharing a ``sessionId``, our ``thread_id``). A pair's score has a
    comparison key for a target, which is neither: it is not posted."""
    if unsent := unsent_status(score):
        return unsent
    target = score.target_id
    if score.scope == "pair":
        return Unsent("target", f"a pair's score (comparison key {target}) has no Langfuse trace")
    if len(target) > MAX_ID_CHARS or "\r" in target:
        return Unsent(
            "target", f"{score.scope} id is not a Langfuse id (over 800 characters or a CR)"
        )
    body: dict[str, Any] = {
        "id": score.score_id,
        ("traceId" if score.scope == "trace" else "sessionId"): target,
        "name": score_name(score),
    }
    label = score.label
    boolean = BOOLEAN_LABELS.get(label.strip().lower()) if label is not None else None
    if labels == "categorical" and boolean is not None:
        body |= {"value": boolean, "dataType": "BOOLEAN"}
    elif labels == "categorical" and label is not None:
        body |= {"value": label, "dataType": "CATEGORICAL"}
    else:
        body |= {"value": posted_value(score, value_mode), "dataType": "NUMERIC"}
    if score.reason:
        body["comment"] = score.reason
    body["metadata"] = _metadata(score)
    return body


def _metadata(score: ScoreEvent) -> dict[str, Any]:
    """What a Langfuse user filters or reads beside the value: where the score came from and
    both of its scales."""
    metadata: dict[str, Any] = {
        "source": "llm-trace-scorer",
        "score_id": score.score_id,
        "rule_id": score.rule_id,
        "pack": score.pack,
        "rule_version": score.rule_version,
        "project_name": score.project_name,
        "value": score.value,
        "raw_value": score.raw_value,
        "scale": scale_text(score),
        "higher_is_better": score.higher_is_better,
    }
    optional = {
        "criterion": score.criterion,
        "label": score.label,
        "judge_model": score.judge_model,
        "thread_kind": score.thread.kind if score.thread else None,
        "close_seq": score.thread.close_seq if score.thread else None,
    }
    return metadata | {k: v for k, v in optional.items() if v is not None}


def ingestion_event(event_id: str, timestamp: str, body: dict[str, Any]) -> dict[str, Any]:
    """One event of an ingestion batch: ``event_id`` is new for every request (Langfuse
    deduplicates events by it), the score's own id stays in the body (upserted on)."""
    return {"id": event_id, "timestamp": timestamp, "type": "score-create", "body": body}


@dataclass(frozen=True, slots=True)
class EventOutcome:
    """What a 207 answer said of one event: ``status`` as Langfuse gave it (201 for a
    success), ``message`` for an error."""

    status: int
    message: str | None = None

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        return self.status == 429 or self.status >= 500


def read_multistatus(payload: Any) -> dict[str, EventOutcome]:
    """The outcome of each event a ``207`` answer names, by event id; raises ``ValueError``
    when the answer is not of that shape."""
    if not isinstance(payload, dict):
        raise ValueError("a 207 answer is a JSON object")
    outcomes: dict[str, EventOutcome] = {}
    for key in ("successes", "errors"):
        entries = payload.get(key, [])
        if not isinstance(entries, list):
            raise ValueError(f"{key} is not a list")
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                raise ValueError(f"an entry of {key} has no id")
            status = entry.get("status")
            status = status if isinstance(status, int) else (201 if key == "successes" else 400)
            message = None
            if key == "errors":
                said = [str(entry[k]) for k in ("message", "error") if entry.get(k)]
                message = ": ".join(said) or f"status {status}"
            outcomes[entry["id"]] = EventOutcome(status, message)
    return outcomes


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LangfusePlatform:
    """Langfuse's side of ``scorer sink langfuse``: batches of ``score-create`` events."""

    name = "langfuse"

    def __init__(
        self,
        value_mode: ValueMode = "normalised",
        labels: str = "categorical",
        *,
        max_batch_bytes: int = MAX_BATCH_BYTES,
        new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        clock: Callable[[], str] = _now,
    ) -> None:
        self.value_mode = value_mode
        self.labels = labels
        self.max_batch_bytes = max_batch_bytes
        self._new_id = new_id
        self._clock = clock

    def prepare(self, score: ScoreEvent) -> dict[str, Any] | Unsent:
        return score_body(score, self.value_mode, self.labels)

    def requests(self, items: list[Item]) -> list[Request]:
        """One batch, or several when the events would pass Langfuse's size limit."""
        timestamp = self._clock()
        batches: list[list[tuple[dict[str, Any], Item]]] = [[]]
        size = 0
        for item in items:
            event = ingestion_event(self._new_id(), timestamp, item.payload)
            event_size = len(orjson.dumps(event)) + 1
            if batches[-1] and size + event_size > self.max_batch_bytes:
                batches.append([])
                size = 0
            batches[-1].append((event, item))
            size += event_size
        return [
            Request(
                "POST",
                INGESTION_PATH,
                orjson.dumps({"batch": [event for event, _ in batch]}),
                {event["id"]: item for event, item in batch},
            )
            for batch in batches
            if batch
        ]

    def read(self, request: Request, payload: bytes) -> dict[str, ItemOutcome]:
        """Each event's outcome from the 207 (or any 2xx) answer; an answer that is not a
        multi-status body accepts the batch (Langfuse said 2xx and named no error)."""
        try:
            outcomes = read_multistatus(orjson.loads(payload)) if payload.strip() else {}
        except ValueError:
            return dict.fromkeys(request.items, "accepted")
        if not outcomes:
            return dict.fromkeys(request.items, "accepted")
        read: dict[str, ItemOutcome] = {}
        for event_id in request.items:
            outcome = outcomes.get(event_id)
            if outcome is None or outcome.retryable:
                read[event_id] = "retry"
            elif outcome.accepted:
                read[event_id] = "accepted"
            else:
                read[event_id] = Rejected(f"{outcome.status}: {outcome.message}")
        return read
