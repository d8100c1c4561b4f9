"""Judging in batches: the OpenAI-compatible Batch API (Azure OpenAI's is the same shape).

A batch is a JSONL file of chat-completion requests, one line per job (``custom_id``, ``method``,
``url``, ``body``: the same body the online transport sends, ``openai_api.chat_arguments``),
uploaded with purpose ``batch``; the batch is created on it with a 24 h completion window, polled
until it is done (``completed``, ``failed``, ``expired``, ``cancelled``), and its output and error
files are read back, each line mapped to its job by ``custom_id``: a chat-completion body
(``ItemAnswered``) or why there is none (``ItemFailed``: refused, failed, expired, cancelled or
missing). No retries and no policy here: what to do with a failed item is the caller's.

Idempotence: ``job_id`` is a deterministic ``custom_id`` (the same job asks the same id after a
restart) and ``batch_key`` names a set of jobs in the batch's metadata, so ``BatchAPI.find`` can
recognise a batch submitted before a crash instead of submitting it again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from openai.types import Batch
from openai.types.chat import ChatCompletion

from .openai_api import _answered, chat_arguments, sdk_client
from .transport import Answered, ChatRequest

CHAT_ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW: Literal["24h"] = "24h"  # the only window the Batch API offers
BATCH_KEY = "scorer_batch_key"  # the metadata entry naming a batch's set of jobs
# a batch in one of these statuses will change no more
FINISHED = frozenset({"completed", "failed", "expired", "cancelled"})


class BatchInputError(ValueError):
    """The jobs cannot make a batch (none, or two with one ``custom_id``)."""


@dataclass(frozen=True)
class BatchJob:
    """One judge request in a batch, named by its ``custom_id`` (see ``job_id``)."""

    custom_id: str
    request: ChatRequest


def job_id(key: str, request: ChatRequest) -> str:
    """A deterministic ``custom_id``: the caller's ``key`` for the score (rule, trace or thread,
    rule version) and the body asked, so a job resubmitted after a restart has the same id."""
    body = orjson.dumps(chat_arguments(request), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(key.encode() + b"\x00" + body).hexdigest()
    return f"judge-{digest[:40]}"


def batch_key(jobs: Iterable[BatchJob]) -> str:
    """The name of a set of jobs, whatever their order (kept in the batch's metadata)."""
    ids = sorted(job.custom_id for job in jobs)
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:48]


def batch_line(job: BatchJob, url: str = CHAT_ENDPOINT) -> dict[str, Any]:
    """The input file's line for ``job``: the body is what the online transport would send."""
    body = chat_arguments(job.request)
    return {"custom_id": job.custom_id, "method": "POST", "url": url, "body": body}


def batch_input(jobs: list[BatchJob], url: str = CHAT_ENDPOINT) -> bytes:
    """The JSONL input file for ``jobs``, one line each, in order."""
    if not jobs:
        raise BatchInputError("a batch needs at least one job")
    seen: set[str] = set()
    for job in jobs:
        if job.custom_id in seen:
            raise BatchInputError(f"two jobs in one batch have custom_id {job.custom_id!r}")
        seen.add(job.custom_id)
    return b"".join(orjson.dumps(batch_line(job, url)) + b"\n" for job in jobs)


@dataclass(frozen=True)
class BatchState:
    """What a poll says of a batch: its status, counts and the files to read once done."""

    id: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: tuple[str, ...] = ()  # why a batch failed validation ("line 3: ...")
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @classmethod
    def of(cls, batch: Batch) -> BatchState:
        counts = batch.request_counts
        errors = tuple(
            f"line {e.line}: {e.message} ({e.code})"
            if e.line is not None
            else f"{e.message} ({e.code})"
            for e in (batch.errors.data or [] if batch.errors is not None else [])
        )
        return cls(
            id=batch.id,
            status=batch.status,
            total=counts.total if counts is not None else 0,
            completed=counts.completed if counts is not None else 0,
            failed=counts.failed if counts is not None else 0,
            output_file_id=batch.output_file_id,
            error_file_id=batch.error_file_id,
            errors=errors,
            metadata=dict(batch.metadata or {}),
        )


@dataclass(frozen=True)
class ItemAnswered:
    """The judge answered a job: the chat-completion body, as the online endpoint returns it."""

    custom_id: str
    body: dict[str, Any]

    def answered(self, request: ChatRequest) -> Answered:
        """The body read as the online transport reads an answer (text, tool calls, usage)."""
        return _answered(request, ChatCompletion.model_validate(self.body), {})


# refused: the request's own fault (a 4xx); error: the provider's trouble or an error line
# with no HTTP response (worth asking again); expired: the 24 h window ran out before it was
# answered; cancelled: the batch was cancelled; batch_failed: the batch failed validation;
# missing: a finished batch said nothing of it
ItemFailure = Literal["refused", "error", "expired", "cancelled", "batch_failed", "missing"]


@dataclass(frozen=True)
class ItemFailed:
    """No answer for a job, and why (said for a reader)."""

    custom_id: str
    kind: ItemFailure
    reason: str
    status: int | None = None  # the HTTP status of the item's response, if it had one
    code: str | None = None  # the provider's error code (``batch_expired``)


@dataclass
class BatchResults:
    """Every job of a finished batch mapped to its outcome, and what could not be mapped."""

    items: dict[str, ItemAnswered | ItemFailed]
    stray: list[str] = field(default_factory=list)  # unreadable lines, unknown custom_ids


def _item_from_line(line: dict[str, Any]) -> ItemAnswered | ItemFailed:
    """One output or error file line as its job's outcome."""
    custom_id = str(line["custom_id"])
    error = line.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        message = str(error.get("message") or code or "no message")
        kind: ItemFailure = "error"
        if code == "batch_expired":
            kind = "expired"
        elif code == "batch_cancelled":
            kind = "cancelled"
        return ItemFailed(custom_id, kind, f"{kind}: {message}", code=code)
    response = line.get("response")
    if not isinstance(response, dict):
        return ItemFailed(custom_id, "error", "error: the line has neither a response nor an error")
    status = int(response.get("status_code") or 0)
    body = response.get("body")
    if status == 200 and isinstance(body, dict):
        return ItemAnswered(custom_id, body)
    inner = body.get("error") if isinstance(body, dict) else None
    message = str(inner.get("message")) if isinstance(inner, dict) else "no message"
    code = inner.get("code") if isinstance(inner, dict) else None
    if 400 <= status < 500 and status not in (408, 409, 429):
        return ItemFailed(
            custom_id, "refused", f"judge refused the request ({status}): {message}", status, code
        )
    return ItemFailed(custom_id, "error", f"judge error ({status}): {message}", status, code)


def _unanswered(custom_id: str, state: BatchState) -> ItemFailed:
    """A job neither file speaks of, by how its batch ended."""
    if state.status == "expired":
        reason = "expired: the batch's 24h window ran out before this item was answered"
        return ItemFailed(custom_id, "expired", reason)
    if state.status in ("cancelled", "cancelling"):
        return ItemFailed(
            custom_id,
            "cancelled",
            "cancelled: the batch was cancelled before this item was answered",
        )
    if state.status == "failed":
        why = "; ".join(state.errors) or "no reason given"
        return ItemFailed(custom_id, "batch_failed", f"batch failed: {why}")
    return ItemFailed(
        custom_id, "missing", f"missing: the batch {state.status} without a line for this item"
    )


def read_results(state: BatchState, custom_ids: Iterable[str], *files: bytes) -> BatchResults:
    """Map the output and error files' lines (``files``) to the jobs ``custom_ids``; a job no
    line speaks of is failed by how the batch ended (expired, cancelled, failed, missing)."""
    wanted = list(custom_ids)
    known = set(wanted)
    items: dict[str, ItemAnswered | ItemFailed] = {}
    stray: list[str] = []
    for content in files:
        for raw in content.splitlines():
            if not raw.strip():
                continue
            try:
                line = orjson.loads(raw)
                item = _item_from_line(line)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                stray.append(raw.decode(errors="replace")[:200])
                continue
            if item.custom_id not in known:
                stray.append(f"unknown custom_id {item.custom_id!r}")
                continue
            # an answer wins over an error line for the same job (a provider's retry answered it)
            if isinstance(items.get(item.custom_id), ItemAnswered):
                continue
            items[item.custom_id] = item
    for custom_id in wanted:
        if custom_id not in items:
            items[custom_id] = _unanswered(custom_id, state)
    return BatchResults({custom_id: items[custom_id] for custom_id in wanted}, stray)


class BatchAPI:
    """The Batch API of one OpenAI-compatible endpoint through the ``openai`` SDK."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float,
        http_client: Any = None,
        url: str = CHAT_ENDPOINT,
    ) -> None:
        # a failed call is the caller's to repeat (it knows what was done)
        self._client = sdk_client(base_url, api_key, timeout_s, http_client)
        self.url = url

    async def close(self) -> None:
        await self._client.close()

    async def submit(
        self, jobs: list[BatchJob], metadata: Mapping[str, str] | None = None
    ) -> BatchState:
        """Upload ``jobs`` as one input file and create a batch on it; its ``batch_key`` is in
        the batch's metadata, so ``find`` recognises it after a restart."""
        content = batch_input(jobs, self.url)
        key = batch_key(jobs)
        upload = await self._client.files.create(
            file=(f"judge-{key}.jsonl", content), purpose="batch"
        )
        batch = await self._client.batches.create(
            input_file_id=upload.id,
            endpoint=self.url,  # type: ignore[arg-type]
            completion_window=COMPLETION_WINDOW,
            metadata={**(metadata or {}), BATCH_KEY: key},
        )
        return BatchState.of(batch)

    async def poll(self, batch_id: str) -> BatchState:
        """The batch's status now."""
        return BatchState.of(await self._client.batches.retrieve(batch_id))

    async def find(self, key: str, limit: int = 100) -> BatchState | None:
        """The newest of the last ``limit`` batches whose metadata names ``key`` (a batch
        submitted before a restart that did not record its id), or None."""
        page = await self._client.batches.list(limit=limit)
        for batch in page.data:
            if (batch.metadata or {}).get(BATCH_KEY) == key:
                return BatchState.of(batch)
        return None

    async def results(self, state: BatchState, custom_ids: Iterable[str]) -> BatchResults:
        """Every job of the finished batch ``state``: its answer or why it has none."""
        if not state.finished:
            raise ValueError(f"batch {state.id} is {state.status}, not finished")
        files = [
            (await self._client.files.content(file_id)).content
            for file_id in (state.output_file_id, state.error_file_id)
            if file_id
        ]
        return read_results(state, custom_ids, *files)
