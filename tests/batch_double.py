"""A local OpenAI-compatible Batch API with scripted outcomes, for tests.

A real HTTP server (aiohttp, in a background thread, as ``scripted_judge.MockJudge``) speaking
the endpoints of OpenAI's Batch API reference (Azure OpenAI's ``/openai/v1`` is the same shape):
``POST /v1/files`` (multipart, purpose ``batch``), ``GET /v1/files/{id}/content``,
``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window: 24h``, ``metadata``),
``GET /v1/batches/{id}`` and ``GET /v1/batches``. Objects are the reference's ``File`` and
``Batch``; output and error file lines are ``{id, custom_id, response: {status_code,
request_id, body}, error}``.

Scripted: ``answers`` per ``custom_id`` (a content string, or an ``ItemError``: an HTTP error
in the error file, or an error line with no response), ``steps`` (the statuses polls walk
through before the batch ends, one per poll), ``ending`` (``completed``, ``expired``: the jobs in
``unfinished`` are in neither file, or ``cancelled``), and a batch whose input fails validation
(a line that is not a POST to the batch's endpoint, a repeated ``custom_id``, a body without a
model, or ``reject`` lines named by a test) ends ``failed`` with ``errors``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from threaded_app import ThreadedApp


@dataclass
class ItemError:
    """A job that fails: an HTTP error response (``status``), or, with ``status=None``, an
    error line without a response (``code``: ``batch_expired``, ``server_error``)."""

    message: str = "the server had an error processing the request"
    status: int | None = 500
    code: str | None = "server_error"


@dataclass
class ScriptedBatch:
    id: str
    input_file_id: str
    endpoint: str
    metadata: dict[str, str]
    lines: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    created_at: int
    steps: list[str]
    polls: int = 0
    status: str = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(
        default_factory=lambda: {"total": 0, "completed": 0, "failed": 0}
    )


class BatchDouble(ThreadedApp):
    """Start with ``with BatchDouble() as api:``; point the client at ``api.base_url``."""

    name = "batch-double"

    def __init__(self, *, default: str = '{"score": 1.0, "reason": "batched"}') -> None:
        super().__init__()
        self.default = default
        self.answers: dict[str, str | ItemError] = {}
        self.steps: list[str] = ["validating", "in_progress", "finalizing"]
        self.ending = "completed"
        self.unfinished: set[str] = set()  # jobs an expired or cancelled batch did not reach
        self.expired_in_error_file = False  # list unreached jobs as ``batch_expired`` error lines
        self.reject: dict[int, str] = {}  # input line number -> validation error message
        self.files: dict[str, tuple[str, bytes]] = {}  # id -> (purpose, content)
        self.batches: dict[str, ScriptedBatch] = {}
        # answers for the jobs whose prompt contains a text (a worker's custom_ids are
        # digests a test does not know): the first matching text wins over ``default``
        self.by_prompt: dict[str, str | ItemError] = {}
        # the next create makes the batch but answers 500, as a reply lost on the way would
        self.lose_create_reply = False
        # every create is refused with this status and makes nothing (an endpoint or model
        # without the Batch API answers so)
        self.refuse_create: int | None = None
        self.calls: list[str] = []  # "POST /v1/files", ... in order
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def uploaded(self, file_id: str) -> list[dict[str, Any]]:
        """The lines of an uploaded file."""
        return [orjson.loads(line) for line in self.files[file_id][1].splitlines() if line]

    # --- objects -----------------------------------------------------------------------
    def _file_object(self, file_id: str, name: str) -> dict[str, Any]:
        purpose, content = self.files[file_id]
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": name,
            "purpose": purpose,
            "status": "processed",
        }

    def _batch_object(self, batch: ScriptedBatch) -> dict[str, Any]:
        errors = {"object": "list", "data": batch.errors} if batch.errors else None
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": batch.status,
            "created_at": batch.created_at,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "errors": errors,
            "metadata": batch.metadata,
            "request_counts": dict(batch.counts),
        }

    def _completion(self, body: dict[str, Any], content: str) -> dict[str, Any]:
        prompt = str(body["messages"][-1]["content"])
        return {
            "id": f"chatcmpl-batch-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "mock"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt) // 4,
                "completion_tokens": len(content) // 4,
                "total_tokens": len(prompt) // 4 + len(content) // 4,
            },
        }

    def _validate(self, endpoint: str, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        errors: list[dict[str, Any]] = []
        seen: set[str] = set()
        for number, line in enumerate(lines, 1):
            problem = self.reject.get(number)
            if line.get("method") != "POST" or line.get("url") != endpoint:
                problem = f"the line is not a POST to {endpoint}"
            elif not isinstance(line.get("body"), dict) or "model" not in line["body"]:
                problem = "the body has no model"
            elif line.get("custom_id") in seen:
                problem = f"duplicate custom_id {line.get('custom_id')!r}"
            seen.add(str(line.get("custom_id")))
            if problem:
                errors.append(
                    {"code": "invalid_request", "line": number, "message": problem, "param": None}
                )
        return errors

    def _finish(self, batch: ScriptedBatch) -> None:
        """The batch reaches ``ending``: write its output and error files."""
        outputs: list[bytes] = []
        failures: list[bytes] = []
        for line in batch.lines:
            custom_id = line["custom_id"]
            if self.ending != "completed" and custom_id in self.unfinished:
                if self.expired_in_error_file and self.ending == "expired":
                    error = {
                        "code": "batch_expired",
                        "message": "This request could not be executed before the completion window expired.",
                    }
                    failures.append(
                        orjson.dumps(
                            {
                                "id": f"batch_req_{next(self._ids)}",
                                "custom_id": custom_id,
                                "response": None,
                                "error": error,
                            }
                        )
                    )
                continue
            answer = self.answers.get(custom_id) or self._by_prompt(line["body"]) or self.default
            row: dict[str, Any] = {"id": f"batch_req_{next(self._ids)}", "custom_id": custom_id}
            if isinstance(answer, ItemError) and answer.status is None:
                failures.append(
                    orjson.dumps(
                        {
                            **row,
                            "response": None,
                            "error": {"code": answer.code, "message": answer.message},
                        }
                    )
                )
            elif isinstance(answer, ItemError):
                body = {
                    "error": {
                        "message": answer.message,
                        "type": "invalid_request_error",
                        "code": answer.code,
                    }
                }
                response = {
                    "status_code": answer.status,
                    "request_id": f"req_{next(self._ids)}",
                    "body": body,
                }
                failures.append(orjson.dumps({**row, "response": response, "error": None}))
            else:
                body = self._completion(line["body"], answer)
                response = {
                    "status_code": 200,
                    "request_id": f"req_{next(self._ids)}",
                    "body": body,
                }
                outputs.append(orjson.dumps({**row, "response": response, "error": None}))
        batch.counts = {
            "total": len(batch.lines),
            "completed": len(outputs),
            "failed": len(failures),
        }
        if outputs:
            batch.output_file_id = self._store("batch_output", b"\n".join(outputs) + b"\n")
        if failures:
            batch.error_file_id = self._store("batch_output", b"\n".join(failures) + b"\n")
        batch.status = self.ending

    def _by_prompt(self, body: dict[str, Any]) -> str | ItemError | None:
        prompt = str(body["messages"][-1]["content"])
        return next((a for text, a in self.by_prompt.items() if text in prompt), None)

    def finish_soon(self) -> None:
        """Every batch not finished yet finishes at its next poll."""
        for batch in self.batches.values():
            batch.steps = batch.steps[: batch.polls + 1]

    def _store(self, purpose: str, content: bytes) -> str:
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = (purpose, content)
        return file_id

    # --- HTTP --------------------------------------------------------------------------
    async def _upload(self, request: web.Request) -> web.Response:
        self.calls.append("POST /v1/files")
        form = await request.post()
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose != "batch" or not isinstance(upload, web.FileField):
            return _error(400, "a batch input file is uploaded as `file` with purpose `batch`")
        file_id = self._store("batch", upload.file.read())
        return web.json_response(self._file_object(file_id, upload.filename))

    async def _content(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        self.calls.append(f"GET /v1/files/{file_id}/content")
        if file_id not in self.files:
            return _error(404, f"no file {file_id}")
        return web.Response(body=self.files[file_id][1], content_type="application/octet-stream")

    async def _create(self, request: web.Request) -> web.Response:
        self.calls.append("POST /v1/batches")
        if self.refuse_create is not None:
            return _error(self.refuse_create, "this model has no batch deployment")
        body = await request.json()
        file_id = body.get("input_file_id")
        if file_id not in self.files or self.files[file_id][0] != "batch":
            return _error(400, f"no batch input file {file_id}")
        if body.get("completion_window") != "24h":
            return _error(400, "completion_window must be 24h")
        lines = self.uploaded(file_id)
        batch = ScriptedBatch(
            id=f"batch_{next(self._ids)}",
            input_file_id=file_id,
            endpoint=str(body.get("endpoint")),
            metadata=dict(body.get("metadata") or {}),
            lines=lines,
            errors=[],
            created_at=int(time.time()),
            steps=list(self.steps),
        )
        batch.counts["total"] = len(lines)
        self.batches[batch.id] = batch
        if self.lose_create_reply:
            self.lose_create_reply = False
            return _error(500, "the reply was lost (the batch was created)")
        return web.json_response(self._batch_object(batch))

    async def _retrieve(self, request: web.Request) -> web.Response:
        batch_id = request.match_info["batch_id"]
        self.calls.append(f"GET /v1/batches/{batch_id}")
        batch = self.batches.get(batch_id)
        if batch is None:
            return _error(404, f"no batch {batch_id}")
        if batch.status not in ("completed", "failed", "expired", "cancelled"):
            batch.polls += 1
            if batch.status == "validating" and (
                errors := self._validate(batch.endpoint, batch.lines)
            ):
                batch.errors, batch.status = errors, "failed"
            elif batch.polls < len(batch.steps):
                batch.status = batch.steps[batch.polls]
            else:
                self._finish(batch)
        return web.json_response(self._batch_object(batch))

    async def _list(self, request: web.Request) -> web.Response:
        self.calls.append("GET /v1/batches")
        limit = int(request.query.get("limit", "20"))
        newest = [self._batch_object(b) for b in reversed(self.batches.values())][:limit]
        page = {
            "object": "list",
            "data": newest,
            "first_id": newest[0]["id"] if newest else None,
            "last_id": newest[-1]["id"] if newest else None,
            "has_more": len(self.batches) > limit,
        }
        return web.json_response(page)

    # --- lifecycle ---------------------------------------------------------------------
    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/files", self._upload),
            web.get("/v1/files/{file_id}/content", self._content),
            web.post("/v1/batches", self._create),
            web.get("/v1/batches", self._list),
            web.get("/v1/batches/{batch_id}", self._retrieve),
        ]


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return web.json_response(body, status=status)
