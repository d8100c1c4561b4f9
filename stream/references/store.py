"""The reference documents a worker holds in memory: the latest value of each key of the
reference topic (``SCORER_REFERENCES_TOPIC``, design record 50), as the topic's reader applies
its records one by one.

- A record whose value is a JSON object sets its key's reference (its raw bytes are kept, and
  parsed again for each trace that joins it: the bound counts what is held, and no two traces
  share one mutable document).
- A tombstone (a null value) deletes its key.
- A record the store cannot take (no key, a key that is not UTF-8, a value that is not a JSON
  object) deletes its key too (the key's latest value is no reference: an older one would be
  stale) and is counted as ``invalid``; ``apply`` says why, for the reader to log.
- Held keys and values are bounded by ``max_bytes`` (each entry counted as its key, its value
  and ``ENTRY_OVERHEAD``): past it, the least recently written references are dropped and
  counted (``dropped``), and a value larger than the bound is not taken at all. Which entries a
  bound drops depends on the order the topic's partitions were read in.

``loaded`` turns true once the reader has read every partition to the end offsets it found
when it started (``ReferenceCatchUp``); the trace agent waits for it (``wait_loaded``) before
it scores its first trace, so no trace is judged against half the references.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

import orjson

ENTRY_OVERHEAD = 120  # bytes: the dict slot, the key's str and the value's bytes objects


class ReferenceStore:
    """The latest reference document of each reference id, within ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self.bytes = 0
        self.dropped = 0  # references dropped to stay within max_bytes
        self.invalid = 0  # records that were no reference (no key, not a JSON object...)
        self.found = 0  # traces that found their reference
        self.missing = 0  # traces that looked one up and found none
        self._loaded = asyncio.Event()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, reference_id: object) -> bool:
        return reference_id in self._entries

    @property
    def loaded(self) -> bool:
        """Whether the reader has caught up with the topic as it was when it started."""
        return self._loaded.is_set()

    def mark_loaded(self) -> None:
        self._loaded.set()

    async def wait_loaded(self) -> None:
        """Return once ``loaded`` (at once when it is)."""
        await self._loaded.wait()

    def apply(self, key: bytes | None, value: bytes | None) -> str | None:
        """One record of the topic, in the order of its partition; why it was not taken as a
        reference (None: it was, or it was a tombstone)."""
        if key is None:
            self.invalid += 1
            return "a record without a key names no reference"
        try:
            reference_id = key.decode()
        except UnicodeDecodeError:
            self.invalid += 1
            return "its key is not UTF-8"
        self._remove(reference_id)  # whatever the record says, its key's older value is gone
        if value is None:
            return None
        problem = _not_a_reference(value)
        if problem is not None:
            self.invalid += 1
            return problem
        size = self._size(reference_id, value)
        if size > self.max_bytes:
            self.dropped += 1
            return f"its {len(value)} bytes are more than the bound holds ({self.max_bytes})"
        self._entries[reference_id] = value
        self.bytes += size
        while self.bytes > self.max_bytes:  # the least recently written go first
            oldest, kept = self._entries.popitem(last=False)
            self.bytes -= self._size(oldest, kept)
            self.dropped += 1
        return None

    def get(self, reference_id: str) -> dict[str, Any] | None:
        """The reference document of ``reference_id`` (a copy of its own), or None."""
        raw = self._entries.get(reference_id)
        if raw is None:
            self.missing += 1
            return None
        self.found += 1
        document: dict[str, Any] = orjson.loads(raw)  # an object: checked when it was applied
        return document

    def _remove(self, reference_id: str) -> None:
        raw = self._entries.pop(reference_id, None)
        if raw is not None:
            self.bytes -= self._size(reference_id, raw)

    @staticmethod
    def _size(reference_id: str, value: bytes) -> int:
        return len(reference_id.encode()) + len(value) + ENTRY_OVERHEAD


def _not_a_reference(value: bytes) -> str | None:
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return f"its value is not JSON ({exc.args[0] if exc.args else 'unreadable'})"
    if not isinstance(document, dict):
        kind = "an array" if isinstance(document, list) else f"a {type(document).__name__}"
        return f"its value is {kind}, not a JSON object"
    return None
