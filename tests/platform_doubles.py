"""Local doubles of Langfuse's and Opik's score APIs, for the sinks' tests.

Real HTTP servers (aiohttp, in a background thread, as ``scripted_judge.MockJudge``) that
check what their platform checks, as the platform's published reference and server code say
(the references are named at the top of ``stream/sinks/langfuse.py`` and ``opik.py``):
credentials, the body field by field, one score a request (Langfuse), whole-batch refusals
(Opik). They store scores as the platforms do (upserted on the score id; on trace or thread and
name), keep every request they were sent, and can be told to fail: the next answers
(429 with Retry-After, 5xx), or one score's requests (Langfuse).
"""

from __future__ import annotations

import asyncio
import base64
import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from threaded_app import ThreadedApp

OPIK_MAX_VALUE = 999_999_999.999999999


@dataclass
class Answer:
    """A scripted answer to the next request."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass
class Received:
    """One request as the double saw it."""

    at: float
    method: str
    path: str
    status: int
    body: Any


class Double(ThreadedApp):
    """The server shell (``ThreadedApp``), scripted answers, the request log."""

    name = "double"

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[Answer] = []
        self.requests: list[Received] = []
        self.lock = threading.Lock()

    def fail_next(self, *answers: Answer) -> None:
        """Answer the next requests so, in order, before handling any normally."""
        with self.lock:
            self.answers.extend(answers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _log(self, request: web.Request, status: int, body: Any) -> None:
        with self.lock:
            self.requests.append(
                Received(time.monotonic(), request.method, request.path, status, body)
            )

    async def _scripted(self, request: web.Request, body: Any) -> web.Response | None:
        with self.lock:
            answer = self.answers.pop(0) if self.answers else None
        if answer is None:
            return None
        self._log(request, answer.status, body)
        payload = answer.body if answer.body is not None else {"message": "scripted failure"}
        return web.json_response(payload, status=answer.status, headers=answer.headers)


async def _json(request: web.Request) -> Any:
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return None


# --- Langfuse ----------------------------------------------------------------------------


def _langfuse_id(value: Any) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= 800 and "\r" not in value


def langfuse_score_problems(body: Any) -> list[str]:
    """What Langfuse's ScoreBody validation would say of ``body`` (empty: valid)."""
    if not isinstance(body, dict):
        return ["body: expected an object"]
    problems = []
    if "id" in body and body["id"] is not None and not _langfuse_id(body["id"]):
        problems.append("id: invalid")
    if not isinstance(body.get("name"), str) or not body["name"]:
        problems.append("name: a non-empty string is required")
    has = {k: bool(body.get(k)) for k in ("traceId", "sessionId", "datasetRunId")}
    for key in ("traceId", "sessionId", "datasetRunId", "observationId", "comment", "environment"):
        if body.get(key) is not None and not isinstance(body[key], str):
            problems.append(f"{key}: expected a string")
    exactly_one = sum(has.values()) == 1 and not (body.get("observationId") and not has["traceId"])
    if not exactly_one:
        problems.append(
            "Provide exactly one of the following: traceId (with optional observationId), "
            "sessionId or datasetRunId. ObservationId requires traceId."
        )
    value, data_type = body.get("value"), body.get("dataType")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if data_type == "NUMERIC" and not number:
        problems.append("value: a number is required for NUMERIC")
    elif data_type == "BOOLEAN" and not (number and value in (0, 1)):
        problems.append("Value must be a number equal to either 0 or 1 for data type BOOLEAN")
    elif data_type == "CATEGORICAL" and not isinstance(value, str):
        problems.append("value: a string is required for CATEGORICAL")
    elif data_type is None and not (number or isinstance(value, str)):
        problems.append("value: a number or a string is required")
    elif data_type not in (None, "NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT", "CORRECTION"):
        problems.append(f"dataType: invalid {data_type!r}")
    if number and not math.isfinite(value):
        problems.append("value: not finite")
    return problems


class LangfuseDouble(Double):
    """``POST /api/public/scores`` with basic auth: one score a request, validated as
    Langfuse's route does, answered ``200 {"id"}`` (or ``400 {"message"}``)."""

    name = "langfuse"

    def __init__(self, public_key: str = "pk-lf-test", secret_key: str = "sk-lf-test") -> None:
        super().__init__()
        self.public_key, self.secret_key = public_key, secret_key
        self.scores: dict[str, dict[str, Any]] = {}  # by score id: the last body upserted
        self.received: list[dict[str, Any]] = []  # every valid score body, in order
        self.refusals: dict[str, list[tuple[int, str]]] = {}  # score id: next answers
        self.in_flight = 0
        self.most_in_flight = 0

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/api/public/scores", self._create)]

    def refuse(self, score_id: str, *answers: tuple[int, str]) -> None:
        """Answer the next requests for this score with these (status, message); then accept
        it as usual."""
        with self.lock:
            self.refusals.setdefault(score_id, []).extend(answers)

    def _authorised(self, request: web.Request) -> bool:
        expected = base64.b64encode(f"{self.public_key}:{self.secret_key}".encode()).decode()
        return request.headers.get("Authorization") == f"Basic {expected}"

    async def _create(self, request: web.Request) -> web.Response:
        body = await _json(request)
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.005)  # a round trip: lets concurrent requests overlap
            return await self._answer(request, body)
        finally:
            with self.lock:
                self.in_flight -= 1

    async def _answer(self, request: web.Request, body: Any) -> web.Response:
        if not self._authorised(request):
            self._log(request, 401, body)
            return web.json_response(
                {"error": "UnauthorizedError", "message": "Invalid credentials"}, status=401
            )
        if (scripted := await self._scripted(request, body)) is not None:
            return scripted
        if problems := langfuse_score_problems(body):
            self._log(request, 400, body)
            return web.json_response({"message": "Invalid request data", "error": problems}, 400)
        with self.lock:
            self.received.append(body)
            queued = self.refusals.get(body.get("id"), [])
            refusal = queued.pop(0) if queued else None
            if refusal is None:
                key = body.get("id") or str(uuid.uuid4())
                self.scores[key] = body  # a score created again with its id replaces it
        if refusal is not None:
            self._log(request, refusal[0], body)
            return web.json_response({"message": refusal[1]}, status=refusal[0])
        self._log(request, 200, body)
        return web.json_response({"id": key})


# --- Opik --------------------------------------------------------------------------------


class OpikDouble(Double):
    """``PUT /v1/private/traces/feedback-scores`` and ``.../threads/feedback-scores``, under a
    base path (as ``http://localhost:5173/api``); ``Authorization`` and ``Comet-Workspace``
    checked when the double is given a key."""

    name = "opik"

    def __init__(self, api_key: str | None = None, workspace: str | None = None) -> None:
        super().__init__()
        self.api_key, self.workspace = api_key, workspace
        self.trace_scores: dict[tuple[str, str], dict[str, Any]] = {}  # (trace id, name)
        self.thread_scores: dict[tuple[str | None, str, str], dict[str, Any]] = {}
        self.items: list[dict[str, Any]] = []  # every item of every accepted batch

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def routes(self) -> list[web.RouteDef]:
        return [
            web.put("/api/v1/private/traces/feedback-scores", self._traces),
            web.put("/api/v1/private/traces/threads/feedback-scores", self._threads),
        ]

    async def _traces(self, request: web.Request) -> web.Response:
        return await self._batch(request, thread=False)

    async def _threads(self, request: web.Request) -> web.Response:
        return await self._batch(request, thread=True)

    async def _batch(self, request: web.Request, thread: bool) -> web.Response:
        body = await _json(request)
        if self.api_key is not None and (
            request.headers.get("Authorization") != self.api_key
            or request.headers.get("Comet-Workspace") != self.workspace
        ):
            self._log(request, 401, body)
            return web.json_response({"code": 401, "message": "User not allowed"}, status=401)
        if (scripted := await self._scripted(request, body)) is not None:
            return scripted
        status, message = self._check(body, thread)
        if status != 204:
            self._log(request, status, body)
            key = "errors" if status == 422 else "message"
            return web.json_response({"code": status, key: message}, status=status)
        with self.lock:
            for item in body["scores"]:
                self.items.append(item)
                if thread:
                    key3 = (item.get("project_name"), item["thread_id"], item["name"])
                    self.thread_scores[key3] = item
                else:
                    self.trace_scores[(item["id"], item["name"])] = item
        self._log(request, 204, body)
        return web.Response(status=204)

    def _check(self, body: Any, thread: bool) -> tuple[int, Any]:
        """Jackson's and the resource's checks: 400 for what does not parse (a UUID, an enum),
        422 for a bean-validation failure (@NotBlank, @NotNull, @DecimalMax, @Size)."""
        if not isinstance(body, dict) or not isinstance(body.get("scores"), list):
            return 422, ["scores must not be null"]
        scores = body["scores"]
        if not 1 <= len(scores) <= 1000:
            return 422, ["scores size must be between 1 and 1000"]
        invalid = []
        for n, item in enumerate(scores):
            if not isinstance(item, dict):
                return 400, "Unable to process JSON"
            if not thread:
                try:
                    trace_id = uuid.UUID(str(item.get("id")))
                except ValueError:
                    return 400, "Unable to process JSON"
                if trace_id.version != 7:
                    return 400, "Trace id must be a version 7 UUID"
            elif not str(item.get("thread_id") or "").strip():
                invalid.append(f"scores[{n}].threadId must not be blank")
            if item.get("source") not in ("ui", "sdk"):
                return 400, "Unable to process JSON"
            if not str(item.get("name") or "").strip():
                invalid.append(f"scores[{n}].name must not be blank")
            value = item.get("value")
            if not isinstance(value, int | float) or isinstance(value, bool):
                invalid.append(f"scores[{n}].value must not be null")
            elif abs(value) > OPIK_MAX_VALUE:
                invalid.append(f"scores[{n}].value must be within the feedback score range")
            project = item.get("project_name")
            if project is not None and not str(project).strip():
                invalid.append(f"scores[{n}].projectName must not be blank")
            for key in ("category_name", "reason", "project_name", "thread_id"):
                if item.get(key) is not None and not isinstance(item[key], str):
                    return 400, "Unable to process JSON"
        return (422, invalid) if invalid else (204, None)
