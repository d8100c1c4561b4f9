"""One step of a thread (``Turn``): a trace's exchange, a coaching-session turn, or one trace
of a pair (``PairMember``), and the cap on a turn's size (its text cut in the middle, with a
visible marker)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field


class PairMember(BaseModel):
    """A trace as one side of a pair: which side (``a``: the first variant, ``b``: the
    second), its variant label, and its document (the trace as the comparison rules read it,
    within the turn cap)."""

    model_config = ConfigDict(frozen=True)

    slot: Literal["a", "b"]
    variant: str
    document: dict[str, Any]


class Turn(BaseModel):
    """One step of a thread: a trace's user/assistant exchange, a coaching-session turn, or
    one trace of a pair."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="Dedupe key: the trace id, or seq-<n> for a session turn")
    seq: int | None = None
    event_time: datetime
    messages: list[dict[str, Any]] = Field(default_factory=list)
    metrics: dict[str, Any] | None = None
    feedback: str | None = None
    cut_bytes: int = Field(default=0, description="Bytes cut from its text to fit the turn cap")
    member: PairMember | None = None

    def canonical(self) -> bytes:
        # model_dump(mode="json")'s value, asked of the serialiser without model_dump's wrapper
        value = self.__pydantic_serializer__.to_python(self, mode="json")
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)

    @property
    def size(self) -> int:
        """The length of its canonical JSON (computed once: ``capped`` and the fold both ask;
        kept in its ``__dict__`` as ``functools.cached_property`` would, without its lock)."""
        known: int | None = self.__dict__.get("size")
        if known is None:
            known = self.__dict__["size"] = len(self.canonical())
        return known

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Turn:
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("size", None)  # the copy's own size, computed when asked
        return copied

    def order(self) -> tuple[int, datetime, str]:
        return (self.seq if self.seq is not None else -1, self.event_time, self.key)

    def capped(self, max_bytes: int) -> Turn:
        """This turn within ``max_bytes`` (its canonical JSON): the longest text (a message's
        content, the feedback) is cut in the middle, with a marker, until it fits; what was
        cut is counted in ``cut_bytes``. Content that is not text (parts, objects) is cut as
        its JSON text. A turn whose metrics alone are over the cap keeps them."""
        over = self.size - max_bytes
        if over <= 0:
            return self
        messages = [dict(m) for m in self.messages]
        feedback = self.feedback
        cut = 0
        while over > 0:
            texts = [(len(_text(m.get("content")).encode()), i) for i, m in enumerate(messages)]
            if feedback is not None:
                texts.append((len(feedback.encode()), -1))
            longest, index = max(texts, default=(0, 0))
            room = longest - over - len(TURN_CUT_MARKER) - 40
            if room < 0 and longest < 200:
                break  # nothing long left to cut
            text = feedback if index == -1 else _text(messages[index]["content"])
            assert text is not None
            shorter = _cut_middle(text, max(room, 0))
            removed = len(text.encode()) - len(shorter.encode())
            if index == -1:
                feedback = shorter
            else:
                messages[index]["content"] = shorter
            cut += removed
            over -= removed
        turn = self.model_copy(
            update={"messages": messages, "feedback": feedback, "cut_bytes": self.cut_bytes + cut}
        )
        return turn if turn.size < self.size else self


TURN_CUT_MARKER = (
    "\n[... {n} bytes cut by the scorer: the turn was over SCORER_TURN_MAX_BYTES ...]\n"
)


def capped_document(document: dict[str, Any], max_bytes: int) -> tuple[dict[str, Any], int]:
    """``document`` within ``max_bytes`` of JSON, and the bytes cut: over the cap, its
    ``spans`` go first (comparison rules read input and output), then its longest strings
    are cut in the middle, with a marker, until it fits (or nothing long is left)."""
    size = len(orjson.dumps(document))
    if size <= max_bytes:
        return document, 0
    copy = orjson.loads(orjson.dumps({k: v for k, v in document.items() if k != "spans"}))
    cut = size - len(orjson.dumps(copy))
    over = size - cut - max_bytes
    while over > 0:
        strings = list(_strings(copy))
        if not strings:
            break
        length, holder, key = max(strings, key=lambda found: found[0])
        room = length - over - len(TURN_CUT_MARKER) - 40
        if room < 0 and length < 200:
            break  # nothing long left to cut
        shorter = _cut_middle(holder[key], max(room, 0))
        removed = length - len(shorter.encode())
        holder[key] = shorter
        cut += removed
        over -= removed
    return copy, cut


def _strings(value: Any) -> Iterator[tuple[int, Any, Any]]:
    """Every string inside ``value`` (nested in objects and lists): its UTF-8 length, and
    the object or list holding it, with its key or index there."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, str):
            yield len(item.encode()), value, key
        elif isinstance(item, dict | list):
            yield from _strings(item)


def _text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else orjson.dumps(content).decode()


def _cut_middle(text: str, keep_bytes: int) -> str:
    """``text`` with its middle replaced by a marker, keeping about ``keep_bytes`` of it."""
    raw = text.encode()
    head = raw[: keep_bytes // 2].decode(errors="ignore")
    tail = raw[len(raw) - keep_bytes // 2 :].decode(errors="ignore") if keep_bytes // 2 else ""
    removed = len(raw) - len(head.encode()) - len(tail.encode())
    return head + TURN_CUT_MARKER.format(n=removed) + tail
