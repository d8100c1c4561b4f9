"""Scores as Langfuse scores: the request bodies and how to read Langfuse's answers. Pure.

Reference followed: Langfuse's own API definition, ``fern/apis/server/definition/scores.yml``
(the ``create`` endpoint, ``CreateScoreRequest``) and ``ingestion.yml`` of langfuse/langfuse
(commit 62751446, 2026), and the server's route and validation
(``web/src/pages/api/public/scores/index.ts``; ``packages/shared/src/server/ingestion/types.ts``:
``ScoreBody``; ``packages/shared/src/utils/scores.ts``: exactly one of traceId, sessionId,
datasetRunId):

- ``POST /api/public/scores``, one score a request, basic auth (public key as user, secret key
  as password). The body is the score: ``id`` (the score's: a score created again with the
  same id replaces it), ``traceId`` or ``sessionId`` (exactly one), ``name`` (not empty),
  ``value`` (a number for NUMERIC and BOOLEAN, 0 or 1 for BOOLEAN, a string for CATEGORICAL),
  ``dataType`` (``NUMERIC`` / ``BOOLEAN`` / ``CATEGORICAL``), ``comment``, ``metadata``. Ids are
  at most 800 characters, without a carriage return. ``200`` with ``{"id"}``; an invalid body
  is ``400`` with ``{"message"}``; ``401``/``403`` for keys that do not open a project (or
  suspended ingestion); ``429`` with ``Retry-After`` when rate limited.
- The batched ``POST /api/public/ingestion`` is not used: Langfuse marks it deprecated, removed
  from Langfuse Cloud on November 16, 2026 and from self-hosted Langfuse with v4. One request a
  score is the supported way; the sink sends several at once (``SCORER_SINK_LANGFUSE_CONCURRENCY``).
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from ..models import ScoreEvent
from .platform import Item, ItemOutcome, Request
from .scores import Unsent, ValueMode, posted_value, scale_text, score_name, unsent_status

SCORES_PATH = "/api/public/scores"
MAX_ID_CHARS = 800
# labels read as a yes/no answer: a BOOLEAN score, 1 for the first kind
BOOLEAN_LABELS = {"yes": 1, "true": 1, "pass": 1, "no": 0, "false": 0, "fail": 0}


def auth_headers(public_key: str, secret_key: str) -> dict[str, str]:
    """Basic auth: the public key as the user, the secret key as the password."""
    token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def score_body(score: ScoreEvent, value_mode: ValueMode, labels: str) -> dict[str, Any] | Unsent:
    """The body posted for ``score``, or why it is not posted.

    A trace score attaches to ``traceId``, a thread score to ``sessionId`` (a Langfuse session
    is a conversation: traces sharing a ``sessionId``, our ``thread_id``), a tool call's to
    its trace (``details.trace_id``; its comment names the call). A pair's score has a
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
    body: dict[str, Any] = {"id": score.score_id, "name": score_name(score)}
    if score.scope == "tool_call":  # on its trace: Langfuse keeps every score of a name
        trace = (score.details or {}).get("trace_id")
        if not isinstance(trace, str) or len(trace) > MAX_ID_CHARS or "\r" in trace:
            return Unsent("target", "a tool call's score names no Langfuse trace id")
        body["traceId"] = trace
    else:
        body["traceId" if score.scope == "trace" else "sessionId"] = target
    label = score.label
    boolean = BOOLEAN_LABELS.get(label.strip().lower()) if label is not None else None
    if labels == "categorical" and boolean is not None:
        body |= {"value": boolean, "dataType": "BOOLEAN"}
    elif labels == "categorical" and label is not None:
        body |= {"value": label, "dataType": "CATEGORICAL"}
    else:
        body |= {"value": posted_value(score, value_mode), "dataType": "NUMERIC"}
    comment = score.reason or ""
    if score.scope == "tool_call":  # which of the trace's calls it scores
        tool = (score.details or {}).get("tool")
        comment = f"tool call {target} ({tool}): {comment}" if comment else f"tool call {target}"
    if comment:
        body["comment"] = comment
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


class LangfusePlatform:
    """Langfuse's side of ``scorer sink langfuse``: one ``POST /api/public/scores`` a score."""

    name = "langfuse"

    def __init__(self, value_mode: ValueMode = "normalised", labels: str = "categorical") -> None:
        self.value_mode = value_mode
        self.labels = labels

    def prepare(self, score: ScoreEvent) -> dict[str, Any] | Unsent:
        return score_body(score, self.value_mode, self.labels)

    def requests(self, items: list[Item]) -> list[Request]:
        """A request a score (the endpoint takes one)."""
        return [
            Request("POST", SCORES_PATH, orjson.dumps(item.payload), {item.key: item})
            for item in items
        ]

    def read(self, request: Request, payload: bytes) -> dict[str, ItemOutcome]:
        """A 2xx answer accepted the request's one score."""
        return dict.fromkeys(request.items, "accepted")
