"""Scores as Opik feedback scores: the request bodies. Pure.

Reference followed: Opik's backend, comet-ml/opik ``apps/opik-backend``:
``api/resources/v1/priv/TracesResource.java`` (``scoreBatchOfTraces``,
``scoreBatchOfThreads``), ``api/FeedbackScoreBatchContainer.java``,
``api/FeedbackScoreItem.java``, ``api/ScoreSource.java``, ``domain/FeedbackScoreService.java``,
``domain/IdGenerator.java``, ``utils/ValidationUtils.java``; and the Python SDK's
``httpx_client.py`` for the headers:

- ``PUT /v1/private/traces/feedback-scores`` and ``PUT /v1/private/traces/threads/feedback-scores``,
  each ``{"scores": [...]}`` of 1 to 1000 items, answered ``204``. A trace item has ``id`` (the
  trace id: a version 7 UUID, or the whole batch is refused), a thread item ``thread_id`` (any
  text; the thread is found or created, active or not); both ``project_name`` (null: the
  default project; a name that does not exist is created), ``name`` (not blank), ``value``
  (required, within +-999999999.999999999), ``category_name``, ``reason``, ``source`` (``ui``
  or ``sdk``; newer servers add ``online_scoring``, older ones refuse it). One invalid item
  fails the whole request (400 or 422). A feedback score is keyed by its target and name: the
  same score sent again replaces itself.
- Comet's cloud wants ``Authorization: <api key>`` (no scheme) and ``Comet-Workspace``; a local
  Opik neither.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from ..models import ScoreEvent
from .platform import Item, ItemOutcome, Request
from .scores import Unsent, ValueMode, posted_value, scale_text, score_name, unsent_status

TRACES_PATH = "/v1/private/traces/feedback-scores"
THREADS_PATH = "/v1/private/traces/threads/feedback-scores"
MAX_ITEMS = 1000
MAX_VALUE = 999_999_999.999999999
SOURCE = "sdk"  # accepted by every Opik version ("online_scoring" only by newer ones)
DEFAULT_PROJECT = "default"  # what the scores topic says when the trace named no project


def feedback_score(
    score: ScoreEvent, value_mode: ValueMode, default_project: str | None
) -> tuple[str, dict[str, Any]] | Unsent:
    """The endpoint and item of ``score``, or why it is not posted. A trace score goes to the
    trace (whose id must be Opik's, a UUIDv7), a thread score to the thread; a pair's score
    has a comparison key for a target, neither; a tool call's would overwrite its trace's
    other calls' (Opik keeps one feedback score of a name per trace): none is posted."""
    if unsent := unsent_status(score):
        return unsent
    target = score.target_id
    if score.scope == "pair":
        return Unsent("target", f"a pair's score (comparison key {target}) has no Opik trace")
    if score.scope == "tool_call":  # Opik keeps one score of a name per trace: calls collide
        return Unsent("target", f"a tool call's score (call {target}) has no Opik target")
    value = posted_value(score, value_mode)
    if abs(value) > MAX_VALUE:
        return Unsent("target", f"value {value:g} is beyond what Opik stores")
    item: dict[str, Any]
    if score.scope == "trace":
        trace_id = opik_trace_id(target)
        if trace_id is None:
            return Unsent("target", f"trace id {target!r} is not an Opik trace id (a UUIDv7)")
        path, item = TRACES_PATH, {"id": trace_id}
    else:
        path, item = THREADS_PATH, {"thread_id": target}
    project = score.project_name if score.project_name != DEFAULT_PROJECT else default_project
    if project is not None and project.strip():
        item["project_name"] = project
    item |= {"name": score_name(score), "value": value, "source": SOURCE}
    if score.label is not None:
        item["category_name"] = score.label
    reason = score.reason or ""
    if value_mode == "normalised":  # the rule's own scale is kept where Opik shows text
        reason = f"{reason} ({scale_text(score)})" if reason else f"({scale_text(score)})"
    if reason:
        item["reason"] = reason
    return path, item


def opik_trace_id(target: str) -> str | None:
    """``target`` as Opik writes a trace id (a UUIDv7, lower case), or None if it is not one."""
    try:
        parsed = uuid.UUID(target)
    except ValueError:
        return None
    text = str(parsed)
    if parsed.version != 7 or text != target.strip().lower():
        return None
    return text


def auth_headers(api_key: str | None, workspace: str | None) -> dict[str, str]:
    """Comet's cloud headers (the Opik SDK's): the key as it is, and the workspace."""
    headers = {}
    if api_key is not None:
        headers["Authorization"] = api_key
    if workspace is not None:
        headers["Comet-Workspace"] = workspace
    return headers


class OpikPlatform:
    """Opik's side of ``scorer sink opik``: trace and thread feedback scores, batched per
    endpoint."""

    name = "opik"

    def __init__(
        self,
        value_mode: ValueMode = "normalised",
        default_project: str | None = None,
        *,
        max_items: int = MAX_ITEMS,
    ) -> None:
        self.value_mode = value_mode
        self.default_project = default_project
        self.max_items = max_items

    def prepare(self, score: ScoreEvent) -> tuple[str, dict[str, Any]] | Unsent:
        return feedback_score(score, self.value_mode, self.default_project)

    def requests(self, items: list[Item]) -> list[Request]:
        by_path: dict[str, list[Item]] = {}
        for item in items:
            by_path.setdefault(item.payload[0], []).append(item)
        requests = []
        for path, group in by_path.items():
            for start in range(0, len(group), self.max_items):
                chunk = group[start : start + self.max_items]
                body = orjson.dumps({"scores": [item.payload[1] for item in chunk]})
                requests.append(Request("PUT", path, body, {item.key: item for item in chunk}))
        return requests

    def read(self, request: Request, payload: bytes) -> dict[str, ItemOutcome]:
        """A 2xx (204) accepts every item: Opik refuses a batch whole or not at all."""
        return dict.fromkeys(request.items, "accepted")
