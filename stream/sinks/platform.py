"""What a sink asks of a platform, and the shapes that go between them. Pure.

A platform turns a score into what it posts (or says why not), packs prepared scores into
requests, and reads the items of a request a 2xx answer accepted. Everything else (retries,
backoff, splitting a refused batch, what a status means for the whole request) is the same
for every platform and lives in ``delivery.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..models import ScoreEvent
from .scores import Unsent


@dataclass(slots=True)
class Item:
    """A score on its way: ``key`` is unique within the batch, ``payload`` what the platform
    prepared from it."""

    key: str
    score: ScoreEvent
    payload: Any


@dataclass(slots=True)
class Request:
    """One HTTP request: ``items`` by the id the platform's answer names them with."""

    method: str
    path: str
    body: bytes
    items: dict[str, Item] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rejected:
    """An item the platform refused for good (a 4xx of its own): logged, counted, not retried."""

    reason: str


ItemOutcome = Literal["accepted", "retry"] | Rejected


class Platform(Protocol):
    """One platform's side of a sink."""

    name: str

    def prepare(self, score: ScoreEvent) -> Any | Unsent:
        """What is posted for ``score``, or why it is not posted."""
        ...

    def requests(self, items: list[Item]) -> list[Request]:
        """``items`` packed into as few requests as the platform's limits allow."""
        ...

    def read(self, request: Request, payload: bytes) -> dict[str, ItemOutcome]:
        """The outcome of each item of ``request`` from a 2xx answer's body (an item it does
        not name is tried again)."""
        ...
