"""Posting prepared scores to a platform until each one is accepted or refused for good: the
policy every sink shares, over aiohttp.

- ``2xx``: the platform reads which items it accepted (Langfuse's 200 accepts its one score,
  Opik's 204 the batch); an item refused by a 4xx of its own is logged with the platform's
  reason and counted, an item refused by a 429 or 5xx of its own is sent again.
- Up to ``concurrency`` requests are in flight at once (Langfuse takes one score a request);
  each waits out its own refusals.
- ``429``, ``5xx``, no answer (connection refused, reset, timed out): the same request again
  after the platform's ``Retry-After`` or a doubling backoff, for as long as it takes. The
  offsets are not committed meanwhile, so an outage delays scores and drops none.
- ``401``, ``403``: the credentials do not open the project; ``404``, ``405``: the address is
  not the platform's API. Nothing can succeed: ``SinkError`` stops the sink (one line, exit 2)
  without committing.
- Any other ``4xx`` for the whole request (Opik refuses a batch for one bad item; a body too
  large is a 413): the batch is split in halves until the item at fault is alone, which is
  then refused as above; the others go through.

Headers are never logged: they carry the keys.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import aiohttp

from ..errors import ScorerError
from .platform import Item, Platform, Rejected, Request

log = logging.getLogger("stream.sinks")

MAX_RETRY_AFTER_S = 600.0  # a Retry-After past this is read as this
FATAL = {
    401: "refused the credentials",
    403: "refused the credentials (forbidden: the key's project, or ingestion suspended)",
    404: "has no such endpoint: is the URL the platform's API?",
    405: "does not take this method here: is the URL the platform's API?",
}


class SinkError(ScorerError):
    """A sink cannot go on: the platform refuses every request (credentials, address)."""


@dataclass
class Tally:
    """What a sink did, counted: sent (accepted by the platform), rejected (refused for good,
    each logged), unsent (not posted, by why: ``status`` or ``target``), invalid (messages
    that are not score events), retries (requests or items sent again)."""

    sent: int = 0
    rejected: int = 0
    unsent: Counter[str] = field(default_factory=Counter)
    invalid: int = 0
    retries: int = 0

    def summary(self) -> str:
        unsent = ", ".join(f"{n} {kind}" for kind, n in sorted(self.unsent.items())) or "0"
        return (
            f"sent {self.sent}, rejected {self.rejected}, not sent {unsent}, "
            f"invalid {self.invalid}, retries {self.retries}"
        )


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (a number or an HTTP date), or None."""
    value = headers.get("Retry-After") or headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = now if now is not None else time.time()
        seconds = when.timestamp() - current
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


class Delivery:
    """One platform's HTTP client and the posting policy above. Use as ``async with``."""

    def __init__(
        self,
        platform: Platform,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        concurrency: int = 1,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.platform = platform
        self.concurrency = max(1, concurrency)
        self.base_url = base_url.rstrip("/")
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Delivery:
        self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def backoff(self, attempt: int) -> float:
        return float(min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))

    async def deliver(self, items: list[Item], tally: Tally) -> None:
        """Post ``items`` until each is accepted or refused for good, ``concurrency`` requests
        at a time; raises ``SinkError`` when the platform refuses every request."""
        queue = deque(self.platform.requests(items))
        try:
            async with asyncio.TaskGroup() as posting:  # one failing poster stops the others
                for _ in range(min(self.concurrency, len(queue))):
                    posting.create_task(self._drain(queue, tally))
        except* SinkError as failed:  # what stopped them, as one of them raised it
            fatal = failed.exceptions[0]
        else:
            return
        raise fatal

    async def _drain(self, queue: deque[Request], tally: Tally) -> None:
        """Post requests off ``queue`` (shared with the other posters) until it is empty."""
        attempt = 0
        while queue:
            request = queue.popleft()
            reply, trouble = await self._post(request)
            waits = trouble is not None or reply is None or reply.status == 429
            if waits or (reply is not None and reply.status >= 500):
                attempt += 1
                tally.retries += 1
                said = trouble or f"HTTP {reply.status if reply else '?'}"
                asked = retry_after(reply.headers) if reply is not None else None
                delay = asked if asked is not None else self.backoff(attempt)
                log.warning(
                    "%s at %s: %s; %d scores wait, sent again in %.1fs (attempt %d)",
                    self.platform.name, self.base_url, said, len(request.items), delay, attempt,
                )  # fmt: skip
                await self._sleep(delay)
                queue.appendleft(request)
                continue
            assert reply is not None
            attempt = 0
            if reply.status in FATAL:
                raise SinkError(
                    f"{self.platform.name} at {self.base_url}{request.path} "
                    f"{FATAL[reply.status]} (HTTP {reply.status}: {_text(reply.body)}); "
                    "no offset was committed"
                )
            if 200 <= reply.status < 300:
                again = self._read(request, reply, tally)
                if again:
                    tally.retries += len(again)
                    await self._sleep(self.backoff(1))
                    queue.extendleft(reversed(self.platform.requests(again)))
                continue
            pending = list(request.items.values())
            if len(pending) > 1:  # a refused batch: find the item at fault
                half = len(pending) // 2
                halves = [
                    *self.platform.requests(pending[:half]),
                    *self.platform.requests(pending[half:]),
                ]
                queue.extendleft(reversed(halves))
                continue
            self._reject(pending[0], f"HTTP {reply.status}: {_text(reply.body)}", tally)

    def _read(self, request: Request, reply: Reply, tally: Tally) -> list[Item]:
        outcomes = self.platform.read(request, reply.body)
        again = []
        for key, item in request.items.items():
            outcome = outcomes.get(key, "retry")
            if outcome == "accepted":
                tally.sent += 1
            elif isinstance(outcome, Rejected):
                self._reject(item, outcome.reason, tally)
            else:
                again.append(item)
        return again

    def _reject(self, item: Item, reason: str, tally: Tally) -> None:
        score = item.score
        tally.rejected += 1
        log.error(
            "%s refused score %s (rule %s, %s %s): %s; not sent again",
            self.platform.name, score.score_id, score.rule_id, score.scope, score.target_id,
            reason,
        )  # fmt: skip

    async def _post(self, request: Request) -> tuple[Reply | None, str | None]:
        assert self._session is not None, "use Delivery as `async with`"
        try:
            async with self._session.request(
                request.method, self.base_url + request.path, data=request.body
            ) as response:
                body = await response.read()
                return Reply(response.status, dict(response.headers), body), None
        except TimeoutError:
            return None, f"no answer within {self._timeout.total:g}s"
        except aiohttp.ClientError as exc:
            return None, f"{type(exc).__name__}: {exc}"


def _text(body: bytes, limit: int = 300) -> str:
    text = " ".join(body.decode("utf-8", "replace").split())
    return text if len(text) <= limit else text[:limit] + "..."
